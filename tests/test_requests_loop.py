"""Request-level engine runs (calibration/engines/requests_loop.py) on the fake engine: closed
batches and closed loops, what a user's `LLM.generate` and `bench serve` measure (issue 45)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pydantic import ValidationError

from calibration.engines.campaign import run_processes
from calibration.engines.backends.fake import FakeBackend, FakeCosts
from calibration.engines.plans import ProcessPlan
from calibration.engines.requests_loop import measure_requests, run_requests, summarize_run
from calibration.engines.run_loop import PointPlan


def _plan(**kw) -> PointPlan:
    base = dict(batch_size=4, prompt_len=64, acceptance_rate=0.0, workload="closed_batch", max_tokens=16, repeats=1)
    return PointPlan(**{**base, **kw})


def test_a_closed_batch_of_deterministic_steps_takes_the_closed_form_time():
    """No jitter, no acceptance: one prefill step for the batch, then max_tokens - 1 decode steps at
    the whole batch; the run's time is exactly their sum, every request gets max_tokens."""
    costs = FakeCosts()
    be = FakeBackend(2, jitter_cv=0.0, costs=costs)
    rec = run_requests(be, _plan(), 0)
    b, p, n, k = 4, 64, 16, 2
    prefill = costs.prefill_step_us(b * p, speculative=True)
    fwd = costs.target_forward_us(b * (k + 1), b, 0.0)  # context only moves the fake's price through kv terms
    assert rec["num_tokens"] == b * n and all(r["num_tokens"] == n for r in rec["requests"])
    assert len(rec["steps"]) == 1 + (n - 1)
    assert rec["steps"][0]["t_us"] == pytest.approx(prefill)
    assert all(r["ttft_us"] == pytest.approx(prefill) for r in rec["requests"])
    assert rec["elapsed_us"] == pytest.approx(rec["steps"][-1]["t_us"])
    assert rec["elapsed_us"] > prefill + (n - 1) * fwd * 0.5
    assert sum(rec["accept_length_counts"]) == b * (n - 1) and rec["accept_length_counts"][0] == b * (n - 1)
    s = summarize_run(rec)
    assert s["tok_per_s"] == pytest.approx(b * n / rec["elapsed_us"] * 1e6)
    assert s["median_tpot_ms"] == pytest.approx((rec["elapsed_us"] - prefill) / (n - 1) / 1e3)


class _LastOutputClock(FakeBackend):
    """SGLang's clock: clock_us is the last step's output time; the engine then sits idle before a run."""

    def __init__(self, *a, idle_us: float = 0.0, **kw):
        super().__init__(*a, **kw)
        self.last_out_us, self.idle_us = 0.0, idle_us

    def clock_us(self) -> float:
        return self.last_out_us

    def step(self):
        out = super().step()
        self.last_out_us = self.now_us
        return out


def test_a_run_starts_its_clock_when_it_submits_not_at_the_last_output_before():
    """An engine whose clock_us is its last output's time (SGLang) and that sat idle 0.5 s after its
    previous run: the next run's TTFT and wall time are the same as on a fresh engine (before the fix,
    the idle 0.5 s counted into both)."""
    fresh = run_requests(_LastOutputClock(2, jitter_cv=0.0, costs=FakeCosts()), _plan(), 0)
    be = _LastOutputClock(2, jitter_cv=0.0, costs=FakeCosts())
    run_requests(be, _plan(), 0)
    be.now_us += 500_000.0  # idle between runs: the engine's clock moves, no output comes
    rec = run_requests(be, _plan(), 1)
    assert rec["elapsed_us"] == pytest.approx(fresh["elapsed_us"])
    assert rec["requests"][0]["ttft_us"] == pytest.approx(fresh["requests"][0]["ttft_us"])


class _RecordsAborts(FakeBackend):
    """An engine that remembers what it was asked to abort; aborting a finished request fails (a run aborts
    its unfinished requests only)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.aborted: list[list[str]] = []

    def abort(self, request_ids):
        gone = [r for r in request_ids if r not in self.requests]
        if gone:
            raise RuntimeError(f"aborted finished requests {gone}")
        self.aborted.append(list(request_ids))
        super().abort(request_ids)


@pytest.mark.parametrize("workload", ["closed_batch", "closed_loop"])
@pytest.mark.parametrize("max_tokens", [1, 16])
def test_a_run_that_ends_aborts_no_finished_request(workload, max_tokens):
    be = _RecordsAborts(3, seed=2)
    for r in range(3):  # a run of the prefill alone, then runs after it, in one engine
        rec = run_requests(be, _plan(workload=workload, max_tokens=max_tokens, acceptance_rate=0.7,
                                     concurrency=2 if workload == "closed_loop" else None,
                                     num_requests=5 if workload == "closed_loop" else None), r)
        assert rec["num_tokens"] == rec["num_requests"] * max_tokens
    assert be.aborted == [[], [], []] and not be.requests


def test_a_closed_batch_drains_speculative_requests_to_exactly_max_tokens():
    be = FakeBackend(3, jitter_cv=0.0)
    rec = run_requests(be, _plan(acceptance_rate=0.9, max_tokens=50), 0)
    assert all(r["num_tokens"] == 50 for r in rec["requests"])
    assert sum(rec["accept_length_counts"][1:]) > 0  # accepted drafts seen
    assert rec["steps"][-1]["running"] >= 1 and rec["steps"][0]["running"] == 4


def test_a_closed_loop_keeps_the_concurrency_and_runs_every_request():
    be = FakeBackend(1, jitter_cv=0.0)
    plan = _plan(workload="closed_loop", concurrency=2, num_requests=5, batch_size=2, max_tokens=8)
    rec = run_requests(be, plan, 0)
    assert rec["num_requests"] == 5 and rec["num_tokens"] == 40
    assert max(s["running"] for s in rec["steps"]) == 2
    later = [r for r in rec["requests"] if r["start_us"] > 0]
    assert len(later) == 3 and all(r["ttft_us"] > 0 for r in later)


def test_repeats_draw_fresh_prompts_and_keys_name_the_workload():
    plan = _plan(repeats=2)
    assert plan.key == "cb_b4_p64_a0_n16x2"
    loop = _plan(workload="closed_loop", concurrency=2, num_requests=6)
    assert loop.key.startswith("cl_c2_r6_p64")
    assert _plan(workload="steady", max_tokens=None).key == "b4_p64_a0_t48x1"
    res = measure_requests(FakeBackend(1, jitter_cv=0.0), plan)
    assert [r["repeat_idx"] for r in res["repeats"]] == [0, 1] and res["workload"] == "closed_batch"


@pytest.mark.parametrize("point, word", [
    (dict(workload="closed_batch"), "max_tokens: needed"),
    (dict(workload="steady", max_tokens=5), "max_tokens: not taken"),
    (dict(workload="closed_loop", max_tokens=5, concurrency=4, num_requests=2), "num_requests 2 < concurrency 4"),
    (dict(workload="closed_batch", max_tokens=8000), "max_model_len"),
])
def test_a_plan_refuses_request_fields_that_do_not_fit(point, word):
    pt = dict(batch_size=2, prompt_len=512, acceptance_rate=None, **point)
    with pytest.raises(ValidationError, match=word):
        ProcessPlan(engine="fake", session="live", label="e2e_s0", num_steps=0, target_config={}, points=[pt])


def test_the_fake_campaign_writes_request_level_points(tmp_path):
    pts = [dict(batch_size=2, prompt_len=64, acceptance_rate=0.7, workload="closed_batch", max_tokens=12, repeats=1),
           dict(batch_size=2, prompt_len=64, acceptance_rate=0.7, workload="closed_loop", concurrency=2,
                num_requests=4, max_tokens=6, repeats=1)]
    plan = ProcessPlan(engine="fake", session="live", label="e2e_s2", num_steps=2, target_config={}, points=pts)
    out = tmp_path / "e2e.points.jsonl"
    status = run_processes([plan], out, in_process=True, log=lambda *_: None)
    assert status == {"e2e_s2": "done"}
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    got = {r["point"]["key"]: r["point"] for r in recs if r["kind"] == "point"}
    assert set(got) == {"cb_b2_p64_a0.7_n12x1", "cl_c2_r4_p64_a0.7_n6x1"}
    assert got["cb_b2_p64_a0.7_n12x1"]["repeats"][0]["num_tokens"] == 24
    assert run_processes([plan], out, in_process=True, log=lambda *_: None) == {"e2e_s2": "skipped"}


def test_request_points_are_read_apart_from_the_steady_windows(tmp_path):
    """A points file holding request-level runs validates line by line (strictly) and the profile
    builder and live records never take them for steady windows."""
    from calibration.engines.build import engine_lines
    from calibration.engines.points import read_points_file
    from simulator.inputs import UserInputError
    pts = [dict(batch_size=2, prompt_len=64, acceptance_rate=0.7, workload="closed_batch", max_tokens=12, repeats=1)]
    plan = ProcessPlan(engine="fake", session="live", label="e2e_s2", num_steps=2, target_config={}, points=pts)
    out = tmp_path / "e2e.points.jsonl"
    run_processes([plan], out, in_process=True, log=lambda *_: None)
    assert [r["kind"] for r in read_points_file(out)] == ["engine", "point"]
    assert engine_lines([out])[1] == [] and len(engine_lines([out], requests=True)[1]) == 1
    lines = out.read_text().splitlines()
    bad = json.loads(lines[1])
    bad["point"]["repeats"][0]["num_tokens"] += 1
    out.write_text(lines[0] + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(UserInputError, match="num_tokens is not the requests' tokens summed"):
        read_points_file(out)


def test_request_points_become_serving_records_that_validate_serving_reads(tmp_path):
    """`specdecsim live --from-points` writes each closed batch / closed loop repeat as a live serving
    record of the same workload; validate-serving runs the serving DES on each."""
    from typer.testing import CliRunner

    from simulator.cli import build_app
    from simulator.evidence.validate_serving import check_record, load_serving_records
    from simulator.scenario import load_profile_for
    pts = [dict(batch_size=3, prompt_len=64, acceptance_rate=0.7, workload="closed_batch", max_tokens=20, repeats=1),
           dict(batch_size=3, prompt_len=64, acceptance_rate=0.7, workload="closed_batch", max_tokens=1, repeats=1),
           dict(batch_size=2, prompt_len=64, acceptance_rate=0.7, workload="closed_loop", concurrency=2,
                num_requests=5, max_tokens=10, repeats=1)]
    plan = ProcessPlan(engine="fake", session="live", label="e2e_s2", num_steps=2, target_config={}, points=pts)
    out = tmp_path / "e2e.points.jsonl"
    run_processes([plan], out, in_process=True, log=lambda *_: None)
    r = CliRunner().invoke(build_app(), ["live", "--engine", "fake", "--from-points", str(out), "--out",
                                         str(tmp_path / "recs")])
    assert r.exit_code == 0, r.output
    recs = dict(load_serving_records([tmp_path / "recs" / "requests"]))
    assert len(recs) == 2  # the prefill-alone point is what users subtract, not a serving record
    kinds = sorted(rec.scenario.serving.arrivals.kind for rec in recs.values())
    assert kinds == ["closed_batch", "closed_loop"]
    batch = next(rec for rec in recs.values() if rec.scenario.serving.arrivals.kind == "closed_batch")
    assert batch.concurrency == 3 and sum(batch.output_tokens) == 60 and set(batch.arrival_us) == {0.0}
    assert batch.result.mean_accept_length > 1.0
    bad = batch.model_dump()
    bad["step_accepted"] = [b * 5 for b in bad["step_batch_size"]]  # 5 tokens a request at num_steps 2
    with pytest.raises(ValidationError, match=r"step_accepted\[\d+\] \d+: each of its \d+ decoding requests takes"):
        type(batch).model_validate(bad)
    bad["step_accepted"] = [0 for _ in bad["step_batch_size"]]  # no token at all: not a decode step
    with pytest.raises(ValidationError, match=r"step_accepted\[\d+\] 0: each of its"):
        type(batch).model_validate(bad)
    bad = batch.model_dump()
    bad["scenario"]["serving"]["num_requests"] = 100_000  # a scenario that is not the one that ran
    with pytest.raises(ValidationError, match=r"scenario.serving.num_requests 100000: the record holds 3 requests"):
        type(batch).model_validate(bad)
    from simulator.evidence.validate_serving import realized_acceptance_rate
    rate = realized_acceptance_rate(batch)
    assert 0.0 < rate < 1.0  # the i.i.d. rate of the accept length the run realized
    from simulator.acceptance import iid_mean_accept_length
    from simulator.evidence.validate_serving import realized_request_rates
    rates = realized_request_rates(batch)  # each request's own: its tokens after the first over its gaps
    gaps = np.bincount(batch.itl_request_idx, minlength=3)
    for i, a in enumerate(rates):
        assert iid_mean_accept_length(a, 2) == pytest.approx((batch.output_tokens[i] - 1) / gaps[i], rel=1e-9)
    replay = check_record("batch", batch, load_profile_for(batch.scenario)[0], acceptance="replay")
    assert replay.predicted_tok_per_s > 0
    src, rec = next(iter(recs.items()))
    row = check_record(src, rec, load_profile_for(rec.scenario)[0])
    assert row.measured_tok_per_s > 0 and row.predicted_tok_per_s > 0


def test_decode_tok_per_s_is_what_users_compute():
    """(tokens - B) / (the batch's run less its prefill-alone run), per closed batch."""
    from calibration.engines.request_records import decode_tok_per_s
    import tempfile
    from pathlib import Path
    pts = [dict(batch_size=2, prompt_len=64, acceptance_rate=0.0, workload="closed_batch", max_tokens=n, repeats=1)
           for n in (1, 16)]
    plan = ProcessPlan(engine="fake", session="live", label="e2e_s1", num_steps=1, target_config={}, points=pts)
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "e2e.points.jsonl"
        run_processes([plan], out, in_process=True, log=lambda *_: None)
        (row,) = decode_tok_per_s([out])
    assert row["decode_tok_per_s"] == pytest.approx((2 * 16 - 2) / (row["generate_s"] - row["prefill_s"]))
    assert row["tok_per_s"] == pytest.approx(32 / row["generate_s"])


class _ProbedHost(FakeBackend):
    """A fake engine on a real host: its runs probe the stepping thread's speed (a stand-in probe of 2,400 us)."""

    simulated_clock = False

    def host_probe(self):
        return 2400.0, 3


def test_a_request_level_run_records_the_host_speed_it_stepped_at():
    """A point planned with host_probe records the host probe after each run (RequestRun.host_probe_us): the
    host speed the run's checks can price it at; a simulated clock's runs record none; the planned request
    points all probe."""
    from calibration.engines.plans import prefill_points, request_points
    from calibration.engines.points import RequestRun
    rec = run_requests(_ProbedHost(1, jitter_cv=0.0), _plan(host_probe=True), 0)
    assert rec["host_probe_us"] == 2400.0 and RequestRun.model_validate(rec).host_probe_us == 2400.0
    assert "host_probe_us" not in run_requests(FakeBackend(1, jitter_cv=0.0), _plan(host_probe=True), 0)
    assert "host_probe_us" not in run_requests(_ProbedHost(1, jitter_cv=0.0), _plan(), 0)
    pts = request_points(True, [4, 1], [1024], [0.6, 0.9]) + prefill_points(([1, 2], [512]), 0.7)
    assert pts and all(p["host_probe"] for p in pts)


def test_poisson_arrivals_are_sent_at_their_times_and_an_idle_engine_waits():
    """A Poisson run sends each request at its seeded arrival (the run's record starts it there), waits
    while the engine is idle, and the same point and repeat draws the same arrivals (replayable)."""
    from calibration.engines.requests_loop import arrival_times_us
    be = FakeBackend(2, jitter_cv=0.0)
    plan = _plan(workload="poisson", num_requests=12, request_rate=5.0, batch_size=12, max_tokens=6)
    assert plan.key.startswith("po_q5_r12_p64")
    arr = arrival_times_us(plan, 0)
    assert arr == arrival_times_us(plan, 0) and arr != arrival_times_us(plan, 1)
    assert arr[0] == 0.0 and np.all(np.diff(arr) > 0) and len(arr) == 12
    rec = run_requests(be, plan, 0)
    assert rec["num_requests"] == 12 and rec["num_tokens"] == 72
    assert sorted(r["start_us"] for r in rec["requests"]) == pytest.approx(arr)
    assert all(r["ttft_us"] > 0 for r in rec["requests"])
    # 5 req/s against requests of a few ms: the engine idles between most arrivals, each request alone
    assert rec["elapsed_us"] >= arr[-1] and max(s["running"] for s in rec["steps"]) <= 2


def test_poisson_runs_become_serving_records_priced_at_their_own_arrivals(tmp_path):
    """A Poisson point's runs are serving records whose scenario lists the run's own arrivals; the serving
    DES replays them (its requests arrive when the engine's did) and prices the run."""
    from typer.testing import CliRunner

    from simulator.cli import build_app
    from simulator.evidence.validate_serving import check_record, load_serving_records
    from simulator.scenario import load_profile_for
    pts = [dict(batch_size=16, prompt_len=64, acceptance_rate=0.7, workload="poisson", num_requests=16,
                request_rate=200.0, max_tokens=12, repeats=2)]
    plan = ProcessPlan(engine="fake", session="live", label="e2e_s2", num_steps=2, target_config={}, points=pts)
    out = tmp_path / "e2e.points.jsonl"
    assert run_processes([plan], out, in_process=True, log=lambda *_: None) == {"e2e_s2": "done"}
    r = CliRunner().invoke(build_app(), ["live", "--engine", "fake", "--from-points", str(out), "--out",
                                         str(tmp_path / "recs")])
    assert r.exit_code == 0, r.output
    recs = dict(load_serving_records([tmp_path / "recs" / "requests"]))
    assert len(recs) == 2
    for src, rec in recs.items():
        arr = rec.scenario.serving.arrivals
        assert arr.kind == "trace" and arr.path is None
        assert np.asarray(arr.arrival_s) * 1e6 == pytest.approx(sorted(rec.arrival_us))
        row = check_record(src, rec, load_profile_for(rec.scenario)[0])
        assert row.measured_tok_per_s > 0 and row.predicted_tok_per_s > 0
    a, b = (rec.scenario.serving.arrivals.arrival_s for rec in recs.values())
    assert a != b  # each repeat its own draw


def test_a_points_file_poisson_point_without_its_request_count_is_refused_in_one_line(tmp_path):
    from calibration.engines.points import read_points_file
    from simulator.inputs import UserInputError
    pts = [dict(batch_size=4, prompt_len=64, acceptance_rate=0.7, workload="poisson", num_requests=4,
                request_rate=100.0, max_tokens=6, repeats=1)]
    plan = ProcessPlan(engine="fake", session="live", label="e2e_s2", num_steps=2, target_config={}, points=pts)
    out = tmp_path / "e2e.points.jsonl"
    run_processes([plan], out, in_process=True, log=lambda *_: None)
    lines = out.read_text().splitlines()
    bad = json.loads(lines[1])
    bad["point"]["num_requests"] = None
    out.write_text(lines[0] + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(UserInputError, match="num_requests: needed by workload poisson") as e:
        read_points_file(out)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("edit, word", [
    (lambda q: q.update(start_us=q["token_times_us"][0] + 1e6), "after its first token"),
    (lambda q: q.update(token_times_us=[]), "but no token_times_us"),
])
def test_a_request_that_starts_after_it_emits_or_emits_untimed_is_refused_in_one_line(tmp_path, edit, word):
    """A points file's request must start before its first token and time the steps it emitted in (found by a
    hostile try: both went through the file's check and broke the bench with a traceback)."""
    from calibration.engines.points import read_points_file
    from simulator.inputs import UserInputError
    pts = [dict(batch_size=2, prompt_len=64, acceptance_rate=0.7, workload="closed_batch", max_tokens=6, repeats=1)]
    plan = ProcessPlan(engine="fake", session="live", label="e2e_s2", num_steps=2, target_config={}, points=pts)
    out = tmp_path / "e2e.points.jsonl"
    run_processes([plan], out, in_process=True, log=lambda *_: None)
    lines = out.read_text().splitlines()
    bad = json.loads(lines[1])
    edit(bad["point"]["repeats"][0]["requests"][1])
    out.write_text(lines[0] + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(UserInputError, match=word) as e:
        read_points_file(out)
    assert "\n" not in str(e.value) and "requests[1]" in str(e.value)


class _CountsRuns(FakeBackend):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.batches = []

    def add_requests(self, prompts, max_tokens):
        self.batches.append((len(prompts), max_tokens))
        return super().add_requests(prompts, max_tokens)


@pytest.mark.parametrize("workload, extra, warm_batch", [
    ("closed_batch", {}, 4), ("closed_loop", dict(concurrency=2, num_requests=4), 2)])
def test_a_warmup_run_goes_first_and_is_not_recorded(workload, extra, warm_batch):
    """A plan's warm-up run (warmup_run_tokens) is one closed batch of the point's batch or concurrency before the
    measured runs; the records are what the same point gives without it (a deterministic fake engine)."""
    plain = measure_requests(FakeBackend(1, jitter_cv=0.0), _plan(workload=workload, repeats=2, **extra))
    be = _CountsRuns(1, jitter_cv=0.0)
    warm = measure_requests(be, _plan(workload=workload, repeats=2, warmup_run_tokens=3, **extra))
    assert be.batches[0] == (warm_batch, 3) and len(warm["repeats"]) == 2
    assert [r["repeat_idx"] for r in warm["repeats"]] == [0, 1]
    for a, b in zip(plain["repeats"], warm["repeats"]):
        assert a["elapsed_us"] == pytest.approx(b["elapsed_us"]) and a["num_tokens"] == b["num_tokens"]


def test_a_warmup_run_is_refused_where_no_batch_starts_together():
    from calibration.engines.plans import PointFields
    with pytest.raises(ValidationError, match="warmup_run_tokens: not taken by workload poisson"):
        PointFields(batch_size=4, prompt_len=64, acceptance_rate=0.5, workload="poisson", max_tokens=8,
                    num_requests=8, request_rate=2.0, warmup_run_tokens=4)
    assert PointFields(batch_size=4, prompt_len=64, acceptance_rate=0.5, workload="closed_batch", max_tokens=8,
                       warmup_run_tokens=4).warmup_run_tokens == 4


class _ThreadedEngine:
    """A toy engine whose scheduler runs in a thread of its own, as SGLang's does: each iteration (STEP_S of
    wall time) reads its inbox, then runs one step, a prefill of what it read alone (SGLang's default) or a
    decode step of the running requests, and puts the step's output in the outbox for `step` to read."""

    STEP_S = 0.002
    num_steps = 0
    sends_at_arrival = True

    def __init__(self):
        import queue
        import threading
        import time
        self.time, self.inbox, self.outbox = time, queue.Queue(), queue.Queue()
        self.running: dict[str, int] = {}  # request -> tokens still to make
        self.read_at: dict[str, float] = {}  # request -> when the scheduler read it
        self.stop, self.n, self.clock = threading.Event(), 0, 0.0
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        while not self.stop.is_set():
            new = []
            while not self.inbox.empty():
                rid, n = self.inbox.get()
                self.read_at[rid] = self.start_clock_us()
                new.append((rid, n))
            if not new and not self.running:
                self.time.sleep(0.0001)
                continue
            self.time.sleep(self.STEP_S)
            if new:
                out = {rid: 1 for rid, _ in new}
                self.running.update({rid: n - 1 for rid, n in new})
            else:
                out = {rid: 1 for rid in self.running}
                self.running = {r: n - 1 for r, n in self.running.items()}
            self.running = {r: n for r, n in self.running.items() if n > 0}
            self.outbox.put((self.start_clock_us(), out))

    def info(self):
        return None

    def clock_us(self):
        return self.clock

    def start_clock_us(self):
        return self.time.perf_counter() * 1e6

    def set_acceptance(self, rate):
        pass

    def add_requests(self, prompts, max_tokens):
        ids = []
        for _ in prompts:
            rid = f"r{self.n}"
            self.n += 1
            self.inbox.put((rid, max_tokens))
            ids.append(rid)
        return ids

    def step(self):
        self.clock, out = self.outbox.get(timeout=10)
        return out

    def abort(self, ids):
        pass

    def start_window(self, instrument):
        pass

    def end_window(self):
        return []


def test_an_engine_scheduling_in_its_own_thread_is_sent_each_poisson_request_at_its_arrival():
    """SGLang reads its requests in its scheduler's thread: a Poisson run sends each one at its arrival time from
    a thread of the run's (not at the next step output after it), records the time it was sent as its start, and
    marks the point `sent: arrival`; the toy engine reads each request within an iteration of its arrival."""
    from calibration.engines.points import RequestPointBody
    from calibration.engines.requests_loop import arrival_times_us, sends_at_arrival
    be = _ThreadedEngine()
    assert sends_at_arrival(be) and not sends_at_arrival(FakeBackend(2))
    plan = _plan(workload="poisson", num_requests=20, request_rate=150.0, batch_size=20, max_tokens=6)
    try:
        point = measure_requests(be, plan)
    finally:
        be.stop.set()
    rec, arr = point["repeats"][0], arrival_times_us(plan, 0)
    assert point["sent"] == "arrival" and rec["num_requests"] == 20 and rec["num_tokens"] == 120
    starts = sorted(r["start_us"] for r in rec["requests"])
    assert np.all(np.array(starts) >= np.array(arr) - 1.0)
    assert np.median(np.array(starts) - np.array(arr)) < 1000.0  # sent within a ms of its time, not a step after
    t0 = min(be.read_at.values())
    waits = sorted(be.read_at[r] - t0 for r in be.read_at)
    assert np.median(np.array(waits) - np.array(arr)) < 3000.0  # read by the engine within about an iteration
    RequestPointBody.model_validate(point)  # the line's schema takes `sent`
    assert "sent" not in measure_requests(FakeBackend(2, jitter_cv=0.0), plan)
