"""Sweep and search points: each point's metrics and running many of them in chunks on a backend.

A point is (point index, Scenario, resolved profile path) (`point_items`). Its metrics are a dict
(the CSV's metric columns and `breakdown_us`): the closed form (`analytic_metrics`, runs of
points that share a cost model together: `analytic_metrics_many`), the DES (`des_metrics`) and,
for a scenario with a `serving:` section, the serving DES's columns (`serving_metrics`).
Profiles, latency lookups and cost models are cached per process (a worker loads each profile
once: `init_worker`). `run_points` runs chunks of points on a backend (simulator.studies.backend)
and keys the results by point index, so neither the backend nor the order chunks finish in
changes them; `des_agreement` is the DES spot-check of a closed-form sweep.
"""

from __future__ import annotations

import json
import math
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from simulator.config import Scenario
from simulator.scenario import UserInputError, load_profile_for
from simulator.studies.backend import Backend
from simulator.units import US_PER_MS

_PROFILES: dict[str, Any] = {}
_COSTS: dict[tuple[str, str], Any] = {}
_LOOKUPS: dict[tuple, Any] = {}
_COST_CACHE_MAX = 4096


def clear_caches() -> None:
    """Forget this process's profiles, latency lookups and cost models (benchmarks time cold runs)."""
    _PROFILES.clear()
    _COSTS.clear()
    _LOOKUPS.clear()


def init_worker(profile_paths: list[str]) -> None:
    """Import the solvers and load each profile once per worker process (idempotent)."""
    import simulator.analytic, simulator.simulate  # noqa: F401,E401
    from simulator.profile import load_profile
    for p in profile_paths:
        if p not in _PROFILES:
            _PROFILES[p] = load_profile(Path(p))


def cached_profile(path: str):
    """The profile at `path`, loaded once per process."""
    if path not in _PROFILES:
        init_worker([path])
    return _PROFILES[path]


def profile_for(sc: Scenario, path: str):
    """The point's profile: the file's, carried to the point's `hardware` GPU (cached)."""
    from simulator.hardware import apply_hardware
    hw = sc.hardware
    if hw.gpu is None and hw.box is None:
        return cached_profile(path)
    key = f"{path}|{hw.gpu}|{hw.box}|{hw.allreduce}"
    if key not in _PROFILES:
        _PROFILES[key] = apply_hardware(sc, cached_profile(path), source=path)
    return _PROFILES[key]


MEMORY_COLUMNS = ("memory_gb_per_gpu", "fits_memory")


def memory_of(sc: Scenario, path: str) -> tuple[float, bool]:
    """(GB per GPU of weights and KV cache on the fullest GPU, whether that fits the GPU's physical
    memory: simulator.memory) of a point with profile `path`."""
    from simulator.memory import GB, check_memory
    fit, too_big, _ = check_memory(sc, profile_for(sc, path))
    return fit.total_bytes / GB, too_big is None


def cost_key(sc: Scenario) -> str:
    """JSON of the scenario fields a CostModel depends on (not acceptance, seed, run length)."""
    dump = sc.model_dump(mode="json", exclude={"acceptance": True, "seed": True, "name": True, "description": True,
                                               "workload": {"max_new_tokens"}, "fidelity": True})
    return json.dumps(dump, sort_keys=True)


def _cost_model(sc: Scenario, profile_path: str):
    """A CostModel per (profile, cost_key), cached in this process (`build_cost_model`)."""
    key = (profile_path, cost_key(sc))
    cost = _COSTS.get(key)
    if cost is None:
        if len(_COSTS) >= _COST_CACHE_MAX:
            _COSTS.clear()
        cost = _COSTS[key] = build_cost_model(sc, profile_path)
    return cost


def build_cost_model(sc: Scenario, profile_path: str):
    """The CostModel of a point (not cached; its profile and latency lookup are).

    A speed-up that does not change a number: the LatencyLookup (interpolators and per-op
    latency cache; it depends only on the profile and the launch mode) is shared by every cost
    model of a profile.
    """
    from simulator.costs.forward import CostModel
    from simulator.costs.lookup import LatencyLookup
    profile = profile_for(sc, profile_path)
    mode = sc.serving_engine.collective_mode(sc.workload.batch_size)
    lookup = _LOOKUPS.setdefault((profile_path, sc.hardware.gpu, sc.hardware.box, mode),
                                 LatencyLookup(profile, collective_mode=mode))
    return CostModel(sc, profile, lookup=lookup)


def analytic_metrics(sc: Scenario, profile_path: str) -> dict:
    """Closed-form metrics of one point (cost model cached by `cost_key`)."""
    from simulator.acceptance import build_acceptance
    from simulator.analytic import analyze
    return _analytic_row(analyze(sc, _cost_model(sc, profile_path), build_acceptance(sc.acceptance, sc.spec)))


def analytic_metrics_many(items: list[tuple[int, Scenario, str]]) -> dict[int, dict]:
    """`analytic_metrics` of many points: runs of consecutive points that share a cost model and
    max_new_tokens, with alike requests, are evaluated together (`simulator.analytic.analyze_many`,
    the same floats); any other point alone."""
    from simulator.acceptance import build_acceptance
    from simulator.analytic import analyze_many
    out: dict[int, dict] = {}
    run: list[tuple[int, Scenario, Any]] = []
    cost = None

    def flush() -> None:
        results = analyze_many([sc for _, sc, _ in run], cost, [acc for _, _, acc in run])
        out.update((idx, _analytic_row(r)) for (idx, _, _), r in zip(run, results))
        run.clear()

    for idx, sc, path in items:
        acc = build_acceptance(sc.acceptance, sc.spec)
        if acc.beta_ab is not None:
            out[idx] = analytic_metrics(sc, path)
            continue
        point_cost = _cost_model(sc, path)
        if run and (point_cost is not cost or sc.workload.max_new_tokens != run[0][1].workload.max_new_tokens
                    or len(acc.base_pmf) != len(run[0][2].base_pmf)):
            flush()
        cost = point_cost
        run.append((idx, sc, acc))
    if run:
        flush()
    return out


def _analytic_row(r) -> dict:
    """The metrics dict of an AnalyticResult."""
    return dict(solver="closed_form", tok_per_s=r.tok_per_s, tok_per_s_ci95_low=None, tok_per_s_ci95_high=None,
                baseline_tok_per_s=r.baseline_tok_per_s, speedup=r.speedup, accept_length=r.mean_accept_length,
                cycle_time_us=r.cycle_time_us, tpot_ms=r.tpot_us / US_PER_MS,
                breakdown_us={k: float(v) for k, v in r.breakdown_us.items()})


def des_metrics(sc: Scenario, profile_path: str) -> dict:
    """DES metrics of one point (`simulator.simulate.simulate`)."""
    from simulator.simulate import simulate
    r, _ = simulate(sc, profile_for(sc, profile_path), profile_ref=profile_path)
    return dict(solver="des", tok_per_s=r.tok_per_s, tok_per_s_ci95_low=r.tok_per_s_ci95[0],
                tok_per_s_ci95_high=r.tok_per_s_ci95[1], baseline_tok_per_s=r.baseline_tok_per_s,
                speedup=r.speedup, accept_length=r.accept_length.mean, cycle_time_us=r.cycle_time_us,
                tpot_ms=r.tpot_ms.mean if r.tpot_ms is not None else None,
                breakdown_us={k: float(v) for k, v in r.breakdown_us.items()})


def check_metrics(m: dict) -> None:
    """Rates and times of a point finite, rates and cycle time > 0, breakdown buckets >= 0.

    Raises:
        ArithmeticError: naming the first that is not.
    """
    values = {k: v for k, v in m.items() if isinstance(v, float)}
    values.update({f"{k}_us": v for k, v in m["breakdown_us"].items()})
    for k, v in values.items():
        positive = k in ("tok_per_s", "baseline_tok_per_s", "speedup", "cycle_time_us")
        if not math.isfinite(v) or (v <= 0 if positive else (v < 0 and k.endswith("_us"))):
            raise ArithmeticError(f"{k} = {v!r}; the scenario's or the profile's numbers are outside what the "
                                  "model computes")


def serving_metrics(sc: Scenario, profile_path: str) -> dict:
    """The serving_* columns of a point with a `serving:` section (simulator.serving, its DES,
    whatever the solver: serving mode has no closed form), with its no-speculation baseline."""
    from simulator.serving.run import simulate_serving
    from simulator.studies.serving_sweep import serving_columns
    return serving_columns(simulate_serving(sc, profile_for(sc, profile_path)))


def run_chunk(solver: str, items: list[tuple[int, Scenario, str]], with_serving: bool = True,
               ) -> list[tuple[int, dict]]:
    """Metrics of a chunk of points; a point whose numbers are not finite is a UserInputError naming it."""
    fn = analytic_metrics if solver == "closed_form" else des_metrics
    closed_form: dict[int, dict] = {}
    if solver == "closed_form":
        try:
            closed_form = analytic_metrics_many(items)
        except ArithmeticError:
            pass  # found again below, point by point, and named
    out = []
    for idx, sc, path in items:
        try:
            m = closed_form[idx] if idx in closed_form else fn(sc, path)
            if with_serving and sc.serving is not None:
                m.update(serving_metrics(sc, path))
            check_metrics(m)
        except ArithmeticError as e:
            raise UserInputError(f"grid point {idx} ({sc.name}): {e}") from None
        out.append((idx, m))
    return out


def _chunks(items: list, num_chunks: int) -> list[list]:
    size = max(1, -(-len(items) // max(1, num_chunks)))
    return [items[i:i + size] for i in range(0, len(items), size)]


def points_bar(progress: bool):
    """A rich progress bar of points on stderr; none where stderr is not a terminal (a transient
    bar there leaves blank lines behind) or `progress` is off."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    err = Console(stderr=True)
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=err, disable=not progress or not err.is_terminal, transient=True)


def run_points(solver: str, items: list[tuple[int, Scenario, str]], backend: Backend,
               progress: bool = True, label: str = "", with_serving: bool = True) -> dict[int, dict]:
    """Metrics per point index, run in chunks on `backend` (entered by the caller).

    Items are sorted by cost key so a chunk reuses its cost models; 8 chunks per worker, at most
    64 points each (the progress bar advances per chunk). Results are keyed by point index, so
    neither the backend nor the order chunks finish in changes them.
    """
    items = sorted(items, key=lambda it: (it[2], cost_key(it[1])))
    workers = backend.num_workers
    chunks = _chunks(items, 1 if workers <= 1 else workers * 8)
    chunks = [c for c in chunks for c in _chunks(c, -(-len(c) // 64))]  # progress every <= 64 points
    out: dict[int, dict] = {}
    from rich.markup import escape
    bar = points_bar(progress)
    warm_up = partial(init_worker, sorted({it[2] for it in items}))
    with backend.submit(partial(run_chunk, solver, with_serving=with_serving), chunks, warm_up) as done, bar:
        task = bar.add_task(escape(label) or solver, total=len(items))  # submitted (forked) before the bar's thread
        for chunk_idx, result in done:
            out.update(result)
            bar.advance(task, len(chunks[chunk_idx]))
    return out


def point_items(scenarios: list[Scenario], profile: str | None, scenario_path: Path,
                indices: list[int] | None = None) -> tuple[list[tuple[int, Scenario, str]], dict[str, str]]:
    """(point index, scenario, resolved profile path) per point, and the profile paths by reference.

    Each distinct (profile, hardware, TP group, models) is checked once: the profile resolves and
    the point's hardware checks pass (`load_profile_for`). Points are numbered 0.. or by `indices`.

    Raises:
        UserInputError: a profile that does not resolve, or hardware a point does not fit.
    """
    profile_paths: dict[str, str] = {}
    items = []
    checked: set[tuple] = set()
    for idx, sc in zip(range(len(scenarios)) if indices is None else indices, scenarios):
        ref = profile or sc.profile
        key = (ref, sc.hardware.gpu, sc.hardware.box, sc.tp_size, sc.placement.label,
               sc.target.model_dump_json(), sc.draft.model_dump_json())
        if key not in checked:
            _, p = load_profile_for(sc, profile, base_dir=None if profile else scenario_path.parent,
                                    source=f"{scenario_path} point {idx}")
            profile_paths.setdefault(ref, str(p.resolve()))
            checked.add(key)
        items.append((idx, sc, profile_paths[ref]))
    return items, profile_paths


def des_agreement(analytic: dict[int, dict], des: dict[int, dict], points: list[tuple[dict, Scenario]]) -> dict:
    """Relative difference of DES vs closed-form tok/s on the spot-check points."""
    checks = []
    for idx in sorted(des):
        a, d = analytic[idx]["tok_per_s"], des[idx]["tok_per_s"]
        checks.append(dict(point_idx=idx, grid=points[idx][0], closed_form_tok_per_s=a, des_tok_per_s=d,
                           des_tok_per_s_ci95=[des[idx]["tok_per_s_ci95_low"], des[idx]["tok_per_s_ci95_high"]],
                           rel_diff=d / a - 1.0))
    rel = np.abs([c["rel_diff"] for c in checks]) if checks else np.array([])
    return dict(num_points=len(checks), points=checks,
                max_abs_rel_diff=float(rel.max()) if len(rel) else None,
                median_abs_rel_diff=float(np.median(rel)) if len(rel) else None)

