"""Bad input, kind by kind: a hypothesis property per kind over generated instances
(tests/fuzz/: cases.py, kinds.py), then the examples of the issue as plain tests.

Every instance must end in one of the outcomes its case allows: a clean error (exit 2, an
'error:' line naming the file or field, a few lines at most, no traceback) or, for an extreme
but valid value, a run whose outputs hold no NaN and no negative time; never a write outside the
requested outputs. Commands run in this process through typer's CliRunner.
"""

from __future__ import annotations

import json
import os
import random
import stat
import tempfile
import time
import typing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.fuzz.cases import KINDS, RECORD, base_config_json, base_profile, base_scenario, dump_json, dump_yaml
from tests.fuzz.kinds import generate
from tests.fuzz.running import (as_expected, classify, error_lines, lay_out, prepare_fixtures, run, run_in_process,
                                snapshot, write_scenario)

EXAMPLES_PER_KIND = {1: 20, 2: 20, 3: 25, 4: 20, 5: 25, 6: 20, 7: 12, 8: 20, 9: 20, 10: 10, 11: 20, 12: 40, 13: 40}  # slow tier
SMALL_EXAMPLES_PER_KIND = 4  # default tier: the same property, the first few derandomized instances per kind


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    """A sweep folder and a validate report written by the tools themselves."""
    return prepare_fixtures(tmp_path_factory.mktemp("fixtures"))


def check_case(case, fixtures, rng: random.Random) -> None:
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d)
        lay_out(case, folder, fixtures, rng)
        before = snapshot(folder)
        code, output, tb = run_in_process(case.argv, folder)
        outcome, detail = classify(case, code, output, tb, folder, before, snapshot(folder))
        assert as_expected(case, outcome), (f"kind {case.kind} {case.name!r}: specdecsim {' '.join(case.argv)[:200]}"
                                            f" -> {outcome} (expected {case.expect}): {detail}\n{output[-2000:]}")


def check_generated(kind: int, max_examples: int, fixtures) -> None:
    @settings(max_examples=max_examples, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(rng=st.randoms(use_true_random=False))
    def prop(rng):
        check_case(generate(kind, rng), fixtures, rng)
    prop()


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS, ids=lambda k: f"kind{k}")
def test_generated_bad_input_ends_cleanly(kind, fixtures):
    """Property, per kind: exit 2 with one line naming the file and field (or a clean run of an
    extreme but valid value), no traceback, no NaN, no negative time, nothing written elsewhere.
    Slow tier: EXAMPLES_PER_KIND instances (about 10 s of CPU in all); the default tier's
    test_generated_bad_input_ends_cleanly_small checks the first SMALL_EXAMPLES_PER_KIND."""
    check_generated(kind, EXAMPLES_PER_KIND[kind], fixtures)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: f"kind{k}")
def test_generated_bad_input_ends_cleanly_small(kind, fixtures):
    """The property of test_generated_bad_input_ends_cleanly (slow tier: EXAMPLES_PER_KIND
    instances per kind) on SMALL_EXAMPLES_PER_KIND instances per kind."""
    check_generated(kind, min(SMALL_EXAMPLES_PER_KIND, EXAMPLES_PER_KIND[kind]), fixtures)


# ---- the examples of the issue ---------------------------------------------------------------------
# kind 1
def test_binary_scenario_and_latin1_config_name_the_file(tmp_path):
    write_scenario(tmp_path)
    (tmp_path / "s.yaml").write_bytes(b"\xff\xfe\x00\x01binary")
    code, out = run(tmp_path, "simulate", "s.yaml")
    assert code == 2 and "s.yaml: not UTF-8" in out
    sc = base_scenario()
    sc["target"] = {"name": "t", "config_path": "config.json"}
    write_scenario(tmp_path, sc)
    (tmp_path / "config.json").write_bytes(
        json.dumps({**base_config_json(), "_name_or_path": "caf\xe9"}, ensure_ascii=False).encode("latin-1"))
    code, out = run(tmp_path, "simulate", "s.yaml")
    assert code == 2 and "target.config_path" in out and "config.json: not UTF-8" in out


# kind 2
def test_deep_nesting_and_billion_laughs_are_refused_fast(tmp_path):
    write_scenario(tmp_path, text=dump_yaml(base_scenario()) + "description: " + "[" * 3000 + "]" * 3000 + "\n")
    code, out = run(tmp_path, "simulate", "s.yaml")
    assert code == 2 and "nested deeper than" in out and "s.yaml" in out
    laughs = ["lol0: &l0 [x, x, x, x, x, x, x, x, x, x]"] + [
        f"lol{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 10)]
    write_scenario(tmp_path, text="\n".join(laughs) + "\n" + dump_yaml(base_scenario()))
    t0 = time.perf_counter()
    code, out = run(tmp_path, "simulate", "s.yaml")
    assert code == 2 and "aliases are expanded" in out and time.perf_counter() - t0 < 5
    (tmp_path / "p.json").write_text("[" * 100_000 + "]" * 100_000)
    write_scenario(tmp_path)
    (tmp_path / "p.json").write_text("[" * 100_000 + "]" * 100_000)
    code, out = run(tmp_path, "simulate", "s.yaml")
    assert code == 2 and "p.json" in out and "nested deeper" in out


# kind 3
@pytest.mark.parametrize("field, value", [("acceptance.rate_concentration", 1e-320),
                                          ("draft.intermediate_size", 10**29),
                                          ("draft.intermediate_size", 1e29)])
def test_numbers_out_of_range_name_the_field(tmp_path, field, value):
    sc = base_scenario()
    section, key = field.split(".")
    sc[section][key] = value
    write_scenario(tmp_path, sc)
    code, out = run(tmp_path, "simulate", "s.yaml")
    assert code == 2 and f"s.yaml: {section}." in out and key in out


@pytest.mark.parametrize("grid", ["acceptance.acceptance_rate=0:inf:0.1", "acceptance.acceptance_rate=0:.inf:0.1",
                                  "spec.num_steps=1..10000000000000", "acceptance.acceptance_rate=0:1:1e-300"])
def test_unbounded_grids_are_refused_before_anything_is_made(tmp_path, grid):
    write_scenario(tmp_path)
    t0 = time.perf_counter()
    code, out = run(tmp_path, "sweep", "s.yaml", "--out", "sw", "--grid", grid)
    assert code == 2 and "--grid" in out and time.perf_counter() - t0 < 5
    assert not (tmp_path / "sw").exists()


def test_every_numeric_field_documents_its_range():
    from simulator.config import CostsConfig, FidelityConfig, ModelShape, Placement, Scenario
    from simulator.workload_config import IidAcceptance, SpecConfig, WorkloadConfig
    from simulator.evidence.live_records import LiveRun
    from simulator.profile import (CollectiveTable, ForwardTable, HardwareInfo, HostOverheads, RooflineParams)
    for model in (ModelShape, SpecConfig, IidAcceptance, WorkloadConfig, FidelityConfig, CostsConfig, Placement,
                  Scenario, HardwareInfo, RooflineParams, HostOverheads, CollectiveTable, ForwardTable, LiveRun):
        for name, info in model.model_fields.items():
            ann = str(info.annotation)
            if ("int" in ann or "float" in ann) and "bool" not in ann and "list" not in ann and "dict" not in ann:
                inner = [m for arg in typing.get_args(info.annotation) for m in getattr(arg, "__metadata__", ())]
                bounds = {type(m).__name__ for m in list(info.metadata) + inner}
                bounds |= {type(m).__name__ for fi in inner if hasattr(fi, "metadata") for m in fi.metadata}
                assert {"Ge", "Le"} <= bounds or {"Gt", "Le"} <= bounds, f"{model.__name__}.{name} has no range"


# kind 4
def test_wrong_types_for_paths_and_mappings(tmp_path):
    sc = base_scenario()
    sc["target"]["config_path"] = 123
    write_scenario(tmp_path, sc)
    code, out = run(tmp_path, "simulate", "s.yaml")
    assert code == 2 and "target.config_path" in out
    sc["target"] = {"name": "t", "config_path": "config.json"}
    write_scenario(tmp_path, sc)
    (tmp_path / "config.json").write_text(json.dumps({**base_config_json(), "text_config": None}))
    code, out = run(tmp_path, "simulate", "s.yaml")
    assert code == 2 and "config.json" in out and "text_config" in out


# kind 5
@pytest.mark.parametrize("num_tokens", [[-4, -2, -1], [0, 4, 16]])
def test_forward_table_axes_must_be_positive(tmp_path, num_tokens):
    prof = base_profile()
    prof["forwards"][0]["num_tokens"] = num_tokens
    write_scenario(tmp_path)
    (tmp_path / "p.json").write_text(dump_json(prof))
    code, out = run(tmp_path, "simulate", "s.yaml", "--set", "costs.source=whole_forward")
    assert code == 2 and "p.json: forwards.0.num_tokens" in out


def test_zero_cost_profile_gives_no_negative_time(tmp_path):
    prof = base_profile()
    prof["host"] = dict(default_launch_us=0, graph_replay_us=0, graph_kernel_gap_us=0, d2h_sync_us=0,
                        host_schedule_us=0, provenance=prof["host"]["provenance"])
    prof["roofline"]["kernel_floor_us"] = 0
    write_scenario(tmp_path)
    (tmp_path / "p.json").write_text(dump_json(prof))
    for extra in ([], ["--set", "fidelity.granularity=kernel"], ["--set", "fidelity.granularity=cycle"],
                  ["--set", "tp_size=2", "--set", "placement=tp1_dedicated"]):
        (tmp_path / "r.json").unlink(missing_ok=True)
        code, out = run(tmp_path, "simulate", "s.yaml", "--json", "r.json", *extra)
        assert code == 0, out
        r = json.loads((tmp_path / "r.json").read_text())
        assert all(v >= 0 for v in r["breakdown_us"].values()), r["breakdown_us"]
        assert r["baseline_tok_per_s"] > 0 and r["tok_per_s"] > 0


# kind 6
def test_a_key_written_twice_is_an_error(tmp_path):
    text = dump_yaml(base_scenario()) + "spec:\n  num_steps: 2\n  num_draft_tokens: 3\n"
    write_scenario(tmp_path, text=text)
    code, out = run(tmp_path, "simulate", "s.yaml")
    assert code == 2 and "s.yaml:" in out and "key 'spec' is written twice" in out


@pytest.mark.parametrize("field, value", [("target.head_dim", None), ("acceptance.rate_concentration", None),
                                          ("fidelity.granularity", "kernel "), ("placement", "tp1_colocated\n"),
                                          ("spec.num_steps", "3"), ("workload.batch_size", 1.0)])
def test_what_is_written_is_used_as_written_or_refused(tmp_path, field, value):
    sc = base_scenario()
    if "." in field:
        section, key = field.split(".")
        sc[section][key] = value
    else:
        sc[field] = value
    write_scenario(tmp_path, sc)
    code, out = run(tmp_path, "simulate", "s.yaml")
    assert code == 2 and field.split(".")[0] in out and "s.yaml" in out


# kind 7
def test_unbounded_work_is_estimated_and_refused_without_force(tmp_path):
    write_scenario(tmp_path)
    t0 = time.perf_counter()
    # 10M cycles of a 256-layer target, kernel by kernel: ~20 minutes even in closed form
    code, out = run(tmp_path, "simulate", "s.yaml", "--set", "fidelity.granularity=kernel",
                    "--set", "target.num_hidden_layers=256", "--set", "fidelity.num_cycles=10000000")
    assert code == 2 and "estimated" in out and "--force" in out and time.perf_counter() - t0 < 5


def test_progress_is_reported_and_the_estimate_printed_for_long_runs(tmp_path, monkeypatch):
    from simulator.cli import common
    from simulator.simulate import simulate
    from tests.conftest import flat_profile, make_scenario
    seen = []
    for granularity in ("cycle", "forward", "kernel"):
        sc = make_scenario(fidelity=dict(num_cycles=600, granularity=granularity))
        simulate(sc, flat_profile(), progress=seen.append)
        assert seen and seen[-1] == pytest.approx(1.0) and seen == sorted(seen)
        seen.clear()
    monkeypatch.setattr(common, "SHOW_ESTIMATE_S", 0.0)
    write_scenario(tmp_path)
    code, out = run(tmp_path, "simulate", "s.yaml")
    assert code == 0 and "estimated" in out


# kind 8
def _special_targets(folder: Path) -> dict[str, Path]:
    out = {}
    os.mkfifo(folder / "fifo")
    out["fifo"] = folder / "fifo"
    (folder / "mine.txt").write_text("keep\n")
    os.symlink("mine.txt", folder / "link.json")
    out["symlink"] = folder / "link.json"
    try:
        os.mknod(folder / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        out["device"] = folder / "null"
    except (PermissionError, OSError):
        pass
    (folder / "notes.json").write_text('{"mine": true}\n')
    out["foreign"] = folder / "notes.json"
    return out


@pytest.mark.parametrize("flag", ["--json", "--trace"])
def test_outputs_are_never_written_over_special_or_foreign_files(tmp_path, flag):
    write_scenario(tmp_path)
    targets = _special_targets(tmp_path)
    for what, path in targets.items():
        before = snapshot(tmp_path)
        code, out = run(tmp_path, "simulate", "s.yaml", flag, path.name, "--set", "fidelity.granularity=kernel")
        assert code == 2 and flag in out, (what, out)
        assert snapshot(tmp_path) == before, what
    code, out = run(tmp_path, "simulate", "s.yaml", flag, "notes.json", "--force")
    assert code == 0 and "specdecsim_output" in (tmp_path / "notes.json").read_text()
    code, out = run(tmp_path, "simulate", "s.yaml", flag, "notes.json")  # now our own output: replaced
    assert code == 0


def test_output_folders_are_ours_or_refused(tmp_path, fixtures):
    write_scenario(tmp_path)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("x")
    code, out = run(tmp_path, "sweep", "s.yaml", "--out", "mine", "--grid", "spec.num_steps=1..2")
    assert code == 2 and "--out mine" in out and "sweep.json" in out
    code, out = run(tmp_path, "plot", str(fixtures["sweep"]), "--out", "mine", "--no-png")
    assert code == 2 and "--out mine" in out
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["thesis.tex"]
    code, out = run(tmp_path, "sweep", "s.yaml", "--out", "sw", "--des-sample", "0", "--grid", "spec.num_steps=1..2")
    assert code == 0
    code, out = run(tmp_path, "sweep", "s.yaml", "--out", "sw", "--des-sample", "0", "--grid", "spec.num_steps=1..2")
    assert code == 0  # our own sweep folder is written again
    (tmp_path / "file").write_text("x")
    code, out = run(tmp_path, "sweep", "s.yaml", "--out", "file/sub", "--grid", "spec.num_steps=1..2")
    assert code == 2 and "file is a file, not a folder" in out


# kind 9
@pytest.mark.parametrize("name", ["[/]", "[bold]x", "\\[/]", "[link=x]y[/link]", ":smile: [b]x"])
def test_markup_in_user_text_is_printed_as_written_and_json_is_written(tmp_path, name):
    write_scenario(tmp_path)
    code, output, tb = run_in_process(["simulate", "s.yaml", "--set", f"name={json.dumps(name)}",
                                       "--json", "r.json"], tmp_path)
    assert tb is None and code == 0, output
    assert json.loads((tmp_path / "r.json").read_text())["scenario"]["name"] == name
    assert name.replace("\\", "") in output.replace("\\", "")


def test_bracketed_paths_and_keys_are_not_markup(tmp_path):
    write_scenario(tmp_path)
    (tmp_path / "[red]s.yaml").write_text((tmp_path / "s.yaml").read_text())
    code, out = run(tmp_path, "simulate", "[red]s.yaml", "--json", "[b]r.json")
    assert code == 0 and "[b]r.json" in out
    code, out = run(tmp_path, "simulate", "s.yaml", "--set", "[/]=1")
    assert code == 2 and "[/]" in out


# kind 10
def test_validate_json_round_trips_into_plot(tmp_path):
    (tmp_path / "p.json").write_text(dump_json(base_profile()))
    (tmp_path / "rec.json").write_text(RECORD.read_text())
    code, out = run(tmp_path, "validate", "rec.json", "--profile", "p.json", "--json", "v.json")
    assert code == 0, out
    from simulator.evidence.validate import ValidationReport, load_validation_report
    report = load_validation_report(tmp_path / "v.json")
    assert ValidationReport.model_validate(report.model_dump(mode="json")) == report
    write_scenario(tmp_path)
    code, out = run(tmp_path, "sweep", "s.yaml", "--out", "sw", "--des-sample", "1", "--grid", "spec.num_steps=1..2",
                    "--grid", "acceptance.acceptance_rate=0.5,0.7")
    assert code == 0, out
    code, out = run(tmp_path, "plot", "sw", "--out", "figs", "--no-png", "--validate-json", "v.json")
    assert code == 0 and 'id="predicted_vs_measured"' in (tmp_path / "figs" / "index.html").read_text(), out


def test_sweep_outputs_round_trip_through_their_schemas(tmp_path):
    from simulator.studies.sweep import SweepMeta, read_sweep_meta, read_sweep_table, row_scenario
    write_scenario(tmp_path)
    code, out = run(tmp_path, "sweep", "s.yaml", "--out", "sw", "--des-sample", "1", "--grid",
                    "placement=shared_tp,tp1_colocated", "--grid", "workload.batch_size=1,2")
    assert code == 0, out
    meta = read_sweep_meta(tmp_path / "sw" / "sweep.json")
    assert SweepMeta.model_validate(meta.model_dump(mode="json")) == meta
    rows = read_sweep_table(tmp_path / "sw" / "sweep.csv")
    assert len(rows) == meta.num_points == 4
    assert row_scenario(rows[0], "x").workload.batch_size == rows[0]["workload.batch_size"]


def test_simulate_json_and_trace_carry_their_schema_marker(tmp_path):
    from simulator.metrics import SimulationResult
    write_scenario(tmp_path)
    code, out = run(tmp_path, "simulate", "s.yaml", "--json", "r.json", "--trace", "t.json")
    assert code == 0, out
    r = json.loads((tmp_path / "r.json").read_text())
    assert r["specdecsim_output"] == "simulation/2"
    assert SimulationResult.model_validate(r).model_dump(mode="json") == r
    assert json.loads((tmp_path / "t.json").read_text())["otherData"]["specdecsim_output"] == "trace/1"


# kind 11
def test_messages_name_the_file(tmp_path, fixtures):
    import shutil
    write_scenario(tmp_path)
    (tmp_path / "p.json").write_bytes(dump_json(base_profile()).replace("fuzz", "caf\xe9").encode("latin-1"))
    code, out = run(tmp_path, "simulate", "s.yaml")
    assert code == 2 and "p.json: not UTF-8" in out
    shutil.copytree(fixtures["sweep"], tmp_path / "sw")
    csv_path = tmp_path / "sw" / "sweep.csv"
    good_csv = csv_path.read_text()
    csv_path.write_bytes(good_csv.replace("shared_tp", "shar\xe9d", 1).encode("latin-1"))
    code, out = run(tmp_path, "plot", "sw", "--out", "figs", "--no-png")
    assert code == 2 and "sweep.csv: not UTF-8" in out
    csv_path.write_text(good_csv)
    (tmp_path / "sw" / "sweep.json").write_text('{"version": ')
    code, out = run(tmp_path, "plot", "sw", "--out", "figs", "--no-png")
    assert code == 2 and "sweep.json:1:" in out
    shutil.copy(fixtures["sweep"] / "sweep.json", tmp_path / "sw" / "sweep.json")
    lines = good_csv.splitlines()
    header = lines[0].split(",")
    col = header.index("scenario_json")
    first = lines[1]
    cut = first.index(',"{')
    csv_path.write_text("\n".join([lines[0], first[:cut] + ',"{""name"": 1}"'] + lines[2:]) + "\n")
    assert col == len(header) - 1
    code, out = run(tmp_path, "plot", "sw", "--out", "figs", "--no-png")
    assert code == 2 and "sweep.csv: line 2: column scenario_json" in out


def test_a_nan_profile_table_is_one_line(tmp_path):
    prof = base_profile()
    prof["forwards"][0]["context_len"] = list(range(1, 61))
    prof["forwards"][0]["latency_us"] = [[float("nan")] * 60 for _ in range(3)]
    write_scenario(tmp_path)
    (tmp_path / "p.json").write_text(json.dumps(prof))
    code, output, _ = run_in_process(["simulate", "s.yaml"], tmp_path)
    assert code == 2 and len(error_lines(output)) == 1 and "p.json" in output


def test_many_problems_are_a_few_lines(tmp_path):
    prof = base_profile()
    prof["forwards"][0]["latency_us"] = [[-1.0] * 2 for _ in range(3)] * 30
    prof["forwards"][0]["num_tokens"] = list(range(1, 91))
    write_scenario(tmp_path)
    (tmp_path / "p.json").write_text(json.dumps(prof))
    code, output, _ = run_in_process(["simulate", "s.yaml"], tmp_path)
    assert code == 2 and 1 < len(error_lines(output)) <= 7 and "more problems" in output


def test_grid_takes_the_numbers_set_takes(tmp_path):
    write_scenario(tmp_path)
    code, out = run(tmp_path, "simulate", "s.yaml", "--set", "acceptance.acceptance_rate=1e-7")
    assert code == 0, out
    code, out = run(tmp_path, "sweep", "s.yaml", "--out", "sw", "--des-sample", "0", "--grid",
                    "acceptance.acceptance_rate=1e-7,0.5")
    assert code == 0, out


def test_an_output_under_a_regular_file_names_it(tmp_path):
    write_scenario(tmp_path)
    (tmp_path / "f").write_text("x")
    code, out = run(tmp_path, "simulate", "s.yaml", "--json", "f/sub/r.json")
    assert code == 2 and "f is a file, not a folder" in out
