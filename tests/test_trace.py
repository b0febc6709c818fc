"""Streamed Chrome/Perfetto traces (simulator.trace): the cycle window, valid JSON written atomically,
the size said first and refused above the limit, and kernel spans of the closed-form engine equal
to the SimPy kernel streams' spans."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from simulator.acceptance import build_acceptance
from simulator.cli import app
from simulator.costs.forward import CostModel
from simulator.des.simulation import DesRun
from simulator.files import TRACE_OUTPUT, is_own_output
from simulator.scenario import load_profile_for, load_scenario
from simulator.estimate import estimate_run, trace_estimate
from simulator.simulate import simulate
from simulator.trace import TraceRecorder, TraceWriter
from simulator.trace_window import TraceWindow, parse_window
from simulator.inputs import UserInputError
from tests.conftest import make_scenario

ROOT = Path(__file__).resolve().parents[1]
SMALL = ROOT / "scenarios" / "llama8b_h200.yaml"
KERNEL = ["--set", "fidelity.granularity=kernel", "--set", "fidelity.num_cycles=30",
          "--set", "costs.source=per_op"]  # per-op kernels (whole forwards are one each)
runner = CliRunner()


def _cli(*args: str):
    return runner.invoke(app, ["simulate", str(SMALL), *args])


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_window_keeps_only_its_cycles_and_the_file_is_valid_json(tmp_path):
    out = tmp_path / "t.json"
    r = _cli(*KERNEL, "--trace", str(out), "--trace-cycles", "3:7")
    assert r.exit_code == 0, r.output
    data = json.load(out.open())  # the whole file is one valid JSON document
    assert data["otherData"] == {"specdecsim_output": TRACE_OUTPUT, "version": data["otherData"]["version"],
                                 "cycles": "3:7"}
    spans = [e for e in data["traceEvents"] if e["ph"] == "X"]
    cycles = sorted((e for e in spans if e["cat"] == "cycle"), key=lambda e: e["ts"])
    assert [e["name"] for e in cycles] == ["cycle 3", "cycle 4", "cycle 5", "cycle 6"]
    lo, hi = cycles[0]["ts"], cycles[-1]["ts"] + cycles[-1]["dur"]
    kernels = [e for e in spans if e["cat"] != "cycle"]
    assert kernels and any(e["name"] == "attention" for e in kernels)
    assert all(lo - 1e-3 <= e["ts"] and e["ts"] + e["dur"] <= hi + 1e-3 for e in kernels)
    assert "cycles 3:7" in r.output and "about" in r.output and "MiB" in r.output  # the size, said first
    assert r.output.index("trace: cycles 3:7") < r.output.index("tokens/s")
    assert _leftovers(tmp_path) == []


def test_no_file_and_no_temp_file_when_the_run_fails(tmp_path, monkeypatch):
    from simulator.des import per_rank
    out = tmp_path / "t.json"
    out.write_text('{"traceEvents": [], "otherData": {"specdecsim_output": "trace/1"}}')  # an earlier trace
    before = out.read_text()
    calls = []
    real = per_rank.RankPlan.run_spans

    def failing(self, *a):  # the 5th traced cycle gives a non-finite kernel time
        t, busy, start, dur = real(self, *a)
        calls.append(1)
        if len(calls) == 5:
            start = start.copy()
            start[0, 0] = np.nan
        return t, busy, start, dur
    monkeypatch.setattr(per_rank.RankPlan, "run_spans", failing)
    r = _cli(*KERNEL, "--trace", str(out))
    assert r.exit_code == 2 and "non-finite" in r.output and "Traceback" not in r.output
    assert len(calls) == 5
    assert out.read_text() == before  # the earlier trace stays whole; no partial file replaced it
    assert _leftovers(tmp_path) == []


def test_writer_removes_its_temp_file_on_an_exception(tmp_path):
    out = tmp_path / "t.json"
    with pytest.raises(KeyboardInterrupt):
        with TraceWriter(out) as w:
            w.streams(["0"])
            w.span("k", "verify_compute", "0", 1.0, 2.0)
            assert _leftovers(tmp_path)  # written beside the target meanwhile
            raise KeyboardInterrupt
    assert not out.exists() and _leftovers(tmp_path) == []


@pytest.mark.parametrize("window,words", [("5:3", "need 0 <= A < B <= 30"), ("abc", "expected A:B"),
                                          ("0:31", "need 0 <= A < B <= 30"), ("4:4", "need 0 <= A < B"),
                                          ("-1:3", "expected A:B"), ("1:2:3", "expected A:B")])
def test_bad_window_is_one_clear_error_exit_2(tmp_path, window, words):
    out = tmp_path / "t.json"
    r = _cli(*KERNEL, "--trace", str(out), "--trace-cycles", window)
    assert r.exit_code == 2, r.output
    assert "--trace-cycles" in r.output and words in r.output and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) <= 2
    assert not out.exists()


def test_bad_window_at_forward_granularity_is_the_only_line(tmp_path):
    """The forward-granularity note comes after the window is checked, so a bad window prints
    one line, not the note and then the error."""
    out = tmp_path / "t.json"
    r = _cli("--set", "fidelity.granularity=forward", "--set", "fidelity.num_cycles=30", "--trace", str(out),
             "--trace-cycles", "5:3")
    assert r.exit_code == 2, r.output
    assert r.output.strip().splitlines() == [ln for ln in r.output.strip().splitlines() if ln.startswith("error:")]
    assert "forward granularity" not in r.output and not out.exists()


def test_trace_cycles_without_trace_is_an_error():
    r = _cli(*KERNEL, "--trace-cycles", "0:5")
    assert r.exit_code == 2 and "--trace-cycles needs --trace" in r.output


def test_parse_window_forms():
    assert parse_window("2:5", 10) == TraceWindow(2, 5)
    assert parse_window("7:", 10) == TraceWindow(7, 10)
    assert parse_window(":3", 10) == TraceWindow(0, 3)
    assert parse_window(":", 10) == TraceWindow(0, 10)
    with pytest.raises(UserInputError, match="need 0 <= A < B <= 10"):
        parse_window("10:", 10)


def test_a_trace_over_the_limit_is_refused_before_the_run_unless_forced(tmp_path):
    path = ROOT / "scenarios" / "tp8_jitter.yaml"  # TP8 per rank: about 1 MB of spans per cycle
    out = tmp_path / "t.json"
    r = runner.invoke(app, ["simulate", str(path), "--trace", str(out), "--trace-cycles", "0:"])
    assert r.exit_code == 2, r.output
    assert "over the 1 GiB trace limit" in r.output and "--force" in r.output
    assert not out.exists() and _leftovers(tmp_path) == []


def test_default_window_is_every_cycle_when_small_else_the_first_that_fit(tmp_path):
    r = _cli(*KERNEL, "--trace", str(tmp_path / "a.json"))
    assert r.exit_code == 0 and "trace: every cycle" in r.output
    assert json.load((tmp_path / "a.json").open())["otherData"]["cycles"] == "0:30"
    path = ROOT / "scenarios" / "tp8_jitter.yaml"
    sc = load_scenario(path, ["fidelity.num_cycles=30"])
    cost = CostModel(sc, load_profile_for(sc, base_dir=path.parent)[0])
    per_cycle = trace_estimate(sc, cost, 1).bytes_per_cycle
    from simulator.trace_window import DEFAULT_WINDOW_BYTES, default_window
    w = default_window(2000, per_cycle)
    assert w.start_cycle == 0 and 1 <= w.num_cycles < 2000
    assert w.num_cycles * per_cycle <= DEFAULT_WINDOW_BYTES < (w.num_cycles + 1) * per_cycle


def test_estimate_matches_what_is_written(tmp_path):
    out = tmp_path / "t.json"
    r = _cli(*KERNEL, "--trace", str(out))
    assert r.exit_code == 0, r.output
    sc = load_scenario(SMALL, ["fidelity.granularity=kernel", "fidelity.num_cycles=30", "costs.source=per_op"])
    cost = CostModel(sc, load_profile_for(sc, base_dir=SMALL.parent)[0])
    est = trace_estimate(sc, cost, 30)
    events = json.load(out.open())["traceEvents"]
    assert est.num_events == pytest.approx(len(events), rel=0.05)
    assert est.num_bytes == pytest.approx(out.stat().st_size, rel=0.15)
    # streamed: the trace adds time to the run estimate, never memory
    bare, traced = estimate_run(sc, cost), estimate_run(sc, cost, trace_cycles=30)
    assert traced.memory_bytes == bare.memory_bytes
    assert traced.seconds == pytest.approx(bare.seconds + est.seconds)


def test_a_large_streamed_trace_is_known_as_ours_by_its_first_line(tmp_path):
    out = tmp_path / "t.json"
    with TraceWriter(out) as w:
        w.streams(["0"])
        for i in range(400_000):  # about 40 MB: over the 32 MiB that an input file may have
            w.span("kernel", "verify_compute", "0", float(i), 1.0)
    assert out.stat().st_size > 32 * 2**20
    assert is_own_output(out, TRACE_OUTPUT)
    os.truncate(out, 100)  # the head alone still names it
    assert is_own_output(out, TRACE_OUTPUT)
    out.write_text('{"displayTimeUnit": "ms", "otherData": {"specdecsim_output": "simulation/1"}, "x": 1}')
    assert not is_own_output(out, TRACE_OUTPUT)


# ---- spans of the closed-form engine --------------------------------------------------------------------
def _spans(sc, prof, kernel_processes: bool, window: TraceWindow | None = None) -> tuple[DesRun, TraceRecorder]:
    cost = CostModel(sc, prof)
    rec = TraceRecorder(window)
    run = DesRun(cost, build_acceptance(sc.acceptance, sc.spec), np.random.default_rng(3), np.random.default_rng(4),
                 trace=rec, kernel_processes=kernel_processes)
    run.run(8, 2)
    return run, rec


@pytest.mark.parametrize("tp_size,placement,per_rank", [(1, "shared_tp", False), (4, "shared_tp", False),
                                                        (4, "shared_tp", True), (4, "tp1_colocated", True),
                                                        (4, "tp1_dedicated", True), (4, "tp2", True)])
@pytest.mark.parametrize("cuda_graph", [True, False])
def test_closed_form_spans_equal_the_kernel_streams_spans(tp_size, placement, per_rank, cuda_graph, profile):
    sc = make_scenario(tp_size=tp_size, placement=placement, serving_engine=dict(cuda_graph=cuda_graph),
                       workload=dict(batch_size=2, context_len=512, max_new_tokens=16),
                       fidelity=dict(granularity="kernel", per_rank=per_rank, num_cycles=8))
    (_, ref), (_, fast) = _spans(sc, profile, True), _spans(sc, profile, False)
    key = lambda e: (e.stream, round(e.start_us, 6), e.name)  # noqa: E731
    a, b = sorted(ref.events, key=key), sorted(fast.events, key=key)
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        assert (x.name, x.cat, x.stream) == (y.name, y.cat, y.stream)
        assert y.start_us == pytest.approx(x.start_us, rel=1e-9, abs=1e-6)
        assert y.dur_us == pytest.approx(x.dur_us, rel=1e-9, abs=1e-6)
    assert [c for c, _, _ in ref.cycle_spans] == [c for c, _, _ in fast.cycle_spans] == list(range(10))
    assert np.ravel([s[1:] for s in fast.cycle_spans]) == pytest.approx(np.ravel([s[1:] for s in ref.cycle_spans]),
                                                                      rel=1e-9)


def test_a_traced_run_times_out_as_an_untraced_one(profile):
    # jitter: the closed form draws a cycle's jitter in one call whether traced or not
    sc = make_scenario(tp_size=4, workload=dict(batch_size=1, context_len=512, max_new_tokens=32),
                       fidelity=dict(granularity="kernel", per_rank=True, jitter_cv=0.3, num_cycles=40))
    plain, _ = simulate(sc, profile)
    rec = TraceRecorder(TraceWindow(5, 9))
    traced, _ = simulate(sc, profile, trace=rec)
    assert traced.tok_per_s == plain.tok_per_s and traced.cycle_time_us == plain.cycle_time_us
    assert [c for c, _, _ in rec.cycle_spans] == [5, 6, 7, 8]
    assert {e.stream for e in rec.events} == {"0", "1", "2", "3"}


def test_forward_granularity_gives_one_span_per_forward_in_the_window(profile):
    sc = make_scenario(fidelity=dict(granularity="forward", num_cycles=20))
    rec = TraceRecorder(TraceWindow(0, 2))
    simulate(sc, profile, trace=rec)
    cost = CostModel(sc, profile)
    assert len(rec.cycle_spans) == 2
    assert len(rec.events) == 2 * len(cost.cycle_forwards(1))
    assert {e.stream for e in rec.events} == {"gpu"}


def test_cycle_granularity_refuses_a_trace(profile):
    with pytest.raises(ValueError, match="granularity"):
        simulate(make_scenario(fidelity=dict(granularity="cycle", num_cycles=20)), profile, trace=TraceRecorder())
