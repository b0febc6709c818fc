"""Records -> results. Every metric is defined here, once.

- tok_per_s: committed tokens of all requests over the measured cycles / their duration
  (system throughput; tokens past a request's max_new_tokens are not counted).
- tok_per_s_per_request: tok_per_s / batch_size.
- baseline_tok_per_s: the same scenario without speculation: batch_size / decode step time.
- speedup: tok_per_s / baseline_tok_per_s.
- accept_length: mean over request-cycles of tokens accepted per cycle, the bonus token
  included (SGLang's and the EAGLE papers' convention), with a 95% interval by batch means
  (30 batches of consecutive cycles, Student t; Law & Kelton, Simulation Modeling and Analysis,
  section 9.5.3).
- draft_acceptance_frac: (accept_length - 1) / num_steps, the share of draft tokens kept (chain).
- cycle_time_us: mean sync-to-sync time of a cycle.
- breakdown_us: mean us per cycle by bucket `<phase>_<compute|comm>` (GPU busy time of the TP
  group's rank 0), `sync` (device->host copy), `host` (the rest: GPU idle while the host
  issues kernels or schedules); the buckets sum to cycle_time_us.
- tpot_ms: per finished request, decode time / max_new_tokens (time per output token; no
  prefill is modelled, so this is the decode part of SGLang's TPOT); p50/p90/p99 over requests, in ms
  as `vllm bench serve` and SGLang's bench_serving print it (mean_tpot_ms, ...).
- baseline_tpot_ms: the baseline's decode step (its time per output token), ms.

Latencies a user reads per token or per request (TTFT, TPOT, ITL, end-to-end) are ms, as the engines'
benches print them; the cycle's own times (cycle_time_us, breakdown_us, baseline_step_us) stay us,
the simulation clock's unit, each named with its unit.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from simulator.des.records import CycleLog
from simulator.files import SIMULATION_OUTPUT
from simulator.units import US_PER_MS, US_PER_S

NUM_BATCHES = 30
# Student t 0.975 quantiles for 1..NUM_BATCHES-1 degrees of freedom, as scipy.stats.t.ppf(0.975, df)
# gives them (scipy.special.stdtrit; tests/test_speed.py checks every entry bit for bit). A table,
# so a simulation does not import scipy.stats (seconds of a CLI command's start-up).
_T975 = (12.706204736174694, 4.302652729749462, 3.1824463052837078, 2.7764451051977934, 2.5705818356363146,
         2.4469118511449786, 2.364624251592784, 2.306004135204166, 2.262157162798205, 2.228138851986274,
         2.200985160091639, 2.1788128296672284, 2.1603686564627913, 2.144786687917804, 2.131449545559776,
         2.1199052992212546, 2.1098155778333156, 2.1009220402410382, 2.0930240544083087, 2.085963447265864,
         2.0796138447276795, 2.0738730679040254, 2.0686576104190486, 2.0638985616280245, 2.0595385527532972,
         2.0555294386428735, 2.0518305164802846, 2.0484071417952454, 2.045229642132703)


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with `df` degrees of freedom (scipy.special.stdtrit)."""
    if 1 <= df <= len(_T975):
        return _T975[df - 1]
    from scipy.special import stdtrit
    return float(stdtrit(df, 0.975))


class Interval(BaseModel):
    """A mean with its 95% confidence interval."""

    model_config = ConfigDict(frozen=True)
    mean: float
    ci95_low: float
    ci95_high: float


class Percentiles(BaseModel):
    model_config = ConfigDict(frozen=True)
    mean: float
    p50: float
    p90: float
    p99: float

    def to_ms(self) -> Percentiles:
        """These percentiles, given in us (the simulation clock), in ms."""
        return Percentiles(**{k: v / US_PER_MS for k, v in self.model_dump().items()})


class SimulationResult(BaseModel):
    """What `specdecsim simulate` prints and writes (latencies in ms, the cycle's times in us, rates per
    second: the module docstring)."""

    model_config = ConfigDict(frozen=True)
    specdecsim_output: Literal["simulation/2"] = SIMULATION_OUTPUT  # kind and schema version of the JSON
    version: str
    solver: str  # 'des' (the closed form's figures sit beside it: analytic_*)
    seed: int
    profile: str
    tok_per_s: float
    tok_per_s_ci95: tuple[float, float]
    tok_per_s_per_request: float
    baseline_tok_per_s: float
    speedup: float
    accept_length: Interval
    draft_acceptance_frac: float
    cycle_time_us: float
    baseline_step_us: float
    breakdown_us: dict[str, float]
    tpot_ms: Percentiles | None
    baseline_tpot_ms: float
    num_cycles: int
    simulated_us: float
    analytic_tok_per_s: float
    analytic_accept_length: float
    notes: list[str]
    scenario: dict
    serving: dict | None = None  # serving mode's metrics (simulator.serving.metrics.ServingResult) when
    # the scenario has a `serving:` section; the fields above stay the steady batch's
    generate: dict | None = None  # `simulate`'s LLM.generate of the steady batch's prompts (a closed batch:
    # simulator.serving.run.simulate_generate) where the scenario has no `serving:` section
    # what the printed result says of its pricing; not written (the notes say it in words)
    priced_by_engine_profile: bool = Field(False, exclude=True, description=(
        "The cycle was priced from the scenario's engine-native profile, not the op-table profile."))
    untabled_op_notes: dict[str, bool] = Field(default_factory=dict, exclude=True, description=(
        "The notes of op shapes with no measured table -> scaled from the nearest measured GEMM."))


def batch_means_interval(values: np.ndarray, num_batches: int = NUM_BATCHES,
                         support: tuple[float, float] = (-np.inf, np.inf)) -> Interval:
    """Mean and 95% t-interval of a (possibly autocorrelated) series by non-overlapping batch means.

    The interval is intersected with `support`, the values the quantity can take (accept_length:
    1..num_steps+1): with few batches a t-interval can reach past them, and the quantity's true
    mean lies inside, so the intersection keeps the coverage.
    """
    v = np.asarray(values, dtype=float)
    n = len(v)
    if n == 0:
        raise ValueError("no values")
    k = min(num_batches, n)
    if k < 2:
        return Interval(mean=float(v.mean()), ci95_low=float(v.mean()), ci95_high=float(v.mean()))
    size = n // k
    means = v[: size * k].reshape(k, size).mean(axis=1)
    half = float(t975(k - 1) * means.std(ddof=1) / np.sqrt(k))
    m = float(v.mean())
    return Interval(mean=m, ci95_low=max(m - half, support[0]), ci95_high=min(m + half, support[1]))


def throughput_interval(log: CycleLog, num_batches: int = NUM_BATCHES) -> tuple[float, float, float]:
    """(tok_per_s, low, high): ratio estimator with a batch-means 95% interval; the low end is
    at least 0 (a rate is never negative, however few the batches)."""
    tokens = log.num_tokens.astype(float)
    durs = log.end_us - log.start_us
    rate = tokens.sum() / durs.sum() * US_PER_S
    k = min(num_batches, len(log))
    if k < 2:
        return rate, rate, rate
    size = len(log) // k
    r = (tokens[: size * k].reshape(k, size).sum(1) / durs[: size * k].reshape(k, size).sum(1)) * US_PER_S
    half = float(t975(k - 1) * r.std(ddof=1) / np.sqrt(k))
    return rate, max(rate - half, 0.0), rate + half


def accept_length_series(log: CycleLog) -> np.ndarray:
    """(num_cycles,) mean accept_length over the batch, per cycle."""
    return log.accept_lengths.mean(axis=1)


def breakdown(log: CycleLog, d2h_sync_us: float) -> dict[str, float]:
    """Mean us per cycle by bucket; `host` closes the sum to the mean cycle time."""
    out = {k: float(v.mean()) for k, v in sorted(log.busy_us.items())}
    out["sync"] = d2h_sync_us
    out["host"] = host_remainder_us(float((log.end_us - log.start_us).mean()), out.values())
    return out


def host_remainder_us(cycle_us: float, bucket_us) -> float:
    """The `host` bucket: cycle time minus the other buckets (GPU idle while the host works).

    With no host cost at all (a profile of zero overheads) the remainder is 0 up to float
    rounding; a remainder within rounding (1e-9 of the cycle time) of zero is 0, never a
    negative time. A larger negative remainder is returned as is (a model error, which
    `simulator.simulate.check_result` refuses to print).
    """
    rest = cycle_us - float(sum(bucket_us))
    return 0.0 if -1e-9 * abs(cycle_us) <= rest < 0 else rest


def tpot(start_us: np.ndarray, end_us: np.ndarray, max_new_tokens: int) -> Percentiles | None:
    """TPOT percentiles (ms) over finished requests, or None if none finished in the horizon."""
    if len(start_us) == 0:
        return None
    t = (np.asarray(end_us) - np.asarray(start_us)) / max_new_tokens / US_PER_MS
    p50, p90, p99 = np.percentile(t, [50, 90, 99])
    return Percentiles(mean=float(t.mean()), p50=float(p50), p90=float(p90), p99=float(p99))
