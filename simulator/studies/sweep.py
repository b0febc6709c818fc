"""Parameter sweeps: grid specs -> validated scenarios -> one result row per grid point.

Grid specs and their expansion into validated scenarios (including the chain rule for
swept `spec.num_steps`) are in `simulator.studies.grid`; see its docstring. Each point's metrics,
and running points in chunks on a backend, are `simulator.studies.points`. The schemas of the
files a sweep writes (`SweepRow` for sweep.csv, `SweepMeta` for sweep.json), their readers and
writer are in `simulator.studies.sweep_files`.

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
`cycle_time_us`, `tpot_ms` (mean TPOT, in ms as the engines' benches print it), for scenarios with a
`serving:` section the serving mode's `serving_*` columns (simulator.studies.serving_sweep; latencies in ms;
run by the serving DES whatever the solver, with the no-speculation baseline, and the crossover load in
sweep.json's `serving_crossover`), the breakdown buckets `<bucket>_us` (see `simulator.metrics`),
`memory_gb_per_gpu`, `fits_memory`, `extrapolation` (where the point lies beyond what its profile
measured, '' where it does not: simulator.studies.extrapolation) and `scenario_json` (the resolved
scenario of the row).

The answer first (simulator.studies.answer, simulator.studies.break_even): best_num_steps.csv holds
0 (no speculation) where the baseline is at least as fast as every swept num_steps, the runner-up
and its gap; a serving sweep's is read per swept load from its serving columns; sweep.json's
`break_even` is the acceptance rate above which speculation pays per batch (or load).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from simulator.config import Scenario
from simulator.inputs import quote
from simulator.scenario import UserInputError, apply_overrides, read_scenario_dict
from simulator.studies.backend import Backend, LocalBackend
from simulator.studies.grid import (MAX_GRID_POINTS, NUM_STEPS_FIELD, GridAxis, check_grid_points, expand,
                                    parse_grid, parse_grids)
from simulator.studies.grid_groups import group_grid
from simulator.studies.points import (MEMORY_COLUMNS, cached_profile, cost_key, des_agreement, memory_of, point_items,
                                      run_points)
from simulator.studies.sweep_files import (BUCKET_ORDER, DESCRIPTIVE_COLUMNS, METRIC_COLUMNS, SweepMeta, SweepResult,
                                           SweepRow, cell_key, describe, read_sweep_meta, read_sweep_table,
                                           row_scenario, write_outputs, sweep_disk_bytes)
from simulator.studies.sweep_grouped import MAX_GROUPED_GRID_POINTS, point_by_point_reason, run_grouped

__all__ = ["GridAxis", "SweepResult", "SweepMeta", "SweepRow", "parse_grid", "parse_grids", "expand", "run_sweep",
           "best_num_steps", "cycle_breakdown_table", "read_sweep_table", "read_sweep_meta", "row_scenario"]

SOLVERS = ("closed_form", "des")


# ---- rows and tables ------------------------------------------------------------------------------
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
    """For each combination of `group_by` values, the num_steps with the highest tok/s, or 0 (no
    speculation) where the baseline is at least as fast as every num_steps
    (`simulator.studies.answer.best_per_combination`: the runner-up, its gap and near ties too).

    Args:
        rows: sweep rows (with `num_steps`, `tok_per_s`, `speedup`, `baseline_tok_per_s`).
        group_by: columns that define a combination (the grid fields other than num_steps).

    Returns:
        Rows {*group_by, best_num_steps, tok_per_s, speedup, baseline_tok_per_s, best_speculative_num_steps,
        best_speculative_speedup, runner_up_num_steps, runner_up_gap_pct, near_tie, extrapolation}, in
        first-seen order.
    """
    from simulator.studies.answer import best_per_combination
    return best_per_combination(rows, group_by, "tok_per_s", "speedup", "baseline_tok_per_s")


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


# ---- the sweep --------------------------------------------------------------------------------------
CLOSED_FORM_POINT_S = 0.015  # closed form of one point, a new cost model included (2-core CI machine)


def estimate_sweep(items: list[tuple[int, Scenario, str]], solver: str, num_des: int,
                   jobs: int) -> tuple[float, float, float]:
    """(seconds, peak bytes, disk bytes: `sweep_disk_bytes`) a sweep is estimated to take: per
    closed-form point CLOSED_FORM_POINT_S and its renewal function, a cost model per cost key,
    `simulator.estimate.estimate_run` per DES point (taken on up to 16 points spread over the grid
    and scaled), `simulator.serving.run.estimate_serving` per point with a serving section (the
    mean of up to 64 points spread over the grid, times their number), divided over `jobs` workers."""
    from simulator.costs.forward import CostModel
    from simulator.estimate import estimate_closed_form_s, estimate_cost_model_s, estimate_run
    des_points = len(items) if solver == "des" else min(num_des, len(items))
    seconds = 0.0
    if solver == "closed_form":
        cost_models = {cost_key(sc): estimate_cost_model_s(sc) for _, sc, _ in items}  # one per cost key
        seconds = sum(CLOSED_FORM_POINT_S + estimate_closed_form_s(sc) for _, sc, _ in items) + sum(cost_models.values())
    memory = 0.0
    if des_points:
        probe = [items[i] for i in sorted({int(i) for i in np.linspace(0, len(items) - 1, min(16, len(items)))})]
        ests = [estimate_run(sc, CostModel(sc, cached_profile(path))) for _, sc, path in probe]
        seconds += des_points * max(e.seconds for e in ests)
        memory = max(e.memory_bytes for e in ests) * min(jobs, des_points)
    serving = [sc for _, sc, _ in items if sc.serving is not None]
    if serving:  # every point with a serving section runs the serving DES, whatever the solver
        from simulator.serving.run import estimate_serving
        probe = [serving[i] for i in sorted({int(i) for i in np.linspace(0, len(serving) - 1, min(64, len(serving)))})]
        ests_s = [estimate_serving(sc) for sc in probe]
        seconds += len(serving) * float(np.mean([e[0] for e in ests_s]))
        memory = max(memory, max(e[1] for e in ests_s) * min(jobs, len(serving)))
    probe = [items[i][1] for i in sorted({int(i) for i in np.linspace(0, len(items) - 1, min(16, len(items)))})] \
        if items else []
    return seconds / jobs, memory, sweep_disk_bytes(len(items), probe)


def run_sweep(scenario_path: Path, grids: list[str], solver: str = "closed_form", jobs: int = 1,
              out_dir: Path | None = None, des_sample: int = 5, overrides: list[str] | None = None,
              profile: str | None = None, seed: int | None = None, progress: bool = True,
              confirm: Callable[[float, float, float], None] | None = None, backend: Backend | None = None,
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
    for r, (_, sc, path) in zip(rows, items):
        r["memory_gb_per_gpu"], r["fits_memory"] = memory_of(sc, path)
    from simulator.studies.extrapolation import row_extrapolation, summary as extrapolation_summary
    for r, (_, sc, path) in zip(rows, items):
        r["extrapolation"] = row_extrapolation(sc, path, r)
    columns = [*columns[:-1], *MEMORY_COLUMNS, "extrapolation", columns[-1]]  # scenario_json stays last
    result = SweepResult(rows=rows, columns=columns, grid_fields=fields, solver=solver, jobs=workers,
                         elapsed_s=elapsed, des_check=des_check, backend=backend.name,
                         num_infeasible=sum(not r["fits_memory"] for r in rows),
                         extrapolation_note=extrapolation_summary([r["extrapolation"] for r in rows]))
    from simulator.studies.serving_sweep import LOAD_FIELDS, crossover, serving_best_num_steps
    load = next((f for f in LOAD_FIELDS if f in fields), None)
    serving = any(r.get("serving_baseline_output_tok_per_s") is not None for r in rows)
    if NUM_STEPS_FIELD in fields:
        others = [f for f in fields if f != NUM_STEPS_FIELD]
        result.best_rows = serving_best_num_steps(rows, others) if serving else best_num_steps(rows, others)
    if load is not None and serving:
        result.crossover_rows = crossover(rows, load, [f for f in fields if f != load])
    paths = {idx: path for idx, _, path in items}
    from simulator.studies.break_even import sweep_break_even
    result.break_even_rows, result.break_even_note = sweep_break_even(
        rows, axes, lambda r: paths[r["point_idx"]], load if serving else None)
    if out_dir is not None:
        write_outputs(result, Path(out_dir), scenario_path, axes, overrides, profile_paths, sweep_seed, des_sample)
    return result

