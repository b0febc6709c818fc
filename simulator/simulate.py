"""One simulation: scenario + profile -> SimulationResult (DES, cross-checked by the analytic form)."""

from __future__ import annotations

import numpy as np

from simulator import __version__
from simulator.acceptance import build_acceptance
from simulator.analytic import analyze
from simulator.config import Scenario
from simulator.costs.forward import CostModel
from simulator.des.records import CycleLog, TraceEvent
from simulator.des.simulation import DesRun
from simulator.des.cycle_level import run_cycle_level
from simulator.metrics import (SimulationResult, accept_length_series, batch_means_interval, breakdown,
                               throughput_interval, tpot)
from simulator.profile import CalibrationProfile
from simulator.units import US_PER_S


def rng_streams(seed: int) -> tuple[np.random.Generator, np.random.Generator, np.random.Generator]:
    """(acceptance, jitter, baseline-jitter) generators spawned in a fixed order from the seed."""
    acc, jit, base = np.random.SeedSequence(seed).spawn(3)
    return np.random.default_rng(acc), np.random.default_rng(jit), np.random.default_rng(base)


def simulate(scenario: Scenario, profile: CalibrationProfile, profile_ref: str = "",
             trace: bool = False) -> tuple[SimulationResult, list[TraceEvent]]:
    """Run the DES for the scenario and summarise it.

    The baseline (no speculation) comes from the closed form, or from its own DES run when
    per-rank jitter makes step times random.

    Returns:
        (result, trace events; empty unless trace=True).
    """
    cost = CostModel(scenario, profile)
    acceptance = build_acceptance(scenario.acceptance, scenario.spec)
    rng_acc, rng_jit, rng_base = rng_streams(scenario.seed)
    w, fid = scenario.workload, scenario.fidelity
    events: list[TraceEvent] = []
    if fid.granularity == "cycle":
        cycles, req_start, req_end = run_cycle_level(cost, acceptance, rng_acc, fid.num_cycles, fid.warmup_cycles)
    else:
        eng = DesRun(cost, acceptance, rng_acc, rng_jit, trace=trace)
        eng.run(fid.num_cycles, fid.warmup_cycles)
        cycles = CycleLog.from_records(eng.cycles)
        req_start = np.array([r.start_us for r in eng.requests])
        req_end = np.array([r.end_us for r in eng.requests])
        events = eng.trace_events or []
    an = analyze(scenario, cost, acceptance)
    if fid.jitter_cv > 0:
        base = DesRun(cost, None, rng_acc, rng_base)
        base.run(max(100, fid.num_cycles), fid.warmup_cycles)
        base_step = float(np.mean([c.end_us - c.start_us for c in base.cycles]))
    else:
        base_step = an.baseline_step_us
    rate, lo, hi = throughput_interval(cycles)
    al = batch_means_interval(accept_length_series(cycles))
    baseline = w.batch_size / base_step * US_PER_S
    result = SimulationResult(
        version=__version__, engine="des", seed=scenario.seed, profile=profile_ref or profile.name,
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
    )
    return result, events
