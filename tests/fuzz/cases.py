"""Generated bad inputs for the `specdecsim` CLI: the fixture they start from and what a case is.

Shared by `tests/fuzz/fuzz_cli.py` (hundreds of seeded cases through the CLI, counted by
outcome) and `tests/test_bad_input.py` (a hypothesis property per kind). A `Case` is a set of
files to lay out in an empty folder, one command line run there, the outputs it may write, and
the words a clean error must contain (the file or field it is about). The generators, one per kind,
are tests/fuzz/gen_values.py (kinds 1-6) and tests/fuzz/gen_commands.py (kinds 7-12), numbered in
tests/fuzz/kinds.py (`generate`); tests/fuzz/running.py lays a case out, runs it in this process with
typer's CliRunner and says what came out (`classify`).

Kinds (the numbers of the bad-input issue):
 1 undecodable files            2 nesting and alias expansion     3 numbers out of range
 4 wrong types                  5 profiles that break the lookup  6 ambiguity (duplicates, nulls, ...)
 7 unbounded work               8 outputs where nobody asked      9 user text as terminal markup
10 outputs one command writes and another reads                  11 messages (naming file and field)
12 engine outputs for the importers                               13 engine-side files and options (gen_engine.py)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "data" / "live" / "h200" / "1b_eager_b1_s1_a50.json"
ENGINE_RUNS = ROOT / "tests" / "data" / "engine_runs"  # the importers' fixtures (kind 12)
KINDS = tuple(range(1, 14))

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
