"""Running serving mode: records of one run, and the metrics with the no-speculation baseline beside them."""

from __future__ import annotations

from simulator.config import Scenario
from simulator.profile import CalibrationProfile
from simulator.serving.costs import StepCosts
from simulator.serving.scheduler import ServingRecords, ServingRun, serving_rngs
from simulator.serving.metrics import ServingResult, serving_metrics




def run_serving(scenario: Scenario, profile: CalibrationProfile, speculative: bool = True,
                costs: StepCosts | None = None, request_rates=None) -> ServingRecords:
    """Records of one serving run (speculative=False: the no-speculation baseline, same workload seeds;
    request_rates: each request's own i.i.d. acceptance rate, in the order sent: ServingRun)."""
    costs = costs or StepCosts(scenario, profile)
    return ServingRun(scenario, costs, speculative, serving_rngs(scenario.seed), request_rates).run()


def simulate_serving(scenario: Scenario, profile: CalibrationProfile, baseline: bool = True) -> ServingResult:
    """The serving metrics of a scenario, with the no-speculation baseline beside them (baseline=True).

    Raises:
        ArithmeticError: nothing finished after the warm-up.
        UserInputError: a trace or length file is bad, or a request cannot fit the KV cache.
    """
    cfg = scenario.serving
    costs = StepCosts(scenario, profile)
    res = serving_metrics(run_serving(scenario, profile, True, costs), cfg.warmup_s, cfg.slo.ttft_ms, cfg.slo.tpot_ms)
    if not baseline:
        return res
    base = serving_metrics(run_serving(scenario, profile, False, costs), cfg.warmup_s, cfg.slo.ttft_ms,
                           cfg.slo.tpot_ms)
    return res.model_copy(update={"baseline_output_tok_per_s": base.output_tok_per_s, "baseline_tpot_ms": base.tpot_ms,
                                  "speedup": res.output_tok_per_s / base.output_tok_per_s})


SECONDS_PER_STEP = 70e-6      # benchmarks/bench_serving.py: 14,182 engine steps in 0.86 s (one 2-core machine)
SECONDS_PER_REQUEST = 50e-6
BYTES_PER_TOKEN = 16          # per-token emission times of both runs (float64)
BYTES_PER_REQUEST = 2048
TOKENS_PER_S_PER_REQUEST = 200.0  # a closed loop's requests per second: an order-of-magnitude guess


def _mean_tokens(dist) -> float:
    kind = getattr(dist, "kind", "")
    if kind == "fixed":
        return float(dist.tokens)
    if kind == "uniform":
        return (dist.min_tokens + dist.max_tokens) / 2.0
    if kind == "lognormal":
        return float(min(max(dist.mean_tokens, dist.min_tokens), dist.max_tokens))
    if kind == "file":  # the file's own lengths (read again when the run starts)
        from simulator.inputs import UserInputError
        from simulator.serving.workload import read_lengths
        try:
            return float(read_lengths(dist.path).mean())
        except UserInputError:
            return 256.0  # the run names the problem
    return 256.0


def _chunk_tokens(scenario: Scenario) -> int:
    """The prefill chunk the run will take (simulator.serving.scheduler): the scenario's where it sets one,
    else its engine profile's measured max_num_batched_tokens, else the default."""
    from simulator.engines.profile import prefill_chunk_tokens, scenario_engine_profile
    from simulator.inputs import UserInputError
    try:
        prof = scenario_engine_profile(scenario)
    except UserInputError:  # the run names the problem
        prof = None
    fits = sorted(prof.prefill if prof is not None else [], key=lambda f: f.max_num_batched_tokens)
    return prefill_chunk_tokens(scenario.serving, fits[0] if fits else None)


def estimate_serving(scenario: Scenario) -> tuple[float, float, int]:
    """(seconds, bytes, requests): a rough cost of simulating the scenario's serving section, the
    speculative and the no-speculation run together, for the CLI's estimate and --force gate.

    Requests: a trace's own (its first num_requests), else num_requests, else arrival rate x
    duration_s (a closed loop: concurrency x duration_s x 200 tokens/s / mean output length), else
    1000; output lengths: a trace's or a length file's mean, else the distribution's. Engine steps: requests x mean output tokens /
    the batch, plus requests x mean input tokens / the prefill chunk (`_chunk_tokens`) (a closed loop's concurrency capped by max_running_requests; 1 otherwise, the worst
    case). Per-step and per-request CPU costs from benchmarks/bench_serving.py.
    """
    sv = scenario.serving
    arrivals = sv.arrivals
    out = _mean_tokens(sv.output_len)
    trace_n = None
    if arrivals.kind == "trace":  # the trace's own requests and output lengths
        from simulator.inputs import UserInputError
        from simulator.serving.workload import read_trace
        try:
            tr = read_trace(arrivals.path, sv.num_requests)
            trace_n, out = len(tr.arrival_s), float(tr.output_tokens.mean())
        except UserInputError:
            pass  # the run names the problem
    if trace_n is not None:
        n = trace_n
    elif sv.num_requests is not None:
        n = sv.num_requests
    elif sv.duration_s is not None and arrivals.kind == "poisson":
        n = arrivals.rate_per_s * sv.duration_s
    elif sv.duration_s is not None and arrivals.kind == "closed_loop":
        n = arrivals.concurrency * sv.duration_s * TOKENS_PER_S_PER_REQUEST / max(out, 1.0)
    else:
        n = 1000
    batch = (min(arrivals.concurrency, sv.max_running_requests) if arrivals.kind == "closed_loop"
             else min(n, sv.max_running_requests) if arrivals.kind == "closed_batch" else 1)
    steps = n * out / max(batch, 1) + n * _mean_tokens(sv.input_len) / _chunk_tokens(scenario)  # decode + prefill
    seconds = 2 * (steps * SECONDS_PER_STEP + n * SECONDS_PER_REQUEST)
    memory = 2 * n * (out * BYTES_PER_TOKEN + BYTES_PER_REQUEST)
    return float(seconds), float(memory), int(n)
