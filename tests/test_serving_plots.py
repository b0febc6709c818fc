"""Serving charts of `specdecsim plot`: TPOT vs output tok/s along the swept load (crossover marked)
and the best num_steps per load; sweeps without serving columns draw neither."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from simulator.studies.plots import write_plots
from simulator.studies.serving_plots import (SERVING_BEST_TITLE, SERVING_LATENCY_TITLE, serving_best_num_steps_figures,
                                     serving_latency_figures)
from simulator.studies.serving_sweep import serving_best_num_steps
from simulator.studies.sweep import read_sweep_meta, read_sweep_table, run_sweep
from simulator.cli.plot import plot_command

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "serving_concurrency.yaml"
LOAD = "serving.arrivals.concurrency"
GRIDS = [f"{LOAD}=1,4", "spec.num_steps=1,3"]
SHORT = ["serving.duration_s=1", "serving.warmup_s=0", "serving.output_len.tokens=32", "serving.input_len.tokens=256"]


def _sweep(out: Path, *sets: str) -> Path:
    run_sweep(SCENARIO, GRIDS, out_dir=out, des_sample=0, overrides=SHORT + list(sets), progress=False)
    return out


@pytest.fixture(scope="module")
def paying_dir(tmp_path_factory) -> Path:  # acceptance 0.7: speculation pays at concurrency 1 and 4
    return _sweep(tmp_path_factory.mktemp("serving_paying"))


@pytest.fixture(scope="module")
def losing_dir(tmp_path_factory) -> Path:  # acceptance 0.1: speculation loses from concurrency 1
    return _sweep(tmp_path_factory.mktemp("serving_losing"), "acceptance.acceptance_rate=0.1")


def _plot(sweep_dir: Path, out: Path) -> Path:
    """`specdecsim plot SWEEP_DIR --out OUT --no-png` (a second command keeps typer from flattening it)."""
    app = typer.Typer()
    app.command("plot")(plot_command)
    app.command("noop")(lambda: None)
    r = CliRunner().invoke(app, ["plot", str(sweep_dir), "--out", str(out), "--no-png"])
    assert r.exit_code == 0, r.output
    return out


def test_serving_sweep_page_has_both_charts_and_the_crossover(tmp_path, losing_dir):
    out = _plot(losing_dir, tmp_path / "figs")
    index = (out / "index.html").read_text()
    assert '<section id="serving_latency_vs_throughput">' in index and '<section id="serving_best_num_steps">' in index
    assert SERVING_LATENCY_TITLE in index and SERVING_BEST_TITLE in index and "crossover at c=1" in index


def test_no_crossover_marker_when_speculation_pays_everywhere(tmp_path, paying_dir):
    meta = read_sweep_meta(paying_dir / "sweep.json")
    assert all(c["crossover"] is None for c in meta.serving_crossover)
    latency = (_plot(paying_dir, tmp_path / "figs") / "index.html").read_text()
    assert "crossover at" not in latency and "speculation pays at every swept load" in latency


def test_latency_figure_lines_and_labels(losing_dir):
    rows = read_sweep_table(losing_dir / "sweep.csv")
    crossover_rows = read_sweep_meta(losing_dir / "sweep.json").serving_crossover
    figs = serving_latency_figures(rows, [g.split("=")[0] for g in GRIDS], crossover_rows)
    assert [s for s, _ in figs] == ["num_steps=1, num_draft_tokens=2", "num_steps=3, num_draft_tokens=4"]
    fig = figs[1][1]
    spec, base, cross = fig.data
    line = sorted((r for r in rows if r["num_steps"] == 3), key=lambda r: r[LOAD])
    assert list(spec.x) == [r["serving_output_tok_per_s"] for r in line]
    assert list(spec.y) == pytest.approx([r["serving_tpot_p50_ms"] for r in line])
    assert list(spec.text) == list(base.text) == ["c=1", "c=4"]
    assert list(base.x) == [r["serving_baseline_output_tok_per_s"] for r in line]
    assert list(base.y) == pytest.approx([r["serving_baseline_tpot_p50_ms"] for r in line])
    assert base.line.dash == "dash"
    assert list(cross.x) == [line[0]["serving_output_tok_per_s"]]  # crossover at concurrency 1
    assert fig.layout.yaxis.title.text == "TPOT p50 (ms)"


def test_best_num_steps_figure_picks_the_highest_serving_tok_per_s(paying_dir):
    rows = read_sweep_table(paying_dir / "sweep.csv")
    [(suffix, fig)] = serving_best_num_steps_figures(rows, [g.split("=")[0] for g in GRIDS])
    assert suffix == ""
    trace = fig.data[0]
    assert list(trace.x) == ["1", "4"]
    for load, best in zip((1, 4), trace.y):
        at = [r for r in rows if r[LOAD] == load]
        assert best == max(at, key=lambda r: r["serving_output_tok_per_s"])["num_steps"]
    assert [b["best_num_steps"] for b in serving_best_num_steps(rows, [LOAD])] == list(trace.y)


def test_sweep_without_serving_columns_has_no_serving_charts(tmp_path):
    from tests.test_plots import GRIDS as STEADY_GRIDS, SCENARIO as STEADY
    rows = run_sweep(STEADY, STEADY_GRIDS[:2], des_sample=0, progress=False).rows
    assert serving_latency_figures(rows) == [] and serving_best_num_steps_figures(rows) == []
    index = write_plots(rows, tmp_path, [g.split("=")[0] for g in STEADY_GRIDS[:2]], png=False).read_text()
    assert "Serving" not in index and "serving_latency" not in index
