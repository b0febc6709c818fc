"""`specdecsim validate`: committed records reproduce the documented table; doctored records
report the error they should; paired baselines and timing-only spreads are used."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator.cli import app
from simulator.profile import load_profile, resolve_profile_path
from simulator.evidence.live_records import LiveRun
from simulator.evidence.validate import compare, load_records, summarize, with_costs_source

ROOT = Path(__file__).resolve().parents[1]
LIVE = ROOT / "data" / "live" / "h200"
POINT = LIVE / "8b_graph_b1_s3_a70_rep3.json"
BASE = LIVE / "8b_graph_b1_baseline_rep3.json"


@pytest.fixture(scope="module")
def profile():
    return load_profile(resolve_profile_path("h200"))


def _doc_block() -> str:
    spec = importlib.util.spec_from_file_location("make_validation_table", ROOT / "docs" / "make_validation_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    text = mod.DOC.read_text()
    return text[text.index(mod.BEGIN) + len(mod.BEGIN):text.index(mod.END)].strip(), mod.generated_block()


def test_committed_records_reproduce_the_documented_table():
    documented, now = _doc_block()
    assert documented == now.strip()


def test_committed_graph_records_meet_the_tok_per_s_bar(profile):
    recs = with_costs_source([r for r in load_records([LIVE]) if r[0].endswith("_rep3.json")], "whole_forward")
    s = next(x for x in summarize(compare(recs, profile)) if x.mode == "graph")
    assert s.num_points == 50 and s.median_abs_error_frac <= 0.03 and s.max_abs_error_frac <= 0.08


def test_doctored_record_reports_the_error_it_should(profile, tmp_path):
    rec = LiveRun.model_validate_json(POINT.read_text())
    [(_, base)] = with_costs_source([("p", rec)], "whole_forward")
    honest = compare([("p", base)], profile)[0]
    # the GPU "ran" 10% slower: every repeat's elapsed time x 1.1
    d = json.loads(POINT.read_text())
    d["repeat_elapsed_us"] = [e * 1.1 for e in d["repeat_elapsed_us"]]
    d["repeat_tok_per_s"] = [t / 1.1 for t in d["repeat_tok_per_s"]]
    d["elapsed_us"] *= 1.1
    d["tok_per_s"] /= 1.1
    slow = tmp_path / "slow.json"
    slow.write_text(json.dumps(d))
    [(_, doctored)] = with_costs_source(load_records([slow]), "whole_forward")
    p = compare([("slow", doctored)], profile)[0]
    assert p.predicted_tok_per_s == pytest.approx(honest.predicted_tok_per_s)  # timings never feed the prediction
    assert 1 + p.tok_per_s_error_frac == pytest.approx(1.1 * (1 + honest.tok_per_s_error_frac), rel=1e-9)
    assert p.measured_speedup == pytest.approx(honest.measured_speedup / 1.1)  # paired baseline untouched
    r = CliRunner().invoke(app, ["validate", str(slow), "--profile", "h200", "--costs-source", "whole_forward",
                                 "--max-error-pct", "5"])
    assert r.exit_code != 0
    r = CliRunner().invoke(app, ["validate", str(POINT), "--profile", "h200", "--costs-source", "whole_forward",
                                 "--max-error-pct", "5"])
    assert r.exit_code == 0, r.output


def test_speedup_uses_the_paired_baseline_else_the_baseline_record(profile):
    rec = LiveRun.model_validate_json(POINT.read_text())
    base = LiveRun.model_validate_json(BASE.read_text())
    p = compare([("p", rec), ("b", base)], profile)[0]
    assert p.measured_speedup == pytest.approx(rec.median_tok_per_s / rec.paired_baseline_tok_per_s)
    unpaired = rec.model_copy(update={"paired_baseline_tok_per_s": None})
    p = compare([("p", unpaired), ("b", base)], profile)[0]
    assert p.measured_speedup == pytest.approx(rec.median_tok_per_s / base.median_tok_per_s)


def test_repeat_spread_is_timing_only_and_measured_is_the_median_repeat():
    rec = LiveRun.model_validate_json(POINT.read_text())
    assert len(set(rec.repeat_num_tokens)) == 1  # one accept sequence replayed
    cyc = rec.repeat_cycle_us
    assert cyc == pytest.approx([e / rec.num_cycles for e in rec.repeat_elapsed_us])
    assert rec.median_tok_per_s == pytest.approx(sorted(rec.repeat_tok_per_s)[1])


def _tp_point(placement: str, steps: int, measured: float, predicted: float, tp: int = 2):
    from simulator.evidence.validate import PointComparison
    return PointComparison(label="x", source="x", target="t", mode="graph", speculative=True, num_steps=steps,
                           acceptance="iid 0.7", batch_size=1, context_len=1024, measured_tok_per_s=measured,
                           predicted_tok_per_s=predicted, tok_per_s_error_frac=predicted / measured - 1,
                           measured_accept_length=2.0, predicted_accept_length=2.0,
                           measured_repeat_spread_frac=None, measured_phase_us={}, predicted_phase_us={},
                           tp_size=tp, placement=placement)


def test_faster_placement_is_judged_only_beyond_noise_and_cells_keep_tp_apart():
    pts = [_tp_point("shared_tp", 3, 100.0, 120.0), _tp_point("tp1_colocated", 3, 110.0, 105.0),  # disagree
           _tp_point("shared_tp", 5, 100.0, 100.0), _tp_point("tp1_colocated", 5, 101.0, 90.0),   # within noise
           _tp_point("shared_tp", 3, 50.0, 50.0, tp=4)]                                          # other tp: alone
    s = summarize(pts)[0]
    assert (s.faster_placement_agree, s.faster_placement_cells) == (0, 1)
    pts[0] = _tp_point("shared_tp", 3, 100.0, 100.0)
    s = summarize(pts)[0]
    assert (s.faster_placement_agree, s.faster_placement_cells) == (1, 1)
    # best num_steps: per (tp, placement); the tp 4 cell has one num_steps, so no choice to judge
    assert s.best_num_steps_cells == 2


def test_tp_records_pair_with_their_own_tp_baseline(profile):
    rec = LiveRun.model_validate_json(POINT.read_text()).model_copy(update={"paired_baseline_tok_per_s": None})
    base = LiveRun.model_validate_json(BASE.read_text())
    other = base.model_copy(update={"scenario": base.scenario.model_copy(update={"tp_size": 2}),
                                    "tok_per_s": base.tok_per_s})
    p = compare([("b2", other), ("p", rec), ("b", base)], profile)[1]
    assert p.measured_speedup == pytest.approx(rec.median_tok_per_s / base.median_tok_per_s)
    assert "tp" not in p.label.split()[3]


def test_record_sets_stay_apart_and_a_file_given_twice_counts_once(profile, tmp_path):
    import shutil
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        shutil.copy(POINT, tmp_path / d / POINT.name)
        shutil.copy(BASE, tmp_path / d / BASE.name)
    slow = json.loads(BASE.read_text())  # set b's baseline ran 2x slower
    for k in ("repeat_elapsed_us",):
        slow[k] = [e * 2 for e in slow[k]]
    slow["repeat_tok_per_s"] = [t / 2 for t in slow["repeat_tok_per_s"]]
    slow["elapsed_us"] *= 2
    slow["tok_per_s"] /= 2
    (tmp_path / "b" / BASE.name).write_text(json.dumps(slow))
    recs = load_records([tmp_path / "a", tmp_path / "b", tmp_path / "a" / POINT.name])
    assert len(recs) == 4
    unpaired = [(s, r.model_copy(update={"paired_baseline_tok_per_s": None}) if r.speculative else r) for s, r in recs]
    pts = {(Path(p.record_set).name, p.speculative): p for p in compare(unpaired, profile)}
    assert pts[("b", True)].measured_speedup == pytest.approx(2 * pts[("a", True)].measured_speedup)
    assert all(p.label.startswith(("llama", "[")) for p in pts.values()) and "[a]" in pts[("a", True)].label


def test_a_tie_between_placements_is_not_a_placement_cell():
    pts = [_tp_point("shared_tp", 3, 100.0, 110.0), _tp_point("tp1_colocated", 3, 120.0, 110.0)]
    assert summarize(pts)[0].faster_placement_cells == 0


def test_take3_and_tp2_records_meet_the_tok_per_s_bar_and_pick_the_faster_placement(profile):
    for folder, n in ((ROOT / "data" / "live" / "h200_session", 50),
                      (ROOT / "data" / "live" / "h200_tp2_noise", 49)):
        s = summarize(compare(with_costs_source(load_records([folder]), "whole_forward"), profile))[0]
        assert s.num_points == n and s.median_abs_error_frac <= 0.03 and s.max_abs_error_frac <= 0.08, folder
    assert s.faster_placement_cells >= 10 and s.faster_placement_agree == s.faster_placement_cells


def test_two_records_of_one_point_in_a_folder_get_a_note(tmp_path):
    for name in ("a.json", "b.json"):
        (tmp_path / name).write_text(POINT.read_text())
    r = CliRunner().invoke(app, ["validate", str(tmp_path), "--profile", "h200"], terminal_width=200)
    assert r.exit_code == 0 and "more than one record in one folder for 1 point(s)" in r.output, r.output
    r = CliRunner().invoke(app, ["validate", str(tmp_path), "--json", str(tmp_path)])
    assert r.exit_code == 2 and "is a folder" in r.output


def _batch_point(b: int, steps: int, measured: float, predicted: float, meas_speedup: float, pred_speedup: float):
    from simulator.evidence.validate import PointComparison
    return PointComparison(label=f"b{b} s{steps}", source="x", target="t", mode="graph", speculative=True,
                           num_steps=steps, acceptance="iid 0.7", batch_size=b, context_len=1024,
                           measured_tok_per_s=measured, predicted_tok_per_s=predicted,
                           tok_per_s_error_frac=predicted / measured - 1, measured_accept_length=2.0,
                           predicted_accept_length=2.0, measured_repeat_spread_frac=None, measured_phase_us={},
                           predicted_phase_us={}, measured_speedup=meas_speedup, predicted_speedup=pred_speedup)


BATCHES = (1, 2, 4, 8, 16, 32, 64)


def _batch_cell(measured_stop: int | None, predicted_stop: int | None, error: float = 0.01):
    """Two num_steps per batch; the best speedup drops to 0.9 from the given batch sizes on."""
    pts = []
    for b in BATCHES:
        for steps, drop in ((1, 0.0), (3, 0.1)):
            meas = (0.9 if measured_stop is not None and b >= measured_stop else 2.0) - drop
            pred = (0.9 if predicted_stop is not None and b >= predicted_stop else 2.0) - drop
            pts.append(_batch_point(b, steps, 100.0 * b, 100.0 * b * (1 + error), meas, pred))
    return pts


def test_batched_points_are_summarized_per_batch_size():
    from simulator.evidence.validate import summarize_by_batch
    pts = _batch_cell(32, 32)
    pts[-1] = _batch_point(64, 3, 100.0, 105.0, 0.8, 0.85)
    by_batch = {b.batch_size: b for b in summarize_by_batch(pts)}
    assert sorted(by_batch) == list(BATCHES) and all(b.num_points == 2 for b in by_batch.values())
    assert by_batch[1].median_abs_error_frac == pytest.approx(0.01)
    assert by_batch[64].max_abs_error_frac == pytest.approx(0.05)
    assert by_batch[1].measured_best_speedup == 2.0 and by_batch[64].measured_best_speedup == pytest.approx(0.9)


@pytest.mark.parametrize("measured, predicted, apart, ok", [
    (32, 32, 0, True), (32, 16, 1, True), (32, 64, 1, True), (16, 64, 2, False),
    (None, 64, 1, True), (None, None, 0, True), (None, 16, 3, False)])
def test_crossover_is_the_first_batch_where_speculation_stops_paying(measured, predicted, apart, ok):
    from simulator.evidence.validate import crossovers
    (c,) = crossovers(_batch_cell(measured, predicted))
    assert (c.measured_crossover, c.predicted_crossover) == (measured, predicted)
    assert c.batch_sizes == list(BATCHES) and c.steps_apart == apart and c.within_one_step is ok


def test_batch_bar_needs_the_errors_the_batch_sizes_and_the_crossover():
    from simulator.evidence.validate import batch_bar, crossovers
    pts = _batch_cell(32, 64)
    assert batch_bar(pts, crossovers(pts))[0]
    pts = _batch_cell(16, 64)  # crossover two steps apart
    met, line = batch_bar(pts, crossovers(pts))
    assert not met and "0 of 1 cells" in line
    pts = [p for p in _batch_cell(32, 32) if p.batch_size <= 16]  # the largest batch under 32
    assert not batch_bar(pts, crossovers(pts))[0]
    pts = _batch_cell(32, 32, error=0.09)
    assert not batch_bar(pts, crossovers(pts))[0]


def test_validate_reports_batch_sizes_and_the_crossover_and_its_json_keeps_them(profile, tmp_path):
    from simulator.evidence.validate import load_validation_report
    files = sorted(str(f) for f in LIVE.glob("8b_graph_b[14]_*.json") if "_rep" not in f.name)
    out = tmp_path / "v.json"
    result = CliRunner().invoke(app, ["validate", *files, "--costs-source", "whole_forward", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "summary by batch size" in result.output and "crossover (speculation stops paying)" in result.output
    assert "batch bar (graph" in result.output
    report = load_validation_report(out)
    assert {b.batch_size for b in report.batch_summaries} == {1, 4}
    assert len(report.crossovers) == 1 and report.crossovers[0].batch_sizes == [1, 4]


def test_committed_batch_grid_meets_the_batch_bar():
    """docs/validation.md, Batch > 1: the live batch grid on the H200 (batch 1-64) from the profile
    with batch-axis whole forwards (data/profiles/h200_batch.json), whole-forward costs."""
    from simulator.profile import load_profile
    from simulator.evidence.validate import batch_bar, compare, crossovers, load_records, with_costs_source
    root = Path(__file__).resolve().parents[1]
    records = with_costs_source(load_records([root / "data" / "live" / "h200_batch"]), "whole_forward")
    profile = load_profile(root / "data" / "profiles" / "h200_batch.json")
    points = compare(records, profile)
    assert len(points) == 28 and {p.batch_size for p in points} == {1, 2, 4, 8, 16, 32, 64}
    ok, line = batch_bar(points, crossovers(points))
    assert ok, line


def test_a_cells_best_num_steps_is_the_mean_of_each_num_steps_records_not_its_luckiest():
    """Five processes measured num_steps 3 and one of them ran fast; two measured num_steps 4, faster on
    average: the measured best is 4 (the most of five noisy records is no measurement of num_steps 3)."""
    from types import SimpleNamespace as P

    from simulator.evidence.validate import best_num_steps, mean_by_num_steps
    cell = [P(num_steps=3, measured_tok_per_s=m, predicted_tok_per_s=100.0) for m in (96, 95, 97, 96, 110)] + \
           [P(num_steps=4, measured_tok_per_s=m, predicted_tok_per_s=101.0) for m in (101, 100)]
    assert max(cell, key=lambda p: p.measured_tok_per_s).num_steps == 3  # the old rule's pick
    assert mean_by_num_steps(cell, lambda p: p.measured_tok_per_s) == {3: 98.8, 4: 100.5}
    assert best_num_steps(cell) == (4, 4)
    cell[-1].measured_tok_per_s = cell[-2].measured_tok_per_s = 90.0
    assert best_num_steps(cell) == (3, 4)
