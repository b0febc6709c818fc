"""The live loop as a closed-loop server: continuous batching over fixed batch slots, on one GPU.

    specdecsim live --serving --out DIR [--sizes 8b] [--concurrency 1,4,16,32] [--num-steps 3] [--requests N]

The scheduler is the serving DES's own (`simulator.serving.scheduler.ServingRun`): closed-loop
arrivals (bench_serving --max-concurrency: C requests in flight, the next one sent when one
finishes), FCFS admission, per-request output lengths and per-request oracle accept lengths from
the scenario's seeded streams (`serving_rngs`). Only the step durations differ: `LiveStepCosts`
runs each engine step for real on the live loop (calibration/live/loop.py) and returns the wall
time since the previous step ended, so the simulation clock is the wall clock (the scheduler's
host bookkeeping between steps is inside the next step's time). The schedule (which request
decodes in which step, how many tokens it keeps) depends on the seeded draws alone, never on
timing, so `specdecsim validate-serving` replays the very same schedule in the DES with modelled
step costs, and the two runs differ only in how long each step took.

What the live loop can and cannot do, and how the scenario says the same:
- fixed batch slots: the CUDA-graph loop has one batch size, so it is built at C slots and every
  forward runs C rows; a finished request's slot takes the next request. The DES prices a step
  at its decode requests (C minus those joining): one or two rows fewer in the steps where a
  request joins, at most ~1% of a step at C >= 4 (where a row costs little); at C = 1 the loop
  skips the forward in a step without decode requests, as the DES does;
- prefill: none. The prompt's KV counts as already in the slot (the slot's static window holds
  context_len tokens); the scenario says `prefill_latency_scale: 0` (a request emits its first
  token at the end of the step it was admitted in, as a free prefill does in the DES);
- attention reads the static window of `context_len` keys whatever the request's position; the
  scenario says `decode_context_len: context_len`, and the prompt is `context_len` tokens;
- acceptance: each step's accept lengths come from the seeded oracle (the GPU's accept result is
  synchronised and range-checked, not used), as in the live grid.
Left out: a real prefill forward, the draft's prefill, KV limits and preemption.
"""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from calibration.live.grid import CONTEXT_LEN, GridPoint, estimate_s, load_record, point_name  # CONTEXT_LEN: the window of every run
from calibration.live.loop import DecodeLoop, SpecLoop
from calibration.live.run import LiveSession, check_single_gpu_scenario, hardware_info
from calibration.provenance import command_line, git_commit
from calibration.shapes import SIZES
from simulator.acceptance import build_acceptance
from simulator.config import Scenario
from simulator.files import write_json_atomic
from simulator.evidence.live_records import LiveServingRun, serving_record_fields
from simulator.serving.scheduler import ServingRun, serving_rngs
from simulator.serving.metrics import serving_metrics
from simulator.units import US_PER_S
from simulator.workload_config import SpecConfig

console = Console()

CONCURRENCY = (1, 4, 16, 32)
NUM_STEPS = 3
ACCEPTANCE_RATE = 0.7
OUTPUT_TOKENS = (64, 256)  # uniform, both ends included
WARMUP_CYCLES = 16


def default_num_requests(concurrency: int) -> int:
    """Requests per run: 12 per slot, at least 24 (steady state for most of the run)."""
    return max(24, 12 * concurrency)


class LiveStepCosts:
    """Stands in for `simulator.serving.costs.StepCosts`: each step runs on the live loop and
    its duration is the wall time since the previous step ended (us).

    Args:
        loop: a SpecLoop (speculative run) or DecodeLoop (baseline) with C slots.
    """

    def __init__(self, loop: SpecLoop | DecodeLoop):
        self.loop = loop
        self.last_s = time.perf_counter()

    def start(self) -> None:
        """Synchronise the device and start the clock (the run's time 0)."""
        if self.loop.dev.type == "cuda":
            torch.cuda.synchronize(self.loop.dev)
        self.last_s = time.perf_counter()

    def _elapsed_us(self) -> float:
        now = time.perf_counter()
        dur, self.last_s = (now - self.last_s) * US_PER_S, now
        return dur

    def decode_step_us(self, batch_size: int, spec: SpecConfig | None, context_len: float,
                       extend_len: int = 1) -> float:
        """Run one step on every slot (a speculative cycle whose draft extend covers `extend_len`
        tokens, or a decode step), wait for its result on the host; wall us since the last step."""
        loop = self.loop
        if spec is None:
            if not isinstance(loop, DecodeLoop):
                raise RuntimeError("a plain decode step asked of a speculative loop")
            loop.read_decode(loop.launch_decode())
            loop.commit()
        else:
            if not isinstance(loop, SpecLoop) or spec.num_steps != loop.s:
                raise RuntimeError(f"a speculative step of num_steps={spec.num_steps} asked of {type(loop).__name__}")
            loop.commit(np.full(loop.b, extend_len, dtype=np.int64))  # positions, extend length, gather index
            loop.run_draft_extend()
            loop.run_draft()
            loop.run_verify()
            loop.read_accept(loop.launch_accept())
        return self._elapsed_us()

    def prefill_us(self, num_tokens: int, context_len: float, token_pairs: float | None = None,
                   speculative: bool = False, step_tokens: int | None = None, alongside_us: float = 0.0,
                   decode_forward_us: float = 0.0) -> float:
        """No prefill forward: the prompt's KV is taken as in the slot already (free prefill)."""
        return 0.0

    def prefill_only_overhead_us(self, speculative: bool = False) -> float:
        """A step with no decode request runs no forward: the scheduler's host time alone."""
        return self._elapsed_us()

    def engine_prefill(self, speculative: bool = False) -> None:
        """No engine profile's prefill: the live loop's own scheduler chunks as its scenario says."""
        return None

    def from_idle_us(self, speculative: bool = False) -> float:
        """Nothing more for the first step after idle: the live loop is always warm."""
        return 0.0


def serving_scenario(size: str, concurrency: int, num_steps: int, acceptance_rate: float, num_requests: int,
                     graph: bool, seed: int = 0) -> Scenario:
    """The scenario of one live serving run (both its speculative and its baseline run)."""
    target, draft = SIZES[size]
    mode = "graph" if graph else "eager"
    return Scenario(
        name=f"{size}_{mode}_serving_c{concurrency}", profile="h200",
        description="live serving run (calibration/live/serving.py), random bf16 weights, pre-filled KV",
        target=target, draft=draft, tp_size=1, placement="shared_tp",
        spec=dict(num_steps=num_steps, topk=1, num_draft_tokens=num_steps + 1),
        acceptance=dict(kind="iid", acceptance_rate=acceptance_rate),
        workload=dict(batch_size=concurrency, context_len=CONTEXT_LEN),
        serving_engine=dict(cuda_graph=graph), seed=seed,
        serving=dict(arrivals=dict(kind="closed_loop", concurrency=concurrency),
                     input_len=dict(kind="fixed", tokens=CONTEXT_LEN),
                     output_len=dict(kind="uniform", min_tokens=OUTPUT_TOKENS[0], max_tokens=OUTPUT_TOKENS[1]),
                     num_requests=num_requests, max_running_requests=concurrency, prefill_latency_scale=0.0,
                     decode_context_len=CONTEXT_LEN))


def check_serving_scenario(scenario: Scenario) -> None:
    """Raise ValueError for a serving section the live loop cannot run as the DES would."""
    check_single_gpu_scenario(scenario)
    cfg, w = scenario.serving, scenario.workload
    if cfg is None or cfg.arrivals.kind != "closed_loop":
        raise ValueError("a live serving run needs serving.arrivals.kind: closed_loop")
    c = cfg.arrivals.concurrency
    problems = [(w.batch_size != c, f"workload.batch_size={w.batch_size} (the slots) must equal concurrency={c}"),
                (cfg.max_running_requests != c, f"max_running_requests must equal concurrency={c}"),
                (cfg.prefill_latency_scale != 0, "prefill_latency_scale must be 0 (the loop runs no prefill)"),
                (cfg.decode_context_len != w.context_len, "decode_context_len must equal workload.context_len "
                                                          "(attention reads the static window)"),
                (cfg.num_requests is None or cfg.duration_s is not None, "give num_requests, not duration_s"),
                (cfg.kv_cache_tokens is not None or cfg.spec_off_above_batch is not None
                 or bool(cfg.num_steps_by_batch), "no KV limit and no spec policy by batch size")]
    for bad, what in problems:
        if bad:
            raise ValueError(f"live serving: {what}")


def run_live_serving(scenario: Scenario, speculative: bool, device: str = "cuda",
                     session: LiveSession | None = None, warmup_cycles: int = WARMUP_CYCLES) -> LiveServingRun:
    """Run the scenario's serving workload on the live loop and record it (see the module docstring).

    Raises:
        ValueError: a scenario the live loop cannot serve (check_serving_scenario).
        RuntimeError: CUDA graphs on a CPU; a corrupt GPU accept result.
    """
    check_serving_scenario(scenario)
    session = session or LiveSession(device)
    loop = session.loop(scenario, speculative)
    costs = LiveStepCosts(loop)
    with torch.no_grad():
        s = scenario.spec.num_steps
        for i in range(warmup_cycles):
            loop.cycle(np.full(loop.b, 1 + i % (s + 1), dtype=np.int64) if speculative else None)
        costs.start()
        rec = ServingRun(scenario, costs, speculative, serving_rngs(scenario.seed)).run()
    cfg = scenario.serving
    return LiveServingRun(
        scenario=scenario, warmup_cycles=warmup_cycles, **serving_record_fields(rec),
        result=serving_metrics(rec, cfg.warmup_s, cfg.slo.ttft_ms, cfg.slo.tpot_ms),
        hardware=hardware_info(session.device),
        created_utc=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        git_commit=git_commit(), command_line=command_line())


@dataclass(frozen=True)
class ServingPoint:
    """One live serving run: size, mode, concurrency, num_steps (None = baseline), requests."""

    size: str
    graph: bool
    concurrency: int
    num_steps: int | None
    num_requests: int
    acceptance_rate: float = ACCEPTANCE_RATE

    @property
    def speculative(self) -> bool:
        return self.num_steps is not None

    @property
    def name(self) -> str:
        return point_name(self, f"serving_c{self.concurrency}")

    def scenario(self) -> Scenario:
        return serving_scenario(self.size, self.concurrency, self.num_steps or NUM_STEPS, self.acceptance_rate,
                                self.num_requests, self.graph)


def serving_grid(sizes: tuple[str, ...], concurrency: tuple[int, ...], num_steps: int, graph: bool,
                 num_requests: int | None = None) -> list[ServingPoint]:
    """At each size and concurrency: the speculative run, then its baseline."""
    return [ServingPoint(size, graph, c, s, num_requests or default_num_requests(c))
            for size in sizes for c in concurrency for s in (num_steps, None)]


def estimate_point_s(p: ServingPoint) -> float:
    """Rough wall seconds of one run on an H200: engine steps (mean output over mean accept, plus
    the first step, per request, over the slots, plus one request's drain) times the live grid's
    per-cycle estimate at batch C."""
    mean_out = sum(OUTPUT_TOKENS) / 2
    accept = 1.0
    if p.speculative:
        spec = SpecConfig(num_steps=p.num_steps, topk=1, num_draft_tokens=p.num_steps + 1)
        accept = build_acceptance(p.scenario().acceptance, spec).mean_accept_length()
    per_request = mean_out / accept + 1
    steps = int(p.num_requests * per_request / p.concurrency + OUTPUT_TOKENS[1] / accept)
    grid_point = GridPoint(p.size, p.graph, p.concurrency, p.num_steps, p.acceptance_rate if p.speculative else None)
    return estimate_s(grid_point, steps, WARMUP_CYCLES)


def load_serving_record(path: Path) -> LiveServingRun | None:
    """The LiveServingRun at `path`, or None if missing or invalid (the run goes again)."""
    return load_record(path, LiveServingRun)


def print_serving_table(rows: list[tuple[ServingPoint, LiveServingRun]]) -> None:
    """Runs with output tok/s, speedup over the baseline at the same size, mode and concurrency,
    TTFT / TPOT / ITL p50 (ms)."""
    base = {(p.size, p.graph, p.concurrency): r.result.output_tok_per_s for p, r in rows if not p.speculative}
    t = Table(title="live serving runs (closed loop)")
    for col in ("run", "requests", "tok/s", "speedup", "TTFT p50 ms", "TPOT p50 ms", "ITL p50 ms", "batch"):
        t.add_column(col, justify="left" if col == "run" else "right")
    for p, r in rows:
        res, ref = r.result, base.get((p.size, p.graph, p.concurrency))
        ms = lambda x: f"{x.p50:.2f}" if x is not None else "-"  # noqa: E731
        t.add_row(p.name, str(res.num_requests), f"{res.output_tok_per_s:.0f}",
                  f"{res.output_tok_per_s / ref:.2f}" if ref else "-", ms(res.ttft_ms), ms(res.tpot_ms),
                  ms(res.itl_ms), f"{res.mean_batch_size:.1f}")
    Console(width=max(console.width, 120)).print(t)


def run_serving_grid(points: list[ServingPoint], out: Path, device: str = "cuda") -> list[tuple[str, str]]:
    """Run every point whose record is not in `out` yet (resume), one LiveServingRun JSON each.

    Returns:
        (point name, error) of every run that failed (reported and skipped).
    """
    todo = [p for p in points if load_serving_record(out / f"{p.name}.json") is None]
    est = sum(estimate_point_s(p) for p in todo) + 5.0 * len({p.size for p in todo})
    console.print(f"{len(points)} serving runs, {len(points) - len(todo)} already in {out}; {len(todo)} to run: "
                  f"estimated {est:.0f} s on an H200")
    session, failed, start = LiveSession(device), [], time.perf_counter()
    for i, p in enumerate(todo):
        t0 = time.perf_counter()
        try:
            rec = run_live_serving(p.scenario(), p.speculative, device, session)
        except (RuntimeError, ValueError) as e:
            failed.append((p.name, f"{type(e).__name__}: {e}"))
            console.print(f"[red]{p.name}: {failed[-1][1]}")
            continue
        write_json_atomic(out / f"{p.name}.json", rec.model_dump(mode="json"))
        console.print(f"[{i + 1}/{len(todo)}] {p.name}: {rec.result.output_tok_per_s:.1f} tok/s, "
                      f"{rec.result.num_requests} requests ({time.perf_counter() - t0:.1f} s)")
    console.print(f"ran {len(todo) - len(failed)} runs in {time.perf_counter() - start:.0f} s")
    print_serving_table([(p, r) for p in points if (r := load_serving_record(out / f"{p.name}.json")) is not None])
    return failed
