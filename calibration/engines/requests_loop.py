"""One measured request-level run of an engine: what `LLM.generate` and `bench serve` see.

A steady window (`run_loop.measure_point`) times decode steps with the batch held full; a user's
run has a start and an end. Two workloads, driven through the same backend interface:

- `closed_batch`: `batch_size` requests of `prompt_len` fresh prompt tokens, all added at once,
  each generating exactly `max_tokens` tokens; the engine steps until the last one finishes (an
  offline `LLM.generate` of the batch: prefill, the first decode steps, the batch draining).
- `closed_loop`: `concurrency` requests in flight, each finished one replaced at once by a new one,
  until `num_requests` have finished (`vllm bench serve --max-concurrency`).
- `poisson`: `num_requests` requests sent at exponential gaps of mean 1 / `request_rate` (`vllm bench
  serve --request-rate`), drawn afresh for each repeat (seeded by the point and repeat). An engine whose
  scheduler reads its requests in a thread of its own (`sends_at_arrival`: SGLang) is sent each request
  at its arrival time by a thread of the run's (`_Sender`), as bench serve's client sends it; its start is
  the time it was sent. Other engines step in the run's own thread: a request whose time has come is sent
  before the next step, an idle engine waits for the next one, and its start is its arrival time. Before
  2026-12-07 SGLang's requests were sent that second way: at the first step output after their arrival,
  when the scheduler, a batch ahead, mostly read its inbox before the request was in it (one decode step
  more before each prefill: docs/make_poisson_lag_table.py).

Every repeat gets prompts of its own (fresh random token ids), so an engine's prefix cache never
serves a repeat from the one before. Per step the run records the wall clock at the step's return,
the tokens each request emitted and, where the backend reports it, the tokens the scheduler placed
in that step (prefill chunks and decode); per request its first-token and finish times. From these
a check computes what users compute (decode tok/s, total tok/s, TTFT, TPOT, ITL, end-to-end
latency) and sees where the time between steady decoding and the whole run goes.
"""

from __future__ import annotations

import bisect
import threading
import time
import zlib
from dataclasses import asdict, replace

import numpy as np

from calibration.engines.backends.base import EngineBackend
from calibration.engines.run_loop import PointPlan, prompt_pool

MAX_RUN_STEPS = 200_000  # engine steps a run may take before it is given up
WARMUP_RUN = -1  # the repeat index of a point's warm-up run (its prompts seeded apart from every measured run's)


def _fresh_prompts(plan: PointPlan, repeat_idx: int, count: int, vocab_size: int | None) -> list[list[int]]:
    """Prompts no other run of the process shares a prefix with (seeded by the point and repeat)."""
    seed = zlib.crc32(f"{plan.key}/{repeat_idx}".encode())
    return prompt_pool(count, plan.prompt_len, seed=seed, vocab_size=vocab_size)


def arrival_times_us(plan: PointPlan, repeat_idx: int) -> list[float]:
    """A Poisson point's send times, us from the run's start: the first at 0, then exponential gaps of mean
    1 / request_rate (seeded by the point and repeat, so a run can be replayed); [0, ...] of the batch
    or the loop's first `concurrency` otherwise (those start together)."""
    if plan.workload != "poisson":
        return []
    rng = np.random.default_rng(zlib.crc32(f"{plan.key}/{repeat_idx}/arrivals".encode()))
    gaps = rng.exponential(1e6 / plan.request_rate, size=plan.num_requests - 1)
    return [0.0] + np.cumsum(gaps).tolist()


def _wait_until(backend: EngineBackend, t_us: float) -> None:
    """Let an idle engine's clock reach `t_us` (its start_clock_us clock): an engine of a simulated clock
    moves it (`idle_until`), a real host sleeps."""
    if (idle_until := getattr(backend, "idle_until", None)) is not None:
        idle_until(t_us)
        return
    time.sleep(max(0.0, t_us - backend.start_clock_us()) / 1e6)


class _Sender(threading.Thread):
    """Sends a Poisson run's requests after the first at their arrival times, from a thread of its own (an
    engine whose scheduler reads its inbox in its own thread: `sends_at_arrival`); each request is entered
    in the run's book under `cond` before the engine can answer it, with the time it was sent, and `cond` is
    signalled (the run's thread waits on it while nothing is in flight, without polling beside the engine)."""

    def __init__(self, backend: EngineBackend, t0: float, arrivals: list[float], prompts: list[list[int]],
                 n_tok: int, book: dict, live: set):
        super().__init__(daemon=True)
        self.backend, self.t0, self.arrivals, self.prompts, self.n_tok = backend, t0, arrivals, prompts, n_tok
        self.book, self.live = book, live
        self.cond = threading.Condition()
        self.stop = threading.Event()
        self.done = False  # every request sent, or the sender stopped
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for i in range(1, len(self.arrivals)):
                wait_s = (self.t0 + self.arrivals[i] - self.backend.start_clock_us()) / 1e6
                if wait_s > 0 and self.stop.wait(wait_s):
                    return
                with self.cond:
                    sent_us = self.backend.start_clock_us() - self.t0
                    rid = self.backend.add_requests([self.prompts[i]], self.n_tok)[0]
                    self.book[rid] = dict(start_us=sent_us, times=[], tokens=0)
                    self.live.add(rid)
                    self.cond.notify()
        except BaseException as e:  # noqa: BLE001 - raised again in the run's thread
            self.error = e
        finally:
            with self.cond:
                self.done = True
                self.cond.notify()

    def wait_for_one(self) -> bool:
        """Wait while nothing is in flight and requests are still to come; whether one is in flight."""
        with self.cond:
            self.cond.wait_for(lambda: self.live or self.done)
            if self.error is not None:
                raise self.error
            return bool(self.live)


def _scheduled(backend: EngineBackend) -> dict | None:
    """The tokens the engine's scheduler placed in the step just run, where the backend says."""
    read = getattr(backend, "last_scheduled", None)
    return read() if read is not None else None


def sends_at_arrival(backend: EngineBackend) -> bool:
    """Whether a Poisson run sends each request at its arrival time from a thread of its own: an engine on the
    host's clock whose scheduler reads its requests in its own thread (SglangBackend.sends_at_arrival)."""
    return bool(getattr(backend, "sends_at_arrival", False)) and not getattr(backend, "simulated_clock", False)


def _book_step(backend: EngineBackend, out: dict[str, int], t0: float, req: dict, live: set, counts: list[int],
               steps: list[dict], n_tok: int) -> tuple[float, list[str]]:
    """Enter one step's output in the run's book: each request's tokens and emission time, the accept lengths
    of decode steps, the step's record; the requests it finished leave `live`. Returns (its time, those)."""
    now, k, tokens = backend.clock_us() - t0, backend.num_steps, 0
    for rid, n in out.items():
        q = req.get(rid)
        if q is None or n <= 0:
            continue
        q["tokens"] += n
        q["times"].append(now)
        tokens += n
        if q["times"][1:] and 1 <= n <= k + 1:  # a decode step's tokens: its accept length
            counts[n - 1] += 1
    steps.append(dict(t_us=now, emitted=sum(1 for n in out.values() if n > 0), tokens=tokens,
                      running=len(live), scheduled=_scheduled(backend)))
    done = [r for r in live if req[r]["tokens"] >= n_tok]
    live.difference_update(done)
    return now, done


def run_requests(backend: EngineBackend, plan: PointPlan, repeat_idx: int, vocab_size: int | None = None) -> dict:
    """One run of a closed batch or a closed loop (module docstring); the run's record.

    Returns:
        {'repeat_idx', 'elapsed_us', 'num_requests', 'num_tokens', 'requests': [{'ttft_us',
        'finish_us', 'num_tokens', 'token_times_us' (first, and the time of each step that emitted
        to it, from the run's start)}], 'steps': [{'t_us', 'emitted' (requests emitting),
        'tokens', 'running', 'scheduled' (backend's, or None)}], 'accept_length_counts',
        'host': {window step figures: host period / blocked, means}}.
    """
    poisson = plan.workload == "poisson"
    arrivals = arrival_times_us(plan, repeat_idx)
    concurrent = plan.batch_size if plan.workload == "closed_batch" else 1 if poisson else plan.concurrency
    total = plan.batch_size if plan.workload == "closed_batch" else plan.num_requests
    n_tok = plan.max_tokens
    prompts = _fresh_prompts(plan, repeat_idx, total, vocab_size)
    k = backend.num_steps
    counts = [0] * (k + 1)
    backend.set_acceptance(plan.acceptance_rate if k else None)
    backend.start_window(False)
    _scheduled(backend)  # the calls of what ran before (a steady window's steps) are not this run's
    t0 = backend.start_clock_us()  # now: SGLang's clock_us is its last output's time, before this run
    ids = backend.add_requests(prompts[:concurrent], n_tok)
    added = len(ids)
    req = {r: dict(start_us=0.0, times=[], tokens=0) for r in ids}
    live = set(ids)
    steps = []
    sender = None
    if poisson and sends_at_arrival(backend):
        sender = _Sender(backend, t0, arrivals, prompts, n_tok, req, live)
        sender.start()
    try:
        for _ in range(MAX_RUN_STEPS):
            if sender is not None:  # requests come at their times from the sender: wait for one in flight
                if not sender.wait_for_one():
                    break
                out = backend.step()
                with sender.cond:  # a request the sender put in is in the book before its first output is read
                    _book_step(backend, out, t0, req, live, counts, steps, n_tok)
                continue
            if poisson and added < total:  # send what has arrived; an idle engine waits for the next
                if not live:
                    _wait_until(backend, t0 + arrivals[added])
                now = backend.start_clock_us() - t0
                due = bisect.bisect_right(arrivals, now) - added
                if due:
                    new = backend.add_requests(prompts[added:added + due], n_tok)
                    for r, a in zip(new, arrivals[added:added + due]):
                        req[r] = dict(start_us=a, times=[], tokens=0)
                    live.update(new)
                    added += due
            if not live:
                break
            now, done = _book_step(backend, backend.step(), t0, req, live, counts, steps, n_tok)
            refill = min(len(done), total - added) if plan.workload == "closed_loop" else 0
            if refill:
                new = backend.add_requests(prompts[added:added + refill], n_tok)
                added += refill
                for r in new:
                    req[r] = dict(start_us=now, times=[], tokens=0)
                live.update(new)
        else:
            raise RuntimeError(f"{plan.key}: {len(live)} requests unfinished after {MAX_RUN_STEPS} engine steps")
        elapsed = backend.clock_us() - t0
    finally:
        if sender is not None:
            sender.stop.set()
            sender.join()
        window = backend.end_window()
        backend.abort(sorted(live))  # only unfinished ones (none after a run that ended): SglangBackend.abort
    host = [s for s in window if s.host_period_us is not None]
    probe = {}
    if plan.host_probe and not getattr(backend, "simulated_clock", False):  # a real host's speed only
        from calibration.engines.run_loop import _probe
        probe = {"host_probe_us": _probe(backend)[0]}  # after the run: its clock has stopped
    return dict(repeat_idx=repeat_idx, elapsed_us=elapsed, num_requests=len(req),
                num_tokens=int(sum(q["tokens"] for q in req.values())), accept_length_counts=counts,
                requests=[dict(start_us=q["start_us"], ttft_us=(q["times"][0] - q["start_us"]) if q["times"] else None,
                               finish_us=q["times"][-1] if q["times"] else None, num_tokens=q["tokens"],
                               token_times_us=q["times"]) for q in req.values()],
                steps=steps, num_engine_steps=len(window),
                host_period_us=[s.host_period_us for s in host],
                host_blocked_us=[s.host_blocked_us for s in host], **probe)


def measure_requests(backend: EngineBackend, plan: PointPlan, vocab_size: int | None = None) -> dict:
    """Every repeat of a request-level point, after its warm-up run where the plan asks one (`warmup_run_tokens`:
    unrecorded, prompts of its own); the point's record (as measure_point's, with request-level repeats)."""
    k = backend.num_steps
    if plan.warmup_run_tokens and plan.workload in ("closed_batch", "closed_loop"):
        b = plan.batch_size if plan.workload == "closed_batch" else plan.concurrency
        run_requests(backend, replace(plan, workload="closed_batch", batch_size=b, concurrency=None, num_requests=None,
                                      max_tokens=plan.warmup_run_tokens), WARMUP_RUN, vocab_size)
    repeats = [run_requests(backend, plan, r, vocab_size) for r in range(plan.repeats)]
    return dict(key=plan.key, workload=plan.workload, num_steps=k, batch_size=plan.batch_size,
                prompt_len=plan.prompt_len, acceptance_rate=plan.acceptance_rate if k else None,
                max_tokens=plan.max_tokens, concurrency=plan.concurrency, num_requests=plan.num_requests,
                plan=asdict(plan), repeats=repeats, clock=CLOCK_FROM_SUBMIT,
                **({"sent": SENT_AT_ARRIVAL} if plan.workload == "poisson" and sends_at_arrival(backend) else {}))


CLOCK_FROM_SUBMIT = "submit"  # a point's runs timed from their submission (backend.start_clock_us)
SENT_AT_ARRIVAL = "arrival"  # a Poisson point's requests sent at their arrival times by the run's sender thread


def wall_times_valid(line: dict) -> bool:
    """Whether a request-level point line's wall times (elapsed, TTFT, end-to-end latency) hold: the runs of
    an engine whose clock_us is its last output's time (EngineSpec.clock_was_last_output: SGLang) before
    `start_clock_us` (no `clock` field) counted the idle time before each run into them; the times between a
    run's own outputs (TPOT, ITL) hold either way."""
    from calibration.engines.backends import ENGINES
    spec = ENGINES.get(line.get("engine", ""))
    return spec is None or not spec.clock_was_last_output or line["point"].get("clock") == CLOCK_FROM_SUBMIT


def summarize_run(rec: dict) -> dict:
    """What a user computes from one run: tok/s over the whole run, TTFT / TPOT / end-to-end
    latency p50 (ms, named as `vllm bench serve` names them: median_ttft_ms, ...)."""
    reqs = rec["requests"]
    ttft = [r["ttft_us"] for r in reqs if r["ttft_us"] is not None]
    tpot = [(r["finish_us"] - r["start_us"] - r["ttft_us"]) / (r["num_tokens"] - 1)
            for r in reqs if r["num_tokens"] > 1 and r["ttft_us"] is not None]
    e2e = [r["finish_us"] - r["start_us"] for r in reqs if r["finish_us"] is not None]
    ms = 1e-3
    return dict(tok_per_s=rec["num_tokens"] / rec["elapsed_us"] * 1e6,
                median_ttft_ms=float(np.median(ttft)) * ms if ttft else None,
                median_tpot_ms=float(np.median(tpot)) * ms if tpot else None,
                median_e2el_ms=float(np.median(e2e)) * ms if e2e else None)
