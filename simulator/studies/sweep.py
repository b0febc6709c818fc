"""Parameter sweeps: grid specs -> validated scenarios -> one result row per grid point.

Grid specs and their expansion into validated scenarios (including the chain rule for
swept `spec.num_steps`) are in `simulator.studies.grid`; see its docstring. The schemas of the files a
sweep writes (`SweepRow` for sweep.csv, `SweepMeta` for sweep.json) and their readers are in
`simulator.studies.sweep_files`.

Solvers: `closed_form` (`simulator.analytic.analyze`, fast; a seeded sample of points is also run
through the DES and the agreement reported) and `des` (`simulator.simulate`). A closed-form sweep
runs grouped where it can (`simulator.studies.sweep_grouped`: a cost model per group of points, numbers as
arrays, up to 2,000,000 points), writing what running it point by point writes.
Outputs (written atomically): `sweep.csv` (one row per point, columns below), `sweep.json`
(the sweep spec, seed, version, DES spot-check) and `best_num_steps.csv` when num_steps is swept.

CSV columns: `point_idx`, the grid fields (named by their dotted path), the scenario fields
that plots use (`placement`, `tp_size`, `num_steps`, `topk`, `num_draft_tokens`,
`acceptance_kind`, `acceptance_rate`, `batch_size`, `context_len`), `solver`, `tok_per_s`,
`tok_per_s_ci95_low`/`_high` (DES only), `baseline_tok_per_s`, `speedup`, `accept_length`,
`cycle_time_us`, `tpot_us` (mean), for scenarios with a `serving:` section the serving mode's
`serving_*` columns (simulator.studies.serving_sweep; run by the serving DES whatever the solver, with
the no-speculation baseline, and the crossover load in sweep.json's `serving_crossover`), the breakdown buckets `<bucket>_us` (see
`simulator.metrics`), and `scenario_json` (the resolved scenario of the row).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from simulator import __version__
from simulator.studies.backend import Backend, LocalBackend
from simulator.config import Scenario
from simulator.files import SWEEP_OUTPUT, is_own_output, write_csv_atomic, write_json_atomic
from simulator.studies.grid import (MAX_GRID_POINTS, NUM_STEPS_FIELD, GridAxis, check_grid_points, expand, group_grid,
                            parse_grid, parse_grids)
from simulator.inputs import quote
from simulator.studies.sweep_files import (SweepGridMeta, SweepMeta, SweepRow, read_sweep_meta, read_sweep_table,
                                   row_scenario)
from simulator.scenario import UserInputError, apply_overrides, load_profile_for, read_scenario_dict
from simulator.studies.sweep_grouped import (MAX_GROUPED_GRID_POINTS, GroupedRows, point_by_point_reason,  # noqa: E402
                                     run_grouped)

__all__ = ["GridAxis", "SweepResult", "SweepMeta", "SweepRow", "parse_grid", "parse_grids", "expand", "run_sweep",
           "best_num_steps", "cycle_breakdown_table", "read_sweep_table", "read_sweep_meta", "row_scenario"]

SOLVERS = ("closed_form", "des")
DESCRIPTIVE_COLUMNS = ("placement", "tp_size", "num_steps", "topk", "num_draft_tokens", "acceptance_kind",
                       "acceptance_rate", "batch_size", "context_len")
METRIC_COLUMNS = ("solver", "tok_per_s", "tok_per_s_ci95_low", "tok_per_s_ci95_high", "baseline_tok_per_s",
                  "speedup", "accept_length", "cycle_time_us", "tpot_us")
BUCKET_ORDER = ("draft_extend_compute", "draft_extend_comm", "draft_compute", "draft_comm", "verify_compute",
                "verify_comm", "accept_compute", "accept_comm", "sync", "host")


@dataclass
class SweepResult:
    """What `run_sweep` produced. Rows are dicts keyed by the CSV columns: a list, or a grouped
    sweep's `simulator.studies.sweep_grouped.GroupedRows`, which makes each when asked."""

    rows: list[dict]
    columns: list[str]
    grid_fields: list[str]
    solver: str
    jobs: int  # chunks run at once: local worker processes, or the Ray cluster's CPUs
    elapsed_s: float
    des_check: dict | None
    csv_path: Path | None = None
    json_path: Path | None = None
    best_path: Path | None = None
    best_rows: list[dict] = field(default_factory=list)
    crossover_rows: list[dict] = field(default_factory=list)  # simulator.studies.serving_sweep.crossover
    backend: str = "local"  # simulator.studies.backend.BACKENDS


# ---- running one point (in a worker process) ----------------------------------------------------
_PROFILES: dict[str, Any] = {}
_COSTS: dict[tuple[str, str], Any] = {}
_COST_CACHE_MAX = 4096


def _init_worker(profile_paths: list[str]) -> None:
    """Import the solvers and load each profile once per worker process (idempotent)."""
    import simulator.analytic, simulator.simulate  # noqa: F401,E401
    from simulator.profile import load_profile
    for p in profile_paths:
        if p not in _PROFILES:
            _PROFILES[p] = load_profile(Path(p))


def _profile(path: str):
    if path not in _PROFILES:
        _init_worker([path])
    return _PROFILES[path]


def _profile_for(sc: Scenario, path: str):
    """The point's profile: the file's, carried to the point's `hardware` GPU (cached)."""
    from simulator.hardware import apply_hardware
    hw = sc.hardware
    if hw.gpu is None and hw.box is None:
        return _profile(path)
    key = f"{path}|{hw.gpu}|{hw.box}|{hw.allreduce}"
    if key not in _PROFILES:
        _PROFILES[key] = apply_hardware(sc, _profile(path), source=path)
    return _PROFILES[key]


def cost_key(sc: Scenario) -> str:
    """JSON of the scenario fields a CostModel depends on (not acceptance, seed, run length)."""
    dump = sc.model_dump(mode="json", exclude={"acceptance": True, "seed": True, "name": True, "description": True,
                                               "workload": {"max_new_tokens"}, "fidelity": True})
    return json.dumps(dump, sort_keys=True)


_LOOKUPS: dict[tuple[str, str], Any] = {}


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
    profile = _profile_for(sc, profile_path)
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
                cycle_time_us=r.cycle_time_us, tpot_us=r.tpot_us,
                breakdown_us={k: float(v) for k, v in r.breakdown_us.items()})


def des_metrics(sc: Scenario, profile_path: str) -> dict:
    """DES metrics of one point (`simulator.simulate.simulate`)."""
    from simulator.simulate import simulate
    r, _ = simulate(sc, _profile_for(sc, profile_path), profile_ref=profile_path)
    return dict(solver="des", tok_per_s=r.tok_per_s, tok_per_s_ci95_low=r.tok_per_s_ci95[0],
                tok_per_s_ci95_high=r.tok_per_s_ci95[1], baseline_tok_per_s=r.baseline_tok_per_s,
                speedup=r.speedup, accept_length=r.accept_length.mean, cycle_time_us=r.cycle_time_us,
                tpot_us=r.tpot_us.mean if r.tpot_us is not None else None,
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
    return serving_columns(simulate_serving(sc, _profile_for(sc, profile_path)))


def _run_chunk(solver: str, items: list[tuple[int, Scenario, str]], with_serving: bool = True,
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
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   disable=not progress, transient=True)
    warm_up = partial(_init_worker, sorted({it[2] for it in items}))
    with backend.submit(partial(_run_chunk, solver, with_serving=with_serving), chunks, warm_up) as done, bar:
        task = bar.add_task(escape(label) or solver, total=len(items))  # submitted (forked) before the bar's thread
        for chunk_idx, result in done:
            out.update(result)
            bar.advance(task, len(chunks[chunk_idx]))
    return out


# ---- rows and tables ------------------------------------------------------------------------------
def describe(sc: Scenario) -> dict:
    """The scenario fields plots group by (DESCRIPTIVE_COLUMNS)."""
    acc = sc.acceptance
    return dict(placement=sc.placement.label, tp_size=sc.tp_size, num_steps=sc.spec.num_steps, topk=sc.spec.topk,
                num_draft_tokens=sc.spec.num_draft_tokens, acceptance_kind=acc.kind,
                acceptance_rate=getattr(acc, "acceptance_rate", None), batch_size=sc.workload.batch_size,
                context_len=sc.workload.context_len)


def build_rows(points: list[tuple[dict, Scenario]], metrics: dict[int, dict],
               grid_fields: list[str]) -> tuple[list[dict], list[str]]:
    """CSV rows and column order (see the module docstring)."""
    buckets = {k for m in metrics.values() for k in m["breakdown_us"]}
    bucket_cols = [b for b in BUCKET_ORDER if b in buckets] + sorted(buckets - set(BUCKET_ORDER))
    desc = [c for c in DESCRIPTIVE_COLUMNS if c not in grid_fields]
    from simulator.studies.serving_sweep import SERVING_COLUMNS
    serving = [c for c in SERVING_COLUMNS if any(c in m for m in metrics.values())]
    columns = (["point_idx", *grid_fields, *desc, *METRIC_COLUMNS, *serving, *(f"{b}_us" for b in bucket_cols),
                "scenario_json"])
    rows = []
    for idx, (values, sc) in enumerate(points):
        m = dict(metrics[idx])
        br = m.pop("breakdown_us")
        row = {"point_idx": idx, **values, **{k: v for k, v in describe(sc).items() if k in desc}, **m}
        row.update({f"{b}_us": br.get(b, 0.0) for b in bucket_cols})
        row["scenario_json"] = json.dumps(sc.model_dump(mode="json"), separators=(",", ":"))
        rows.append(row)
    return rows, columns


def best_num_steps(rows: list[dict], group_by: list[str]) -> list[dict]:
    """For each combination of `group_by` values, the row with the highest tok/s.

    Args:
        rows: sweep rows (with `num_steps`, `tok_per_s`, `speedup`).
        group_by: columns that define a combination (the grid fields other than num_steps).

    Returns:
        Rows {*group_by, best_num_steps, tok_per_s, speedup, baseline_tok_per_s}, in first-seen order.
    """
    best: dict[tuple, dict] = {}
    for r in rows:
        key = tuple(_hashable(r.get(c)) for c in group_by)
        if key not in best or r["tok_per_s"] > best[key]["tok_per_s"]:
            best[key] = r
    return [{**{c: r.get(c) for c in group_by}, "best_num_steps": r["num_steps"], "tok_per_s": r["tok_per_s"],
             "speedup": r["speedup"], "baseline_tok_per_s": r["baseline_tok_per_s"]} for r in best.values()]


def _hashable(v: Any) -> Any:
    return json.dumps(v) if isinstance(v, (list, dict)) else v


def cycle_breakdown_table(rows: list[dict]) -> list[dict]:
    """Per row, the breakdown buckets gathered into the groups the stacked chart shows (us).

    Groups: draft_compute_us, draft_comm_us, verify_compute_us (verify + accept),
    verify_comm_us, draft_extend_us (compute + comm, placement transfers to it included),
    host_sync_us (host + device->host sync). They sum to cycle_time_us.
    """
    groups = {"draft_compute_us": ("draft_compute",), "draft_comm_us": ("draft_comm",),
              "verify_compute_us": ("verify_compute", "accept_compute"),
              "verify_comm_us": ("verify_comm", "accept_comm"),
              "draft_extend_us": ("draft_extend_compute", "draft_extend_comm"), "host_sync_us": ("host", "sync")}
    out = []
    for r in rows:
        g = {k: sum(float(r.get(f"{b}_us") or 0.0) for b in bs) for k, bs in groups.items()}
        known = {b for bs in groups.values() for b in bs}
        other = sum(float(v or 0.0) for k, v in r.items() if k.endswith("_us") and k[:-3] in BUCKET_ORDER
                    and k[:-3] not in known)
        g["host_sync_us"] += other
        out.append({**{c: r.get(c) for c in DESCRIPTIVE_COLUMNS}, **g, "cycle_time_us": r["cycle_time_us"]})
    return out


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


# ---- files ------------------------------------------------------------------------------------------
# ---- the sweep --------------------------------------------------------------------------------------
CLOSED_FORM_POINT_S = 0.015  # closed form of one point, a new cost model included (2-core CI machine)


def estimate_sweep(items: list[tuple[int, Scenario, str]], solver: str, num_des: int,
                   jobs: int) -> tuple[float, float]:
    """(seconds, peak bytes) a sweep is estimated to take: per closed-form point CLOSED_FORM_POINT_S
    and its renewal function, a cost model per cost key,
    `simulator.simulate.estimate_run` per DES point (taken on up to 16 points spread over the grid
    and scaled), divided over `jobs` workers."""
    from simulator.costs.forward import CostModel
    from simulator.simulate import estimate_closed_form_s, estimate_cost_model_s, estimate_run
    des_points = len(items) if solver == "des" else min(num_des, len(items))
    seconds = 0.0
    if solver == "closed_form":
        cost_models = {cost_key(sc): estimate_cost_model_s(sc) for _, sc, _ in items}  # one per cost key
        seconds = sum(CLOSED_FORM_POINT_S + estimate_closed_form_s(sc) for _, sc, _ in items) + sum(cost_models.values())
    memory = 0.0
    if des_points:
        probe = [items[i] for i in sorted({int(i) for i in np.linspace(0, len(items) - 1, min(16, len(items)))})]
        ests = [estimate_run(sc, CostModel(sc, _profile(path))) for _, sc, path in probe]
        seconds += des_points * max(e.seconds for e in ests)
        memory = max(e.memory_bytes for e in ests) * min(jobs, des_points)
    return seconds / jobs, memory


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


def run_sweep(scenario_path: Path, grids: list[str], solver: str = "closed_form", jobs: int = 1,
              out_dir: Path | None = None, des_sample: int = 5, overrides: list[str] | None = None,
              profile: str | None = None, seed: int | None = None, progress: bool = True,
              confirm: Callable[[float, float], None] | None = None, backend: Backend | None = None,
              point_by_point: bool = False) -> SweepResult:
    """Expand the grids over a scenario, run every point, write the outputs.

    A closed-form sweep runs grouped (`simulator.studies.sweep_grouped`: a scenario and cost model per
    group of points that differ only in acceptance, numbers as arrays, sweep.csv streamed; up to
    MAX_GROUPED_GRID_POINTS points) unless the grid has fields inside other swept fields or a
    point has a `serving:` section; then, and for the DES solver, point by point (up to
    MAX_GRID_POINTS points). Both write the same files. A grouped sweep runs its closed form in
    this process; `jobs` spreads its DES spot-check.

    Args:
        scenario_path: scenario YAML. grids: `--grid` specs. solver: 'closed_form' or 'des'.
        jobs: worker processes of the local backend (1 = in this process); used when backend is None.
        out_dir: where to write (None: nothing written).
        des_sample: with solver 'closed_form', points also run through the DES (seeded sample).
        overrides: `--set` strings applied before the grid. profile: profile name/path override.
        seed: seed of the DES spot-check sample (default: the scenario's seed).
        progress: show a rich progress bar.
        confirm: called with the estimate (seconds, peak bytes; `estimate_sweep`) once the grid is
            expanded and before any point runs; it may raise to stop the sweep.
        backend: where points run (simulator.studies.backend; None: `LocalBackend(jobs)`); entered here.
        point_by_point: run a closed-form sweep point by point (the reference of the grouped path).

    Raises:
        UserInputError: bad scenario, grid, point, profile, solver, jobs or seed; a backend that
            cannot start.
    """
    t0 = time.perf_counter()
    if solver not in SOLVERS:
        raise UserInputError(f"--solver {quote(solver)}: expected one of {', '.join(SOLVERS)}")
    backend = LocalBackend(jobs) if backend is None else backend
    if des_sample < 0:
        raise UserInputError(f"--des-sample {des_sample}: expected 0 or more")
    if seed is not None and not 0 <= seed <= 2**63 - 1:
        raise UserInputError(f"--seed {seed}: expected 0..2**63-1")
    grouped = solver == "closed_form" and not point_by_point
    axes = parse_grids(list(grids), MAX_GROUPED_GRID_POINTS if grouped else MAX_GRID_POINTS)
    scenario_path = Path(scenario_path)
    base = apply_overrides(read_scenario_dict(scenario_path), list(overrides or []), str(scenario_path))
    if grouped:
        grid = group_grid(base, axes, str(scenario_path), scenario_path.parent)
        why = point_by_point_reason(grid)
        if why is None:
            return run_grouped(grid, scenario_path, backend, out_dir, des_sample, overrides, profile, seed, progress,
                               confirm, t0)
        check_grid_points(axes, MAX_GRID_POINTS, f"points; a sweep that runs point by point ({why})")
    points = expand(base, axes, str(scenario_path), scenario_path.parent)
    items, profile_paths = point_items([sc for _, sc in points], profile, scenario_path)
    sweep_seed = points[0][1].seed if seed is None else seed
    des_check = None
    with backend:
        workers = backend.num_workers
        if confirm is not None:
            confirm(*estimate_sweep(items, solver, des_sample, workers))
        metrics = run_points(solver, items, backend, progress, label=f"{solver} sweep")
        if solver == "closed_form" and des_sample > 0:
            rng = np.random.default_rng(sweep_seed)
            sample = sorted(int(i) for i in rng.choice(len(points), size=min(des_sample, len(points)), replace=False))
            des = run_points("des", [items[i] for i in sample], backend, progress, label="DES spot-check",
                             with_serving=False)
            des_check = des_agreement(metrics, des, points)
    elapsed = time.perf_counter() - t0
    fields = [a.field for a in axes]
    rows, columns = build_rows(points, metrics, fields)
    result = SweepResult(rows=rows, columns=columns, grid_fields=fields, solver=solver, jobs=workers,
                         elapsed_s=elapsed, des_check=des_check, backend=backend.name)
    if NUM_STEPS_FIELD in fields:
        result.best_rows = best_num_steps(rows, [f for f in fields if f != NUM_STEPS_FIELD])
    from simulator.studies.serving_sweep import LOAD_FIELDS, crossover
    load = next((f for f in LOAD_FIELDS if f in fields), None)
    if load is not None and any(r.get("serving_baseline_output_tok_per_s") is not None for r in rows):
        result.crossover_rows = crossover(rows, load, [f for f in fields if f != load])
    if out_dir is not None:
        _write_outputs(result, Path(out_dir), scenario_path, axes, overrides, profile_paths, sweep_seed, des_sample)
    return result


def _write_outputs(result: SweepResult, out_dir: Path, scenario_path: Path, axes: list[GridAxis],
                   overrides: list[str] | None, profile_paths: dict[str, str], seed: int, des_sample: int,
                   progress: bool = False) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    stale_best = out_dir / "best_num_steps.csv"  # an earlier sweep's, when this one has no best table
    replacing_ours = is_own_output(out_dir / "sweep.json", SWEEP_OUTPUT)
    result.csv_path = out_dir / "sweep.csv"
    if isinstance(result.rows, GroupedRows):
        result.rows.write_csv(result.csv_path, progress)
    else:
        write_csv_atomic(result.csv_path, result.rows, result.columns)
    if result.best_rows:
        result.best_path = out_dir / "best_num_steps.csv"
        write_csv_atomic(result.best_path, result.best_rows, list(result.best_rows[0]))
    result.json_path = out_dir / "sweep.json"
    meta = SweepMeta(
        version=__version__, scenario_path=str(scenario_path), overrides=list(overrides or []),
        grids=[SweepGridMeta(spec=a.spec, field=a.field, values=list(a.values)) for a in axes],
        chain_rule="spec.num_steps swept, spec.topk == 1, spec.num_draft_tokens not swept: "
                   "num_draft_tokens = num_steps + 1",
        solver=result.solver, backend=result.backend, jobs=result.jobs, num_points=len(result.rows), seed=seed, des_sample=des_sample,
        profiles=profile_paths, elapsed_s=result.elapsed_s, csv=result.csv_path.name,
        best_num_steps_csv=result.best_path.name if result.best_path else None, des_check=result.des_check,
        serving_crossover=result.crossover_rows or None)
    write_json_atomic(result.json_path, meta.model_dump(mode="json"), allow_nan=False)
    if result.best_path is None and replacing_ours and stale_best.is_file() and not stale_best.is_symlink():
        stale_best.unlink()  # it answered the earlier sweep's grid, not this one's
