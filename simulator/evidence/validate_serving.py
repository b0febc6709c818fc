"""Live serving runs against the serving DES: the same scenario simulated, tok/s and TPOT compared.

Each LiveServingRun embeds the serving scenario it ran (closed loop at concurrency C, seeded
output lengths, seeded per-request acceptance, `prefill_latency_scale: 0`, `decode_context_len`
= the live loop's static window). `check_record` runs the serving DES on that scenario with the
profile's step costs (`simulator.serving.run.run_serving`, speculative or not as the record) and
measures both with one function (`simulator.serving.metrics.serving_metrics`). The live run's
scheduler is the DES's own and its draws are seeded, so both runs serve the same schedule (same
requests, steps, batches and accept lengths; `same_schedule` says so); they differ in step
durations only. Errors are predicted / measured - 1:

- tok_per_s_error_frac: output tokens/s over the run (first arrival to last finish);
- tpot_p50_error_frac: the median request's time per output token;
- ttft_p50_error_frac, itl_p50_error_frac: reported, not judged.

`acceptance="measured"` (`validate-serving --acceptance measured`) prices a speculative record whose
scenario forces an i.i.d. rate at the rate whose mean accept length is the one the run realized (its
accepted tokens over its decode request-steps): an engine's seeded draws over a few requests are a few
percent off the formula (issue 45), and the error should measure the timing, not those draws. A record
of the DES's own scheduler (the live loop) serves the same draws as the DES: leave it at "scenario".
`acceptance="replay"` goes one further: each request at the rate of the accept length it realized
(`realized_request_rates`), so a closed batch's last request to finish, which sets the run's time,
draws as it did in the engine (its mean, not its sequence).

The bar (`serving_bar`): |tok/s error| and |TPOT p50 error| <= 5% on every record.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from simulator import __version__
from simulator.files import OUTPUT_KEY, SERVING_VALIDATION_OUTPUT
from simulator.inputs import UserInputError, format_validation_error, read_json
from simulator.evidence.live_records import LiveServingRun
from simulator.profile import CalibrationProfile
from simulator.serving.metrics import serving_metrics
from simulator.serving.costs import StepCosts
from simulator.serving.run import draws_metrics, num_draws, run_serving
from simulator.evidence.validate import record_files

SERVING_BAR_FRAC = 0.05  # the bar: tok/s and TPOT p50 within 5%


@dataclass(frozen=True)
class ServingComparison:
    """One live serving record against the DES on its scenario (latencies in ms, rates per second)."""

    source: str
    target: str
    speculative: bool
    concurrency: int
    num_requests: int
    same_schedule: bool
    measured_tok_per_s: float
    predicted_tok_per_s: float
    tok_per_s_error_frac: float
    measured_tpot_p50_ms: float
    predicted_tpot_p50_ms: float
    tpot_p50_error_frac: float
    measured_ttft_p50_ms: float
    predicted_ttft_p50_ms: float
    ttft_p50_error_frac: float
    measured_itl_p50_ms: float
    predicted_itl_p50_ms: float
    itl_p50_error_frac: float
    measured_mean_batch_size: float
    predicted_mean_batch_size: float


def load_serving_records(paths: list[Path]) -> list[tuple[str, LiveServingRun]]:
    """Read LiveServingRun JSON files (folders are searched for *.json).

    Raises:
        UserInputError: a missing path, no records, a file that is not JSON or not a LiveServingRun
            (naming the file and the field).
    """
    files = record_files(paths)
    out = []
    for f in {f.resolve(): f for f in files}.values():
        data = read_json(f, "live serving record (LiveServingRun JSON)")
        if isinstance(data, dict) and data.get("kind") != "live_serving":
            raise UserInputError(f"{f}: not a live serving record (kind: live_serving expected; `specdecsim "
                                 "live --serving` writes them, `specdecsim validate` reads the other live records)")
        try:
            out.append((str(f), LiveServingRun.model_validate(data, strict=True)))
        except ValidationError as e:
            raise UserInputError(format_validation_error(str(f), e)) from None
    return out


def _err(predicted: float, measured: float) -> float:
    """predicted / measured - 1; NaN where either is not a positive figure (a record without ITL gaps)."""
    if not (np.isfinite(predicted) and np.isfinite(measured)) or measured <= 0:
        return float("nan")
    return predicted / measured - 1


def realized_acceptance_rate(rec: LiveServingRun) -> float | None:
    """The i.i.d. rate whose mean accept length at the record's num_steps is the one its decode steps
    realized; None where the record does not speculate, forces no i.i.d. rate or realized no interior mean."""
    from scipy.optimize import brentq

    from simulator.acceptance import iid_mean_accept_length
    k = rec.scenario.spec.num_steps
    steps = int(np.sum(rec.step_batch_size))
    if not rec.speculative or rec.scenario.acceptance.kind != "iid" or steps == 0:
        return None
    mean = float(np.sum(rec.step_accepted)) / steps
    if not 1.0 < mean < k + 1:
        return None
    return float(brentq(lambda a: iid_mean_accept_length(a, k) - mean, 1e-12, 1 - 1e-12))


def realized_request_rates(rec: LiveServingRun) -> np.ndarray | None:
    """Each request's own i.i.d. rate: the one whose mean accept length at the record's num_steps is
    the request's tokens after its first over the decode steps that emitted to it (its gaps), in the
    order the requests were sent (the record's); a request that realized no interior mean takes the
    end of the range it reached. None where the record does not speculate, forces no i.i.d. rate or
    draws one accept length a step for the whole batch (`draw: per_batch_step`: no per-request draw)."""
    from scipy.optimize import brentq

    from simulator.acceptance import iid_mean_accept_length
    acc = rec.scenario.acceptance
    k = rec.scenario.spec.num_steps
    if not rec.speculative or acc.kind != "iid" or acc.draw == "per_batch_step":
        return None
    order = np.argsort(np.asarray(rec.arrival_us, dtype=float), kind="stable")
    gaps = np.bincount(np.asarray(rec.itl_request_idx, dtype=np.int64), minlength=len(rec.arrival_us))
    out = []
    for i in order:
        if gaps[i] == 0:
            out.append(acc.acceptance_rate)
            continue
        mean = (rec.output_tokens[i] - 1) / gaps[i]
        if mean <= 1.0:
            out.append(0.0)
        elif mean >= k + 1:
            out.append(1.0)
        else:
            out.append(float(brentq(lambda a: iid_mean_accept_length(a, k) - mean, 1e-12, 1 - 1e-12)))
    return np.asarray(out)


def check_record(src: str, rec: LiveServingRun, profile: CalibrationProfile,
                 costs_source: str | None = None, acceptance: str = "scenario") -> ServingComparison:
    """The serving DES on the record's scenario (costs.source replaced where given; acceptance="measured":
    at the rate the run realized, `realized_acceptance_rate`; "replay": each request at the rate it
    realized, `realized_request_rates`, else as "measured") against the record.

    Raises:
        ArithmeticError: no request finished in the simulation.
        UserInputError: the scenario asks the profile for something it lacks.
    """
    sc = rec.scenario
    if costs_source is not None:
        sc = sc.model_copy(update={"costs": sc.costs.model_copy(update={"source": costs_source})})
    rates = realized_request_rates(rec) if acceptance == "replay" else None
    if rates is None and acceptance in ("measured", "replay") and (rate := realized_acceptance_rate(rec)) is not None:
        sc = sc.model_copy(update={"acceptance": sc.acceptance.model_copy(update={"acceptance_rate": rate})})
    cfg = sc.serving
    costs = StepCosts(sc, profile)
    sim = run_serving(sc, profile, rec.speculative, costs, request_rates=rates)
    live = rec.serving_records()
    meas = serving_metrics(live, cfg.warmup_s, cfg.slo.ttft_ms, cfg.slo.tpot_ms)
    same = (len(sim.step_start_us) == len(live.step_start_us)
            and np.array_equal(sim.step_batch_size, live.step_batch_size)
            and np.array_equal(sim.step_accepted, live.step_accepted)
            and np.array_equal(sim.output_tokens, live.output_tokens))
    # a run that drew what the DES's first draw drew (the live loop replays the seeded streams) is held to
    # that draw; an engine's own draws, to the mean of the scenario's draws (`num_draws`: a closed batch)
    draws = [sim] if same else [sim] + [run_serving(sc, profile, rec.speculative, costs, rates, d)
                                         for d in range(1, num_draws(sc, rec.speculative))]
    pred = draws_metrics(draws, cfg.warmup_s, cfg.slo.ttft_ms, cfg.slo.tpot_ms)

    def p50(x):
        return x.p50 if x is not None else float("nan")
    return ServingComparison(
        source=src, target=sc.target.name, speculative=rec.speculative, concurrency=rec.concurrency,
        num_requests=meas.num_requests, same_schedule=bool(same),
        measured_tok_per_s=meas.output_tok_per_s, predicted_tok_per_s=pred.output_tok_per_s,
        tok_per_s_error_frac=_err(pred.output_tok_per_s, meas.output_tok_per_s),
        measured_tpot_p50_ms=p50(meas.tpot_ms), predicted_tpot_p50_ms=p50(pred.tpot_ms),
        tpot_p50_error_frac=_err(p50(pred.tpot_ms), p50(meas.tpot_ms)),
        measured_ttft_p50_ms=p50(meas.ttft_ms), predicted_ttft_p50_ms=p50(pred.ttft_ms),
        ttft_p50_error_frac=_err(p50(pred.ttft_ms), p50(meas.ttft_ms)),
        measured_itl_p50_ms=p50(meas.itl_ms), predicted_itl_p50_ms=p50(pred.itl_ms),
        itl_p50_error_frac=_err(p50(pred.itl_ms), p50(meas.itl_ms)),
        measured_mean_batch_size=meas.mean_batch_size, predicted_mean_batch_size=pred.mean_batch_size)


def serving_bar(rows: list[ServingComparison], bar_frac: float = SERVING_BAR_FRAC) -> tuple[bool, str]:
    """(met, one line): |tok/s error| and |TPOT p50 error| <= bar_frac on every record."""
    if not rows:
        return False, "serving bar: no records"
    worst_tok = max(abs(r.tok_per_s_error_frac) for r in rows)
    worst_tpot = max(abs(r.tpot_p50_error_frac) for r in rows)
    other = sum(not r.same_schedule for r in rows)
    met = worst_tok <= bar_frac and worst_tpot <= bar_frac and other == 0
    return met, (f"serving bar ({bar_frac:.0%} on tok/s and TPOT p50, {len(rows)} runs): "
                 f"{'met' if met else 'NOT met'}; max |tok/s error| {worst_tok:.1%}, max |TPOT p50 error| "
                 f"{worst_tpot:.1%}" + (f"; {other} run(s) served another schedule than the simulation, so their "
                                        "step times are not comparable" if other else ""))


def to_json(rows: list[ServingComparison], profile_ref: str, bar_frac: float = SERVING_BAR_FRAC) -> dict:
    """The comparison as a JSON-ready dict (marked as a serving validation output)."""
    met, line = serving_bar(rows, bar_frac)
    def finite(row: dict) -> dict:  # a figure a record cannot give (no ITL gaps: its error) is null, not NaN
        return {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in row.items()}
    return {OUTPUT_KEY: SERVING_VALIDATION_OUTPUT, "version": __version__, "profile": profile_ref,
            "bar_frac": bar_frac, "bar_met": met, "bar": line, "points": [finite(asdict(r)) for r in rows]}
