"""Sweeps: grid parsing, expansion rules, outputs, solvers and the CLI function."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from simulator.studies.grid import expand, parse_grid, parse_grids
from simulator.scenario import UserInputError, read_scenario_dict
from simulator.cli.sweep import sweep_command
from simulator.studies.sweep import best_num_steps, cycle_breakdown_table, read_sweep_table, run_sweep

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "tp1_draft.yaml"
REQUIRED_COLUMNS = ("tok_per_s", "baseline_tok_per_s", "speedup", "accept_length", "cycle_time_us", "tpot_ms",
                    "solver", "scenario_json", "verify_compute_us", "draft_compute_us", "host_us", "sync_us")


# ---- parsing --------------------------------------------------------------------------------------------
def test_integer_range_includes_both_ends():
    ax = parse_grid("spec.num_steps=1..8")
    assert ax.field == "spec.num_steps"
    assert ax.values == tuple(range(1, 9))


def test_float_range_includes_stop_without_float_noise():
    ax = parse_grid("acceptance.acceptance_rate=0.3:0.95:0.05")
    assert len(ax.values) == 14
    assert ax.values[0] == 0.3 and ax.values[-1] == 0.95
    assert parse_grid("acceptance.acceptance_rate=0.1:0.3:0.1").values == (0.1, 0.2, 0.3)  # not 0.30000000000000004


def test_list_values_are_yaml_scalars():
    assert parse_grid("placement=shared_tp,tp1_colocated").values == ("shared_tp", "tp1_colocated")
    assert parse_grid("workload.batch_size=1, 4,16").values == (1, 4, 16)
    assert parse_grid("serving_engine.cuda_graph=true,false").values == (True, False)


def test_bracketed_lists_keep_their_commas():
    ax = parse_grid("acceptance.acceptance_rates=[0.9,0.8],[0.7,0.6]")
    assert ax.values == ([0.9, 0.8], [0.7, 0.6])


@pytest.mark.parametrize("spec, words", [
    ("spec.num_step=1..8", "unknown field 'spec.num_step'"),
    ("specs.num_steps=1..8", "unknown field"),
    ("spec.num_steps=8..1", "empty range"),
    ("acceptance.acceptance_rate=0.9:0.3:0.1", "empty range"),
    ("spec.num_steps=0.5:2:0.5", "valid integer"),
    ("acceptance.acceptance_rate=0.5:1.2:0.1", "less than or equal to 1"),
    ("placement=1.5", "placement must be a label"),
    ("spec.num_steps", "expected field=values"),
    ("spec.num_steps=", "no values"),
    ("=1..3", "empty field name"),
    ("spec.num_steps=1..", "malformed integer range"),
    ("acceptance.acceptance_rate=a:b:c", "is not a number"),
    ("spec.num_steps=1,,2", "empty value"),
    ("acceptance.acceptance_rate=0.1:0.5:0", "step must not be 0"),
    ("spec.num_steps.deep=1", "is not a section"),
], ids=lambda x: x if "=" in x or "." in x else None)
def test_bad_grid_spec_names_the_spec(spec, words):
    with pytest.raises(UserInputError) as e:
        parse_grid(spec)
    assert repr(spec) in str(e.value)
    assert words in str(e.value)


def test_same_field_twice_is_an_error():
    with pytest.raises(UserInputError, match="already swept"):
        parse_grids(["spec.num_steps=1..3", "spec.num_steps=4..5"])


# ---- expansion ----------------------------------------------------------------------------------------
def _expand(specs: list[str], **set_fields) -> list:
    data = read_scenario_dict(SCENARIO)
    for k, v in set_fields.items():
        data[k] = v
    return expand(data, parse_grids(specs), str(SCENARIO), SCENARIO.parent)


def test_swept_num_steps_keeps_chain_scenarios_valid():
    points = _expand(["spec.num_steps=1..4", "placement=shared_tp,tp1_colocated"])
    assert len(points) == 8
    for values, sc in points:
        assert sc.spec.num_steps == values["spec.num_steps"]
        assert sc.spec.num_draft_tokens == sc.spec.num_steps + 1
        assert sc.placement.label == values["placement"]


def test_swept_num_draft_tokens_is_not_rewritten():
    with pytest.raises(UserInputError, match="grid point .*num_draft_tokens"):
        _expand(["spec.num_steps=2..3", "spec.num_draft_tokens=3"])


def test_positional_list_of_wrong_length_names_the_point():
    with pytest.raises(UserInputError) as e:
        _expand(["spec.num_steps=2..3"], acceptance=dict(kind="positional", acceptance_rates=[0.8, 0.7]))
    msg = str(e.value)
    assert "spec.num_steps=3" in msg and "acceptance_rates has 2 entries" in msg and "hint" in msg


def test_point_out_of_range_fails_like_a_scenario():
    with pytest.raises(UserInputError, match="tp_size"):
        _expand(["placement=tp3"])


# ---- running ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    res = run_sweep(SCENARIO, ["spec.num_steps=1..3", "acceptance.acceptance_rate=0.6,0.8"], solver="closed_form",
                    jobs=1, out_dir=out, des_sample=3, progress=False)
    return res, out


def test_sweep_writes_csv_and_json(small_sweep):
    res, out = small_sweep
    with open(out / "sweep.csv", newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        header = reader.fieldnames
    assert len(rows) == 6
    for c in ("spec.num_steps", "acceptance.acceptance_rate", *REQUIRED_COLUMNS):
        assert c in header
    assert sorted({(int(r["spec.num_steps"]), float(r["acceptance.acceptance_rate"])) for r in rows}) == \
        [(s, a) for s in (1, 2, 3) for a in (0.6, 0.8)]
    first = json.loads(rows[0]["scenario_json"])
    assert first["spec"]["num_steps"] == int(rows[0]["spec.num_steps"])
    meta = json.loads((out / "sweep.json").read_text())
    assert meta["version"] and meta["seed"] == 0 and meta["solver"] == "closed_form"
    assert [g["field"] for g in meta["grids"]] == ["spec.num_steps", "acceptance.acceptance_rate"]
    assert meta["des_check"]["num_points"] == 3
    assert (out / "best_num_steps.csv").is_file()
    assert not list(out.glob(".*.tmp"))  # atomic writes leave no temp files


def test_breakdown_buckets_sum_to_cycle_time(small_sweep):
    res, _ = small_sweep
    for r in cycle_breakdown_table(res.rows):
        parts = sum(v for k, v in r.items() if k.endswith("_us") and k != "cycle_time_us")
        assert parts == pytest.approx(r["cycle_time_us"], rel=1e-9)


def test_more_acceptance_gives_more_tokens_per_second(small_sweep):
    res, _ = small_sweep
    by = {(r["num_steps"], r["acceptance_rate"]): r["tok_per_s"] for r in res.rows}
    for s in (1, 2, 3):
        assert by[(s, 0.8)] > by[(s, 0.6)]


def test_analytic_and_des_agree_on_the_sample(small_sweep):
    res, _ = small_sweep
    dc = res.des_check
    assert dc["num_points"] == 3
    assert dc["max_abs_rel_diff"] < 0.04, dc  # closed form vs 2000-cycle DES: a few %
    for p in dc["points"]:
        assert p["rel_diff"] == pytest.approx(p["des_tok_per_s"] / p["closed_form_tok_per_s"] - 1)


def test_des_sample_is_seeded(tmp_path):
    grids = ["spec.num_steps=1..4", "acceptance.acceptance_rate=0.6,0.8"]
    a = run_sweep(SCENARIO, grids, des_sample=2, seed=7, progress=False, overrides=["fidelity.num_cycles=200"])
    b = run_sweep(SCENARIO, grids, des_sample=2, seed=7, progress=False, overrides=["fidelity.num_cycles=200"])
    assert [p["point_idx"] for p in a.des_check["points"]] == [p["point_idx"] for p in b.des_check["points"]]


def test_parallel_sweep_matches_serial():
    grids = ["spec.num_steps=2..3", "placement=shared_tp,tp1_colocated"]
    serial = run_sweep(SCENARIO, grids, jobs=1, des_sample=0, progress=False)
    parallel = run_sweep(SCENARIO, grids, jobs=2, des_sample=0, progress=False)
    assert [r["tok_per_s"] for r in serial.rows] == [r["tok_per_s"] for r in parallel.rows]


def test_des_solver_rows(tmp_path):
    res = run_sweep(SCENARIO, ["spec.num_steps=2,3"], solver="des", out_dir=tmp_path, progress=False,
                    overrides=["fidelity.num_cycles=300"])
    assert [r["solver"] for r in res.rows] == ["des", "des"]
    assert all(r["tok_per_s_ci95_low"] <= r["tok_per_s"] <= r["tok_per_s_ci95_high"] for r in res.rows)
    assert res.des_check is None
    back = read_sweep_table(tmp_path / "sweep.csv")
    assert [r["tok_per_s"] for r in back] == pytest.approx([r["tok_per_s"] for r in res.rows])


def test_best_num_steps_picks_the_fastest():
    rows = [dict(num_steps=s, placement=p, tok_per_s=t, speedup=t / 10, baseline_tok_per_s=10.0)
            for p, ts in (("a", (10, 30, 20)), ("b", (40, 10, 5))) for s, t in zip((1, 2, 3), ts)]
    best = best_num_steps(rows, ["placement"])
    assert [(b["placement"], b["best_num_steps"], b["speedup"]) for b in best] == [("a", 2, 3.0), ("b", 1, 4.0)]


# ---- CLI function ------------------------------------------------------------------------------------
def _app() -> typer.Typer:
    app = typer.Typer()
    app.command("sweep")(sweep_command)

    @app.command("noop")
    def _noop() -> None:  # a second command, so 'sweep' is addressed by name as in specdecsim
        pass
    return app


def test_sweep_command_writes_outputs(tmp_path):
    r = CliRunner().invoke(_app(), ["sweep", str(SCENARIO), "--grid", "spec.num_steps=1..3", "--grid",
                                    "acceptance.acceptance_rate=0.6,0.8", "--des-sample", "0", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "best num_steps" in r.output
    assert len(read_sweep_table(tmp_path / "sweep.csv")) == 6


def test_a_sweep_without_a_best_table_removes_the_earlier_sweeps_best_table(tmp_path):
    """Sweeping num_steps, then only acceptance into the same folder: the first sweep's
    best_num_steps.csv answered its grid, not the second's, so it goes (sweep.json names none);
    the same file in a folder no sweep wrote (--force) is left alone."""
    out = tmp_path / "sw"
    first = CliRunner().invoke(_app(), ["sweep", str(SCENARIO), "--grid", "spec.num_steps=1..3", "--des-sample", "0",
                                        "--out", str(out)])
    assert first.exit_code == 0 and (out / "best_num_steps.csv").exists(), first.output
    second = CliRunner().invoke(_app(), ["sweep", str(SCENARIO), "--grid", "acceptance.acceptance_rate=0.6,0.8",
                                         "--des-sample", "0", "--out", str(out)])
    assert second.exit_code == 0, second.output
    assert json.loads((out / "sweep.json").read_text())["best_num_steps_csv"] is None
    assert sorted(p.name for p in out.iterdir()) == ["sweep.csv", "sweep.json"]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "best_num_steps.csv").write_text("my notes\n")
    forced = CliRunner().invoke(_app(), ["sweep", str(SCENARIO), "--grid", "acceptance.acceptance_rate=0.6,0.8",
                                         "--des-sample", "0", "--out", str(mine), "--force"])
    assert forced.exit_code == 0 and (mine / "best_num_steps.csv").read_text() == "my notes\n"


@pytest.mark.parametrize("args, words", [
    (["--grid", "spec.num_step=1..3"], "unknown field"),
    (["--grid", "spec.num_steps=3..1"], "empty range"),
    (["--grid", "spec.num_steps=1..3", "--solver", "gpu"], "--solver 'gpu'"),
    (["--grid", "spec.num_steps=1..3", "--engine", "analytic"], "--engine was renamed --solver"),
    (["--grid", "spec.num_steps=1..3", "--set", "workload.batch_size=0"], "batch_size"),
])
def test_sweep_command_bad_input_exits_2(tmp_path, args, words):
    r = CliRunner().invoke(_app(), ["sweep", str(SCENARIO), "--out", str(tmp_path), *args])
    assert r.exit_code == 2, r.output
    assert words in " ".join(r.output.split())
    assert not (tmp_path / "sweep.csv").exists()


def test_a_best_num_steps_on_the_grid_edge_is_noted():
    from simulator.cli.sweep import best_on_grid_edge
    rows = [{"best_num_steps": 3}, {"best_num_steps": 2}]
    assert "largest swept (3) in 1 of 2" in best_on_grid_edge(rows, [1, 2, 3])
    assert best_on_grid_edge(rows, [1, 2, 3, 4]) is None
    assert best_on_grid_edge(rows, [3]) is None  # one value: nothing to widen from


def test_a_staged_folder_is_the_old_run_or_the_new_one(tmp_path, monkeypatch):
    """simulator.files.StagedFolder: an error while writing leaves the earlier files (and no staged
    ones); a SIGTERM that arrives while the files move in is taken after the last one moved."""
    import os
    import signal

    from simulator.files import StagedFolder
    for n in ("a.csv", "b.json", "stale.csv"):
        (tmp_path / n).write_text("old")
    with pytest.raises(RuntimeError):
        with StagedFolder(tmp_path) as st:
            st.path("a.csv").write_text("new")
            raise RuntimeError("cut")
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {"a.csv": "old", "b.json": "old", "stale.csv": "old"}

    def interrupt(signum, frame):
        raise KeyboardInterrupt
    old_handler = signal.signal(signal.SIGTERM, interrupt)
    real_replace = os.replace
    calls = []

    def replace(src, dst):
        if not calls:
            os.kill(os.getpid(), signal.SIGTERM)  # arrives between the moves
        calls.append(dst)
        real_replace(src, dst)
    monkeypatch.setattr(os, "replace", replace)
    try:
        with pytest.raises(KeyboardInterrupt):
            with StagedFolder(tmp_path) as st:
                st.path("a.csv").write_text("new")
                st.path("b.json").write_text("new")
                st.remove("stale.csv")
    finally:
        signal.signal(signal.SIGTERM, old_handler)
    assert len(calls) == 2
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {"a.csv": "new", "b.json": "new"}


def test_a_staged_output_that_is_a_folder_is_refused_before_anything_moves(tmp_path):
    from simulator.files import OutputPathError, StagedFolder
    (tmp_path / "sweep.json").write_text("old")
    (tmp_path / "sweep.csv").mkdir()
    with pytest.raises(OutputPathError, match="sweep.csv: is a folder"):
        with StagedFolder(tmp_path) as st:
            st.path("sweep.json").write_text("new")
            st.path("sweep.csv").write_text("new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep.csv", "sweep.json"]
    assert (tmp_path / "sweep.json").read_text() == "old"
