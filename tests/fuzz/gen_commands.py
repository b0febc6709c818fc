"""Generators of bad inputs, kinds 7-12: what a command is asked to do with them (unbounded work, outputs
where nobody asked, user text as terminal markup, outputs one command writes and another reads, messages,
engine outputs for the importers).
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

from tests.fuzz.cases import (ENGINE_RUNS, MARKUP, RECORD, base_profile, base_scenario, Case, dump_json,
                              scenario_files, set_path, simulate_case, Special)
from tests.fuzz.gen_values import gen_special_inputs


def gen_work(rng: random.Random) -> Case:
    """Kind 7: runs that would take hours or all memory: refused with the estimate, before running."""
    how = rng.choice(["kernel", "cycle_memory", "per_rank", "sweep_des", "sweep_points", "sweep_closed_form",
                      "deep_models"])
    if how == "sweep_closed_form":  # the closed form's renewal function over a million tokens, per point
        return Case(7, how, ["sweep", "s.yaml", "--out", "sw", "--set", "workload.max_new_tokens=1000000",
                             "--set", "acceptance.rate_concentration=10", "--grid", "spec.num_steps=1..64",
                             "--grid", "acceptance.acceptance_rate=0.1:0.9:0.01"], scenario_files(), outputs=("sw",),
                    mention=("--force",))
    if how == "deep_models":  # 1024-layer models, a draft extend per accept length, many cycles
        extra = ["--set", "draft.num_hidden_layers=1024", "--set", "target.num_hidden_layers=1024",
                 "--set", "spec.num_steps=64", "--set", "spec.num_draft_tokens=65", "--set", "fidelity.granularity=kernel",
                 "--set", f"fidelity.num_cycles={rng.choice([20000, 100000])}"]
        return simulate_case(7, how, scenario_files(), extra, mention=("--force",))
    if how == "kernel":  # closed-form kernel steps cost ~0.03 us each (simulator.des.per_rank): many of them
        extra = ["--set", "fidelity.granularity=kernel", "--set", "target.num_hidden_layers=256",
                 "--set", "fidelity.num_cycles=10000000"]
    elif how == "cycle_memory":
        extra = ["--set", "fidelity.granularity=cycle", "--set", "fidelity.num_cycles=10000000",
                 "--set", f"workload.batch_size={rng.choice([512, 4096])}"]
    elif how == "per_rank":
        extra = ["--set", "fidelity.granularity=kernel", "--set", "fidelity.per_rank=true", "--set", "tp_size=8",
                 "--set", "fidelity.jitter_cv=0.3", "--set", "fidelity.num_cycles=10000000"]
    else:
        grids = (["--solver", "des", "--grid", "spec.num_steps=1..8", "--grid", "workload.batch_size=1..512",
                  "--set", "fidelity.granularity=kernel"] if how == "sweep_des" else
                 ["--grid", "spec.num_steps=1..64", "--grid", "workload.batch_size=1..4096"])
        return Case(7, how, ["sweep", "s.yaml", "--out", "sw", *grids], scenario_files(), outputs=("sw",),
                    mention=("--force", "points"))
    return simulate_case(7, how, scenario_files(), extra, mention=("--force",))


def gen_outputs(rng: random.Random) -> Case:
    """Kind 8: outputs aimed at devices, FIFOs, symlinks, foreign files and folders, paths under files."""
    target = rng.choice(["fifo", "chardev", "symlink", "foreign", "dir", "under_file", "own", "empty"])
    files = scenario_files()
    specials = {"fifo": Special("fifo"), "chardev": Special("chardev"), "symlink": Special("symlink", "mine.txt"),
                "dir": Special("dir"), "foreign": "my notes, keep me\n", "empty": ""}
    cmd = rng.choice(["simulate_json", "simulate_trace", "validate_json", "sweep_out", "plot_out"])
    if cmd in ("sweep_out", "plot_out"):
        out = "o"
        if target in ("fifo", "chardev", "symlink", "foreign", "empty"):
            files[out] = specials[target] if target in specials else ""
            files["mine.txt"] = "keep\n"
        elif target == "dir":
            files["o/notes.txt"] = "mine\n"
        elif target == "under_file":
            files["f"] = "a file\n"
            out = "f/o"
        if cmd == "sweep_out":
            argv = ["sweep", "s.yaml", "--out", out, "--des-sample", "0", "--grid", "spec.num_steps=1..2"]
            return Case(8, f"sweep --out {target}", argv, files, outputs=(out,) if target == "own" else (),
                        mention=("--out",), expect="success" if target == "own" else "error")
        return Case(8, f"plot --out {target}", ["plot", "sw", "--out", out, "--no-png"], files,
                    outputs=(out,) if target == "own" else (), mention=("--out",), needs=("sweep",),
                    expect="success" if target == "own" else "error")
    out = "t.json"
    files["mine.txt"] = "keep\n"
    if target == "under_file":
        files["f"] = "a file\n"
        out = "f/t.json"
    elif target == "own":  # an earlier output of the same command may be replaced
        files[out] = dump_json({"simulate_json": {"specdecsim_output": "simulation/2"},
                                "simulate_trace": {"traceEvents": [], "otherData": {"specdecsim_output": "trace/1"}},
                                "validate_json": {"specdecsim_output": "validation/1"}}[cmd])
    elif target in specials:
        files[out] = specials[target]
    if cmd == "validate_json":
        files.update({"rec.json": RECORD.read_text()})
        argv = ["validate", "rec.json", "--profile", "p.json", "--json", out]
    else:
        flag = "--json" if cmd == "simulate_json" else "--trace"
        argv = ["simulate", "s.yaml", flag, out] + (["--set", "fidelity.granularity=kernel"] if flag == "--trace" else [])
    ok = target in ("own", "empty")
    return Case(8, f"{argv[0]} {target}", argv, files, outputs=(out,) if ok else (),
                mention=("--json", "--trace", out), expect="success" if ok else "error")


def gen_markup(rng: random.Random) -> Case:
    """Kind 9: square brackets and backslashes in names, values, keys, paths: never terminal markup."""
    text = rng.choice(MARKUP)
    how = rng.choice(["name", "set_value", "set_key", "path", "json_path", "profile_path", "description",
                      "model_name", "grid"])
    files = scenario_files()
    if how == "name":
        files = scenario_files(set_path(base_scenario(), "name", text))
        return simulate_case(9, how, files, mention=("s.yaml",), expect="success")
    if how == "model_name":
        files = scenario_files(set_path(base_scenario(), rng.choice(["target.name", "draft.name"]), text))
        return simulate_case(9, how, files, mention=("s.yaml",), expect="success")
    if how == "description":
        return simulate_case(9, how, scenario_files(set_path(base_scenario(), "description", text)), expect="success")
    if how == "set_value":
        return simulate_case(9, how, files, ["--set", f"name={json.dumps(text)}"], mention=("--set",),
                             expect="success")
    if how == "set_key":
        return simulate_case(9, how, files, ["--set", f"{text}=1"], mention=("--set", "s.yaml"))
    if how == "grid":
        return Case(9, how, ["sweep", "s.yaml", "--out", "sw", "--des-sample", "0", "--grid", f"name={text}"],
                    files, outputs=("sw",), mention=("--grid",), expect="either")
    if how == "path":
        name = f"{text.replace('/', '_').replace(chr(92), '_')}s.yaml"
        files[name] = files.pop("s.yaml")
        return Case(9, how, ["simulate", name, "--json", "out.json"], files, outputs=("out.json",), mention=(name,),
                    expect="success")
    if how == "json_path":
        name = f"{text.replace('/', '_').replace(chr(92), '_')}.json"
        return Case(9, how, ["simulate", "s.yaml", "--json", name], files, outputs=(name,), mention=(name,),
                    expect="success")
    name = f"{text.replace('/', '_').replace(chr(92), '_')}p.json"
    files[name] = files.pop("p.json")
    return Case(9, how, ["simulate", "s.yaml", "--profile", name, "--json", "out.json"], files, outputs=("out.json",),
                mention=(name,), expect="success")


def gen_round_trip(rng: random.Random) -> Case:
    """Kind 10: what one command writes, read by the next; as written (must work) or damaged."""
    how = rng.choice(["plot_sweep", "plot_report", "damage_report", "damage_sweep_json", "damage_csv",
                      "plot_csv_file"])
    if how == "plot_sweep":
        return Case(10, how, ["plot", "sw", "--out", "figs", "--no-png"], {}, outputs=("figs",), needs=("sweep",),
                    expect="success")
    if how == "plot_csv_file":
        return Case(10, how, ["plot", "sw/sweep.csv", "--out", "figs", "--no-png"], {}, outputs=("figs",),
                    needs=("sweep",), expect="success")
    if how == "plot_report":
        return Case(10, how, ["plot", "sw", "--out", "figs", "--no-png", "--validate-json", "v.json"], {},
                    outputs=("figs",), needs=("sweep", "report"), expect="success")
    if how == "damage_report":
        return Case(10, how, ["plot", "sw", "--out", "figs", "--no-png", "--validate-json", "v.json"], {},
                    outputs=("figs",), mention=("v.json",), needs=("sweep", "report", "damage:v.json"),
                    expect="either")
    target = "sw/sweep.json" if how == "damage_sweep_json" else "sw/sweep.csv"
    return Case(10, how, ["plot", "sw", "--out", "figs", "--no-png"], {}, outputs=("figs",),
                mention=(target.split("/")[1],), needs=("sweep", f"damage:{target}"), expect="either")



def gen_messages(rng: random.Random) -> Case:
    """Kind 11: the everyday mistakes whose messages must name the file and the field."""
    how = rng.choice(["missing_scenario", "folder_scenario", "missing_profile", "profile_csv", "nan_profile",
                      "bad_cell", "broken_sweep_json", "out_under_file", "grid_1e-7", "missing_record",
                      "record_folder_empty", "profile_folder", "config_missing", "bad_yaml", "special", "special"])
    if how == "special":
        return gen_special_inputs(rng)
    files = scenario_files()
    if how == "missing_scenario":
        return Case(11, how, ["simulate", "nope.yaml"], files, mention=("nope.yaml",))
    if how == "folder_scenario":
        files["d/x"] = "x"
        return Case(11, how, ["simulate", "d"], files, mention=("d",))
    if how == "missing_profile":
        return Case(11, how, ["simulate", "s.yaml", "--profile", "nope.json"], files, mention=("nope",))
    if how == "profile_folder":
        files["pd/x"] = "x"
        return Case(11, how, ["simulate", "s.yaml", "--profile", "pd/"], files, mention=("pd",))
    if how == "profile_csv":
        files["p.json"] = "a,b\n1,2\n"
        return Case(11, how, ["simulate", "s.yaml"], files, mention=("p.json",))
    if how == "nan_profile":
        prof = base_profile()
        prof["forwards"][0]["latency_us"] = [[float("nan")] * 60 for _ in range(3)]
        prof["forwards"][0]["context_len"] = list(range(1, 61))
        files["p.json"] = json.dumps(prof)
        return Case(11, how, ["simulate", "s.yaml"], files, mention=("p.json",))
    if how == "bad_cell":
        return Case(11, how, ["plot", "sw", "--out", "figs", "--no-png"], {}, outputs=("figs",),
                    mention=("sweep.csv",), needs=("sweep", "damage_cell:sw/sweep.csv"))
    if how == "broken_sweep_json":
        return Case(11, how, ["plot", "sw", "--out", "figs", "--no-png"], {"sw/sweep.json": '{"version": '},
                    outputs=("figs",), mention=("sweep.json",), needs=("sweep",))
    if how == "out_under_file":
        files["f"] = "x\n"
        return Case(11, how, ["simulate", "s.yaml", "--json", "f/sub/r.json"], files, mention=("f",))
    if how == "grid_1e-7":
        return Case(11, how, ["sweep", "s.yaml", "--out", "sw", "--des-sample", "0", "--grid",
                              "acceptance.acceptance_rate=1e-7,0.5"], files, outputs=("sw",), mention=("--grid",),
                    expect="success")
    if how == "missing_record":
        return Case(11, how, ["validate", "nope.json", "--profile", "p.json"], files, mention=("nope.json",))
    if how == "record_folder_empty":
        files["recs/readme.txt"] = "x"
        return Case(11, how, ["validate", "recs", "--profile", "p.json"], files, mention=("recs",))
    if how == "config_missing":
        sc = base_scenario()
        sc["target"] = {"name": "t", "config_path": "nope/config.json"}
        return Case(11, how, ["simulate", "s.yaml"], scenario_files(sc), mention=("config.json",))
    return Case(11, how, ["simulate", "s.yaml"], scenario_files(text="spec: [1,\n  num_steps: 3\n"),
                mention=("s.yaml",))


IMPORTER_FIXTURES = ("sglang_server.log", "vllm_server.log", "vllm_metrics.prom", "sglang_bench_serving.txt",
                     "sglang_bench_serving.jsonl", "sglang_bench_speculative.jsonl",
                     "sglang_bench_one_batch_server.jsonl", "sglang_bench_one_batch_server.txt",
                     "sglang_bench_one_batch.txt", "trtllm_bench.txt", "vllm_bench_serve.json",
                     "vllm_bench_serve.txt", "vllm_latency.json", "vllm_latency.txt")
IMPORTER_VALUES = ("-5", "-0.5", "nan", "NaN", "inf", "-inf", "1e400", "-1e400", "9" * 5000, "0", "-0", "1e-320",
                   "abc", "", "[1, 2]", "{}", "2.5", "150", "1e308", "true", "null", "0x1f", "1_000", "١٢")
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])")


def gen_importers(rng: random.Random) -> Case:
    """Kind 12: engine outputs given to `calibrate from-runs` (simulator.evidence.importers), each a
    shipped fixture with one figure replaced (negative, NaN, 1e400, 5,000 digits, a list, text),
    a line dropped or repeated, the file cut, a bad byte, JSON nested deep or with a key twice."""
    name = rng.choice(IMPORTER_FIXTURES)
    text = (ENGINE_RUNS / name).read_text()
    how = rng.choice(["number"] * 6 + ["drop_line", "repeat_line", "cut", "bad_byte", "deep", "dup_key", "empty"])
    data: str | bytes = text
    if how == "number":
        spans = [m.span() for m in _NUMBER.finditer(text)]
        a, b = rng.choice(spans)
        value = rng.choice(IMPORTER_VALUES)
        data, how = text[:a] + value + text[b:], f"number {text[a:b]!r}->{value[:12]!r}"
    elif how in ("drop_line", "repeat_line"):
        lines = text.splitlines(keepends=True)
        i = rng.randrange(len(lines))
        data = "".join(lines[:i] + ([lines[i]] * rng.choice([2, 50, 5000]) if how == "repeat_line" else [])
                       + lines[i + 1:])
    elif how == "cut":
        data = text[:rng.randrange(1, max(2, len(text)))]
    elif how == "bad_byte":
        raw = text.encode()
        i = rng.randrange(len(raw))
        data = raw[:i] + rng.choice([b"\xff", b"\xc3", b"\x00", b"\xed\xa0\x80"]) + raw[i:]
    elif how == "deep":
        data = "[" * 5000 + "]" * 5000 if name.endswith((".json", ".jsonl")) else text + "{" * 5000 + "\n"
    elif how == "dup_key":
        data = text.replace("{", '{"batch_size": 1, ', 1) if "{" in text else text + text
    else:
        data = rng.choice(["", "\n", " ", "\ufeff"])
    sc = base_scenario()
    sc["serving_engine"] = {"kind": rng.choice(["sglang", "vllm"])}
    run = "run" + Path(name).suffix
    fmt = rng.choice(["auto"] * 4 + ["sglang_server_log", "vllm_prometheus"])
    return Case(12, f"{name} {how}", ["calibrate", "from-runs", "s.yaml", run, "--out", "fitted.yaml", "--format", fmt],
                {**scenario_files(sc), run: data}, outputs=("fitted.yaml",), mention=("run", "--format"),
                expect="either")
