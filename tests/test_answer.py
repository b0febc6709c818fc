"""The answer first (issue 49): every sweep and search prints where speculation pays before its tables.

- the break-even acceptance rate per batch (per load for a serving sweep), from the closed form;
- 0 (no speculation) as the best num_steps where every num_steps is slower than the baseline;
- near ties between the best and the runner-up, with their gap;
- the points beyond the profile's measured range named, in tables and files;
- a serving sweep's best-num_steps table read from the serving runs at each swept load.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from simulator.cli.search import search_command
from simulator.cli.sweep import sweep_command
from simulator.studies.points import analytic_metrics, point_items
from simulator.studies.search import run_search
from simulator.studies.sweep import row_scenario, run_sweep

ROOT = Path(__file__).resolve().parents[1]
VLLM = ROOT / "scenarios" / "vllm_llama8b_h200.yaml"  # engine profile measured at batch 1..64
SERVING = ROOT / "scenarios" / "serving_concurrency.yaml"
GRID = ["spec.num_steps=1..3", "acceptance.acceptance_rate=0.05,0.6", "workload.batch_size=1,128"]


def _app(name: str, fn) -> typer.Typer:
    app = typer.Typer()
    app.command(name)(fn)
    app.command("noop")(lambda: None)  # a second command, so the first is addressed by name
    return app


@pytest.fixture(scope="module")
def vllm_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("answer_sweep")
    return run_sweep(VLLM, GRID, out_dir=out, des_sample=0, progress=False), out


# ---- break-even acceptance rate ------------------------------------------------------------------------
def test_solve_break_even_finds_the_root_and_says_where_there_is_none():
    from simulator.studies.answer import grid_break_even, solve_break_even
    rate, how = solve_break_even(lambda a: 0.5 + 2.0 * a)  # speedup 1 at a = 0.25
    assert how == "root" and rate == pytest.approx(0.25, abs=1e-4)
    assert solve_break_even(lambda a: 0.5 + 0.1 * a) == (None, "never pays")
    assert solve_break_even(lambda a: 1.2 + a) == (0.0, "pays at any rate")
    assert grid_break_even([(0.6, 1.4), (0.2, 0.8)]) == (pytest.approx(0.2 + 0.2 * 0.4 / 0.6), "root")  # linear


def test_sweep_break_even_rate_is_where_the_closed_form_speedup_is_one(vllm_sweep):
    """Per batch: at the break-even rate the best num_steps' closed-form speedup is 1 (and the
    smallest over the swept num_steps); it lies between the swept rates where the best changes
    from 0 (no speculation) to a num_steps."""
    from simulator.studies.break_even import with_rate
    res, out = vllm_sweep
    by_batch = {r["at_value"]: r for r in res.break_even_rows}
    assert sorted(by_batch) == [1, 128] and all(r["method"] == "closed_form" for r in by_batch.values())
    scenarios = {(r["batch_size"], r["num_steps"]): row_scenario(r, "test") for r in res.rows}
    items, _ = point_items([row_scenario(res.rows[0], "test")], None, VLLM)
    path = items[0][2]
    for b, be in by_batch.items():
        rate = be["break_even_acceptance_rate"]
        assert 0.05 < rate < 0.6
        speedups = {k: analytic_metrics(with_rate(scenarios[(b, k)], rate), path)["speedup"] for k in (1, 2, 3)}
        assert speedups[be["num_steps"]] == pytest.approx(1.0, abs=2e-3)
        assert max(speedups.values()) <= 1.0 + 2e-3  # no num_steps pays below it
    assert by_batch[1]["break_even_acceptance_rate"] < by_batch[128]["break_even_acceptance_rate"]
    assert [b["at_value"] for b in json.loads((out / "sweep.json").read_text())["break_even"]] == [1, 128]


def test_sweep_command_prints_the_answer_first(tmp_path):
    r = CliRunner().invoke(_app("sweep", sweep_command), ["sweep", str(VLLM), *[a for g in GRID for a in ("--grid", g)],
                                                          "--des-sample", "0", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    first = " ".join(r.output.split())
    assert first.startswith("answer: speculation pays above acceptance rate 0.")
    assert "at batch 1 (num_steps" in first and "at batch 128 (num_steps" in first
    assert first.index("answer:") < first.index("best num_steps per combination")


# ---- no speculation where it wins -----------------------------------------------------------------------
def test_best_num_steps_is_no_speculation_where_every_num_steps_is_slower(vllm_sweep):
    res, out = vllm_sweep
    best = list(csv.DictReader((out / "best_num_steps.csv").open()))
    low = [b for b in best if float(b["acceptance.acceptance_rate"]) == 0.05]
    assert low and all(b["best_num_steps"] == "0" for b in low)
    for b in low:  # every swept num_steps at that combination is slower than no speculation
        same = [r for r in res.rows if r["acceptance_rate"] == 0.05 and r["batch_size"] == int(b["workload.batch_size"])]
        assert max(r["tok_per_s"] for r in same) < float(b["baseline_tok_per_s"]) == float(b["tok_per_s"])
        assert float(b["speedup"]) == 1.0 and float(b["best_speculative_speedup"]) < 1.0
    high = [b for b in best if float(b["acceptance.acceptance_rate"]) == 0.6]
    assert all(int(b["best_num_steps"]) >= 1 for b in high)


def test_sweep_table_says_no_speculation(tmp_path):
    r = CliRunner().invoke(_app("sweep", sweep_command), ["sweep", str(VLLM), "--grid", "spec.num_steps=1,2",
                                                          "--set", "acceptance.acceptance_rate=0.05",
                                                          "--des-sample", "0", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    words = " ".join(r.output.split())
    assert "no speculation is fastest in 1 of 1 combinations" in words
    assert "0 (no speculation)" in words


# ---- near ties ------------------------------------------------------------------------------------------
def test_a_near_tie_is_flagged_with_its_gap():
    from simulator.studies.answer import best_of, near_tie_words
    b = best_of([(4, 100.0, 2.0), (5, 100.7, 2.014)], baseline=50.0)
    assert (b["best_num_steps"], b["runner_up_num_steps"], b["near_tie"]) == (5, 4, True)
    assert b["runner_up_gap_pct"] == pytest.approx(0.7)
    assert near_tie_words(b) == "near tie: 5 vs 4, 0.7% apart"
    far = best_of([(4, 100.0, 2.0), (5, 110.0, 2.2)], baseline=50.0)
    assert not far["near_tie"] and near_tie_words(far) == ""
    tie_with_none = best_of([(1, 99.5, 0.995)], baseline=100.0)  # no speculation 0.5% ahead of num_steps 1
    assert near_tie_words(tie_with_none) == "near tie: 0 (no speculation) vs 1, 0.5% apart"


def test_best_rows_gap_is_the_runner_up_of_the_sweep_rows(vllm_sweep):
    res, _ = vllm_sweep
    for b in res.best_rows:
        same = [r for r in res.rows if r["acceptance_rate"] == b["acceptance.acceptance_rate"]
                and r["batch_size"] == b["workload.batch_size"]]
        toks = sorted([r["tok_per_s"] for r in same] + [same[0]["baseline_tok_per_s"]], reverse=True)
        assert b["runner_up_gap_pct"] == pytest.approx((toks[0] / toks[1] - 1) * 100)
        assert b["near_tie"] == (b["runner_up_gap_pct"] < 1.0)


# ---- extrapolation --------------------------------------------------------------------------------------
def test_sweep_points_beyond_the_measured_batches_are_flagged(vllm_sweep):
    res, out = vllm_sweep
    rows = list(csv.DictReader((out / "sweep.csv").open()))
    for r in rows:
        beyond = int(r["batch_size"]) > 64
        assert ("batch 128 > measured 64" in r["extrapolation"]) == beyond
    assert all(("batch 128" in b["extrapolation"]) == (b["workload.batch_size"] == 128) for b in res.best_rows)
    assert "lie beyond the profile's measured range" in res.extrapolation_note


def test_op_table_points_past_their_measured_context_are_flagged():
    """A scenario priced from the op tables (no engine profile): a context past the tables' largest."""
    res = run_sweep(ROOT / "scenarios" / "llama8b_h200.yaml", ["workload.context_len=1024,200000"],
                    des_sample=0, progress=False)
    words = {r["context_len"]: r["extrapolation"] for r in res.rows}
    assert words[1024] == "" and "past their measured range" in words[200000]


def test_search_names_configurations_beyond_the_measured_batches(tmp_path):
    r = CliRunner().invoke(_app("search", search_command), ["search", str(VLLM), "--space", "workload.batch_size=64,128",
                                                            "--space", "spec.num_steps=1..3", "--objective", "tok_per_s",
                                                            "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader((tmp_path / "search.csv").open()))
    assert all(("batch 128 > measured 64" in x["extrapolation"]) == (x["batch_size"] == "128") for x in rows)
    meta = json.loads((tmp_path / "search.json").read_text())
    assert meta["best"]["batch_size"] == 128 and "batch 128 > measured 64" in meta["best"]["extrapolation"]
    words = " ".join(r.output.split())
    assert words.startswith("answer: best:")
    assert "#1 lies beyond the profile's measured range: batch 128 > measured 64" in words
    assert " 1* " in r.output  # the top table marks it


def test_search_answers_no_speculation_and_the_break_even_rate():
    res = run_search(VLLM, "tok_per_s", ["spec.num_steps=1..2"], overrides=["acceptance.acceptance_rate=0.05"])
    assert res.answer["best_num_steps"] == 0 and res.answer["lines"][0].startswith("0 (no speculation)")
    [be] = res.answer["break_even"]
    assert be["batch_size"] == 8 and 0.05 < be["break_even_acceptance_rate"] < 0.5


# ---- serving sweeps: best num_steps per swept load -------------------------------------------------------
SHORT = ["serving.duration_s=2", "serving.warmup_s=0.2", "serving.output_len.tokens=48", "serving.input_len.tokens=256"]


def test_serving_best_num_steps_is_read_per_load_and_agrees_with_the_crossover(tmp_path):
    load = "serving.arrivals.concurrency"
    res = run_sweep(SERVING, ["spec.num_steps=1,5", f"{load}=1,128"], out_dir=tmp_path, des_sample=0,
                    overrides=SHORT, progress=False)
    best = {b[load]: b for b in res.best_rows}
    assert sorted(best) == [1, 128]
    tops = {c: max((r for r in res.rows if r[load] == c), key=lambda r: r["serving_output_tok_per_s"]) for c in best}
    paying = {c: t["serving_output_tok_per_s"] > t["serving_baseline_output_tok_per_s"] for c, t in tops.items()}
    assert {c: b["best_num_steps"] for c, b in best.items()} == {c: t["num_steps"] if paying[c] else 0
                                                                 for c, t in tops.items()}
    for c, b in best.items():
        top = tops[c]
        assert b["serving_output_tok_per_s"] == max(top["serving_output_tok_per_s"],
                                                    top["serving_baseline_output_tok_per_s"])
        for x in res.crossover_rows:  # a num_steps whose crossover is at or below this load is not the best
            if x["crossover"] is not None and x["crossover"] <= c:
                assert b["best_num_steps"] != x["spec.num_steps"]
    file_best = {int(r[load]): int(r["best_num_steps"]) for r in csv.DictReader((tmp_path / "best_num_steps.csv").open())}
    assert file_best == {c: b["best_num_steps"] for c, b in best.items()}
    assert [r["at"] for r in res.break_even_rows] == ["concurrency", "concurrency"]


def test_the_extrapolation_summary_groups_points_that_differ_only_in_their_number():
    from simulator.studies.extrapolation import summary
    line = summary(["num_steps 7 > measured 6", "num_steps 8 > measured 6; batch 128 > measured 64", "",
                    "verify of 1,152 tokens > largest CUDA-graph size 512; num_steps 8 > measured 6"])
    assert line.startswith("3 of the 4 points lie beyond")
    assert "num_steps 7, 8 > measured 6 (3)" in line and "verify of 1,152 tokens > largest CUDA-graph size 512 (1)" in line
    assert "batch 128 > measured 64 (1)" in line
