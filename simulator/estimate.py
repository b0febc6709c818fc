"""What a run will cost before it starts: DES seconds and memory, a trace's events and bytes.

`estimate_run` gives the seconds and peak memory of `simulator.simulate.simulate` from the number
of events a scenario's fidelity asks for, so the CLI can print an estimate, refuse an unbounded run
unless the user insists, and show progress on a long one; sweeps add up the same parts per point
(`estimate_cost_model_s`, `estimate_closed_form_s`). `trace_estimate` says how many events and
bytes a trace of a window of cycles holds (`simulator.trace` writes it) and what writing it adds.
The constants were measured on a 2-core CI machine; other machines differ by about 2x, so an
estimate is a guide, not a bound.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from simulator.config import Scenario
from simulator.costs.forward import CostModel

# DES cost per simulated cycle, measured on a 2-core CI machine (benchmarks/bench_simulate.py
# scenarios, per-op costs).
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
    (`trace_estimate`; streamed, so it adds no memory);
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
            streams = scenario.placement.num_gpus(scenario.tp_size) if fid.per_rank else 1
            kernels = kernels_per_cycle(scenario, cost) * streams
            per_cycle_us += _KERNEL_STEP_US * kernels
    base_us = 0.0
    if baseline:
        streams = scenario.placement.num_gpus(scenario.tp_size) if fid.per_rank else 1
        base_kernels = sum(len(f.kernels) for f in cost.baseline_forwards()) * streams
        base_us = baseline * (_FORWARD_LEVEL_US[0] + _KERNEL_STEP_US * base_kernels)  # never traced
    seconds = (_FIXED_S + estimate_cost_model_s(scenario) + estimate_closed_form_s(scenario)
               + (cycles * per_cycle_us + base_us) / 1e6)
    if trace_cycles and fid.granularity != "cycle":
        seconds += trace_estimate(scenario, cost, trace_cycles).seconds
    return RunEstimate(seconds=seconds, memory_bytes=memory, num_cycles=cycles + baseline)


# ---- a trace ------------------------------------------------------------------------------------------
# Bytes of a span line: its name and category as JSON plus `_LABEL_BYTES` (the other keys), plus
# `_TIME_BYTES` ('"ts":' and '"dur":' with 3 decimals, a ts of 7 integer digits (10 s), the closing
# brace and ',\n'); a cycle span `_CYCLE_BYTES` plus 3 per request (its accept lengths).
_LABEL_BYTES = 46
_TIME_BYTES = 28
_CYCLE_BYTES = 140
# Seconds per event written (formatting and writing one line; measured with
# benchmarks/bench_trace.py on the 2-core CI machine, tp1_draft at kernel granularity).
_EVENT_WRITE_S = 0.5e-6


@dataclass(frozen=True)
class TraceEstimate:
    """What a trace of a window will hold: events (spans, cycles and thread names), file bytes,
    and the seconds writing them adds to the run (all approximate)."""

    num_events: int
    num_bytes: float
    seconds: float
    bytes_per_cycle: float


def trace_estimate(scenario: Scenario, cost: CostModel, num_cycles: int) -> TraceEstimate:
    """Events and bytes of a trace of `num_cycles` cycles of `scenario` (`cost`: its CostModel).

    Per cycle: at kernel granularity one span per kernel per GPU stream that runs or joins it
    (counted from the kernels of a cycle with draft-extend length 1, `RankPlan.member`; when
    building them would take over a second, every kernel on every stream, an upper end), at
    forward granularity one span per forward, plus the cycle's own span. Bytes per span: its
    name and category as JSON plus `_TIME_BYTES`.
    """
    from simulator.des.per_rank import RankPlan
    fid = scenario.fidelity
    per_rank = fid.per_rank
    streams = scenario.placement.num_gpus(scenario.tp_size) if per_rank else 1
    if fid.granularity == "kernel" and estimate_cost_model_s(scenario) < 1.0:
        gpus = list(range(streams)) if per_rank else None
        plan = RankPlan(cost.cycle_forwards(1), gpus, cost.dedicated_draft_gpu if per_rank else None)
        label_bytes = np.array([len(json.dumps(n)) + len(json.dumps(c)) + _LABEL_BYTES for n, c in plan.labels])
        per_stream = plan.member.sum(axis=0)
        spans = int(per_stream.sum())
        span_bytes = float((per_stream * (label_bytes + _TIME_BYTES)).sum())
    elif fid.granularity == "kernel":
        spans = kernels_per_cycle(scenario, cost) * streams
        span_bytes = spans * (30.0 + _LABEL_BYTES + _TIME_BYTES)
    else:
        fwds = cost.cycle_forwards(1)
        spans = len(fwds)
        span_bytes = float(sum(2 * len(json.dumps(f.phase)) + _LABEL_BYTES + _TIME_BYTES for f in fwds))
    cycle_bytes = _CYCLE_BYTES + 3.0 * scenario.workload.batch_size
    per_cycle = span_bytes + cycle_bytes
    events = num_cycles * (spans + 1) + 2 * (streams + 1)
    return TraceEstimate(num_events=events, num_bytes=num_cycles * per_cycle, seconds=events * _EVENT_WRITE_S,
                         bytes_per_cycle=per_cycle)
