"""One simulation: scenario + profile -> SimulationResult (DES, cross-checked by the analytic form).

Also what a run will cost before it starts (`estimate_run`): DES seconds and memory from the
number of events a scenario's fidelity asks for, so the CLI can print an estimate, refuse an
unbounded run unless the user insists, and show progress on a long one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from simulator import __version__
from simulator.acceptance import build_acceptance
from simulator.analytic import analyze
from simulator.config import Scenario
from simulator.costs.forward import CostModel
from simulator.des.records import CycleLog
from simulator.des.simulation import DesRun
from simulator.des.cycle_level import run_cycle_level
from simulator.metrics import (SimulationResult, accept_length_series, batch_means_interval, breakdown,
                               throughput_interval, tpot)
from simulator.profile import CalibrationProfile
from simulator.units import US_PER_S

if TYPE_CHECKING:
    from simulator.trace import TraceSink


def rng_streams(seed: int) -> tuple[np.random.Generator, np.random.Generator, np.random.Generator]:
    """(acceptance, jitter, baseline-jitter) generators spawned in a fixed order from the seed."""
    acc, jit, base = np.random.SeedSequence(seed).spawn(3)
    return np.random.default_rng(acc), np.random.default_rng(jit), np.random.default_rng(base)


# DES cost per simulated cycle, measured on a 2-core CI machine (benchmarks/bench_simulate.py
# scenarios, per-op costs); other machines differ by about 2x, so the estimate is a guide.
_CYCLE_LEVEL_US = (0.5, 1.0)  # (per cycle, per request slot per cycle)
_FORWARD_LEVEL_US = (20.0, 0.6)  # (per cycle, per request slot per cycle)
# per kernel per GPU stream, closed form (simulator.des.per_rank; benchmarks/bench_des.py: TP8
# per rank, 10k kernel steps per cycle, 0.28 ms per cycle)
_KERNEL_STEP_US = 0.03
_RECORD_BYTES = (300.0, 40.0)  # a cycle record: (per cycle, per request slot)
_FIXED_S = 0.3  # imports aside: summary, notes, small cost models
_LAYER_FORWARD_US = 250.0  # building one decoder layer's ops and looking up their latencies
_RENEWAL_US = (0.3, 0.06)  # closed form, requests alike: (per token of max_new_tokens, per accept length)
_RENEWAL_CLASSES_US = (7.0, 0.05)  # closed form, 256 rate classes: (per token, per accept length)


def estimate_cost_model_s(scenario: Scenario) -> float:
    """Seconds to build a scenario's cost model: the forwards of a cycle (a draft extend per
    accept length, the draft steps, verify, decode), one decoder layer at a time."""
    s = scenario.spec.num_steps
    layer_forwards = (2 * s + 2) * scenario.draft.num_hidden_layers + 2 * scenario.target.num_hidden_layers
    return layer_forwards * _LAYER_FORWARD_US / 1e6


def estimate_closed_form_s(scenario: Scenario) -> float:
    """Seconds of `simulator.analytic.analyze` beyond the cost model: the renewal function over
    max_new_tokens (per rate class when requests draw their own acceptance rate)."""
    k, m = scenario.spec.num_steps + 1, scenario.workload.max_new_tokens
    acc = scenario.acceptance
    classes = acc.kind == "iid" and acc.rate_concentration is not None and 0 < acc.acceptance_rate < 1
    per_token, per_length = _RENEWAL_CLASSES_US if classes else _RENEWAL_US
    return m * (per_token + per_length * k) / 1e6


_KERNELS_PER_LAYER = 25  # ops of a decoder layer (attention, MLP or MoE, norms, collectives), an upper end


def kernels_per_cycle(scenario: Scenario, cost: CostModel) -> int:
    """Kernels of one cycle's forwards: counted where building them is quick, else from the layers."""
    if estimate_cost_model_s(scenario) < 1.0:
        return sum(len(f.kernels) for f in cost.cycle_forwards(1))
    draft_forwards = cost.num_draft_forwards + 1
    layers = draft_forwards * scenario.draft.num_hidden_layers + 2 * scenario.target.num_hidden_layers
    return layers * _KERNELS_PER_LAYER


@dataclass(frozen=True)
class RunEstimate:
    """What a simulation will cost: wall seconds and peak memory (both approximate)."""

    seconds: float
    memory_bytes: float
    num_cycles: int  # simulated cycles, warm-up and the jitter baseline's included


def estimate_run(scenario: Scenario, cost: CostModel, trace_cycles: int = 0) -> RunEstimate:
    """Approximate DES wall time and memory of `simulate(scenario, ...)`.

    seconds = fixed + cost model + closed form + cycles * (per_cycle + per_slot * batch_size
    [+ kernel steps * 0.03 us]) + writing the trace of `trace_cycles` cycles
    (`simulator.trace.trace_estimate`; streamed, so it adds no memory);
    kernel steps per cycle = kernels of a cycle's forwards * GPU streams (tp_size, + a
    dedicated draft GPU, with per_rank), closed-form steps (simulator.des.per_rank).
    Constants: `_CYCLE_LEVEL_US` etc., measured here.
    """
    fid, b = scenario.fidelity, scenario.workload.batch_size
    cycles = fid.num_cycles + fid.warmup_cycles
    baseline = max(100, fid.num_cycles) + fid.warmup_cycles if fid.jitter_cv > 0 else 0
    if fid.granularity == "cycle":
        per_cycle_us = _CYCLE_LEVEL_US[0] + _CYCLE_LEVEL_US[1] * b
        memory = cycles * b * 8.0 * 8  # (cycles, batch) int64 arrays: accept, kept and their copies
    else:
        per_cycle_us = _FORWARD_LEVEL_US[0] + _FORWARD_LEVEL_US[1] * b
        memory = cycles * (_RECORD_BYTES[0] + _RECORD_BYTES[1] * b)
        if fid.granularity == "kernel":
            streams = (scenario.tp_size + (cost.dedicated_draft_gpu is not None)) if fid.per_rank else 1
            kernels = kernels_per_cycle(scenario, cost) * streams
            per_cycle_us += _KERNEL_STEP_US * kernels
    base_us = 0.0
    if baseline:
        streams = (scenario.tp_size + (cost.dedicated_draft_gpu is not None)) if fid.per_rank else 1
        base_kernels = sum(len(f.kernels) for f in cost.baseline_forwards()) * streams
        base_us = baseline * (_FORWARD_LEVEL_US[0] + _KERNEL_STEP_US * base_kernels)  # never traced
    seconds = (_FIXED_S + estimate_cost_model_s(scenario) + estimate_closed_form_s(scenario)
               + (cycles * per_cycle_us + base_us) / 1e6)
    if trace_cycles and fid.granularity != "cycle":
        from simulator.trace import trace_estimate
        seconds += trace_estimate(scenario, cost, trace_cycles).seconds
    return RunEstimate(seconds=seconds, memory_bytes=memory, num_cycles=cycles + baseline)


def simulate(scenario: Scenario, profile: CalibrationProfile, profile_ref: str = "",
             trace: TraceSink | None = None, progress: Callable[[float], None] | None = None,
             ) -> tuple[SimulationResult, TraceSink | None]:
    """Run the DES for the scenario and summarise it.

    The baseline (no speculation) comes from the closed form, or from its own DES run when
    per-rank jitter makes step times random (that run is never traced).

    Args:
        trace: gets the spans of the cycles in its window as they run (`simulator.trace`: a
            TraceWriter streams them to a file); forward or kernel granularity only.
        progress: called now and then with the fraction of the run done (0..1).

    Returns:
        (result, the `trace` sink given, its spans delivered).

    Raises:
        ValueError: a trace at cycle granularity (which keeps no spans).
        ArithmeticError: the run produced a non-finite or non-positive rate or time (a bug or
            numbers the schema should have refused); nothing is returned to print or write.
    """
    cost = CostModel(scenario, profile)
    acceptance = build_acceptance(scenario.acceptance, scenario.spec)
    rng_acc, rng_jit, rng_base = rng_streams(scenario.seed)
    w, fid = scenario.workload, scenario.fidelity
    share = 1.0 if fid.jitter_cv == 0 else 0.5  # of the progress bar, the speculative run's
    step = (lambda frac: progress(share * frac)) if progress is not None else None
    if fid.granularity == "cycle":
        if trace is not None:
            raise ValueError("a trace needs fidelity.granularity forward or kernel")
        cycles, req_start, req_end = run_cycle_level(cost, acceptance, rng_acc, fid.num_cycles, fid.warmup_cycles,
                                                     progress=step)
    else:
        eng = DesRun(cost, acceptance, rng_acc, rng_jit, trace=trace, progress=step)
        eng.run(fid.num_cycles, fid.warmup_cycles)
        cycles = CycleLog.from_records(eng.cycles)
        req_start = np.array([r.start_us for r in eng.requests])
        req_end = np.array([r.end_us for r in eng.requests])
    an = analyze(scenario, cost, acceptance)
    if fid.jitter_cv > 0:
        base_step = None if progress is None else (lambda frac: progress(0.5 + 0.5 * frac))
        base = DesRun(cost, None, rng_acc, rng_base, progress=base_step)
        base.run(max(100, fid.num_cycles), fid.warmup_cycles)
        base_step = float(np.mean([c.end_us - c.start_us for c in base.cycles]))
    else:
        base_step = an.baseline_step_us
    rate, lo, hi = throughput_interval(cycles)
    al = batch_means_interval(accept_length_series(cycles), support=(1.0, scenario.spec.num_steps + 1.0))
    baseline = w.batch_size / base_step * US_PER_S
    result = SimulationResult(
        version=__version__, solver="des", seed=scenario.seed, profile=profile_ref or profile.name,
        tok_per_s=rate, tok_per_s_ci95=(lo, hi), tok_per_s_per_request=rate / w.batch_size,
        baseline_tok_per_s=baseline, speedup=rate / baseline, accept_length=al,
        draft_acceptance_frac=(al.mean - 1.0) / scenario.spec.num_steps,
        cycle_time_us=float(np.mean(cycles.end_us - cycles.start_us)),
        baseline_step_us=base_step, breakdown_us=breakdown(cycles, cost.d2h_sync_us),
        tpot_us=tpot(req_start, req_end, w.max_new_tokens), baseline_tpot_us=base_step,
        num_cycles=len(cycles), simulated_us=float(cycles.end_us[-1] - cycles.start_us[0]),
        analytic_tok_per_s=an.tok_per_s, analytic_accept_length=an.mean_accept_length,
        notes=sorted(set(cost.notes) | set(scenario.target.config_notes) | set(scenario.draft.config_notes)),
        scenario=scenario.model_dump(mode="json"),
        serving=_serving_block(scenario, profile),
    )
    check_result(result)
    if progress is not None:
        progress(1.0)
    return result, trace


def _serving_block(scenario: Scenario, profile: CalibrationProfile) -> dict | None:
    """Serving mode's metrics as JSON (simulator.serving), or None without a `serving:` section."""
    if scenario.serving is None:
        return None
    from simulator.serving.run import simulate_serving
    return simulate_serving(scenario, profile).model_dump(mode="json")


def check_result(result: SimulationResult) -> None:
    """Every rate and time of a result finite, rates and cycle times > 0, breakdown buckets >= 0.

    Raises:
        ArithmeticError: naming the first number that is not.
    """
    def bad(name: str, value: float, positive: bool = True) -> None:
        if not math.isfinite(value) or (value <= 0 if positive else value < 0):
            raise ArithmeticError(f"the simulation gave {name} = {value!r}; the scenario's or the profile's "
                                  "numbers are outside what the model computes")
    for name in ("tok_per_s", "baseline_tok_per_s", "speedup", "cycle_time_us", "baseline_step_us",
                 "analytic_tok_per_s"):
        bad(name, getattr(result, name))
    for k, v in result.breakdown_us.items():
        bad(f"breakdown_us.{k}", v, positive=False)
    bad("accept_length.mean", result.accept_length.mean)
    bad("accept_length.ci95_low", result.accept_length.ci95_low)
    bad("tok_per_s_ci95 low", result.tok_per_s_ci95[0], positive=False)
    bad("tok_per_s_ci95 high", result.tok_per_s_ci95[1])
    if result.tpot_us is not None:
        for name in ("mean", "p50", "p90", "p99"):
            bad(f"tpot_us.{name}", getattr(result.tpot_us, name))
