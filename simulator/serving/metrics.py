"""Serving records -> serving metrics. Every serving metric is defined here, once.

Measured requests: those arriving at or after `serving.warmup_s` that finished. Over them
(latencies in ms, as `vllm bench serve` and SGLang's bench_serving print them: mean_ttft_ms, p99_itl_ms, ...;
rates per second; percentiles p50/p90/p99 and the mean over requests):
- duration_s: last measured finish - first measured arrival (bench_serving's benchmark duration,
  the warm-up left out).
- output_tok_per_s: their output tokens / duration_s; request_per_s: their count / duration_s.
- ttft_ms: first token - arrival (queueing and prefill included).
- tpot_ms: (finish - first token) / (output_tokens - 1), requests with >= 2 output tokens.
- itl_ms: gaps between consecutive token emissions of a request after its first token; a
  speculative cycle emits its accepted tokens at once, as a streaming client receives them.
- e2e_latency_ms: finish - arrival; queue_ms: first admission - arrival.
- tok_per_s_per_user: mean over requests of 1 / tpot (the decode speed one user sees).
- goodput_request_per_s / goodput_tok_per_s: requests meeting every SLO given (ttft <= slo.ttft_ms,
  tpot <= slo.tpot_ms), and their output tokens, per second of duration_s (DistServe's goodput);
  slo_attained_frac: their share of the measured requests (1 when no SLO is given).
- mean_batch_size: decode requests per engine step, weighted by step time;
  spec_step_frac: share of decode steps that speculated; mean_accept_length: tokens per request
  per speculative cycle (raw, before truncation at the output length).
- mean_requests_in_system: time average of (arrived - finished) over [warmup_s, last arrival]
  (Little's law: = arrival rate x mean e2e latency in steady state); where every request arrived by
  warmup_s (a closed batch), over [warmup_s, last finish].
- num_preemptions: preemptions of measured requests (recompute).
- baseline_output_tok_per_s / baseline_tpot_ms / speedup: the same workload without speculation,
  when run (speedup = output_tok_per_s / baseline_output_tok_per_s).
- draws / duration_s_range: a closed batch that speculates is one draw of the acceptance (its wall
  time ends with the request that drew the fewest accepted tokens); its metrics are the mean over
  `draws` independent draws (`mean_results`), duration_s_range the lowest and highest of them.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from simulator.metrics import Percentiles
from simulator.serving.scheduler import ServingRecords
from simulator.units import US_PER_MS, US_PER_S


class ServingResult(BaseModel):
    """The `serving` block of a SimulationResult (latencies in ms, rates per second)."""

    model_config = ConfigDict(frozen=True)
    speculative: bool
    num_requests: int
    duration_s: float
    output_tok_per_s: float
    request_per_s: float
    tok_per_s_per_user: float | None = None
    ttft_ms: Percentiles
    tpot_ms: Percentiles | None = None
    itl_ms: Percentiles | None = None
    e2e_latency_ms: Percentiles
    queue_ms: Percentiles
    goodput_request_per_s: float
    goodput_tok_per_s: float
    slo_attained_frac: float
    mean_batch_size: float
    spec_step_frac: float
    mean_accept_length: float | None = None  # a record written without None fields leaves it out
    mean_requests_in_system: float
    num_preemptions: int
    num_engine_steps: int
    num_finished: int = 0  # every finished request, warm-up ones included
    baseline_output_tok_per_s: float | None = None
    baseline_tpot_ms: Percentiles | None = None
    speedup: float | None = None
    draws: int = 1  # independent draws of the acceptance averaged (a closed batch's `serving.draws`)
    duration_s_range: tuple[float, float] | None = None  # the lowest and highest duration_s of those draws


def mean_results(results: list[ServingResult]) -> ServingResult:
    """The mean of several independent draws' metrics, field by field (a rate, a count or a percentile:
    its mean over the draws that have it; a count rounded), with `draws` and `duration_s_range`: the
    expected value of what one run measures, which is itself one draw."""
    if len(results) == 1:
        return results[0]
    out = {}
    for name, first in results[0]:
        vals = [v for v in (getattr(r, name) for r in results) if v is not None]
        if isinstance(first, bool) or not vals:
            out[name] = first
        elif isinstance(first, Percentiles) or isinstance(vals[0], Percentiles):
            out[name] = Percentiles(**{k: float(np.mean([getattr(v, k) for v in vals])) for k in Percentiles.model_fields})
        elif isinstance(vals[0], int):
            out[name] = int(round(float(np.mean(vals))))
        elif isinstance(vals[0], float):
            out[name] = float(np.mean(vals))
        else:
            out[name] = first
    durations = [r.duration_s for r in results]
    return ServingResult(**{**out, "draws": len(results), "duration_s_range": (min(durations), max(durations))})


def percentiles(values: np.ndarray) -> Percentiles | None:
    """Mean, p50, p90, p99 of values; None when there are none."""
    v = np.asarray(values, dtype=float)
    if len(v) == 0:
        return None
    p50, p90, p99 = np.percentile(v, [50, 90, 99])
    return Percentiles(mean=float(v.mean()), p50=float(p50), p90=float(p90), p99=float(p99))


def mean_in_system(arrival_us: np.ndarray, finish_us: np.ndarray, t0: float, t1: float) -> float:
    """Time average over [t0, t1] of requests arrived and not finished (unfinished: still in)."""
    if t1 <= t0:
        return 0.0
    start = np.clip(arrival_us, t0, t1)
    end = np.clip(np.where(np.isnan(finish_us), t1, finish_us), t0, t1)
    return float(np.maximum(end - start, 0.0).sum() / (t1 - t0))


def serving_metrics(rec: ServingRecords, warmup_s: float, ttft_slo_ms: float | None,
                    tpot_slo_ms: float | None) -> ServingResult:
    """ServingResult of one run's records (see the module docstring).

    Raises:
        ArithmeticError: no request finished after the warm-up (nothing to measure).
    """
    warm_us = warmup_s * US_PER_S
    m = (rec.arrival_us >= warm_us) & ~np.isnan(rec.finish_us)
    if not m.any():
        raise ArithmeticError(f"no request arriving after warmup_s={warmup_s:g} finished; send more requests "
                              "or lower serving.warmup_s" + ("" if len(rec.arrival_us) else
                                                             " (none arrived: serving.duration_s may end before "
                                                             "the first arrival)"))
    arr, first, fin = rec.arrival_us[m], rec.first_token_us[m], rec.finish_us[m]
    out = rec.output_tokens[m]
    duration_us = max(float(fin.max() - arr.min()), 1e-9)
    ttft = first - arr
    multi = out >= 2
    tpot = (fin[multi] - first[multi]) / (out[multi] - 1)
    ok = np.ones(len(arr), dtype=bool)
    if ttft_slo_ms is not None:
        ok &= ttft <= ttft_slo_ms * US_PER_MS
    if tpot_slo_ms is not None:
        tpot_all = np.where(multi, (fin - first) / np.maximum(out - 1, 1), 0.0)
        ok &= tpot_all <= tpot_slo_ms * US_PER_MS
    measured_idx = np.flatnonzero(m)
    itl = rec.itl_us[np.isin(rec.itl_request_idx, measured_idx)]
    dur_steps = rec.step_end_us - rec.step_start_us
    decode = rec.step_batch_size > 0
    spec = rec.step_num_steps > 0
    spec_reqs = rec.step_batch_size[spec].sum()
    t_last_arrival = float(rec.arrival_us.max())
    if t_last_arrival <= warm_us:  # a closed batch: every request in at the start, the batch draining
        t_last_arrival = float(np.nanmax(rec.finish_us))
    return ServingResult(
        speculative=rec.speculative,
        num_requests=int(m.sum()),
        num_finished=int((~np.isnan(rec.finish_us)).sum()),
        duration_s=duration_us / US_PER_S,
        output_tok_per_s=float(out.sum()) / duration_us * US_PER_S,
        request_per_s=float(m.sum()) / duration_us * US_PER_S,
        tok_per_s_per_user=float(np.mean(US_PER_S / tpot[tpot > 0])) if (tpot > 0).any() else None,
        ttft_ms=percentiles(ttft / US_PER_MS), tpot_ms=percentiles(tpot / US_PER_MS),
        itl_ms=percentiles(itl / US_PER_MS), e2e_latency_ms=percentiles((fin - arr) / US_PER_MS),
        queue_ms=percentiles((rec.admit_us[m] - arr) / US_PER_MS),
        goodput_request_per_s=float(ok.sum()) / duration_us * US_PER_S,
        goodput_tok_per_s=float(out[ok].sum()) / duration_us * US_PER_S,
        slo_attained_frac=float(ok.mean()),
        mean_batch_size=float((rec.step_batch_size * dur_steps).sum() / dur_steps.sum()) if len(dur_steps) else 0.0,
        spec_step_frac=float(spec.sum() / decode.sum()) if decode.any() else 0.0,
        mean_accept_length=float(rec.step_accepted[spec].sum() / spec_reqs) if spec_reqs else None,
        mean_requests_in_system=mean_in_system(rec.arrival_us, rec.finish_us, warm_us, t_last_arrival),
        num_preemptions=int(rec.num_preemptions[m].sum()),
        num_engine_steps=len(rec.step_start_us),
    )


def users_decode_tok_per_s(batch_size: int, max_tokens: int, generate_s: float, prefill_s: float | None) -> float | None:
    """A closed batch's decode tok/s as users compute it: (B x N - B) / (the generate's wall time - the same
    prompts' with one new token); None without that prefill-alone run, or where it took as long."""
    if prefill_s is None or generate_s <= prefill_s:
        return None
    return (batch_size * max_tokens - batch_size) / (generate_s - prefill_s)
