"""SimPy model of speculative cycles: a host process feeding GPU stream processes.

Actors:
- `host_loop`: schedules (host_schedule_us), issues each forward's kernels (host_us each, or
  one graph replay), then waits at the device->host sync of the accept step and pays
  d2h_sync_us; samples accept lengths and commits tokens to the batch's requests.
- `stream_loop`: one per GPU stream. By default the whole TP group is one stream (all ranks
  start and finish a forward together). With `fidelity.per_rank` every rank (and a dedicated
  draft GPU) is its own stream; a collective or transfer is a barrier that completes at
  max(arrival of every member) + its latency, so a straggler delays everyone.

Granularity: `forward` puts one item per cycle (its forwards in order) on the stream and
computes each forward's finish in closed form (kernel j issued at h0 + H_j runs once issued and
the stream is free: finish = max(gpu_free + G, h0 + max_j(H_j + suffix_j))), which equals the
kernel-by-kernel result for deterministic costs at a tenth of the events. `kernel` issues kernel by kernel (needed for per-rank barriers and
jitter, and for traces). Kernel granularity runs the GPU side in closed form
(`simulator.des.per_rank.RankPlan`: per-stream runs of kernels between collectives, ranks meeting
at each collective, jitter drawn per cycle in one numpy call), with the same host process; the
SimPy kernel-by-kernel streams remain as the reference it is tested against (`kernel_processes`).
Traces: the cycles inside the sink's window hand their spans to it (`simulator.trace`); a traced
cycle draws and times out as an untraced one. Left out: prefill, request arrivals (the batch is
refilled at once), memory limits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import simpy

from simulator.acceptance import AcceptanceModel
from simulator.costs.forward import CostModel, Forward, Kernel
from simulator.des.per_rank import RankPlan
from simulator.des.records import CycleRecord, RequestRecord


@dataclass
class _Sync:
    event: simpy.Event


@dataclass
class _Barrier:
    members: int
    latency_us: float
    arrived: int = 0
    done: simpy.Event | None = None


@dataclass
class _Stream:
    name: str
    store: simpy.Store
    busy: dict = field(default_factory=dict)  # bucket -> us, reset each cycle


class DesRun:
    """One discrete-event simulation run of a scenario's cycles.

    Args:
        cost: CostModel of the scenario. acceptance: AcceptanceModel (None = baseline, accept_length 1).
        rng_accept: generator for accept lengths and request rates. rng_jitter: per-kernel noise.
        trace: a `simulator.trace.TraceSink` that gets the spans of the cycles in its window
            (kernel granularity: per-kernel spans on every stream; forward: one per forward), or None.
        env: a SimPy environment to run in (default: a new one).
        progress: called every PROGRESS_CYCLES cycles with the fraction of the run done (0..1).
        kernel_processes: at kernel granularity, run the GPU streams as SimPy processes kernel by
            kernel (the reference the closed form is tested against).
    """

    PROGRESS_CYCLES = 256

    def __init__(self, cost: CostModel, acceptance: AcceptanceModel | None,
                 rng_accept: np.random.Generator, rng_jitter: np.random.Generator, trace=None,
                 env: simpy.Environment | None = None, progress: Callable[[float], None] | None = None,
                 kernel_processes: bool = False):
        self.progress = progress
        self.cost, self.acceptance = cost, acceptance
        self.sc = cost.sc
        self.rng_accept, self.rng_jitter = rng_accept, rng_jitter
        self.env = env if env is not None else simpy.Environment()
        fid = self.sc.fidelity
        self.kernel_level = fid.granularity == "kernel"
        self.jitter_sigma = float(np.sqrt(np.log1p(fid.jitter_cv ** 2))) if fid.jitter_cv > 0 else 0.0
        self.draft_gpu = cost.dedicated_draft_gpu  # None, or the GPU number of a dedicated draft GPU
        if fid.per_rank:
            gpus = list(range(self.sc.placement.num_gpus(self.sc.tp_size)))  # a dedicated draft GPU is tp_size
            names = [str(g) for g in gpus]
        else:
            names = ["gpu"]
        self.streams = {n: _Stream(n, simpy.Store(self.env)) for n in names}
        self.per_rank = fid.per_rank
        self.stream_gpus = gpus if fid.per_rank else None
        self.closed_form = self.kernel_level and not kernel_processes  # kernel granularity: RankPlan
        self._plans: dict[int, tuple[tuple[Forward, ...], RankPlan]] = {}
        self.cycles: list[CycleRecord] = []
        self.requests: list[RequestRecord] = []
        self.trace = trace
        self._tracing = False  # the current cycle is inside the trace window
        if trace is not None:
            trace.streams(names)
        self._accept_block: list[np.ndarray] = []

    # ---- issuing -------------------------------------------------------------------------------
    def _targets(self, gpus: tuple[int, ...]) -> list[_Stream]:
        if not self.per_rank:
            return [self.streams["gpu"]]
        return [self.streams[str(g)] for g in gpus]

    def _issue(self, fwds: list[Forward]):
        """Host process part: issue a cycle's forwards (yields host time)."""
        if not self.kernel_level:
            self.streams["gpu"].store.put(("forwards", self.env.now, fwds))
            yield self.env.timeout(sum(f.host_us for f in fwds))
            return
        for fwd in fwds:
            for k in fwd.kernels:
                if k.host_us:
                    yield self.env.timeout(k.host_us)
                targets = self._targets(k.gpus)
                barrier = _Barrier(len(targets), k.gpu_us) if (k.barrier and len(targets) > 1) else None
                for s in targets:
                    s.store.put(("kernel", barrier, k))

    def host_loop(self, num_cycles: int, warmup_cycles: int):
        """Host actor: schedule, issue the cycle, sync, sample acceptance, commit tokens."""
        env, sc = self.env, self.sc
        b, max_new = sc.workload.batch_size, sc.workload.max_new_tokens
        overlapped = sc.serving_engine.overlapped
        spec = self.acceptance is not None
        rates = self.acceptance.draw_request_rates(self.rng_accept, b) if spec else None
        generated = [0] * b
        req_start = [0.0] * b
        extend_len = 1
        streams = list(self.streams.values())
        schedule_us = self.cost.host_schedule_us if spec else self.cost.baseline_host_schedule_us
        sync_us = self.cost.d2h_sync_us if spec else self.cost.baseline_d2h_sync_us
        for idx in range(warmup_cycles + num_cycles):
            start = env.now
            self._tracing = tracing = (self.trace is not None
                                       and self.trace.start_cycle <= idx < self.trace.stop_cycle)
            if not overlapped:
                yield env.timeout(schedule_us)
            fwds = self.cost.cycle_forwards(extend_len) if spec else self.cost.baseline_forwards()
            if self.closed_form:
                plan = self._plan(fwds)
                if tracing:
                    gpu_done_us, busy, k_start, k_dur = plan.run_spans(env.now, self.rng_jitter, self.jitter_sigma)
                    self.trace.kernels(plan, list(self.streams), k_start, k_dur)
                else:
                    gpu_done_us, busy = plan.run(env.now, self.rng_jitter, self.jitter_sigma)
                yield env.timeout(plan.host_total_us)
                if overlapped:
                    yield env.timeout(schedule_us)
                yield env.timeout(max(0.0, gpu_done_us - env.now))  # the sync waits for every stream
            else:
                yield from self._issue(fwds)
                if overlapped:
                    yield env.timeout(schedule_us)
                syncs = []
                for s in streams:
                    ev = env.event()
                    s.store.put(("sync", _Sync(ev), None))
                    syncs.append(ev)
                yield syncs[0] if len(syncs) == 1 else simpy.AllOf(env, syncs)
                busy = self._cycle_busy()
            yield env.timeout(sync_us)
            acc = self._accept_lengths(b, rates).tolist()
            measured = idx >= warmup_cycles
            num_committed = 0
            for slot, a in enumerate(acc):
                c = min(a, max_new - generated[slot])
                generated[slot] += c
                num_committed += c
                if generated[slot] >= max_new:
                    if measured and req_start[slot] >= self._measure_from:
                        self.requests.append(RequestRecord(req_start[slot], env.now, max_new))
                    generated[slot] = 0
                    req_start[slot] = env.now
                    if rates is not None:
                        rates[slot] = self.acceptance.draw_request_rates(self.rng_accept, 1)[0]
            if tracing:
                self.trace.cycle(idx, start, env.now, acc, num_committed)
            if measured:
                self.cycles.append(CycleRecord(idx - warmup_cycles, start, env.now, tuple(acc), num_committed,
                                               extend_len, tuple(busy.items())))
            for s in streams:
                s.busy = {}
            extend_len = max(acc)
            if idx + 1 == warmup_cycles:
                self._measure_from = env.now
            if self.progress is not None and (idx + 1) % self.PROGRESS_CYCLES == 0:
                self.progress((idx + 1) / (warmup_cycles + num_cycles))

    def _plan(self, fwds: tuple[Forward, ...]) -> RankPlan:
        """The RankPlan of a cycle's forwards (memoised per forwards tuple; the cost model memoises those)."""
        hit = self._plans.get(id(fwds))
        if hit is None or hit[0] is not fwds:
            hit = (fwds, RankPlan(fwds, self.stream_gpus, self.draft_gpu if self.per_rank else None))
            self._plans[id(fwds)] = hit
        return hit[1]

    def _accept_lengths(self, b: int, rates: np.ndarray | None) -> np.ndarray:
        """(b,) accept lengths of this cycle; homogeneous requests are drawn in blocks for speed."""
        if self.acceptance is None:
            return np.ones(b, dtype=np.int64)
        if rates is not None:
            return self.acceptance.sample(self.rng_accept, b, rates)
        if not self._accept_block:
            self._accept_block = list(self.acceptance.sample_cycles(self.rng_accept, 4096, b)[::-1])
        return self._accept_block.pop()

    def _cycle_busy(self) -> dict[str, float]:
        """GPU busy time of this cycle by bucket: the TP group's stream (rank 0), plus the
        compute of a dedicated draft GPU (its transfers are already counted on rank 0)."""
        streams = list(self.streams.values())
        busy = dict(streams[0].busy)
        if self.per_rank and self.draft_gpu is not None:
            for key, us in self.streams[str(self.draft_gpu)].busy.items():
                if key.endswith("_compute"):
                    busy[key] = busy.get(key, 0.0) + us
        return busy

    # ---- GPU streams ---------------------------------------------------------------------------
    def _account(self, stream: _Stream, k: Kernel, start: float, dur: float):
        key = f"{k.phase}_{k.category}"
        stream.busy[key] = stream.busy.get(key, 0.0) + dur
        if self._tracing:
            self.trace.span(k.name, key, stream.name, start, dur)

    def stream_loop(self, stream: _Stream):
        """GPU stream actor: run items in issue order."""
        env = self.env
        while True:
            kind, a, b = yield stream.store.get()
            if kind == "sync":
                a.event.succeed()
            elif kind == "forwards":
                t_host, t_gpu = a, env.now
                for fwd in b:
                    start = max(t_gpu, t_host + fwd.kernels[0].host_us)
                    t_gpu = max(t_gpu + fwd.gpu_us, t_host + fwd.span_us)
                    t_host += fwd.host_us
                    for key, us in fwd.busy_by_bucket:
                        stream.busy[key] = stream.busy.get(key, 0.0) + us
                    if self._tracing:
                        self.trace.span(fwd.phase, fwd.phase, stream.name, start, t_gpu - start)
                yield env.timeout(t_gpu - env.now)
            else:
                barrier, k = a, b
                start = env.now
                if barrier is not None:
                    barrier.arrived += 1
                    if barrier.done is None:
                        barrier.done = env.event()
                    if barrier.arrived == barrier.members:
                        env.process(self._complete(barrier))
                    yield barrier.done
                    if self.draft_gpu is not None and self.draft_gpu in k.gpus:
                        # a transfer to or from the dedicated draft GPU: the wait for it is that GPU's
                        # compute, which _cycle_busy adds; count the transfer alone, as the forward
                        # granularity does, so no time is counted twice
                        start = env.now - barrier.latency_us
                    self._account(stream, k, start, env.now - start)
                else:
                    dur = k.gpu_us
                    if self.jitter_sigma and k.category == "compute":
                        dur *= float(self.rng_jitter.lognormal(-0.5 * self.jitter_sigma ** 2, self.jitter_sigma))
                    yield env.timeout(dur)
                    self._account(stream, k, start, dur)

    def _complete(self, barrier: _Barrier):
        yield self.env.timeout(barrier.latency_us)
        barrier.done.succeed()

    def run(self, num_cycles: int, warmup_cycles: int) -> None:
        """Simulate warm-up plus num_cycles cycles (or decode steps for the baseline)."""
        self._measure_from = 0.0 if warmup_cycles == 0 else float("inf")
        if not self.closed_form:
            for s in self.streams.values():  # sorted by construction: ranks in order
                self.env.process(self.stream_loop(s))
        done = self.env.process(self.host_loop(num_cycles, warmup_cycles))
        self.env.run(until=done)
