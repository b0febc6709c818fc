"""Published cases: replay what serving engines measured on real boxes, and score the prediction.

A case file (data/cases/public.yaml; schema `CaseFile`) holds, per published source, the stated
inputs (engine, hardware, models, TP, batch, steps, topk, accept length) and the published figures
(baseline and speculative tok/s or TPOT). `replay_cases` predicts each figure from the hardware
catalog, the engine model and the profile alone (closed form, `simulator.analytic`) and scores it:

- a speculative run passes when its tok/s is within 10% (`TOK_S_TOL`) and, where the source also
  gives a baseline, its speedup within 0.10 (`SPEEDUP_TOL`) of the published ones;
- a baseline passes within 10%; a communication case (simulator.costs.collectives_model) within 15%;
- figures marked `role: fit` set the engines' fitted host times (simulator.evidence.engine_fit) and are
  reported but not scored; figures the source lacks an input for are `replayable: false`;
- a case passes when every scored figure of it passes; cases with nothing scored are not counted;
- a sweep also reports the leave-out protocol (`leave_out`): the engine's kernel efficiency and
  host time per cycle fitted on the sweep's two end runs alone, the runs between them predicted
  (rows with role 'leave_out', outside the pass count).

The accept length is an input: the acceptance rate is solved from it (scipy brentq on the
acceptance model's mean: iid for chains, per-candidate for trees), so a case tests the cost of a
cycle, not the draft's quality.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, ValidationError, model_validator

from simulator.evidence.engine_fit import predict  # noqa: F401  (re-exported: the closed form of a case's scenario)
from simulator.inputs import UserInputError, format_validation_error, read_yaml, refuse_nulls
from simulator.schema_base import StrictModel

TOK_S_TOL = 0.10       # issue 14: speculative tok/s within 10%
SPEEDUP_TOL = 0.10     # ... and speedup within 0.10 (absolute) where a baseline is published
COMM_TOL = 0.15        # communication cases within 15%
DEFAULT_CASES = Path("cases") / "public.yaml"  # under simulator.profile.data_dir()
DEFAULT_COMM_CASES = Path("cases") / "comm_public.yaml"

Role = Literal["scored", "fit"]


class CaseFigure(StrictModel):
    """A published figure: tok/s of the whole batch or TPOT (ms per output token per request)."""

    tok_s: float | None = Field(None, ge=1e-3, le=1e7, description="Output tok/s, 0.001..1e7.")
    tpot_ms: float | None = Field(None, ge=1e-3, le=1e5, description="ms per output token, 0.001..1e5.")
    role: Role = "scored"

    @model_validator(mode="after")
    def _one(self):
        if (self.tok_s is None) == (self.tpot_ms is None):
            raise ValueError("give exactly one of tok_s, tpot_ms")
        return self


class CaseRun(CaseFigure):
    """One speculative run of a case: its spec settings, accept length and figure."""

    label: str = Field("", max_length=200)
    num_steps: int | None = Field(None, ge=1, le=64)
    topk: int = Field(1, ge=1, le=64)
    num_draft_tokens: int | None = Field(None, ge=2, le=4096)
    accept_length: float | None = Field(None, ge=1.0, le=65.0, description="Tokens per verify incl. the bonus.")
    engine: dict[str, Any] = Field(default_factory=dict, description="serving_engine fields this run states.")
    context_len: int | None = Field(None, ge=1, le=2_097_152, description="The run's context, where the source "
                                    "states one per run (default the case's).")
    replayable: bool = True
    why: str = Field("", max_length=500)

    @model_validator(mode="after")
    def _inputs(self):
        if self.replayable and (self.num_steps is None or self.accept_length is None):
            raise ValueError("a replayable run needs num_steps and accept_length (else replayable: false, why)")
        if not self.replayable and not self.why:
            raise ValueError("replayable: false needs `why`")
        return self


class CaseBaseline(CaseFigure):
    """One more published no-speculation figure of a case, at its own batch or hardware setting."""

    label: str = Field("", max_length=200)
    batch_size: int | None = Field(None, ge=1, le=4096)
    hardware: dict[str, Any] = Field(default_factory=dict, description="hardware fields this run states.")


class CaseScenario(StrictModel):
    """The stated set-up of a case (models by name from the file's `models`)."""

    target: str | None = None
    draft: str | None = None
    tp_size: int = Field(1, ge=1, le=64)
    batch_size: int = Field(1, ge=1, le=4096)
    placement: str = "shared_tp"
    method: Literal["eagle3", "eagle", "mtp", "draft_model", "ngram"] = "eagle3"
    context_len: int | None = Field(None, ge=1, le=2_097_152)
    expert_parallel_size: int = Field(1, ge=1, le=64)
    expert_dispatch: Literal["allreduce", "all_to_all"] = "allreduce"


class PublishedCase(StrictModel):
    """One published source's figures and the inputs it states."""

    id: str = Field(min_length=1, max_length=200)
    source: str = Field(min_length=1, max_length=1000)
    engine: dict[str, Any] = Field(default_factory=dict)
    hardware: dict[str, Any] = Field(default_factory=dict)
    assumed: list[str] = Field(default_factory=list)
    scenario: CaseScenario = CaseScenario()
    baseline: CaseFigure | None = None
    baselines: list[CaseBaseline] = Field(default_factory=list, description="Further baselines (batch, hardware).")
    sweep: bool = False
    runs: list[CaseRun] = Field(default_factory=list)
    replayable: bool = True
    why: str = ""


class CaseDefaults(StrictModel):
    context_len: int = Field(1024, ge=1, le=2_097_152)
    max_new_tokens: int = Field(256, ge=1, le=1_000_000)


class CaseFile(StrictModel):
    """A file of published cases (data/cases/public.yaml)."""

    defaults: CaseDefaults = CaseDefaults()
    models: dict[str, dict[str, Any]] = Field(default_factory=dict)
    cases: list[PublishedCase]

    @model_validator(mode="after")
    def _names(self):
        for c in self.cases:
            if not c.replayable:
                continue
            for role in ("target", "draft"):
                name = getattr(c.scenario, role)
                if name is None:
                    raise ValueError(f"case {c.id}: scenario.{role} is required (a name from `models`), or "
                                     "replayable: false with `why`")
                if name not in self.models:
                    raise ValueError(f"case {c.id}: scenario.{role} {name!r} is not in `models`")
        return self


def load_case_file(path: Path) -> CaseFile:
    """Read and validate a case file.

    Raises:
        UserInputError: unreadable, bad YAML, or a field out of range (naming the file and field).
    """
    data = read_yaml(path, "case file")
    refuse_nulls(data, str(path))
    try:
        return CaseFile.model_validate(data, strict=True)  # as a scenario file: no string for a number
    except ValidationError as e:
        raise UserInputError(format_validation_error(str(path), e)) from None


@dataclass
class FigureResult:
    """A published figure and its prediction (JSON row of `specdecsim cases --json`)."""

    case_id: str
    label: str
    kind: str                        # baseline | speculative | comm
    metric: str                      # tok_s | tpot_ms | latency_us
    published: float | None
    predicted: float | None
    error_frac: float | None
    role: str                        # scored | fit | not_replayable
    passed: bool | None
    speedup_published: float | None = None
    speedup_predicted: float | None = None
    speedup_error: float | None = None
    accept_length: float | None = None
    num_steps: int | None = None
    why: str = ""


@dataclass
class CaseResult:
    id: str
    source: str
    passed: bool | None              # None: nothing scored
    assumed: list[str]
    figures: list[FigureResult] = field(default_factory=list)

    def to_json(self) -> dict:
        scored = [f for f in self.figures if f.role == "scored"]
        worst = max(scored, key=lambda f: abs(f.error_frac or 0.0), default=None)
        return {"id": self.id, "source": self.source, "passed": self.passed, "assumed": self.assumed,
                "metric": worst.metric if worst else None, "predicted": worst.predicted if worst else None,
                "published": worst.published if worst else None, "error_frac": worst.error_frac if worst else None,
                "figures": [asdict(f) for f in self.figures]}


def _model(cf: CaseFile, name: str) -> dict:
    return dict(cf.models[name])


def _acceptance(spec: dict, accept_length: float, source: str) -> dict:
    """The acceptance section whose mean accept length is `accept_length` (brentq on the rate).

    Raises:
        UserInputError: the accept length is not reachable with these steps / tree.
    """
    from simulator.acceptance import build_acceptance
    from simulator.workload_config import IidAcceptance, SpecConfig, TreeAcceptance
    sp = SpecConfig(**spec)
    tree = sp.topk > 1

    def mean(a: float) -> float:
        acc = TreeAcceptance(acceptance_rate=a) if tree else IidAcceptance(acceptance_rate=a)
        return build_acceptance(acc, sp).mean_accept_length()

    lo, hi = mean(0.0), mean(1.0)
    if not lo - 1e-9 <= accept_length <= hi + 1e-9:
        raise UserInputError(f"{source}: accept_length {accept_length} is outside {lo:.3g}..{hi:.3g}, what "
                             f"num_steps={sp.num_steps} topk={sp.topk} num_draft_tokens={sp.num_draft_tokens} can give")
    from scipy.optimize import brentq  # here: scipy.optimize is slow to import
    a = 1.0 if accept_length >= hi else (0.0 if accept_length <= lo else
                                          brentq(lambda x: mean(x) - accept_length, 0.0, 1.0, xtol=1e-10))
    return {"kind": "tree" if tree else "iid", "acceptance_rate": float(a)}


def build_case_scenario(cf: CaseFile, case: PublishedCase, run: CaseRun | None, base_dir: Path,
                        engine_overrides: dict | None = None, baseline: CaseBaseline | None = None) -> Any:
    """The Scenario of one run of a case (run None: the baseline, with a 1-step chain spec).

    Raises:
        UserInputError: a model, engine or hardware field out of range (naming the case).
    """
    from simulator.scenario import scenario_from_dict
    sc = case.scenario
    src = f"{case.id}{(': ' + (run.label or f'{run.num_steps} steps')) if run else ': baseline'}"
    steps = run.num_steps if run is not None else 1
    topk = run.topk if run is not None else 1
    ndt = (run.num_draft_tokens if run is not None and run.num_draft_tokens else steps + 1)
    spec = {"method": sc.method, "num_steps": steps, "topk": topk, "num_draft_tokens": ndt}
    al = run.accept_length if run is not None else 1.0
    data = {
        "name": src[:200], "profile": "h200", "target": _model(cf, sc.target), "draft": _model(cf, sc.draft),
        "tp_size": sc.tp_size, "placement": sc.placement,
        "expert_parallel_size": sc.expert_parallel_size, "expert_dispatch": sc.expert_dispatch,
        "hardware": {**case.hardware, **(baseline.hardware if baseline is not None else {})}, "spec": spec,
        "acceptance": _acceptance(spec, al, src),
        "workload": {"batch_size": (baseline.batch_size if baseline is not None and baseline.batch_size
                                    else sc.batch_size),
                     "context_len": (run.context_len if run is not None and run.context_len
                                     else sc.context_len or cf.defaults.context_len),
                     "max_new_tokens": cf.defaults.max_new_tokens},
        "serving_engine": {**case.engine, **(run.engine if run is not None else {}), **(engine_overrides or {})},
        "fidelity": {"num_cycles": 100},
    }
    return scenario_from_dict(data, src, base_dir)


def _figure_value(fig: CaseFigure, tok_s: float, batch_size: int) -> tuple[str, float, float]:
    """(metric, published, predicted) in the figure's own metric."""
    if fig.tok_s is not None:
        return "tok_s", fig.tok_s, tok_s
    return "tpot_ms", fig.tpot_ms, 1000.0 * batch_size / tok_s


def _tok_s_of(fig: CaseFigure, batch_size: int) -> float:
    return fig.tok_s if fig.tok_s is not None else 1000.0 * batch_size / fig.tpot_ms


def replay_case(cf: CaseFile, case: PublishedCase, base_dir: Path,
                engine_overrides: dict | None = None) -> CaseResult:
    """Predict and score every figure of one case (see the module docstring)."""
    res = CaseResult(case.id, case.source, None, list(case.assumed))
    if not case.replayable:
        res.figures.append(FigureResult(case.id, "", "speculative", "tok_s", None, None, None, "not_replayable",
                                        None, why=case.why))
        return res
    b = case.scenario.batch_size
    base_pred = None
    if case.baseline is not None:
        sc = build_case_scenario(cf, case, None, base_dir, engine_overrides)
        _, base_pred = predict(sc)
        metric, pub, pred = _figure_value(case.baseline, base_pred, b)
        err = pred / pub - 1.0
        res.figures.append(FigureResult(case.id, "baseline", "baseline", metric, pub, pred, err, case.baseline.role,
                                        abs(err) <= TOK_S_TOL if case.baseline.role == "scored" else None))
    for extra in case.baselines:
        sc = build_case_scenario(cf, case, None, base_dir, engine_overrides, baseline=extra)
        _, pred_base = predict(sc)
        metric, pub, pred = _figure_value(extra, pred_base, extra.batch_size or b)
        err = pred / pub - 1.0
        res.figures.append(FigureResult(case.id, extra.label or f"baseline batch {extra.batch_size}", "baseline",
                                        metric, pub, pred, err, extra.role,
                                        abs(err) <= TOK_S_TOL if extra.role == "scored" else None))
    for run in case.runs:
        label = run.label or f"{run.num_steps} steps"
        if not run.replayable:
            pub_metric = "tok_s" if run.tok_s is not None else "tpot_ms"
            res.figures.append(FigureResult(case.id, label, "speculative", pub_metric, run.tok_s or run.tpot_ms,
                                            None, None, "not_replayable", None, num_steps=run.num_steps,
                                            why=run.why))
            continue
        sc = build_case_scenario(cf, case, run, base_dir, engine_overrides)
        spec_pred, base_pred_run = predict(sc)
        metric, pub, pred = _figure_value(run, spec_pred, b)
        err = pred / pub - 1.0
        fr = FigureResult(case.id, label, "speculative", metric, pub, pred, err, run.role, None,
                          accept_length=run.accept_length, num_steps=run.num_steps)
        ok = abs(err) <= TOK_S_TOL
        if case.baseline is not None:
            fr.speedup_published = _tok_s_of(run, b) / _tok_s_of(case.baseline, b)
            fr.speedup_predicted = spec_pred / base_pred_run
            fr.speedup_error = fr.speedup_predicted - fr.speedup_published
            ok = ok and abs(fr.speedup_error) <= SPEEDUP_TOL
        fr.passed = ok if run.role == "scored" else None
        res.figures.append(fr)
    scored = [f.passed for f in res.figures if f.role == "scored"]
    res.passed = all(scored) if scored else None
    if engine_overrides is None:
        res.figures += leave_out(cf, case, base_dir)
    return res


def leave_out(cf: CaseFile, case: PublishedCase, base_dir: Path) -> list[FigureResult]:
    """The leave-out protocol of a sweep: fit the engine's LEAVE_OUT_PARAMS (kernel efficiency
    and host time per cycle, simulator.evidence.engine_fit) on the sweep's two end runs only, for this case
    alone, then predict the runs between them. Rows have role 'leave_out'; [] for a case that is
    not a sweep or has fewer than three replayable runs."""
    from simulator.evidence.engine_fit import LEAVE_OUT_PARAMS, Observation, fit_engine
    runs = [r for r in case.runs if r.replayable]
    if not case.sweep or len(runs) < 3:
        return []
    b = case.scenario.batch_size
    ends = (runs[0], runs[-1])
    obs = [Observation(f"{case.id}: {r.label or f'{r.num_steps} steps'}",
                       lambda f, r=r: build_case_scenario(cf, case, r, base_dir, f), True, _tok_s_of(r, b))
           for r in ends]
    fit = fit_engine(case.engine.get("kind", "live_loop"), obs, LEAVE_OUT_PARAMS, drop_no_effect=True)
    out = []
    for run in runs[1:-1]:
        sc = build_case_scenario(cf, case, run, base_dir, fit.params)
        spec_pred, _ = predict(sc)
        metric, pub, pred = _figure_value(run, spec_pred, b)
        err = pred / pub - 1.0
        out.append(FigureResult(case.id, f"{run.label or f'{run.num_steps} steps'} (leave-out: "
                                         + ", ".join(f"{k} {v:.3g}" for k, v in fit.params.items()) + ")",
                                "speculative", metric, pub, pred, err, "leave_out", abs(err) <= TOK_S_TOL,
                                accept_length=run.accept_length, num_steps=run.num_steps))
    return out


def is_comm_case_file(path: Path) -> bool:
    """Whether `path` is a communication case file (data/cases/comm_public.yaml: every case has
    `points`, none has `runs` or `scenario`), to be replayed by `comm_results`.

    Raises:
        UserInputError: unreadable or not YAML.
    """
    data = read_yaml(path, "case file")
    cases = data.get("cases") if isinstance(data, dict) else None
    return (isinstance(cases, list) and bool(cases) and set(data) == {"cases"}
            and all(isinstance(c, dict) and "points" in c and not {"runs", "scenario"} & set(c) for c in cases))


def comm_results(path: Path) -> list[CaseResult]:
    """The communication cases of `path` (simulator.costs.collectives_fit.replay_comm_cases)."""
    from simulator.costs.collectives_fit import replay_comm_cases
    sources = {c.get("id"): c.get("source", "") for c in (read_yaml(path, "case file") or {}).get("cases", [])
               if isinstance(c, dict)}
    out: dict[str, CaseResult] = {}
    for row in replay_comm_cases(path):
        cid = row["case_id"] if "case_id" in row else row["id"]
        cr = out.setdefault(cid, CaseResult(cid, sources.get(cid, ""), None, []))
        if "size_bytes" not in row:
            continue
        role = "scored" if row.get("scored", True) else "fit"
        err = row["error_frac"]
        cr.figures.append(FigureResult(cid, f"{row.get('algorithm', '')} {row['size_bytes']:,} B", "comm",
                                       "latency_us", row["published_us"], row["predicted_us"], err, role,
                                       (abs(err) <= COMM_TOL) if role == "scored" else None))
    for cr in out.values():
        scored = [f.passed for f in cr.figures if f.role == "scored"]
        cr.passed = all(scored) if scored else None
    return list(out.values())


def replay_cases(path: Path, engine_overrides: dict[str, dict] | None = None,
                 comm_path: Path | None = None) -> list[CaseResult]:
    """Replay every case of a case file (plus the communication cases when available).

    Args:
        path: case file. engine_overrides: engine kind -> serving_engine fields to force (the fit
            uses it). comm_path: a communication case file to replay too (None: none).

    Raises:
        UserInputError: a bad case file or case.
    """
    cf = load_case_file(path)
    out = []
    for case in cf.cases:
        kind = case.engine.get("kind", "live_loop")
        try:
            out.append(replay_case(cf, case, path.parent, (engine_overrides or {}).get(kind)))
        except UserInputError as e:
            raise UserInputError(f"{path}: {e}") from None
    if engine_overrides is None and comm_path is not None:
        out += comm_results(comm_path)
    return out


def summary(results: list[CaseResult]) -> dict:
    """Pass counts: cases with something scored, passed, and the fraction."""
    counted = [r for r in results if r.passed is not None]
    passed = sum(bool(r.passed) for r in counted)
    return {"cases": len(results), "scored_cases": len(counted), "passed": passed,
            "pass_frac": passed / len(counted) if counted else None,
            "not_replayable": sum(r.passed is None for r in results)}


def median_abs_error(results: list[CaseResult], kind: str) -> float | None:
    errs = [abs(f.error_frac) for r in results for f in r.figures
            if f.kind == kind and f.role == "scored" and f.error_frac is not None]
    return float(np.median(errs)) if errs else None
