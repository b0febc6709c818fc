"""Configuration search: the best point, the Pareto front, constraints, bad input and the command."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from simulator.cli.search import render, search_command
from simulator.files import OUTPUT_KEY
from simulator.studies.search import pareto_front, run_search
from simulator.studies.sweep import run_sweep

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "tp1_draft.yaml"
SPACE = ["tp_size=4,8", "placement=shared_tp,tp1_colocated", "spec.num_steps=1..4"]


@pytest.fixture(scope="module")
def small():
    return run_search(SCENARIO, "tok_per_s_per_user", SPACE)


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command("search")(search_command)

    @app.command("noop")
    def _noop() -> None:  # a second command, so 'search' is addressed by name as in specdecsim
        pass
    return app


def test_best_point_is_the_argmax_of_a_brute_force_sweep(small):
    sweep = run_sweep(SCENARIO, ["tp_size=4,8", "placement=shared_tp,tp1_colocated", "spec.num_steps=1..4"],
                      des_sample=0, progress=False)
    brute = max(sweep.rows, key=lambda r: r["tok_per_s"] / r["batch_size"])
    best = small.best
    assert len(small.rows) == len(sweep.rows) == 16
    assert (best["tp_size"], best["placement"], best["num_steps"]) == \
        (brute["tp_size"], brute["placement"], brute["spec.num_steps"])
    assert best["tok_per_s_per_user"] == pytest.approx(brute["tok_per_s"] / brute["batch_size"], rel=1e-12)


def test_tok_per_s_per_gpu_counts_a_dedicated_draft_gpu():
    res = run_search(SCENARIO, "tok_per_s_per_gpu", ["tp_size=2", "placement=tp1_dedicated", "spec.num_steps=3"])
    (r,) = res.rows
    assert r["num_gpus"] == 3
    assert r["tok_per_s_per_gpu"] == pytest.approx(r["tok_per_s"] / 3)


def test_pareto_front_is_non_dominated_and_holds_each_axis_max(small):
    (xc, _), (yc, _) = small.pareto_axes
    front = [small.rows[i] for i in small.pareto]
    for f in front:
        assert not any(r[xc] >= f[xc] and r[yc] >= f[yc] and (r[xc] > f[xc] or r[yc] > f[yc]) for r in small.rows)
    assert max(r[xc] for r in front) == max(r[xc] for r in small.rows)
    assert max(r[yc] for r in front) == max(r[yc] for r in small.rows)


def test_pareto_front_of_hand_made_points():
    rows = [{"a": 1, "b": 5}, {"a": 2, "b": 4}, {"a": 2, "b": 3}, {"a": 3, "b": 1}, {"a": 0, "b": 5}]
    assert pareto_front(rows, (("a", True), ("b", True))) == [3, 1, 0]
    assert pareto_front(rows, (("a", True), ("b", False))) == [3]


def test_constraints_exclude_points(small):
    tpots = sorted(r["tpot_p50_ms"] for r in small.rows)
    limit_ms = tpots[len(tpots) // 2]
    res = run_search(SCENARIO, "tok_per_s_per_user", SPACE, max_tpot_ms=limit_ms, max_gpus=4)
    assert 0 < len(res.ranked) < len(res.rows)
    for r in res.rows:
        assert r["feasible"] == (r["tpot_p50_ms"] <= limit_ms and r["num_gpus"] <= 4)
    assert all(res.rows[i]["feasible"] for i in res.ranked + res.pareto)
    assert res.best["tpot_p50_ms"] <= limit_ms


def test_default_space_is_chains_for_iid_and_trees_for_tree_acceptance():
    chains = run_search(SCENARIO, "tok_per_s", ["tp_size=8", "placement=shared_tp"])
    assert {r["topk"] for r in chains.rows} == {1} and len(chains.rows) == 8
    trees = run_search(SCENARIO, "tok_per_s", ["tp_size=8", "placement=shared_tp", "spec.num_steps=3"],
                       overrides=["acceptance={kind: tree, acceptance_rate: 0.6}", "spec.topk=4",
                                  "spec.num_draft_tokens=8"])
    assert {r["topk"] for r in trees.rows} == {1, 2, 4, 8}
    assert all(r["num_steps"] + 1 <= r["num_draft_tokens"] for r in trees.rows)


@pytest.mark.parametrize("args, words", [
    (["--objective", "speed"], "--objective 'speed': expected one of"),
    (["--space", "spec.num_step=1..3"], "--space 'spec.num_step=1..3': unknown field"),
    (["--space", "spec.topk=2"], "topk > 1 needs acceptance kind tree"),
    (["--objective", "goodput"], "needs serving mode"),
])
def test_bad_objective_or_space_is_a_one_line_error(tmp_path, args, words):
    r = CliRunner().invoke(_app(), ["search", str(SCENARIO), "--out", str(tmp_path / "o"), *args])
    assert r.exit_code == 2, r.output
    assert words in " ".join(r.output.split())
    assert not (tmp_path / "o").exists()


def test_command_runs_on_tp1_draft_in_seconds(tmp_path):
    t0 = time.perf_counter()
    r = CliRunner().invoke(_app(), ["search", str(SCENARIO), "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert time.perf_counter() - t0 < 20
    meta = json.loads((tmp_path / "search.json").read_text())
    assert meta[OUTPUT_KEY] == "search/1" and meta["best"]["rank"] == 1 and meta["num_points"] == 80
    html = (tmp_path / "index.html").read_text()
    assert html.count("plotly.js v") == 1 and "<script src=" not in html  # inlined once, no CDN
    assert len((tmp_path / "search.csv").read_text().splitlines()) == 81
    assert "top 10 by tok_per_s_per_user" in r.output
    again = CliRunner().invoke(_app(), ["search", str(SCENARIO), "--space", "spec.num_steps=2", "--out", str(tmp_path)])
    assert again.exit_code == 0, again.output  # an earlier search folder is replaced


def test_command_refuses_a_folder_that_is_not_a_search(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    r = CliRunner().invoke(_app(), ["search", str(SCENARIO), "--space", "spec.num_steps=2", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "--force" in r.output
    r = CliRunner().invoke(_app(), ["search", str(SCENARIO), "--space", "spec.num_steps=2", "--out", str(tmp_path),
                                    "--force"])
    assert r.exit_code == 0, r.output


def test_tables_fit_80_columns(small):
    assert max(len(line) for line in render(small, 10).splitlines()) <= 80
