"""Generated bad inputs for the `specdecsim` CLI, one generator per kind of bad input.

Shared by `tests/fuzz/fuzz_cli.py` (hundreds of seeded cases through the CLI, counted by
outcome) and `tests/test_bad_input.py` (a hypothesis property per kind). A `Case` is a set of
files to lay out in an empty folder, one command line run there, the outputs it may write, and
the words a clean error must contain (the file or field it is about). `run_case` runs it in
this process with typer's CliRunner; `classify` says what came out.

Kinds (the numbers of the bad-input issue):
 1 undecodable files            2 nesting and alias expansion     3 numbers out of range
 4 wrong types                  5 profiles that break the lookup  6 ambiguity (duplicates, nulls, ...)
 7 unbounded work               8 outputs where nobody asked      9 user text as terminal markup
10 outputs one command writes and another reads                  11 messages (naming file and field)
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import random
import re
import stat
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "data" / "live" / "h200" / "1b_eager_b1_s1_a50.json"
ENGINE_RUNS = ROOT / "tests" / "data" / "engine_runs"  # the importers' fixtures (kind 12)
KINDS = tuple(range(1, 13))

TINY_TARGET = dict(name="tiny-target", hidden_size=64, num_hidden_layers=2, num_attention_heads=8,
                   num_key_value_heads=2, intermediate_size=128, vocab_size=256)
TINY_DRAFT = dict(name="tiny-draft", hidden_size=64, num_hidden_layers=1, num_attention_heads=8,
                  num_key_value_heads=2, intermediate_size=128, vocab_size=256, draft_vocab_size=128,
                  num_fc_input_hidden_states=3)
ASSUMED = dict(kind="assumed", source="fuzz fixture")


# ---- the fixture: a tiny scenario, a small profile, a model config, a record ----------------------
def base_scenario() -> dict:
    return dict(name="tiny", profile="p.json", target=dict(TINY_TARGET), draft=dict(TINY_DRAFT), tp_size=1,
                placement="shared_tp", spec=dict(num_steps=3, topk=1, num_draft_tokens=4),
                acceptance=dict(kind="iid", acceptance_rate=0.6),
                workload=dict(batch_size=1, context_len=512, max_new_tokens=64),
                serving_engine=dict(cuda_graph=True), fidelity=dict(num_cycles=40),
                costs=dict(source="per_op"), seed=1)


def base_profile() -> dict:
    """A flat profile (every op 10 us) with one table of each kind, for mutations to hit."""
    return dict(
        schema_version=1, name="fuzz",
        hardware=dict(gpu_name="test", gpu_count=8, interconnect="test"),
        roofline=dict(hbm_bandwidth_gb_per_s=1e15, bf16_tflops=1e15, kernel_floor_us=10.0,
                      link_bandwidth_gb_per_s=1e15, collective_base_latency_us=5.0, provenance=ASSUMED),
        host=dict(default_launch_us=8.0, graph_replay_us=12.0, graph_kernel_gap_us=0.0, d2h_sync_us=15.0,
                  host_schedule_us=40.0, provenance=ASSUMED),
        collectives=[dict(op="allreduce", world_size=2, mode="graph", size_bytes=[1024, 65536, 1048576],
                          latency_us=[8.0, 12.0, 40.0], provenance=ASSUMED)],
        ops=[dict(key="rmsnorm:h=64", axes=["num_tokens"], grid={"num_tokens": [1.0, 16.0, 256.0]},
                  latency_us=[3.0, 4.0, 9.0], provenance=ASSUMED)],
        forwards=[dict(model="tiny-target", phase="forward", tp_size=1, mode="graph", num_tokens=[1, 4, 16],
                       context_len=[256, 1024], latency_us=[[50.0, 60.0], [55.0, 66.0], [80.0, 95.0]],
                       provenance=ASSUMED)])


def base_config_json() -> dict:
    return dict(architectures=["LlamaForCausalLM"], hidden_size=64, num_hidden_layers=2, num_attention_heads=8,
                num_key_value_heads=2, intermediate_size=128, vocab_size=256)


def dump_yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False)


def dump_json(data: Any) -> str:
    return json.dumps(data, indent=1)


# ---- cases ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Special:
    """A file that is not plain content: 'fifo', 'chardev' (a /dev/null twin, root only), 'dir',
    'symlink' (to `target`)."""

    what: str
    target: str = ""


@dataclass
class Case:
    """One generated input: files laid out in an empty folder, then `argv` run there.

    Attributes:
        outputs: paths (relative) the command may create or replace; anything else must stay as it was.
        mention: a clean error names at least one of these (a file, a field, an option).
        needs: fixtures to copy in first: 'sweep' (a sweep folder `sw/`), 'report' (`v.json`).
        expect: 'error' (exit 2 naming a `mention`), 'success' or 'either'.
    """

    kind: int
    name: str
    argv: list[str]
    files: dict[str, Any] = field(default_factory=dict)
    outputs: tuple[str, ...] = ()
    mention: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()
    expect: str = "error"  # "error", "success" or "either" (an extreme but valid value may run)


def scenario_files(data: Any = None, text: str | None = None, **more) -> dict:
    files = {"s.yaml": text if text is not None else dump_yaml(base_scenario() if data is None else data),
             "p.json": dump_json(base_profile())}
    files.update(more)
    return files


def simulate_case(kind: int, name: str, files: dict, extra: list[str] = (), mention=("s.yaml",),
                  json_out: bool = True, expect: str = "error") -> Case:
    argv = ["simulate", "s.yaml", *extra] + (["--json", "out.json"] if json_out else [])
    return Case(kind, name, argv, files, outputs=("out.json",) if json_out else (), mention=tuple(mention),
                expect=expect)


SCENARIO_NUMBERS = (
    "target.hidden_size", "target.num_hidden_layers", "target.num_attention_heads", "target.num_key_value_heads",
    "target.intermediate_size", "target.vocab_size", "target.head_dim", "target.weight_dtype_bytes",
    "draft.intermediate_size", "draft.hidden_size", "draft.draft_vocab_size", "draft.num_fc_input_hidden_states",
    "draft.kv_cache_dtype_bytes", "tp_size", "spec.num_steps", "spec.num_draft_tokens", "spec.topk",
    "acceptance.acceptance_rate", "acceptance.rate_concentration", "workload.batch_size", "workload.context_len",
    "workload.max_new_tokens", "fidelity.num_cycles", "fidelity.warmup_cycles", "fidelity.jitter_cv",
    "costs.collective_latency_scale", "costs.compute_latency_scale", "seed")
EXTREMES = (0, -1, 1, 2, 3, 7, 0.5, 1.5, 1e-7, 1e-320, 5e-324, 1e-300, 0.01, 0.999999, 1e6, 1e9, 1e29, 1e308,
            10**30, 2**63, 2**64, -(2**63), 4096, 65536, 1_000_000, 10_000_000)
WRONG_TYPES = ("x", [1, 2], {"a": 1}, True, [], {}, "[/]", "5", " 5", "0.5 ")
MARKUP = ("[/]", "[bold]x", "[red]", "x[/x]", "\\[/]", "[link=http://x]y", "[/bold]", "[[", "]]", "[b", "\\",
          "[bold red on white]", "[#ff0000]x", "[@click]x", "[/][/]")


def set_path(data: dict, dotted: str, value: Any) -> dict:
    node = data
    parts = dotted.split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = value
    return data


def _yaml_scalar(v: Any) -> str:
    return json.dumps(v) if not isinstance(v, str) else json.dumps(v)


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


def _set_indexed(data: Any, dotted: str, value: Any) -> Any:
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
    _set_indexed(prof, path, copy.deepcopy(rng.choice(values)))
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
        files[out] = dump_json({"simulate_json": {"specdecsim_output": "simulation/1"},
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


def damage(text: str, rng: random.Random, name: str) -> str:
    """A plausible corruption of one of our outputs: a key dropped, a value of the wrong type, the
    file cut short, a cell changed."""
    if name.endswith(".csv"):
        lines = text.splitlines()
        how = rng.choice(["cut", "cell", "nan", "header", "scenario_json", "extra_cell"])
        if how == "cut":
            return text[:rng.randrange(1, max(2, len(text)))]
        header = lines[0].split(",")
        if how == "header":
            return "\n".join([",".join(h + "x" if i == rng.randrange(len(header)) else h
                                       for i, h in enumerate(header))] + lines[1:]) + "\n"
        row = next(csv_rows(text))
        col = rng.choice([c for c in header if c != "scenario_json"]) if how != "scenario_json" else "scenario_json"
        row[col] = {"cell": rng.choice(["abc", "-5", "", "[1]", "True", "1e999"]), "nan": "nan",
                    "scenario_json": rng.choice(["{", "[]", '{"name": 1}', '{"a":' * 3000, "null"]),
                    "extra_cell": "x"}.get(how, "x")
        return rewrite_first_row(text, row, extra=how == "extra_cell")
    data = json.loads(text)
    how = rng.choice(["drop", "type", "cut", "marker", "nan"])
    if how == "cut":
        return text[:rng.randrange(1, len(text))]
    if how == "nan":
        return text.replace(": 0.", ": NaN, \"x\": 0.", 1) if ": 0." in text else text + "x"
    keys = list(data)
    key = rng.choice(keys)
    if how == "drop":
        data.pop(key)
    elif how == "marker":
        data["specdecsim_output"] = rng.choice(["simulation/1", "sweep/2", 1, None])
    else:
        data[key] = rng.choice(WRONG_TYPES + (None, -1))
    return json.dumps(data)


def csv_rows(text: str):
    import csv
    import io
    return csv.DictReader(io.StringIO(text))


def rewrite_first_row(text: str, row: dict, extra: bool = False) -> str:
    import csv
    import io
    rows = list(csv_rows(text))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    w.writerow(row)
    for r in rows[1:]:
        w.writerow(r)
    out = buf.getvalue()
    if extra:
        lines = out.split("\n")
        lines[1] += ",extra"
        out = "\n".join(lines)
    return out


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


GENERATORS = {1: gen_undecodable, 2: gen_nesting, 3: gen_numbers, 4: gen_types, 5: gen_profiles,
              6: gen_ambiguity, 7: gen_work, 8: gen_outputs, 9: gen_markup, 10: gen_round_trip, 11: gen_messages,
              12: gen_importers}


def generate(kind: int, rng: random.Random) -> Case:
    return GENERATORS[kind](rng)


# ---- laying out and running a case ----------------------------------------------------------------------
def prepare_fixtures(folder: Path) -> dict[str, Path]:
    """Outputs of real runs that cases of kinds 8, 10 and 11 read: a sweep folder and a validate
    report, made once with the CLI (in this process)."""
    from typer.testing import CliRunner

    from simulator.cli import app
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "s.yaml").write_text(dump_yaml(base_scenario()))
    (folder / "p.json").write_text(dump_json(base_profile()))
    (folder / "rec.json").write_text(RECORD.read_text())
    runner = CliRunner()
    old = os.getcwd()
    os.chdir(folder)
    try:
        r = runner.invoke(app, ["sweep", "s.yaml", "--out", "sw", "--des-sample", "1", "--grid", "spec.num_steps=1..3",
                                "--grid", "acceptance.acceptance_rate=0.5,0.8"])
        assert r.exit_code == 0, r.output
        r = runner.invoke(app, ["validate", "rec.json", "--profile", "p.json", "--json", "v.json"])
        assert r.exit_code == 0, r.output
    finally:
        os.chdir(old)
    return {"sweep": folder / "sw", "report": folder / "v.json"}


def lay_out(case: Case, folder: Path, fixtures: dict[str, Path], rng: random.Random) -> None:
    """Write a case's files (and the fixtures it needs) into an empty folder."""
    import shutil
    for need in case.needs:
        if need == "sweep":
            shutil.copytree(fixtures["sweep"], folder / "sw")
        elif need == "report":
            shutil.copy(fixtures["report"], folder / "v.json")
        elif need.startswith("damage:"):
            p = folder / need.split(":", 1)[1]
            p.write_text(damage(p.read_text(), rng, p.name))
        elif need.startswith("damage_cell:"):
            p = folder / need.split(":", 1)[1]
            row = next(csv_rows(p.read_text()))
            row["scenario_json"] = '{"name": 1, "target": []}'
            p.write_text(rewrite_first_row(p.read_text(), row))
    for rel, content in case.files.items():
        p = folder / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if p.is_symlink() or p.exists():  # a fixture's file replaced by the case's own
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        if isinstance(content, Special):
            if content.what == "fifo":
                os.mkfifo(p)
            elif content.what == "chardev":
                try:
                    os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # a /dev/null twin
                except (PermissionError, OSError):
                    os.mkfifo(p)
            elif content.what == "dir":
                p.mkdir(exist_ok=True)
                (p / "inside.txt").write_text("mine\n")
            elif content.what == "dangling":
                os.symlink("gone/nowhere", p)
            elif content.what == "symlink":
                (folder / content.target).parent.mkdir(parents=True, exist_ok=True)
                if not (folder / content.target).exists():
                    (folder / content.target).write_text("keep\n")
                os.symlink(content.target, p)
        elif isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)


def snapshot(folder: Path) -> dict[str, tuple]:
    """(kind, content hash) of every entry below `folder`, without following links or opening FIFOs."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            if stat.S_ISREG(st.st_mode):
                out[str(p.relative_to(folder))] = ("file", hashlib.sha256(p.read_bytes()).hexdigest())
            elif stat.S_ISLNK(st.st_mode):
                out[str(p.relative_to(folder))] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[str(p.relative_to(folder))] = ("dir",)
            else:
                out[str(p.relative_to(folder))] = ("special", stat.S_IFMT(st.st_mode))
    return out


def changed_outside(before: dict, after: dict, outputs: tuple[str, ...]) -> list[str]:
    """Entries created, changed or removed that are not the case's outputs (or inside them)."""
    def allowed(rel: str) -> bool:
        return any(rel == o or rel.startswith(o.rstrip("/") + "/") for o in outputs) or \
            any(o.startswith(rel + "/") for o in outputs)  # a folder made for an output
    keys = set(before) | set(after)
    return sorted(k for k in keys if before.get(k) != after.get(k) and not allowed(k)
                  and not Path(k).name.startswith("."))


_NAN = re.compile(r"(?<![\w.])-?(nan|inf|infinity)(?![\w])", re.I)


def bad_numbers(value: Any, key: str = "") -> list[str]:
    """Non-finite numbers anywhere, and negative ones under time and rate keys, in a JSON output."""
    found = []
    if isinstance(value, dict):
        for k, v in value.items():
            if k in ("scenario",):
                continue
            found += bad_numbers(v, f"{key}.{k}" if key else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found += bad_numbers(v, f"{key}[{i}]")
    elif isinstance(value, float):
        if not math.isfinite(value):
            found.append(f"{key}={value}")
        elif value < 0 and re.search(r"(_us|tok_per_s|speedup|accept_length)(\b|\.|\[|$)", key) \
                and "error" not in key and "rel_diff" not in key:
            found.append(f"{key}={value}")
    return found


OUTCOMES = ("clean error", "success", "traceback", "hang", "nan or negative", "wrote outside outputs",
            "unclear error", "other exit")


def as_expected(case: Case, outcome: str) -> bool:
    """Whether an outcome is one the case allows: a clean error where an error is expected, a
    success where a run is, either where an extreme but valid value may run."""
    allowed = {"error": ("clean error",), "success": ("success",), "either": ("clean error", "success")}
    return outcome in allowed[case.expect]


def classify(case: Case, exit_code: int | None, output: str, tb: str | None, folder: Path,
             before: dict, after: dict) -> tuple[str, str]:
    """(outcome, detail) of a finished case; outcome is one of OUTCOMES."""
    if exit_code is None:
        return "hang", ""
    if tb or "Traceback (most recent call last)" in output:
        return "traceback", (tb or output)[-1500:]
    outside = changed_outside(before, after, case.outputs)
    if outside:
        return "wrote outside outputs", ", ".join(outside[:5])
    if exit_code == 0:
        if _NAN.search(output):
            return "nan or negative", _NAN.search(output).group(0)
        for rel in case.outputs:
            p = folder / rel
            if p.is_file() and p.suffix == ".json" and not p.is_symlink():
                try:
                    bad = bad_numbers(json.loads(p.read_text()))
                except (ValueError, UnicodeDecodeError):
                    bad = ["unreadable output"]
                if bad:
                    return "nan or negative", ", ".join(bad[:3])
        return "success", ""
    if exit_code == 2:
        lines = [ln for ln in output.strip().splitlines() if ln.strip()]
        # our 'error: ...' line, or typer's usage error (Usage, Try --help, a boxed 'Error' of a line or two)
        err = [i for i, ln in enumerate(lines) if "error:" in ln or ln.startswith("Usage: ") or "─ Error ─" in ln]
        if not err:
            return "unclear error", "no 'error:' line: " + output[-300:]
        tail = lines[err[0]:]
        if len(tail) > 8 or sum(len(ln) for ln in tail) > 1500:
            return "unclear error", f"{len(tail)} lines, {sum(len(ln) for ln in tail)} characters"
        text = " ".join(" ".join(tail).split())
        if case.mention and not any(m in text or m in output for m in case.mention):
            return "unclear error", f"names none of {case.mention}: {text[:300]}"
        return "clean error", ""
    return "other exit", f"exit {exit_code}: {output[-300:]}"


def run_in_process(argv: list[str], folder: Path) -> tuple[int, str, str | None]:
    """(exit code, output, traceback text or None) of `specdecsim argv` run with CliRunner in `folder`."""
    from typer.testing import CliRunner

    from simulator.cli import app
    old = os.getcwd()
    os.chdir(folder)
    try:
        r = CliRunner().invoke(app, argv)
    finally:
        os.chdir(old)
    tb = None
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        tb = "".join(traceback.format_exception(*r.exc_info))
    return r.exit_code, r.output, tb
