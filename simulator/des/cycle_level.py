"""Cycle-granularity engine: the DES aggregated to one SimPy event per block of cycles.

Exact for deterministic costs (no per-rank jitter): every cycle starts from an idle GPU after
the accept step's device->host sync, so its duration depends only on the draft-extend length
e (the longest accept_length of the previous cycle) and equals `simulator.analytic.cycle_time_us`
(which the forward-granularity DES reproduces; tests hold the two together). The host process
then advances the SimPy clock by whole blocks of cycles, and per-request bookkeeping
(truncation at max_new_tokens, TPOT) is done per batch slot with numpy. Accept lengths are
drawn per slot, request by request, so per-request acceptance rates work too.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import simpy

from simulator.acceptance import AcceptanceModel
from simulator.analytic import cycle_time_us
from simulator.costs.forward import CostModel
from simulator.des.records import CycleLog

BLOCK_CYCLES = 4096


def _slot_sequence(acceptance: AcceptanceModel, rng: np.random.Generator, total: int, max_new: int):
    """Accept lengths of one batch slot over `total` cycles, request after request.

    Returns:
        (accept (total,), committed (total,), requests [(first_cycle, last_cycle)] that finished).
    """
    if acceptance.beta_ab is None:  # alike requests: draw the whole slot at once, then cut it
        acc = acceptance.sample(rng, total)
        kept = acc.copy()
        csum = np.concatenate([[0], np.cumsum(acc)])  # csum[k] = tokens in cycles < k
        done = []
        k = 0
        while k < total:
            last = int(np.searchsorted(csum, csum[k] + max_new)) - 1  # first cycle reaching max_new
            if last >= total:
                break
            kept[last] = max_new - (csum[last] - csum[k])
            done.append((k, last))
            k = last + 1
        return acc, kept, done
    acc = np.empty(total, dtype=np.int64)
    kept = np.empty(total, dtype=np.int64)
    done = []
    k = 0
    mean = max(1.0, acceptance.mean_accept_length())
    while k < total:
        rates = acceptance.draw_request_rates(rng, 1)
        seq = np.empty(0, dtype=np.int64)
        while seq.sum() < max_new:
            n = int(2 * (max_new - seq.sum()) / mean) + 8
            more = acceptance.sample(rng, n, None if rates is None else np.full(n, rates[0]))
            seq = np.concatenate([seq, more])
        csum = np.cumsum(seq)
        length = int(np.searchsorted(csum, max_new)) + 1  # first cycle reaching max_new
        seq = seq[:length]
        kept_seq = seq.copy()
        kept_seq[-1] = max_new - (csum[length - 2] if length > 1 else 0)
        take = min(length, total - k)
        acc[k:k + take] = seq[:take]
        kept[k:k + take] = kept_seq[:take]
        if take == length:
            done.append((k, k + length - 1))
        k += take
    return acc, kept, done


def run_cycle_level(cost: CostModel, acceptance: AcceptanceModel | None, rng: np.random.Generator,
                    num_cycles: int, warmup_cycles: int, env: simpy.Environment | None = None,
                    progress: Callable[[float], None] | None = None):
    """Simulate warm-up + num_cycles cycles; returns (CycleLog, request start/end arrays in us).

    acceptance=None runs the no-speculation baseline (one token per request per step).
    progress: called after each batch slot's accept lengths are drawn, with the fraction done.
    """
    sc = cost.sc
    b, max_new = sc.workload.batch_size, sc.workload.max_new_tokens
    total = warmup_cycles + num_cycles
    env = env or simpy.Environment()
    if acceptance is None:
        acc = np.ones((total, b), dtype=np.int64)
        kept = acc.copy()
        requests = [[(i, i + max_new - 1) for i in range(0, total - max_new + 1, max_new)] for _ in range(b)]
        fwds_of = {1: cost.baseline_forwards()}
        from simulator.analytic import baseline_step_us
        table = {1: baseline_step_us(cost)}
        ext = np.ones(total, dtype=np.int64)
    else:
        cols = []
        for slot in range(b):
            if acceptance.batch_wide and cols:  # one accept length per step for the whole batch
                cols.append(cols[0])
            else:
                cols.append(_slot_sequence(acceptance, rng, total, max_new))
            if progress is not None:
                progress((slot + 1) / b)
        acc = np.stack([c[0] for c in cols], axis=1)
        kept = np.stack([c[1] for c in cols], axis=1)
        requests = [c[2] for c in cols]
        ext = np.concatenate([[1], acc[:-1].max(axis=1)])
        js = range(1, sc.spec.num_steps + 2)
        fwds_of = {j: cost.cycle_forwards(j) for j in js}
        table = {j: cycle_time_us(cost, j) for j in js}
    lut = np.zeros(max(table) + 1)
    for j, t in table.items():
        lut[j] = t
    dur = lut[ext]
    end = np.cumsum(dur)

    def host_loop():
        for i in range(0, total, BLOCK_CYCLES):
            yield env.timeout(float(dur[i:i + BLOCK_CYCLES].sum()))

    env.run(until=env.process(host_loop()))
    start = end - dur
    buckets: dict[str, np.ndarray] = {}
    for j, fwds in fwds_of.items():
        for f in fwds:
            for key, us in f.busy_by_bucket:
                buckets.setdefault(key, np.zeros(len(lut)))[j] += us
    w = slice(warmup_cycles, total)
    log = CycleLog(start[w], end[w], acc[w], kept[w].sum(axis=1), ext[w], {k: v[ext[w]] for k, v in buckets.items()})
    t0 = start[warmup_cycles] if total > warmup_cycles else 0.0
    req = [(start[first], end[last]) for slot in requests for first, last in slot
           if first >= warmup_cycles and start[first] >= t0]
    req_start = np.array([r[0] for r in req])
    req_end = np.array([r[1] for r in req])
    return log, req_start, req_end
