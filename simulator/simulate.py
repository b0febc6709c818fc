"""One simulation: scenario + profile -> SimulationResult (DES, cross-checked by the analytic form).

What a run will cost before it starts (seconds, memory, a trace's size) is `simulator.estimate`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
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
from simulator.units import US_PER_MS, US_PER_S

if TYPE_CHECKING:
    from simulator.trace import TraceSink


def rng_streams(seed: int) -> tuple[np.random.Generator, np.random.Generator, np.random.Generator]:
    """(acceptance, jitter, baseline-jitter) generators spawned in a fixed order from the seed."""
    acc, jit, base = np.random.SeedSequence(seed).spawn(3)
    return np.random.default_rng(acc), np.random.default_rng(jit), np.random.default_rng(base)


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
    notes = sorted(set(cost.notes) | set(scenario.target.config_notes) | set(scenario.draft.config_notes))
    if rate / baseline > al.mean * (1 + 1e-3):  # a cycle cheaper than one decode step: priced out of range
        notes.append(f"the speculative cycle ({float(np.mean(cycles.end_us - cycles.start_us)):,.0f} us) is priced "
                     f"below one baseline decode step ({base_step:,.0f} us), so the speedup exceeds the accept length; "
                     "no engine verifies num_steps + 1 tokens in less than it decodes one: the costs here are out of "
                     "the range they were measured in (the notes above say where), not a prediction to act on")
    result = SimulationResult(
        version=__version__, solver="des", seed=scenario.seed, profile=profile_ref or profile.name,
        tok_per_s=rate, tok_per_s_ci95=(lo, hi), tok_per_s_per_request=rate / w.batch_size,
        baseline_tok_per_s=baseline, speedup=rate / baseline, accept_length=al,
        draft_acceptance_frac=(al.mean - 1.0) / scenario.spec.num_steps,
        cycle_time_us=float(np.mean(cycles.end_us - cycles.start_us)),
        baseline_step_us=base_step, breakdown_us=breakdown(cycles, cost.d2h_sync_us),
        tpot_ms=tpot(req_start, req_end, w.max_new_tokens), baseline_tpot_ms=base_step / US_PER_MS,
        num_cycles=len(cycles), simulated_us=float(cycles.end_us[-1] - cycles.start_us[0]),
        analytic_tok_per_s=an.tok_per_s, analytic_accept_length=an.mean_accept_length,
        notes=notes,
        scenario=_priced_scenario(scenario, cost),
        serving=_serving_block(scenario, profile),
        priced_by_engine_profile=cost.native is not None, untabled_op_notes=dict(cost.lookup.untabled_op_notes),
    )
    check_result(result)
    if progress is not None:
        progress(1.0)
    return result, trace


def _priced_scenario(scenario: Scenario, cost: CostModel) -> dict:
    """The scenario as JSON, naming the engine profile that priced it (a shipped one it did not name, where
    that one priced it: simulator.costs.engine_native.shipped_match), so the JSON reruns as it ran."""
    out = scenario.model_dump(mode="json")
    if cost.native is not None and cost.native.chosen:
        out["serving_engine"]["engine_profile"] = cost.native.chosen
    return out


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
    if result.tpot_ms is not None:
        for name in ("mean", "p50", "p90", "p99"):
            bad(f"tpot_ms.{name}", getattr(result.tpot_ms, name))
