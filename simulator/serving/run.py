"""Running serving mode: records of one run, and the metrics with the no-speculation baseline beside them."""

from __future__ import annotations

import numpy as np

from simulator.config import Scenario
from simulator.profile import CalibrationProfile
from simulator.serving.costs import StepCosts
from simulator.serving.scheduler import ServingRecords, ServingRun, serving_rngs
from simulator.serving.config import ServingConfig
from simulator.serving.metrics import ServingResult, mean_results, serving_metrics, users_decode_tok_per_s
from simulator.units import US_PER_S

DRAW_REQUESTS = 64  # a closed batch's default draws cover about this many requests, 2 to MAX_DEFAULT_DRAWS
MAX_DEFAULT_DRAWS = 16
CLOSED_LOOP_MIN_DRAWS = 4  # a closed loop's draws at least (num_draws)


def run_serving(scenario: Scenario, profile: CalibrationProfile, speculative: bool = True,
                costs: StepCosts | None = None, request_rates=None, draw: int = 0) -> ServingRecords:
    """Records of one serving run (speculative=False: the no-speculation baseline, same workload seeds;
    request_rates: each request's own i.i.d. acceptance rate, in the order sent: ServingRun; draw: the
    seed's independent draw, `serving_rngs`)."""
    costs = costs or StepCosts(scenario, profile)
    return ServingRun(scenario, costs, speculative, serving_rngs(scenario.seed, draw), request_rates).run()


def num_draws(scenario: Scenario, speculative: bool) -> int:
    """The independent draws of the acceptance a prediction averages: a closed batch that speculates
    and decodes past its first token ends with its unluckiest request, so one run is one draw of its wall
    time (a batch of 4 at acceptance 0.6 and 5 steps: about 4% apart, benchmarks/bench_request_level.py);
    a closed loop's TTFT p50 is one of its joins, which come one or a few at a time as the draw has requests
    finish (four draws of one H100 run: 98.9-163.2 ms, docs/make_closed_loop_ttft_table.py), so a closed loop
    takes CLOSED_LOOP_MIN_DRAWS at least; `serving.draws` where set, else enough for about DRAW_REQUESTS
    requests, 2-16. Everything else: 1 (Poisson or trace arrivals' many requests average over themselves;
    no speculation draws nothing)."""
    sv = scenario.serving
    loop = sv is not None and sv.arrivals.kind == "closed_loop"
    if not speculative or sv is None or sv.arrivals.kind != "closed_batch" and not loop \
            or _mean_tokens(sv.output_len) <= 1:
        return 1
    if sv.draws is not None:
        return sv.draws
    if loop and sv.num_requests is None:  # a loop of serving.duration_s: its many joins average over themselves
        return CLOSED_LOOP_MIN_DRAWS
    return min(MAX_DEFAULT_DRAWS, max(CLOSED_LOOP_MIN_DRAWS if loop else 2, -(-DRAW_REQUESTS // (sv.num_requests or 1))))


def run_serving_draws(scenario: Scenario, profile: CalibrationProfile, speculative: bool = True,
                      costs: StepCosts | None = None, request_rates=None) -> list[ServingRecords]:
    """Records of each of the scenario's draws (`num_draws`; the first is `run_serving`'s)."""
    costs = costs or StepCosts(scenario, profile)
    return [run_serving(scenario, profile, speculative, costs, request_rates, d)
            for d in range(num_draws(scenario, speculative))]


def draws_metrics(records: list[ServingRecords], warmup_s: float, ttft_slo_ms: float | None,
                  tpot_slo_ms: float | None) -> ServingResult:
    """The mean of the draws' serving metrics (`mean_results`)."""
    return mean_results([serving_metrics(r, warmup_s, ttft_slo_ms, tpot_slo_ms) for r in records])


def mean_wall_s(records: list[ServingRecords]) -> float:
    """The draws' mean wall time from t = 0 to the last finish, s (a closed batch's generate)."""
    return sum(float(r.finish_us.max()) for r in records) / len(records) / US_PER_S


def simulate_serving(scenario: Scenario, profile: CalibrationProfile, baseline: bool = True) -> ServingResult:
    """The serving metrics of a scenario, with the no-speculation baseline beside them (baseline=True).

    Raises:
        ArithmeticError: nothing finished after the warm-up.
        UserInputError: a trace or length file is bad, or a request cannot fit the KV cache.
    """
    cfg = scenario.serving
    costs = StepCosts(scenario, profile)
    res = draws_metrics(run_serving_draws(scenario, profile, True, costs), cfg.warmup_s, cfg.slo.ttft_ms,
                        cfg.slo.tpot_ms)
    if not baseline:
        return res
    base = serving_metrics(run_serving(scenario, profile, False, costs), cfg.warmup_s, cfg.slo.ttft_ms,
                           cfg.slo.tpot_ms)
    return _beside_baseline(res, base)


def _beside_baseline(res: ServingResult, base: ServingResult) -> ServingResult:
    """The speculative run's metrics with the no-speculation run's tok/s, TPOT and the speedup beside them."""
    return res.model_copy(update={"baseline_output_tok_per_s": base.output_tok_per_s, "baseline_tpot_ms": base.tpot_ms,
                                  "speedup": res.output_tok_per_s / base.output_tok_per_s})


GENERATE_MAX_SECONDS = 3.0  # simulate's LLM.generate table is left out (a note gives the command) past this estimate


def generate_scenario(scenario: Scenario, max_tokens: int | None = None) -> Scenario:
    """The scenario's steady batch asked as users run it: `LLM.generate` of workload.batch_size prompts of
    workload.context_len tokens, each generating workload.max_new_tokens (or `max_tokens`): a closed batch
    (serving.arrivals.kind closed_batch), chunked as the engine chunks where its profile says."""
    w = scenario.workload
    n = w.max_new_tokens if max_tokens is None else max_tokens
    serving = {"arrivals": {"kind": "closed_batch"}, "num_requests": w.batch_size,
               "input_len": {"kind": "fixed", "tokens": w.context_len},
               "output_len": {"kind": "fixed", "tokens": n},
               "max_running_requests": max(w.batch_size, 1)}
    return scenario.model_copy(update={"serving": ServingConfig.model_validate(serving)})


def simulate_generate(scenario: Scenario, profile: CalibrationProfile) -> tuple[dict | None, str | None]:
    """(the generate block, a note): what `LLM.generate` of the steady batch's prompts gives
    (generate_scenario): the closed batch's serving metrics with the no-speculation baseline, its wall
    time, the prefill alone's (the same prompts, one new token), and the decode tok/s users compute from
    the two (users_decode_tok_per_s); None and why where the scenario has a serving section of its own,
    asks one new token, or would take past GENERATE_MAX_SECONDS to simulate (the environment's
    SPECDECSIM_GENERATE_MAX_S in its place where set; 0 leaves the table out)."""
    if scenario.serving is not None:
        return None, None
    w = scenario.workload
    if w.max_new_tokens < 2:
        return None, "LLM.generate of the batch not simulated: workload.max_new_tokens is 1 (the prefill alone)"
    import os
    raw = os.environ.get("SPECDECSIM_GENERATE_MAX_S", "")
    try:
        limit = float(raw) if raw.strip() else GENERATE_MAX_SECONDS
    except ValueError:
        limit = float("nan")
    if not limit >= 0:
        return None, f"LLM.generate of the batch not simulated: SPECDECSIM_GENERATE_MAX_S={raw!r} is not seconds >= 0"
    if limit == 0:
        return None, "LLM.generate of the batch not simulated (SPECDECSIM_GENERATE_MAX_S=0)"
    sc = generate_scenario(scenario)
    secs, _, _ = estimate_serving(sc)
    if secs > limit:
        what = "one prompt" if w.batch_size == 1 else f"{w.batch_size:,} prompts"
        return None, (f"LLM.generate of {what} not simulated (about {secs:,.0f} s of simulation); --set "
                      f"serving.arrivals.kind=closed_batch --set serving.num_requests={w.batch_size} --set "
                      f"serving.input_len.tokens={w.context_len} --set serving.output_len.tokens={w.max_new_tokens} "
                      "asks it (with --force)")
    costs = StepCosts(sc, profile)
    one = generate_scenario(scenario, 1)
    out, metrics = {}, {}
    for speculative, key in ((True, "speculative"), (False, "baseline")):
        gen = run_serving_draws(sc, profile, speculative, costs)
        alone = run_serving(one, profile, speculative, costs)
        metrics[key] = draws_metrics(gen, 0.0, None, None)
        gen_s, alone_s = mean_wall_s(gen), float(alone.finish_us.max()) / US_PER_S
        walls = [mean_wall_s([g]) for g in gen]
        out[key] = {"generate_s": gen_s, "prefill_alone_s": alone_s, "draws": len(gen),
                    "generate_s_range": [min(walls), max(walls)],
                    "decode_tok_per_s": users_decode_tok_per_s(w.batch_size, w.max_new_tokens, gen_s, alone_s)}
    res = _beside_baseline(metrics["speculative"], metrics["baseline"])
    fit = costs.engine_prefill(True)
    said = sorted(n for n in costs.cost_model(1, None, 1).lookup.notes if "the prefill from" in n)
    prefill = (said[0].split("the prefill from ", 1)[1] if said else "the engine profile's own runs of the prefill alone"
               ) if fit is not None else "the op tables of the project's own loop (no engine profile measured a prefill)"
    return {"batch_size": w.batch_size, "prompt_tokens": w.context_len, "max_tokens": w.max_new_tokens,
            **out, "prefill_priced_from": prefill, "serving": res.model_dump(mode="json")}, None


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
    speculative runs (a closed batch's draws, `num_draws`) and the no-speculation run together, for the
    CLI's estimate and --force gate.

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
    if arrivals.kind == "trace" and arrivals.arrival_s is not None:
        listed = [t for t in arrivals.arrival_s if sv.duration_s is None or t < sv.duration_s]
        trace_n = len(listed[:sv.num_requests])
    elif arrivals.kind == "trace":  # the trace's own requests and output lengths
        from simulator.inputs import UserInputError
        from simulator.serving.workload import read_trace
        try:
            tr = read_trace(arrivals.path, sv.num_requests)
            kept = tr.arrival_s < sv.duration_s if sv.duration_s is not None else np.ones(len(tr.arrival_s), bool)
            trace_n = int(kept.sum())
            out = float(tr.output_tokens[kept].mean()) if trace_n else float(tr.output_tokens.mean())
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
    runs = 1 + num_draws(scenario, True)  # the no-speculation run and the speculative draws
    seconds = runs * (steps * SECONDS_PER_STEP + n * SECONDS_PER_REQUEST)
    memory = runs * n * (out * BYTES_PER_TOKEN + BYTES_PER_REQUEST)
    return float(seconds), float(memory), int(n)
