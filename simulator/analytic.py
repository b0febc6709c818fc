"""Closed-form expectations for a scenario: the cross-check of the DES and the fast sweep engine.

Exact, for deterministic costs and without per-rank jitter, for the quantities below:

- cycle_time(e) = S + F(e) + d            (host scheduling not overlapped)
               = max(H(e) + S, F(e)) + d  (overlapped)
  with F(e) the GPU finish time of the cycle's forwards issued onto an idle GPU
  (`simulator.costs.forward.chain_span_us`), H(e) the host issue time, S = host_schedule_us,
  d = d2h_sync_us and e the draft-extend length (the longest accept_length of the previous
  cycle in the batch).
- Each slot's accept_length ~ pmf (occupancy-weighted across request rates), independent
  across slots, so P(e <= j) = CDF(j)^batch_size; drawn once for the whole batch
  (`draw: per_batch_step`, SGLang's forced acceptance), e is that one draw: P(e <= j) = CDF(j).
- Requests stop at max_new_tokens (the final cycle's surplus is discarded): the expected
  cycles a request needs is the renewal function m(M), m(x) = 1 + sum_j p_j m(x - j),
  m(x <= 0) = 0 (Feller, An Introduction to Probability Theory, vol. 1, ch. XIII).
- Throughput (renewal-reward): tok_per_s = batch_size * M / E[m_r(M)] / E[cycle_time].
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.acceptance import AcceptanceModel
from simulator.config import Scenario
from simulator.costs.forward import CostModel, chain_span_us
from simulator.metrics import host_remainder_us
from simulator.units import US_PER_S


def cycle_time_us(cost: CostModel, extend_tokens_per_request: int) -> float:
    """Duration of one speculative cycle, sync to sync, in us (see the module docstring)."""
    fwds = cost.cycle_forwards(extend_tokens_per_request)
    return _sync_to_sync_us(cost, fwds, cost.host_schedule_us, cost.d2h_sync_us)


def baseline_step_us(cost: CostModel) -> float:
    """Duration of one no-speculation decode step, in us."""
    return _sync_to_sync_us(cost, cost.baseline_forwards(), cost.baseline_host_schedule_us,
                            cost.baseline_d2h_sync_us)


def _sync_to_sync_us(cost: CostModel, fwds, s: float, d: float) -> float:
    span = chain_span_us(fwds)
    host = sum(f.host_us for f in fwds)
    if cost.engine.overlapped:
        return max(host + s, span) + d
    return s + span + d


def renewal_cycles(pmf: np.ndarray, max_new_tokens: int) -> np.ndarray | float:
    """m(M): expected cycles to emit >= M tokens when a cycle emits j with probability pmf[j-1].

    Args:
        pmf: (num_steps+1,) or (num_classes, num_steps+1) accept_length pmfs.
        max_new_tokens: M.

    Returns:
        float for a 1-D pmf, else (num_classes,) array.
    """
    if np.ndim(pmf) == 1:  # one class: a plain loop is faster than numpy at this size
        probs = [float(x) for x in pmf]
        m = [0.0] * len(probs) + [0.0] * max_new_tokens  # m[x + k - 1] = m(x)
        k = len(probs)
        for x in range(1, max_new_tokens + 1):
            m[x + k - 1] = 1.0 + sum(pj * m[x + k - 1 - j] for j, pj in enumerate(probs, start=1))
        return m[max_new_tokens + k - 1]
    p = np.atleast_2d(np.asarray(pmf, dtype=float))
    k = p.shape[1]
    m = np.zeros((p.shape[0], max_new_tokens + k))  # m[:, x + k - 1] = m(x); m(x <= 0) = 0
    for x in range(1, max_new_tokens + 1):
        window = m[:, x - 1:x - 1 + k][:, ::-1]  # m(x-1), m(x-2), ..., m(x-k)
        m[:, x + k - 1] = 1.0 + np.einsum("ij,ij->i", p, window)
    out = m[:, max_new_tokens + k - 1]
    return float(out[0]) if np.ndim(pmf) == 1 else out


def extend_length_pmf(slot_pmf: np.ndarray, batch_size: int) -> np.ndarray:
    """pmf of max(accept_length) over batch_size independent slots."""
    cdf = np.cumsum(slot_pmf) ** batch_size
    return np.diff(np.concatenate([[0.0], cdf]))


@dataclass(frozen=True)
class AnalyticResult:
    """Expectations for one scenario (all times in us)."""

    tok_per_s: float
    baseline_tok_per_s: float
    mean_accept_length: float
    cycle_time_us: float
    baseline_step_us: float
    tpot_us: float
    breakdown_us: dict[str, float]

    @property
    def speedup(self) -> float:
        return self.tok_per_s / self.baseline_tok_per_s


def breakdown_us(cost: CostModel, ext_pmf: np.ndarray) -> dict[str, float]:
    """Expected us per cycle by bucket; buckets sum to the expected cycle time.

    Buckets: `<phase>_compute` and `<phase>_comm` GPU busy time, `sync` (d2h), and `host`
    (the rest: GPU idle while the host issues or schedules).
    """
    out: dict[str, float] = {}
    total = 0.0
    for j, p in enumerate(ext_pmf, start=1):
        if p == 0:
            continue
        for f in cost.cycle_forwards(j):
            for key, us in f.busy_by_bucket:
                out[key] = out.get(key, 0.0) + p * us
        total += p * cycle_time_us(cost, j)
    out["sync"] = cost.d2h_sync_us
    out["host"] = host_remainder_us(total, out.values())
    return out


def analyze(scenario: Scenario, cost: CostModel, acceptance: AcceptanceModel,
            truncate: bool = True) -> AnalyticResult:
    """Closed-form tok/s, accept length, cycle time and breakdown for a scenario.

    truncate=False drops the max_new_tokens truncation (every accepted token counts, as in a
    live loop's timed cycles): a request of rate class r then needs M / E[accept_length | r]
    cycles, the limit of the renewal function.
    """
    b, M = scenario.workload.batch_size, scenario.workload.max_new_tokens
    rows, request_w = acceptance.rate_classes()
    lengths = np.arange(1, rows.shape[1] + 1)

    def cycles_needed(pmfs: np.ndarray) -> np.ndarray | float:
        return renewal_cycles(pmfs, M) if truncate else M / (np.atleast_2d(pmfs) @ lengths)

    if len(request_w) == 1:
        slot_pmf = rows[0]
        cycles_per_request = float(np.ravel(cycles_needed(slot_pmf))[0])
    else:
        # a request class occupies slots for m_r(M) cycles: cycles see classes by occupancy
        m_r = np.asarray(cycles_needed(rows))
        occupancy = request_w * m_r / float(request_w @ m_r)
        slot_pmf = occupancy @ rows
        cycles_per_request = float(request_w @ m_r)
    ext = extend_length_pmf(slot_pmf, 1 if acceptance.batch_wide else b)
    cycle = float(sum(p * cycle_time_us(cost, j) for j, p in enumerate(ext, start=1) if p > 0))
    tok_per_s = b * M / cycles_per_request / cycle * US_PER_S
    step = baseline_step_us(cost)
    return AnalyticResult(
        tok_per_s=tok_per_s,
        baseline_tok_per_s=b / step * US_PER_S,
        mean_accept_length=float(slot_pmf @ np.arange(1, len(slot_pmf) + 1)),
        cycle_time_us=cycle,
        baseline_step_us=step,
        tpot_us=cycles_per_request * cycle / M,
        breakdown_us=breakdown_us(cost, ext),
    )


@dataclass(frozen=True)
class ClosedFormColumns:
    """`analyze` of many points that share one cost model, as arrays (n = points; times in us).

    Attributes:
        breakdown_us: bucket -> (n,) expected us per cycle; 0 where a point's extend lengths never
            reach a forward with that bucket (`bucket_mask` says where the bucket is in the point's
            breakdown, as `analyze` would list it); `host` last.
        bucket_mask: bucket -> (n,) bool.
    """

    tok_per_s: np.ndarray
    baseline_tok_per_s: float
    cycle_time_us: np.ndarray
    baseline_step_us: float
    tpot_us: np.ndarray
    breakdown_us: dict[str, np.ndarray]
    bucket_mask: dict[str, np.ndarray]
    bucket_order: dict[tuple, list[str]]  # extend-length pattern (ext > 0 per length) -> its buckets in order
    patterns: np.ndarray  # (n, k) bool: ext > 0

    @property
    def speedup(self) -> np.ndarray:
        return self.tok_per_s / self.baseline_tok_per_s


def renewal_cycles_many(pmfs: np.ndarray, max_new_tokens: int) -> np.ndarray:
    """`renewal_cycles` of many one-class pmfs, column by column: m(x) = 1 + sum_j p_j m(x - j),
    with the operations of its 1-D path in the same order (the same floats).

    Args:
        pmfs: (n, k) accept_length pmfs. max_new_tokens: M.

    Returns:
        (n,) m(M).
    """
    n, k = pmfs.shape
    M = max_new_tokens
    p = np.ascontiguousarray(pmfs.T)  # p[j - 1] = p_j of every point: rows, so each step reads memory in order
    m = np.zeros((k, n))  # m[x % k] = m(x) of every point, for the last k values of x; m(x <= 0) = 0
    acc, term = np.empty(n), np.empty(n)  # written in place: no temporary arrays per step
    for x in range(1, M + 1):
        np.multiply(p[0], m[(x - 1) % k], out=acc)
        for j in range(2, k + 1):
            np.add(acc, np.multiply(p[j - 1], m[(x - j) % k], out=term), out=acc)
        np.add(1.0, acc, out=m[x % k])  # m(x - k), the oldest, is no longer needed
    return m[M % k].copy()


def mean_accept_lengths(pmfs: np.ndarray) -> np.ndarray:
    """(n,) E[accept_length] of (n, k) pmfs, row by row as `analyze` computes one (the same floats)."""
    lengths = np.arange(1, pmfs.shape[1] + 1)
    return np.array([float(p @ lengths) for p in pmfs])


def closed_form_columns(cost: CostModel, pmfs: np.ndarray, batch_size: int, max_new_tokens: int,
                        cycles_per_request: np.ndarray, batch_wide: np.ndarray | None = None) -> ClosedFormColumns:
    """The closed form of points with alike requests that share `cost` and batch_size, as arrays.

    Each number is computed with the operations of `analyze` in the same order (extend-length pmf,
    cycle and bucket sums, the host remainder), elementwise, so a point's numbers do not depend on
    the other points evaluated with it.

    Args:
        pmfs: (n, k) accept_length pmfs (one rate class each). cycles_per_request: (n,)
            `renewal_cycles_many(pmfs, max_new_tokens)`. batch_wide: (n,) bool, points whose batch
            draws one accept length per step (the extend length is that draw), or None (none do).
    """
    b, M = batch_size, max_new_tokens
    n, k = pmfs.shape
    power = np.full((n, 1), float(b)) if batch_wide is None else np.where(np.asarray(batch_wide)[:, None], 1.0, b)
    ext = np.diff(np.concatenate([np.zeros((n, 1)), np.cumsum(pmfs, axis=1) ** power], axis=1), axis=1)
    positive = ext > 0
    cycle = np.zeros(n)
    buckets: dict[str, np.ndarray] = {}
    order_by_j: list[list[str]] = []
    for j in range(1, k + 1):
        p = ext[:, j - 1]
        cycle = cycle + np.where(positive[:, j - 1], p * cycle_time_us(cost, j), 0.0)
        keys = []
        for f in cost.cycle_forwards(j):
            for key, us in f.busy_by_bucket:
                buckets[key] = buckets.get(key, np.zeros(n)) + np.where(positive[:, j - 1], p * us, 0.0)
                keys.append(key)
        order_by_j.append(list(dict.fromkeys(keys)))
    # the host bucket: cycle minus the other buckets summed in the point's order (host_remainder_us)
    host = np.zeros(n)
    mask = {key: np.zeros(n, dtype=bool) for key in buckets}
    orders: dict[tuple, list[str]] = {}
    patterns, inverse = np.unique(positive, axis=0, return_inverse=True)
    for pat_idx, pat in enumerate(patterns):
        rows = np.flatnonzero(np.ravel(inverse) == pat_idx)
        pattern = tuple(pat.tolist())
        orders[pattern] = list(dict.fromkeys(key for j in range(k) if pattern[j] for key in order_by_j[j]))
        total = 0
        for key in orders[pattern]:
            total = total + buckets[key][rows]
            mask[key][rows] = True
        total = total + cost.d2h_sync_us
        c = cycle[rows]
        rest = c - total
        host[rows] = np.where((-1e-9 * np.abs(c) <= rest) & (rest < 0), 0.0, rest)
    breakdown = {key: np.where(mask[key], v, 0.0) for key, v in buckets.items()}
    breakdown["sync"] = np.full(n, float(cost.d2h_sync_us))
    breakdown["host"] = host
    mask["sync"] = mask["host"] = np.ones(n, dtype=bool)
    step = baseline_step_us(cost)
    return ClosedFormColumns(
        tok_per_s=b * M / cycles_per_request / cycle * US_PER_S, baseline_tok_per_s=b / step * US_PER_S,
        cycle_time_us=cycle, baseline_step_us=step, tpot_us=cycles_per_request * cycle / M,
        breakdown_us=breakdown, bucket_mask=mask, bucket_order=orders, patterns=positive)


def analyze_many(scenarios: list[Scenario], cost: CostModel,
                 acceptances: list[AcceptanceModel]) -> list[AnalyticResult]:
    """`analyze` (truncated) of points that share one cost model, evaluated together in numpy
    (`closed_form_columns`).

    Every point must have alike requests (one rate class, `beta_ab` None), pmfs of one length
    and the cost model's batch_size; max_new_tokens may differ only between calls. Each number
    is computed with the operations of `analyze` in the same order (renewal sum, extend-length
    pmf, cycle and bucket sums), so the results are the same floats (tests/test_speed.py).

    Raises:
        ValueError: points that do not fit the conditions above.
    """
    if not scenarios:
        return []
    b, M = scenarios[0].workload.batch_size, scenarios[0].workload.max_new_tokens
    if any(sc.workload.batch_size != b or sc.workload.max_new_tokens != M for sc in scenarios) or \
            any(acc.beta_ab is not None for acc in acceptances):
        raise ValueError("analyze_many: points differ in batch_size or max_new_tokens, or have rate classes")
    pmfs = np.stack([acc.base_pmf for acc in acceptances])  # (num_points, k)
    cycles_per_request = renewal_cycles_many(pmfs, M)
    cols = closed_form_columns(cost, pmfs, b, M, cycles_per_request,
                               np.array([acc.batch_wide for acc in acceptances], dtype=bool))
    means = mean_accept_lengths(pmfs)
    out = []
    for i in range(len(pmfs)):
        keys = cols.bucket_order[tuple(cols.patterns[i].tolist())]
        br = {key: cols.breakdown_us[key][i] for key in (*keys, "sync", "host")}
        br["sync"] = cost.d2h_sync_us
        c, cpr = float(cols.cycle_time_us[i]), float(cycles_per_request[i])
        out.append(AnalyticResult(
            tok_per_s=b * M / cpr / c * US_PER_S, baseline_tok_per_s=cols.baseline_tok_per_s,
            mean_accept_length=float(means[i]), cycle_time_us=c, baseline_step_us=cols.baseline_step_us,
            tpot_us=cpr * c / M, breakdown_us=br))
    return out
