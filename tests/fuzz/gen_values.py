"""Generators of bad inputs, kinds 1-6: what a file or a value holds (undecodable bytes, nesting and
alias expansion, numbers out of range, wrong types, profiles that break the lookup, ambiguity).
"""

from __future__ import annotations

import copy
import json
import random
import re
from typing import Any

from tests.fuzz.cases import (ASSUMED, EXTREMES, RECORD, SCENARIO_NUMBERS, WRONG_TYPES, base_config_json,
                              base_profile, base_scenario, Case, dump_json, dump_yaml, scenario_files,
                              set_path, simulate_case, Special)


def gen_undecodable(rng: random.Random) -> Case:
    """Kind 1: binary, Latin-1, UTF-16 or cut-UTF-8 bytes where a text file is read."""
    def bad_bytes(text: str) -> bytes:
        how = rng.choice(["binary", "latin1", "utf16", "cut"])
        if how == "binary":
            return bytes([0xFF, 0xFE]) + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
        if how == "latin1":
            i = rng.randrange(len(text) + 1)
            return (text[:i] + "caf\xe9 \xff" + text[i:]).encode("latin-1", "replace")
        if how == "utf16":
            return text.encode("utf-16")
        raw = ("é" * 3 + text).encode()
        return raw[:1] + raw[2:]  # a UTF-8 sequence cut in half
    target = rng.choice(["scenario", "config", "profile", "record", "sweep_csv", "sweep_json", "report"])
    if target == "scenario":
        return Case(1, "scenario", ["simulate", "s.yaml"],
                    {**scenario_files(), "s.yaml": bad_bytes(dump_yaml(base_scenario()))}, mention=("s.yaml",))
    if target == "config":
        sc = base_scenario()
        sc["target"] = {"name": "t", "config_path": "config.json"}
        return Case(1, "config.json", ["simulate", "s.yaml"],
                    scenario_files(sc, **{"config.json": bad_bytes(dump_json(base_config_json()))}),
                    mention=("config.json",))
    if target == "profile":
        return Case(1, "profile", ["simulate", "s.yaml"], {**scenario_files(), "p.json": bad_bytes(
            dump_json(base_profile()))}, mention=("p.json",))
    if target == "record":
        return Case(1, "record", ["validate", "rec.json", "--profile", "p.json"],
                    {"rec.json": bad_bytes(RECORD.read_text()), "p.json": dump_json(base_profile())},
                    mention=("rec.json",))
    if target == "report":
        return Case(1, "validate json", ["plot", "sw", "--out", "figs", "--no-png", "--validate-json", "v.json"],
                    {"v.json": bad_bytes('{"specdecsim_output": "validation/1"}')}, outputs=("figs",),
                    mention=("v.json",), needs=("sweep",))
    name = "sw/sweep.csv" if target == "sweep_csv" else "sw/sweep.json"
    return Case(1, name, ["plot", "sw", "--out", "figs", "--no-png"], {name: bad_bytes("point_idx,x\n0,1\n")},
                outputs=("figs",), mention=(name.split("/")[1],), needs=("sweep",))


def _deep(depth: int, inner: Any = 1, as_dict: bool = False) -> Any:
    node = inner
    for _ in range(depth):
        node = {"a": node} if as_dict else [node]
    return node


def _laughs(levels: int, width: int) -> str:
    lines = ["name: tiny", f"l0: &l0 [{', '.join(['x'] * width)}]"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


def gen_nesting(rng: random.Random) -> Case:
    """Kind 2: values nested thousands deep, YAML aliases expanding to billions, recursive aliases."""
    how = rng.choice(["yaml_deep", "yaml_flow_deep", "laughs", "recursive", "json_deep", "set_deep", "grid_deep",
                      "config_deep", "record_deep"])
    depth = rng.choice([33, 40, 100, 500, 1000, 3000, 20000])
    if how == "yaml_deep":  # block style around a flow-style deep value (JSON is YAML)
        sc = base_scenario()
        set_path(sc, rng.choice(["description", "acceptance.acceptance_rates", "spec.num_steps", "extra"]), "DEEP")
        text = dump_yaml(sc).replace("DEEP", json.dumps(_deep(min(depth, 400), as_dict=rng.random() < 0.5)))
        return Case(2, how, ["simulate", "s.yaml"], scenario_files(text=text), mention=("s.yaml",))
    if how == "yaml_flow_deep":
        text = dump_yaml(base_scenario()) + "description: " + "[" * depth + "]" * depth + "\n"
        return Case(2, how, ["simulate", "s.yaml"], scenario_files(text=text), mention=("s.yaml",))
    if how == "laughs":
        text = _laughs(rng.randrange(6, 12), rng.randrange(6, 12)) + dump_yaml(
            {k: v for k, v in base_scenario().items() if k != "name"})
        return Case(2, how, ["simulate", "s.yaml"], scenario_files(text=text), mention=("s.yaml",))
    if how == "recursive":
        text = dump_yaml(base_scenario()) + rng.choice(["loop: &a [*a]\n", "loop: &a {b: *a}\n",
                                                        "loop: &a [1, [2, *a]]\n"])
        return Case(2, how, ["simulate", "s.yaml"], scenario_files(text=text), mention=("s.yaml",))
    if how == "json_deep":
        return Case(2, how, ["simulate", "s.yaml"], {**scenario_files(), "p.json": "[" * depth + "]" * depth},
                    mention=("p.json",))
    if how == "config_deep":
        sc = base_scenario()
        sc["target"] = {"name": "t", "config_path": "config.json"}
        cfg = base_config_json()
        cfg["text_config"] = _deep(depth, as_dict=True) if depth <= 900 else None
        text = dump_json(cfg) if depth <= 900 else '{"text_config": ' + "[" * depth + "]" * depth + "}"
        return Case(2, how, ["simulate", "s.yaml"], scenario_files(sc, **{"config.json": text}),
                    mention=("config.json",))
    if how == "record_deep":
        rec = json.loads(RECORD.read_text())
        rec["phase_us"] = {"x": 0}
        text = dump_json(rec).replace('"x": 0', '"x": ' + "[" * depth + "]" * depth)
        return Case(2, how, ["validate", "rec.json", "--profile", "p.json"],
                    {"rec.json": text, "p.json": dump_json(base_profile())}, mention=("rec.json",))
    if how == "set_deep":
        return Case(2, how, ["simulate", "s.yaml", "--set", "description=" + "[" * depth + "]" * depth],
                    scenario_files(), mention=("--set",))
    return Case(2, how, ["sweep", "s.yaml", "--out", "sw", "--grid", "description=" + "[" * depth + "]" * depth],
                scenario_files(), outputs=("sw",), mention=("--grid",))


def gen_numbers(rng: random.Random) -> Case:
    """Kind 3: every numeric field at extremes, written in the file or with --set; grids with
    infinite, huge or NaN ranges; command-line numbers."""
    how = rng.choice(["file", "set", "set", "grid", "concentration", "options"])
    if how == "options":
        return gen_option_numbers(rng)
    field_ = rng.choice(SCENARIO_NUMBERS)
    value = rng.choice(EXTREMES)
    if how == "concentration":
        field_, value = "acceptance.rate_concentration", rng.choice([1e-320, 5e-324, 1e-300, 1e-9, 1e308, 0.001])
    if how in ("file", "concentration"):
        sc = set_path(base_scenario(), field_, value)
        return simulate_case(3, f"{field_}={value!r}", scenario_files(sc), mention=("s.yaml", field_), expect="either")
    if how == "set":
        written = rng.choice([repr(value), json.dumps(value), f"{value:e}" if isinstance(value, float) else str(value),
                              ".inf", "-.inf", ".nan", "1e999", "-1e999", "1" * 5000])
        return simulate_case(3, f"--set {field_}={written[:20]}", scenario_files(),
                             ["--set", f"{field_}={written}"], mention=(field_, "--set"), expect="either")
    spec = rng.choice([f"acceptance.acceptance_rate=0:{rng.choice(['.inf', 'inf', '1e308', '.nan', '1e999'])}:0.1",
                       "acceptance.acceptance_rate=0:1:1e-9", "acceptance.acceptance_rate=1e308:-1e308:-1e300",
                       "spec.num_steps=1..10000000000000", "spec.num_steps=1.." + "9" * 30,
                       "workload.context_len=1..200000", "acceptance.acceptance_rate=0:1:5e-324",
                       "acceptance.acceptance_rate=" + ",".join(["0.5"] * 20000),
                       f"{field_}={rng.choice(['.nan', '.inf', '-.inf', '1e999', '1e-7', '5e-324'])}",
                       "acceptance.acceptance_rate=-0:0:0", "seed=0..9223372036854775808"])
    return Case(3, f"--grid {spec[:40]}", ["sweep", "s.yaml", "--out", "sw", "--des-sample", "0", "--grid", spec],
                scenario_files(), outputs=("sw",), mention=("--grid",), expect="either")


def gen_option_numbers(rng: random.Random) -> Case:
    """Kind 3, command-line numbers: worker counts, samples, seeds and thresholds at extremes."""
    opt, value = rng.choice([("--jobs", v) for v in ("0", "-1", "1000000", "99999999999999999999")]
                            + [("--des-sample", v) for v in ("-1", "10" * 20)]
                            + [("--seed", v) for v in ("-1", str(2**63), str(2**64), "-" + "9" * 30)]
                            + [("--max-error-pct", v) for v in ("nan", "-1", "inf", "-inf", "1e999")]
                            + [("--max-speedup-error", v) for v in ("nan", "-0.5")])
    if opt in ("--jobs", "--des-sample") or (opt == "--seed" and rng.random() < 0.5):
        return Case(3, f"{opt} {value[:20]}", ["sweep", "s.yaml", "--out", "sw", "--grid", "spec.num_steps=1..2",
                                              opt, value], scenario_files(), outputs=("sw",), mention=(opt,),
                    expect="either" if opt == "--des-sample" and value != "-1" else "error")  # capped at the points
    if opt == "--seed":
        return simulate_case(3, f"{opt} {value[:20]}", scenario_files(), [opt, value], mention=(opt,))
    return Case(3, f"{opt} {value}", ["validate", "rec.json", "--profile", "p.json", opt, value],
                {"rec.json": RECORD.read_text(), "p.json": dump_json(base_profile())}, mention=(opt,))


def gen_option_types(rng: random.Random) -> Case:
    """Kind 4, command-line types: words for numbers, unknown options and choices, empty --set keys."""
    argv = rng.choice([["sweep", "s.yaml", "--out", "sw", "--grid", "spec.num_steps=1..2", "--jobs", "two"],
                       ["simulate", "s.yaml", "--seed", "[/]"], ["simulate", "s.yaml", "--nope"],
                       ["sweep", "s.yaml", "--out", "sw", "--grid", "spec.num_steps=1..2", "--solver", "gpu"],
                       ["validate", "rec.json", "--profile", "p.json", "--judge-mode", "graph "],
                       ["validate", "rec.json", "--profile", "p.json", "--acceptance", "[red]x"],
                       ["validate", "rec.json", "--profile", "p.json", "--costs-source", "per_op "],
                       ["simulate", "s.yaml", "--set", "spec..num_steps=3"], ["simulate", "s.yaml", "--set", "=3"],
                       ["simulate", "s.yaml", "--set", " spec.num_steps=3"], ["simulate", "s.yaml", "--set", "spec"],
                       ["simulate", "s.yaml", "--set", "spec.num_steps.x=3"], ["simulate"], ["nope"],
                       ["sweep", "s.yaml", "--out", "sw"], ["sweep", "s.yaml", "--out", "sw", "--grid", ""],
                       ["plot"], ["validate"], ["simulate", "s.yaml", "--json"]])
    files = {**scenario_files(), "rec.json": RECORD.read_text()}
    return Case(4, " ".join(argv)[:50], argv, files, outputs=("sw",) if "sw" in argv else (),
                mention=tuple(a for a in argv if a.startswith("-")) + ("Usage", "--set", "--grid", "Missing"),
                expect="either" if " spec.num_steps=3" in argv else "error")  # spaces around a whole key: YAML's rule


def gen_special_inputs(rng: random.Random) -> Case:
    """Kind 11, inputs that are not regular files: FIFOs (reading one would wait forever), devices,
    folders, dangling links, empty files."""
    what = rng.choice(["fifo", "chardev", "dir", "dangling", "empty"])
    which = rng.choice(["scenario", "config", "profile", "record", "report", "sweep_csv"])
    special = {"fifo": Special("fifo"), "chardev": Special("chardev"), "dir": Special("dir"),
               "dangling": Special("symlink", "gone/nowhere"), "empty": ""}[what]
    if what == "dangling":
        special = Special("dangling")
    files = scenario_files()
    if which == "scenario":
        files["s.yaml"] = special
        return Case(11, f"{what} scenario", ["simulate", "s.yaml"], files, mention=("s.yaml",))
    if which == "config":
        sc = base_scenario()
        sc["target"] = {"name": "t", "config_path": "config.json"}
        return Case(11, f"{what} config", ["simulate", "s.yaml"], scenario_files(sc, **{"config.json": special}),
                    mention=("config.json",))
    if which == "profile":
        files["p.json"] = special
        return Case(11, f"{what} profile", ["simulate", "s.yaml"], files, mention=("p.json",))
    if which == "record":
        return Case(11, f"{what} record", ["validate", "recs", "--profile", "p.json"],
                    {"p.json": dump_json(base_profile()), "recs/a.json": special, "recs/b.json": RECORD.read_text()},
                    mention=("a.json", "recs"))
    if which == "report":
        return Case(11, f"{what} report", ["plot", "sw", "--out", "figs", "--no-png", "--validate-json", "v.json"],
                    {"v.json": special}, outputs=("figs",), mention=("v.json",), needs=("sweep",))
    return Case(11, f"{what} sweep csv", ["plot", "sw", "--out", "figs", "--no-png"], {"sw/sweep.csv": special},
                outputs=("figs",), mention=("sweep.csv", "sw"), needs=("sweep",))


def gen_types(rng: random.Random) -> Case:
    """Kind 4: a path, mapping, list or number where another type is expected (files and options)."""
    how = rng.choice(["config_path", "text_config", "section", "field", "config_not_object", "top", "record",
                      "options"])
    if how == "options":
        return gen_option_types(rng)
    if how == "config_path":
        value = rng.choice([123, 1.5, True, [], ["config.json"], {"a": 1}, "", "   ", "/", ".", "\0x"])
        sc = base_scenario()
        sc["target"]["config_path"] = value
        return Case(4, f"config_path={value!r}", ["simulate", "s.yaml"], scenario_files(sc),
                    mention=("config_path", "s.yaml"))
    if how in ("text_config", "config_not_object"):
        sc = base_scenario()
        sc["target"] = {"name": "t", "config_path": "config.json"}
        cfg: Any = base_config_json()
        if how == "text_config":
            cfg["text_config"] = rng.choice([None, [], "x", 5, [1, 2], True])
        else:
            cfg = rng.choice([[], "x", 5, None, [cfg]])
        return Case(4, how, ["simulate", "s.yaml"], scenario_files(sc, **{"config.json": dump_json(cfg)}),
                    mention=("config.json",))
    if how == "section":
        section = rng.choice(["target", "draft", "spec", "acceptance", "workload", "serving_engine", "fidelity",
                              "costs", "placement"])
        value = rng.choice(WRONG_TYPES + (123, 1.5))
        sc = base_scenario()
        sc[section] = value
        return Case(4, f"{section}={value!r}", ["simulate", "s.yaml"], scenario_files(sc),
                    mention=(section, "s.yaml"), expect="either" if value == {} else "error")  # {}: the defaults
    if how == "field":
        field_ = rng.choice(SCENARIO_NUMBERS + ("name", "profile", "target.name", "serving_engine.cuda_graph",
                                                "fidelity.granularity", "costs.source", "acceptance.kind"))
        if field_ in ("name", "profile", "target.name"):
            value = rng.choice([5, 1.5, True, [1, 2], {"a": 1}, []])  # a string field given no string
        elif field_ == "serving_engine.cuda_graph":
            value = rng.choice([v for v in WRONG_TYPES if not isinstance(v, bool)] + [1, 0])
        else:
            value = rng.choice(WRONG_TYPES)
        return simulate_case(4, f"{field_}={value!r}", scenario_files(set_path(base_scenario(), field_, value)),
                             mention=(field_.split(".")[0], "s.yaml"))
    if how == "record":
        rec = json.loads(RECORD.read_text())
        key = rng.choice(["scenario", "num_cycles", "accept_length_counts", "phase_us", "repeat_tok_per_s",
                          "hardware", "tok_per_s"])
        rec[key] = value = rng.choice(WRONG_TYPES + (None, -1))
        return Case(4, f"record {key}", ["validate", "rec.json", "--profile", "p.json"],
                    {"rec.json": dump_json(rec), "p.json": dump_json(base_profile())}, mention=("rec.json",),
                    expect="either" if value in ([], {}) else "error")  # an empty optional list or mapping is valid
    text = rng.choice(["- a\n- b\n", "just text\n", "42\n", "", "null\n", "[]\n", "'x'\n"])
    return Case(4, f"top {text!r}", ["simulate", "s.yaml"], scenario_files(text=text), mention=("s.yaml",))


PROFILE_MUTATIONS = (
    ("forwards.0.num_tokens", [[-4, -2, -1], [0, 4, 16], [1, 1, 2], [4, 2, 1], [1, 4]]),
    ("forwards.0.context_len", [[-256, 1024], [0, 1024], [1024, 256], [256]]),
    ("forwards.0.latency_us", [[[0, 0], [0, 0], [0, 0]], [[-1, 2], [3, 4], [5, 6]], [[50, 60]], [[1e-300, 1], [1, 1], [1, 1]]]),
    ("forwards.0.tp_size", [0, -1, 10**9]),
    ("collectives.0.size_bytes", [[0, 1, 2], [-1, 5, 9], [10**30, 10**31, 10**32], [3, 2, 1]]),
    ("collectives.0.latency_us", [[0, 1, 2], [1e-320, 1, 2], [1, 2]]),
    ("ops.0.grid", [{"num_tokens": [0.0, 1.0, 2.0]}, {"num_tokens": [-1.0, 1.0, 2.0]}, {"num_tokens": [1e-300, 1, 2]},
                    {"batch_size": [1.0, 2.0, 3.0]}]),
    ("ops.0.latency_us", [[0, 0, 0], [1, 2], [1e-320, 1, 1]]),
    ("host", [dict(default_launch_us=0, graph_replay_us=0, graph_kernel_gap_us=0, d2h_sync_us=0, host_schedule_us=0,
                   provenance=ASSUMED)]),
    ("host.d2h_sync_us", [-1, 0, 1e300]),
    ("host.op_launch_us", [{"gemm": -1}, {"gemm": 1e300}, {"gemm": 0}]),
    ("roofline.kernel_floor_us", [0, -1, 1e-300]),
    ("roofline.hbm_bandwidth_gb_per_s", [0, 1e-300, 1e300, 1]),
    ("roofline.bf16_tflops", [0, 1e-300, 1e-3]),
    ("roofline.collective_base_latency_us", [0, -1]),
    ("schema_version", [2, "1", None]),
)


def set_indexed(data: Any, dotted: str, value: Any) -> Any:
    node = data
    parts = dotted.split(".")
    for p in parts[:-1]:
        node = node[int(p)] if isinstance(node, list) else node[p]
    last = parts[-1]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return data


def gen_profiles(rng: random.Random) -> Case:
    """Kind 5: profile tables that validate or nearly: negative and zero axes, zero costs and rows,
    NaN, denormals, one-point axes; used by the per-op and whole-forward costs."""
    prof = base_profile()
    path, values = rng.choice(PROFILE_MUTATIONS)
    set_indexed(prof, path, copy.deepcopy(rng.choice(values)))
    text = dump_json(prof)
    if rng.random() < 0.15:
        text = text.replace("50.0", "NaN", 1)
    extra = ["--set", f"costs.source={rng.choice(['per_op', 'whole_forward'])}",
             "--set", f"tp_size={rng.choice([1, 2])}", "--set", f"placement={rng.choice(['shared_tp', 'tp1_colocated'])}"]
    return simulate_case(5, f"profile {path}", {**scenario_files(), "p.json": text}, extra, mention=("p.json",),
                         expect="either")


def gen_ambiguity(rng: random.Random) -> Case:
    """Kind 6: a key written twice, null where a value is needed, whitespace inside enum-like values,
    strings for numbers."""
    how = rng.choice(["duplicate", "duplicate_flow", "null", "whitespace", "string_number", "float_int",
                      "json_duplicate", "set_flow_duplicate"])
    text = dump_yaml(base_scenario())
    if how == "duplicate":
        section = rng.choice(["spec", "acceptance", "seed", "name", "workload", "fidelity"])
        m = re.search(rf"^{section}:.*(?:\n  .*)*", text, re.M)
        return Case(6, f"duplicate {section}", ["simulate", "s.yaml"], scenario_files(text=text + m.group(0) + "\n"),
                    mention=("s.yaml",))
    if how == "duplicate_flow":
        return Case(6, how, ["simulate", "s.yaml"],
                    scenario_files(text=text.replace("spec:\n", "spec: {num_steps: 3, num_steps: 2}\nold_spec:\n")),
                    mention=("s.yaml",))
    if how == "null":
        field_ = rng.choice(SCENARIO_NUMBERS + ("spec", "acceptance", "target.head_dim",
                                                "acceptance.rate_concentration", "target.config_path", "profile"))
        sc = set_path(base_scenario(), field_, None)
        return simulate_case(6, f"null {field_}", scenario_files(sc), mention=(field_, "s.yaml"))
    if how == "whitespace":
        field_, value = rng.choice([("placement", "tp1_colocated"), ("fidelity.granularity", "kernel"),
                                    ("costs.source", "whole_forward"), ("acceptance.kind", "iid"),
                                    ("placement", "shared_tp"), ("serving_engine.kind", "live_loop")])
        value = rng.choice([value + " ", " " + value, value + "\n", value + "\t", value.upper()])
        sc = set_path(base_scenario(), field_, value)
        return simulate_case(6, f"whitespace {field_}", scenario_files(sc), mention=(field_.split(".")[0], "s.yaml"))
    if how == "string_number":
        field_ = rng.choice(SCENARIO_NUMBERS)
        sc = set_path(base_scenario(), field_, rng.choice(["5", " 5 ", "0.5", "1e3", "yes", "true"]))
        return simulate_case(6, f"string {field_}", scenario_files(sc), mention=(field_, "s.yaml"))
    if how == "float_int":
        field_ = rng.choice([f for f in SCENARIO_NUMBERS if "rate" not in f and "scale" not in f
                             and "dtype" not in f and "jitter" not in f])
        sc = set_path(base_scenario(), field_, 4.0)
        return simulate_case(6, f"float {field_}", scenario_files(sc), mention=(field_, "s.yaml"))
    if how == "json_duplicate":
        text = dump_json(base_profile()).replace('"name": "fuzz"', '"name": "fuzz", "name": "other"')
        return simulate_case(6, how, {**scenario_files(), "p.json": text}, mention=("p.json",))
    return simulate_case(6, how, scenario_files(), ["--set", "spec={num_steps: 3, num_steps: 2}"],
                         mention=("--set",))
