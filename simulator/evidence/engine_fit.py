"""Fit a serving engine's named parameters to observed runs (scipy least squares).

An observation is a scenario (everything stated: hardware, models, steps, accept length, batch)
and a measured tok/s, speculative or baseline. The fit varies a small named set of engine
fields (`FIT_PARAMS`: host time per baseline decode step, per speculative cycle, per draft step,
or the kernel efficiency relative to the profile) so that the closed-form predictions
(simulator.analytic) match, minimising the relative tok/s errors with
`scipy.optimize.least_squares` (bounded, trust-region reflective). Standard errors come from the
Jacobian at the optimum, cov = s^2 (J^T J)^-1 with s^2 = sum(r^2) / (m - n); with as many
observations as parameters (m = n) the fit is exact and has no error estimate (None).

Two users:
- simulator.evidence.engine_defaults: the engine defaults in simulator/engines/models.py (ENGINE_HOST_DEFAULTS)
  are this fit on the figures marked `role: fit` in data/cases/public.yaml (`python -m
  simulator.evidence.engine_defaults` prints them; tests/test_engine_fit.py checks the shipped defaults);
- `specdecsim calibrate from-runs`: a user's own engine logs (simulator.evidence.importers) and scenario.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from simulator.inputs import UserInputError

# The parameters fitted per engine, and their bounds (us; kernel_efficiency: a ratio).
FIT_PARAMS: dict[str, tuple[str, ...]] = {
    "sglang": ("host_decode_step_us", "host_cycle_us"),
    "vllm": ("host_decode_step_us", "host_cycle_us", "host_draft_step_us"),
}
# TensorRT-LLM has no fitted defaults: the one public TensorRT-LLM run with an accept length (the
# DeepSeek-R1 MTP sweep) is a sweep scored by the leave-out protocol instead (simulator.evidence.cases), and
# its overlap scheduler hides host work shorter than the GPU's, so the profile's host times stand.
LEAVE_OUT_PARAMS = ("kernel_efficiency", "host_cycle_us")
BOUNDS: dict[str, tuple[float, float]] = {
    "host_decode_step_us": (0.0, 1e5), "host_cycle_us": (0.0, 1e5), "host_draft_step_us": (0.0, 1e5),
    "kernel_efficiency": (0.05, 20.0),
}
X0: dict[str, float] = {"host_decode_step_us": 100.0, "host_cycle_us": 200.0, "host_draft_step_us": 50.0,
                        "kernel_efficiency": 1.0}


MIN_TOK_S, MAX_TOK_S = 1e-6, 1e9  # a run's throughput: past these its residuals are not finite numbers


@dataclass
class Observation:
    """One observed figure: `build(engine_fields)` -> Scenario; `speculative` picks the metric."""

    label: str
    build: Callable[[dict], object]
    speculative: bool
    tok_s: float
    weight: float = 1.0  # log lines / records the figure averages: its residual counts that often


@dataclass
class FitResult:
    """Fitted engine fields with standard errors (None when m <= n) and per-observation errors."""

    kind: str
    params: dict[str, float]
    stderr: dict[str, float | None]
    residuals: list[tuple[str, float]] = field(default_factory=list)
    success: bool = True
    message: str = ""

    def table(self) -> str:
        lines = [f"{self.kind}: fitted on {len(self.residuals)} figures ({self.message})"]
        for k, v in self.params.items():
            se = self.stderr.get(k)
            flag = "  (not determined: the error exceeds the value)" if se is not None and se > abs(v) else ""
            lines.append(f"  {k:22s} {v:12.4g}  {'+/- ' + format(se, '.3g') if se is not None else '(no error estimate)'}"
                         + flag)
        for label, r in self.residuals:
            lines.append(f"  {label:60s} {r:+.2%}")
        return "\n".join(lines)


def predict(scenario) -> tuple[float, float]:
    """(speculative tok/s, baseline tok/s) of a scenario, closed form (every accepted token counts)."""
    from simulator.acceptance import build_acceptance
    from simulator.analytic import analyze
    from simulator.costs.forward import CostModel
    from simulator.scenario import load_profile_for
    profile = _profile_of(scenario, load_profile_for)
    cost = CostModel(scenario, profile)
    r = analyze(scenario, cost, build_acceptance(scenario.acceptance, scenario.spec), truncate=False)
    return r.tok_per_s, r.baseline_tok_per_s


_PROFILES: dict[tuple, object] = {}


def _profile_of(scenario, load):
    """The scenario's profile, read once per (profile, hardware, file version) in this process: a
    fit predicts every observation at every step of the least squares from one profile."""
    from simulator.profile import resolve_profile_path
    try:
        path = resolve_profile_path(scenario.profile)
        stamp = path.stat().st_mtime_ns, path.stat().st_size
    except (FileNotFoundError, OSError):
        return load(scenario)[0]  # the loader says what is wrong
    key = (str(path), stamp, scenario.hardware.model_dump_json())
    if key not in _PROFILES:
        if len(_PROFILES) > 16:
            _PROFILES.clear()
        _PROFILES[key] = load(scenario)[0]
    return _PROFILES[key]


def predict_tok_s(scenario, speculative: bool) -> float:
    """Closed-form tok/s of a scenario (speculative or its baseline), every accepted token counted."""
    spec, base = predict(scenario)
    return spec if speculative else base


def fit_engine(kind: str, observations: list[Observation], params: tuple[str, ...] | None = None,
               drop_no_effect: bool = False) -> FitResult:
    """Least-squares fit of `params` (default FIT_PARAMS[kind]) to the observations.

    A parameter that does not change any prediction (e.g. host time hidden by an overlap
    scheduler) cannot be fitted: an error, or with `drop_no_effect` the fit is redone without it
    and the result's message names it.

    Raises:
        UserInputError: no observations, an unknown or repeated parameter, fewer observations than
            parameters, or (without drop_no_effect) a parameter with no effect.
    """
    params = tuple(params or FIT_PARAMS.get(kind, ()))
    dups = sorted({p for p in params if params.count(p) > 1})
    if dups:
        raise UserInputError(f"fit parameters named twice: {', '.join(dups)}")
    unknown = [p for p in params if p not in BOUNDS]
    if unknown:
        raise UserInputError(f"cannot fit {', '.join(unknown)}; fittable: {', '.join(BOUNDS)}")
    if not params:
        raise UserInputError(f"engine kind {kind!r} has no fittable parameters (one of {', '.join(FIT_PARAMS)})")
    w = np.sqrt(np.array([o.weight for o in observations], float))
    if len(observations) < len(params):
        raise UserInputError(f"fitting {len(params)} parameters ({', '.join(params)}) needs at least as many "
                             f"observed runs; got {len(observations)}")
    lo = np.array([BOUNDS[p][0] for p in params])
    hi = np.array([BOUNDS[p][1] for p in params])
    scale = np.array([X0[p] for p in params])

    def fields(x: np.ndarray) -> dict:
        return {p: float(v) for p, v in zip(params, x * scale)}

    def residuals(x: np.ndarray) -> np.ndarray:
        f = fields(x)
        return w * np.array([predict_tok_s(o.build(f), o.speculative) / o.tok_s - 1.0 for o in observations])

    x0 = np.clip(np.ones(len(params)), lo / scale, hi / scale)
    from scipy.optimize import least_squares  # here: scipy.optimize is slow to import
    sol = least_squares(residuals, x0, bounds=(lo / scale, hi / scale), method="trf", x_scale="jac",
                        diff_step=1e-4)
    m, n = float(w @ w), len(params)  # figures: every log line a point averages counts
    dead = [p for i, p in enumerate(params) if not np.any(np.abs(sol.jac[:, i]) > 1e-9)]
    if dead and drop_no_effect and len(dead) < n:
        kept = fit_engine(kind, observations, tuple(p for p in params if p not in dead), drop_no_effect=True)
        kept.message += f"; no effect, not fitted: {', '.join(dead)}"
        return kept
    if dead:
        raise UserInputError(f"{', '.join(dead)} does not change the prediction of these runs (no effect at "
                             f"{', '.join(f'{p}={v:g}' for p, v in fields(sol.x).items() if p in dead)}): it cannot "
                             "be fitted from them")
    stderr: dict[str, float | None] = {p: None for p in params}
    if m > n:
        s2 = float(sol.fun @ sol.fun) / (m - n)
        jtj = sol.jac.T @ sol.jac
        try:
            cov = np.linalg.inv(jtj) * s2
            for i, p in enumerate(params):
                v = cov[i, i]
                stderr[p] = float(math.sqrt(v) * scale[i]) if v >= 0 and math.isfinite(v) else None
        except np.linalg.LinAlgError:
            pass
    at_bound = [p for i, p in enumerate(params) if sol.active_mask[i] != 0]
    unweighted = sol.fun / w
    worst = float(np.max(np.abs(unweighted)))
    if m == n and worst < 1e-3:
        how = "exact: as many runs as parameters"
    elif m <= n:
        how = f"not determined: as many runs as parameters, largest error {worst:.1%}"
    else:
        how = (f"least squares over {len(observations)} runs, largest error {worst:.1%}" if m == len(observations)
               else f"least squares over {len(observations)} operating points ({m:,.0f} log lines or records), "
                    f"largest error {worst:.1%}")
    if at_bound:
        how += f"; at a bound: {', '.join(at_bound)}"
    return FitResult(kind, fields(sol.x), stderr, [(o.label, float(r)) for o, r in zip(observations, unweighted)],
                     bool(sol.success), how)


def run_observations(scenario, runs, source: str) -> list[Observation]:
    """Observations from a scenario and a user's observed runs (simulator.evidence.importers).

    Each run sets what it states on a copy of the scenario: its batch size (rounded), num_steps,
    and its acceptance (per-position or mean accept length: importers.acceptance_from_run);
    a run with speculation off (or no acceptance) is a baseline observation. Runs without a
    throughput (output tok/s or TPOT) are skipped.

    Raises:
        UserInputError: no run has a throughput; a run's acceptance does not fit the scenario.
    """
    from simulator.evidence.importers import acceptance_from_run
    from simulator.scenario import scenario_from_dict
    base = scenario.model_dump(mode="json", exclude_none=True)
    for role in ("target", "draft"):  # the dump holds the config.json's fields already
        base[role].pop("config_path", None)
        base[role].pop("config_notes", None)
    out = []
    for run in runs:
        where = f"{run.source_file}:{run.source_line}" if run.source_line else run.source_file
        if run.num_intervals > 1:
            where += f" (+{run.num_intervals - 1:,} more at batch {round(run.batch_size or 0)})"
        b = max(1, round(run.batch_size)) if run.batch_size else scenario.workload.batch_size
        if run.output_tok_per_s:
            tok_s = float(run.output_tok_per_s)
        elif run.tpot_ms:
            tok_s = 1000.0 * b / run.tpot_ms
        else:
            continue
        if not (math.isfinite(tok_s) and MIN_TOK_S <= tok_s <= MAX_TOK_S):
            raise UserInputError(f"{where}: a throughput of {tok_s:g} tok/s; a run's is {MIN_TOK_S:g}..{MAX_TOK_S:g} "
                                 "tok/s (output tok/s, or batch / TPOT)")
        spec_on = run.speculative if run.speculative is not None else (
            run.accept_length is not None or bool(run.per_position_acceptance))
        data = {**base, "workload": {**base["workload"], "batch_size": b}}
        if spec_on:
            steps = run.num_steps or scenario.spec.num_steps
            spec = {**base["spec"], "num_steps": steps}
            if scenario.spec.topk == 1:
                spec["num_draft_tokens"] = steps + 1
            data["spec"] = spec
            acc = acceptance_from_run(run, steps)
            if acc["kind"] == "positional" and len(acc["acceptance_rates"]) != steps:
                raise UserInputError(f"{where}: {len(acc['acceptance_rates'])} per-position rates but num_steps "
                                     f"{steps}; give the scenario the run's num_steps")
            data["acceptance"] = acc

        def build(fields, data=data, where=where):
            d = {**data, "serving_engine": {**data["serving_engine"], **fields}}
            return scenario_from_dict(d, f"{source} with {where}", Path("."))

        out.append(Observation(where, build, spec_on, tok_s, float(run.num_intervals)))
    if not out:
        raise UserInputError(f"{source}: none of the runs states a throughput (output tok/s or TPOT)")
    return out
