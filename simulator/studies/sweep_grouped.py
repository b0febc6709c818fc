"""The closed-form sweep of a large grid: points grouped by cost model, numbers as columns,
sweep.csv streamed.

`simulator.studies.sweep.run_sweep` takes this path for `--solver closed_form` (up to
MAX_GROUPED_GRID_POINTS points) unless the grid has fields inside other swept fields or a point
has a `serving:` section; it writes the files the point-by-point path writes, byte for byte
(tests/test_sweep_grouped.py holds the two paths together).

- The grid is split (`simulator.studies.grid_groups.group_grid`) into groups, the combinations of the swept
  fields outside `acceptance` (everything a cost model depends on), and acceptances, the
  combinations of the swept acceptance fields; a point is a (group, acceptance) pair. A group's
  scenario and cost model are made once, not a scenario per point.
- Per group, the points with alike requests are evaluated together
  (`simulator.analytic.closed_form_columns`: the operations of `analyze` elementwise, so the same
  floats); the renewal function and mean accept length depend only on the pmf and are computed
  once per (spec, max_new_tokens). A point whose requests draw their own rate (rate
  classes) runs `analyze` alone.
- The numbers are kept as (groups, acceptances) float arrays, about 100 bytes per point;
  rows are made from them in chunks: `scenario_json` is the group's scenario JSON around the
  acceptance's, joined from pieces the csv module encoded once.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from simulator.scenario import UserInputError
from simulator.studies.grid import NUM_STEPS_FIELD
from simulator.studies.extrapolation import point_extrapolation
from simulator.studies.grid_groups import GroupedGrid
from simulator.studies.points import (MEMORY_COLUMNS, build_cost_model, cached_profile, cost_key, des_agreement,
                                      memory_of, point_items, points_bar, run_chunk, run_points)
from simulator.studies.sweep_files import (BUCKET_ORDER, DESCRIPTIVE_COLUMNS, METRIC_COLUMNS, SweepResult, cell_key,
                                           describe, write_outputs)
from simulator.units import US_PER_MS

MAX_GROUPED_GRID_POINTS = 2_000_000  # points of a grouped closed-form sweep
GROUPED_POINT_S = 20e-6  # CPU seconds per point beyond its group's cost model: numbers, its CSV row (2-core machine)
GROUPED_POINT_BYTES = 300.0  # peak memory per point: the float columns, best_num_steps' index arrays
_RENEWAL_COLUMNS_US = (1.0, 5e-4)  # renewal_cycles_many per token x accept length: fixed, per point (measured)
CHUNK_ROWS = 4096  # rows per piece of sweep.csv
_ACCEPTANCE_COLUMNS = ("acceptance_kind", "acceptance_rate")  # simulator.studies.sweep_files.describe's columns from acceptance
_MARK = "\x01"  # cut mark inside a scenario JSON: json.dumps escapes control characters, csv leaves them


@dataclass
class GroupedNumbers:
    """The closed form of every point of a grouped grid (arrays indexed [group, acceptance])."""

    grid: GroupedGrid
    profile_paths: list[str]  # per group
    tok_per_s: np.ndarray
    baseline_tok_per_s: np.ndarray  # (groups,)
    speedup: np.ndarray
    accept_length: np.ndarray
    cycle_time_us: np.ndarray
    tpot_ms: np.ndarray
    buckets_us: dict[str, np.ndarray] = field(default_factory=dict)  # 0 where not in the point's breakdown
    bucket_mask: dict[str, np.ndarray] = field(default_factory=dict)
    memory_gb_per_gpu: list[float] = field(default_factory=list)  # per group (acceptance does not change it)
    fits_memory: list[bool] = field(default_factory=list)
    extrapolation: list[str] = field(default_factory=list)  # per group (simulator.studies.extrapolation)

    def metrics(self, point_idx: int) -> dict:
        """The metrics dict of one point, as `simulator.studies.points.analytic_metrics` gives it (buckets in
        BUCKET_ORDER rather than the point's own order)."""
        (g,), (a,) = self.grid.locate(np.array([point_idx]))
        return dict(solver="closed_form", tok_per_s=float(self.tok_per_s[g, a]), tok_per_s_ci95_low=None,
                    tok_per_s_ci95_high=None, baseline_tok_per_s=float(self.baseline_tok_per_s[g]),
                    speedup=float(self.speedup[g, a]), accept_length=float(self.accept_length[g, a]),
                    cycle_time_us=float(self.cycle_time_us[g, a]), tpot_ms=float(self.tpot_ms[g, a]),
                    breakdown_us={k: float(v[g, a]) for k, v in self.buckets_us.items() if self.bucket_mask[k][g, a]})


def point_by_point_reason(grid: GroupedGrid | None) -> str | None:
    """Why a grid runs point by point rather than grouped (None: it runs grouped).

    Args:
        grid: `simulator.studies.grid_groups.group_grid`'s answer (None for fields inside other swept fields).
    """
    if grid is None:
        return "fields inside other swept fields"
    if any(sc.serving is not None for sc in grid.groups):
        return "a serving: section"
    return None


def run_grouped(grid: GroupedGrid, scenario_path: Path, backend, out_dir: Path | None, des_sample: int,
                overrides: list[str] | None, profile: str | None, seed: int | None, progress: bool,
                confirm, t0: float):
    """`simulator.studies.sweep.run_sweep` of a grouped grid (its arguments; t0: its start, perf_counter).
    The closed form runs in this process; `backend` (simulator.studies.backend, entered here) runs the DES
    spot-check.

    Raises:
        UserInputError: a profile or hardware a group does not fit, a point whose numbers are
            not finite, as the point-by-point path raises them.
    """
    first_points = grid.first_points().tolist()
    items, profile_paths = point_items(grid.groups, profile, scenario_path, indices=first_points)
    group_paths = [path for _, _, path in items]
    sweep_seed = grid.groups[0].seed if seed is None else seed  # point 0 is in group 0
    des_check = None
    n = grid.num_points
    with backend:
        jobs = backend.num_workers
        if confirm is not None:
            confirm(*estimate(grid, group_paths, des_sample, jobs))
        numbers = evaluate(grid, group_paths, progress)
        if des_sample > 0:
            rng = np.random.default_rng(sweep_seed)
            sample = sorted(int(i) for i in rng.choice(n, size=min(des_sample, n), replace=False))
            points = {i: grid.point(i) for i in sample}
            g_idx, _ = grid.locate(np.array(sample))
            des = run_points("des", [(i, points[i][1], group_paths[g]) for i, g in zip(sample, g_idx.tolist())],
                             backend, progress, label="DES spot-check", with_serving=False)
            des_check = des_agreement({i: numbers.metrics(i) for i in sample}, des, points)
    elapsed = time.perf_counter() - t0
    fields = [a.field for a in grid.axes]
    rows = GroupedRows(numbers, fields)
    g_all, _ = grid.locate(np.arange(n))
    result = SweepResult(rows=rows, columns=rows.columns, grid_fields=fields, solver="closed_form", jobs=jobs,
                         elapsed_s=elapsed, des_check=des_check, backend=backend.name,
                         num_infeasible=int(np.count_nonzero(~np.asarray(numbers.fits_memory, bool)[g_all])))
    from simulator.studies.extrapolation import summary
    result.extrapolation_note = summary([numbers.extrapolation[g] for g in g_all.tolist()])
    if NUM_STEPS_FIELD in fields:
        result.best_rows = best_num_steps_rows(numbers, fields)
    from simulator.studies.break_even import sweep_break_even
    result.break_even_rows, result.break_even_note = sweep_break_even(
        rows, grid.axes, lambda r: group_paths[int(grid.locate(np.array([r["point_idx"]]))[0][0])], None)
    if out_dir is not None:
        write_outputs(result, Path(out_dir), scenario_path, grid.axes, overrides, profile_paths, sweep_seed,
                       des_sample, progress)
    return result


# ---- the numbers -------------------------------------------------------------------------------------
def evaluate(grid: GroupedGrid, profile_paths: list[str], progress: bool = True) -> GroupedNumbers:
    """The closed form of every point (module docstring), the cost model of each group made once.

    Raises:
        UserInputError: a point whose numbers are not finite or positive, named as the
            point-by-point path names it.
    """

    n_g, n_a = len(grid.groups), len(grid.acceptances)
    out = GroupedNumbers(grid, profile_paths, tok_per_s=np.zeros((n_g, n_a)), baseline_tok_per_s=np.zeros(n_g),
                         speedup=np.zeros((n_g, n_a)), accept_length=np.zeros((n_g, n_a)),
                         cycle_time_us=np.zeros((n_g, n_a)), tpot_ms=np.zeros((n_g, n_a)))
    order = sorted(range(n_g), key=lambda g: (profile_paths[g], cost_key(grid.groups[g])))  # a cost model at a time
    pmfs: dict[tuple, tuple] = {}  # (spec, max_new_tokens) -> acceptance models, renewal, mean accept length
    cost, cost_id = None, None
    bar = points_bar(progress)
    with bar, np.errstate(all="ignore"):
        task = bar.add_task(f"closed form, {n_g:,} groups x {n_a:,} acceptances", total=n_g)
        for g in order:
            sc = grid.groups[g]
            key = (profile_paths[g], cost_key(sc))
            if key != cost_id:
                cost, cost_id = build_cost_model(sc, profile_paths[g]), key
            _evaluate_group(out, g, sc, cost, pmfs)
            bar.advance(task)
    _check(out)
    for g, sc in enumerate(grid.groups):
        gb, fits = memory_of(sc, profile_paths[g])
        out.memory_gb_per_gpu.append(gb)
        out.fits_memory.append(fits)
        out.extrapolation.append(point_extrapolation(sc, profile_paths[g]))
    return out


def _acceptance_columns(grid: GroupedGrid, sc, pmfs: dict) -> tuple:
    """(acceptance models, alike indices, their pmfs, renewal m(M), mean accept lengths) of the
    acceptances with the group's spec and max_new_tokens (cached: groups share them)."""
    from simulator.acceptance import build_acceptance
    from simulator.analytic import mean_accept_lengths, renewal_cycles_many
    key = (sc.spec.num_steps, sc.spec.topk, sc.spec.num_draft_tokens, sc.workload.max_new_tokens)
    if key not in pmfs:
        models = [build_acceptance(acc, sc.spec) for acc in grid.acceptances]
        alike = np.array([i for i, m in enumerate(models) if m.beta_ab is None], dtype=np.int64)
        rows = np.stack([models[i].base_pmf for i in alike]) if len(alike) else np.zeros((0, 1))
        pmfs[key] = (models, alike, rows, renewal_cycles_many(rows, sc.workload.max_new_tokens),
                     mean_accept_lengths(rows))
    return pmfs[key]


def _evaluate_group(out: GroupedNumbers, g: int, sc, cost, pmfs: dict) -> None:
    from simulator.analytic import analyze, closed_form_columns
    models, alike, rows, cycles_per_request, means = _acceptance_columns(out.grid, sc, pmfs)
    n_a = len(models)
    b, M = sc.workload.batch_size, sc.workload.max_new_tokens
    if len(alike):
        cols = closed_form_columns(cost, rows, b, M, cycles_per_request,
                                   np.array([models[i].batch_wide for i in alike], dtype=bool))
        out.tok_per_s[g, alike] = cols.tok_per_s
        out.baseline_tok_per_s[g] = cols.baseline_tok_per_s
        out.speedup[g, alike] = cols.speedup
        out.accept_length[g, alike] = means
        out.cycle_time_us[g, alike] = cols.cycle_time_us
        out.tpot_ms[g, alike] = cols.tpot_us / US_PER_MS
        for k, v in cols.breakdown_us.items():
            values, mask = _bucket(out, k)
            values[g, alike], mask[g, alike] = v, cols.bucket_mask[k]
    others = np.setdiff1d(np.arange(n_a), alike)
    for a in others:  # requests with rates of their own: rate classes, one point at a time
        r = analyze(sc.model_copy(update={"acceptance": out.grid.acceptances[a]}), cost, models[a])
        out.tok_per_s[g, a], out.baseline_tok_per_s[g] = r.tok_per_s, r.baseline_tok_per_s
        out.speedup[g, a], out.accept_length[g, a] = r.speedup, r.mean_accept_length
        out.cycle_time_us[g, a], out.tpot_ms[g, a] = r.cycle_time_us, r.tpot_us / US_PER_MS
        for k, v in r.breakdown_us.items():
            values, mask = _bucket(out, k)
            values[g, a], mask[g, a] = v, True


def _bucket(out: GroupedNumbers, key: str) -> tuple[np.ndarray, np.ndarray]:
    if key not in out.buckets_us:
        out.buckets_us[key] = np.zeros(out.tok_per_s.shape)
        out.bucket_mask[key] = np.zeros(out.tok_per_s.shape, dtype=bool)
    return out.buckets_us[key], out.bucket_mask[key]


def _check(out: GroupedNumbers) -> None:
    """`simulator.studies.points.check_metrics` on every point at once; the first point that fails is run
    point by point, so its error is the one that path gives."""
    bad = np.zeros(out.tok_per_s.shape, dtype=bool)
    for v in (out.tok_per_s, out.baseline_tok_per_s[:, None], out.speedup, out.cycle_time_us):
        bad |= ~np.isfinite(v) | (v <= 0)
    for v in (out.accept_length,):
        bad |= ~np.isfinite(v)
    for v in (out.tpot_ms, *out.buckets_us.values()):
        bad |= ~np.isfinite(v) | (v < 0)
    if not bad.any():
        return
    g_idx, a_idx = out.grid.locate(np.arange(out.grid.num_points))
    first = int(np.flatnonzero(bad[g_idx, a_idx])[0])
    _, sc = out.grid.point(first)
    run_chunk("closed_form", [(first, sc, out.profile_paths[int(g_idx[first])])])
    m = out.metrics(first)  # the point-by-point path found no fault: say what the columns hold
    raise UserInputError(f"grid point {first} ({sc.name}): numbers not finite or not positive: "
                         f"{ {k: v for k, v in m.items() if isinstance(v, float)} }")


# ---- rows --------------------------------------------------------------------------------------------
class GroupedRows(Sequence):
    """The rows of a grouped sweep, each a dict keyed by the CSV columns (as `build_rows` makes
    them), made when asked for; `write_csv` streams them all to sweep.csv."""

    def __init__(self, numbers: GroupedNumbers, grid_fields: list[str]):
        self.numbers, self.grid = numbers, numbers.grid
        present = [k for k, m in numbers.bucket_mask.items() if m.any()]
        self.bucket_cols = [b for b in BUCKET_ORDER if b in present] + sorted(set(present) - set(BUCKET_ORDER))
        self.desc = [c for c in DESCRIPTIVE_COLUMNS if c not in grid_fields]
        self.columns = ["point_idx", *grid_fields, *self.desc, *METRIC_COLUMNS,
                        *(f"{b}_us" for b in self.bucket_cols), *MEMORY_COLUMNS, "extrapolation", "scenario_json"]
        self._json = _ScenarioJson(self.grid)
        # describe() of a point: the acceptance columns from its acceptance, the others from its group
        groups = [describe(sc) for sc in self.grid.groups]
        sc0 = self.grid.groups[0]
        accs = [describe(sc0.model_copy(update={"acceptance": acc})) for acc in self.grid.acceptances]
        self._acc_desc = {c: [d[c] for d in accs] for c in self.desc if c in _ACCEPTANCE_COLUMNS}
        self._group_desc = {c: [d[c] for d in groups] for c in self.desc if c not in _ACCEPTANCE_COLUMNS}

    def __len__(self) -> int:
        return self.grid.num_points

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        i = int(i) % len(self)
        cells = self._cells(np.array([i]), encode=False)
        return dict(zip(self.columns, (c[0] for c in cells)))

    def __iter__(self) -> Iterator[dict]:
        for start in range(0, len(self), CHUNK_ROWS):
            idx = np.arange(start, min(start + CHUNK_ROWS, len(self)))
            cells = self._cells(idx, encode=False)
            yield from (dict(zip(self.columns, row)) for row in zip(*cells))

    def _cells(self, idx: np.ndarray, encode: bool) -> list[list]:
        """Column by column, the cells of points `idx`: raw values, or (encode) as the CSV holds
        them, scenario_json last as its CSV-encoded cell."""
        from simulator.files import csv_cell
        n = self.numbers
        g_idx, a_idx = self.grid.locate(idx)
        multi = np.unravel_index(idx, self.grid.shape)
        cols: list[list] = [idx.tolist()]
        for ax, i in zip(self.grid.axes, multi):
            cols.append(_take([csv_cell(v) for v in ax.values] if encode else list(ax.values), i))
        for c in self.desc:
            cols.append(_take(self._acc_desc[c], a_idx) if c in self._acc_desc else _take(self._group_desc[c], g_idx))
        cols += [["closed_form"] * len(idx), n.tok_per_s[g_idx, a_idx].tolist(), [None] * len(idx),
                 [None] * len(idx), n.baseline_tok_per_s[g_idx].tolist(), n.speedup[g_idx, a_idx].tolist(),
                 n.accept_length[g_idx, a_idx].tolist(), n.cycle_time_us[g_idx, a_idx].tolist(),
                 n.tpot_ms[g_idx, a_idx].tolist()]
        cols += [n.buckets_us[b][g_idx, a_idx].tolist() for b in self.bucket_cols]
        cols += [_take(n.memory_gb_per_gpu, g_idx), _take(n.fits_memory, g_idx), _take(n.extrapolation, g_idx)]
        cols.append(self._json.cells(g_idx, a_idx, encode))
        return cols

    def write_csv(self, path: Path, progress: bool = True) -> None:
        """sweep.csv, as `simulator.files.write_csv_atomic` writes `build_rows`' rows, streamed in
        chunks of CHUNK_ROWS rows to a temp file moved over `path` at the end."""

        from simulator.files import atomic_file, csv_lines
        bar = points_bar(progress)
        with atomic_file(path) as f, bar:
            task = bar.add_task(f"writing {path.name}", total=len(self))
            f.write(csv_lines([self.columns]).encode("utf-8"))
            for start in range(0, len(self), CHUNK_ROWS):
                idx = np.arange(start, min(start + CHUNK_ROWS, len(self)))
                cells = self._cells(idx, encode=True)
                try:
                    text = _join_rows(csv_lines(zip(*cells[:-1])), cells[-1])
                except ValueError:  # a cell with a line break: the whole rows through the csv module
                    g_idx, a_idx = self.grid.locate(idx)
                    text = csv_lines(zip(*cells[:-1], self._json.cells(g_idx, a_idx, encode=False)))
                f.write(text.encode("utf-8"))
                bar.advance(task, len(idx))


def _take(values: list, idx: np.ndarray) -> list:
    """values[i] for i in idx, as a list (values of any type)."""
    return [values[i] for i in idx.tolist()]


def _join_rows(text: str, last_cells: list[str]) -> str:
    """CSV rows (text, one row a line) with one more, already encoded, cell at the end of each.

    Raises:
        ValueError: the rows do not split into one line each (a cell holding a line break).
    """
    lines = text.split("\n")
    if lines[-1] != "" or len(lines) != len(last_cells) + 1:
        raise ValueError("a CSV cell holds a line break")
    return "".join(itertools.chain.from_iterable(zip(lines, itertools.repeat(","), last_cells,
                                                     itertools.repeat("\n"))))


class _ScenarioJson:
    """The scenario_json cell of each point: the group's scenario JSON around the acceptance's
    (json.dumps of model_dump(mode='json'), compact), raw or as the csv module encodes it."""

    def __init__(self, grid: GroupedGrid):
        self.grid = grid
        self._groups: dict[int, tuple[str, str, str, str]] = {}
        self._accs: dict[int, tuple[str, str]] = {}

    def _group(self, g: int) -> tuple[str, str, str, str]:
        if g not in self._groups:
            from simulator.files import csv_lines
            dump = self.grid.groups[g].model_dump(mode="json")
            mark = _MARK
            while True:  # a mark the scenario's own strings do not hold
                dump["acceptance"] = mark
                parts = json.dumps(dump, separators=(",", ":")).split(json.dumps(mark))
                if len(parts) == 2:
                    break
                mark += _MARK
            before, after = parts
            enc_before, enc_after = csv_lines([[before + _MARK + after]])[:-1].split(_MARK)
            self._groups[g] = (before, after, enc_before, enc_after)
        return self._groups[g]

    def _acc(self, a: int) -> tuple[str, str]:
        if a not in self._accs:
            from simulator.files import csv_lines
            text = json.dumps(self.grid.acceptances[a].model_dump(mode="json"), separators=(",", ":"))
            enc = csv_lines([[_MARK + text + _MARK]])[:-1]
            self._accs[a] = (text, enc.split(_MARK)[1])
        return self._accs[a]

    def cells(self, g_idx: np.ndarray, a_idx: np.ndarray, encode: bool) -> list[str]:
        i, j = (2, 3) if encode else (0, 1)
        groups = {g: self._group(g) for g in set(g_idx.tolist())}
        accs = {a: self._acc(a)[1 if encode else 0] for a in set(a_idx.tolist())}
        return [groups[g][i] + accs[a] + groups[g][j] for g, a in zip(g_idx.tolist(), a_idx.tolist())]


# ---- tables over all points --------------------------------------------------------------------------
def best_num_steps_rows(numbers: GroupedNumbers, grid_fields: list[str]) -> list[dict]:
    """`simulator.studies.sweep.best_num_steps(rows, grid fields but num_steps)` from the columns: per
    combination of the other grid fields' values, the two points with the highest tok/s (the first
    in row order on a tie) and no speculation (`simulator.studies.answer.best_of`), combinations in
    the order rows first show them."""
    from simulator.studies.answer import best_of, best_row
    grid = numbers.grid
    idx = np.arange(grid.num_points)
    multi = np.unravel_index(idx, grid.shape)
    others = [i for i, f in enumerate(grid_fields) if f != NUM_STEPS_FIELD]
    key = np.zeros(len(idx), dtype=np.int64)
    for i in others:  # values that are equal share an id, as they share a dict key
        ids: dict[Any, int] = {}
        value_ids = np.array([ids.setdefault(cell_key(v), len(ids)) for v in grid.axes[i].values], dtype=np.int64)
        key = key * len(grid.axes[i].values) + value_ids[multi[i]]
    g_idx, a_idx = grid.locate(idx)
    tok = numbers.tok_per_s[g_idx, a_idx]
    order = np.lexsort((idx, -tok, key))  # by key, then highest tok/s, then first in row order
    starts = np.flatnonzero(np.r_[True, key[order][1:] != key[order][:-1]])  # per key, keys ascending
    ends = np.r_[starts[1:], len(order)]
    _, first_seen = np.unique(key, return_index=True)  # keys ascending too
    out = []
    for s, e in zip(starts[np.argsort(first_seen)].tolist(), ends[np.argsort(first_seen)].tolist()):
        p = int(order[s])
        combo = grid.combo(p)
        cands = []
        for q in order[s:min(s + 2, e)].tolist():
            (g,), (a,) = grid.locate(np.array([q]))
            cands.append((g, (grid.groups[g].spec.num_steps, float(numbers.tok_per_s[g, a]),
                              float(numbers.speedup[g, a]))))
        g0 = cands[0][0]
        baseline = float(numbers.baseline_tok_per_s[g0])
        b = best_of([c for _, c in cands], baseline)
        g_best = next((g for g, c in cands if c[0] == b["best_num_steps"]), g0)
        out.append(best_row({grid_fields[i]: combo[i] for i in others}, b, "tok_per_s", "speedup",
                            "baseline_tok_per_s", baseline, numbers.extrapolation[g_best]))
    return out


def estimate(grid: GroupedGrid, profile_paths: list[str], des_sample: int, jobs: int) -> tuple[float, float, float]:
    """(seconds, peak bytes, disk bytes: `simulator.studies.sweep_files.sweep_disk_bytes`) of a
    grouped sweep: a cost model per distinct cost key
    (`simulator.estimate.estimate_cost_model_s`), `analyze` per point with rate classes
    (`estimate_closed_form_s`), the renewal function per (spec, max_new_tokens) over the other
    points, GROUPED_POINT_S and GROUPED_POINT_BYTES per point, and the DES
    spot-check as `simulator.studies.sweep.estimate_sweep` estimates it: `estimate_run` on up to 16 points
    spread over the grid, the slowest times the sample, over `jobs` workers."""
    from simulator.costs.forward import CostModel
    from simulator.estimate import estimate_closed_form_s, estimate_cost_model_s, estimate_run
    cost_models = {cost_key(sc): estimate_cost_model_s(sc) for sc in grid.groups}
    seconds = sum(cost_models.values()) + grid.num_points * GROUPED_POINT_S
    classes = [acc for acc in grid.acceptances if getattr(acc, "rate_concentration", None) is not None]
    for acc in classes:
        seconds += len(grid.groups) * estimate_closed_form_s(grid.groups[0].model_copy(update={"acceptance": acc}))
    alike = len(grid.acceptances) - len(classes)  # an upper end: a rate of 0 or 1 has no classes
    renewals = {(sc.spec.num_steps, sc.spec.topk, sc.spec.num_draft_tokens, sc.workload.max_new_tokens)
                for sc in grid.groups}  # as _acceptance_columns caches them
    seconds += sum(M * (s + 1) * (_RENEWAL_COLUMNS_US[0] + _RENEWAL_COLUMNS_US[1] * alike)
                   for s, _, _, M in renewals) / 1e6
    memory = grid.num_points * GROUPED_POINT_BYTES
    num_des = min(des_sample, grid.num_points)
    if num_des:
        probe = sorted({int(i) for i in np.linspace(0, grid.num_points - 1, min(16, grid.num_points))})
        g_idx, _ = grid.locate(np.array(probe))
        ests = []
        for p, g in zip(probe, g_idx.tolist()):
            sc = grid.point(p)[1]
            ests.append(estimate_run(sc, CostModel(sc, cached_profile(profile_paths[g]))))
        seconds += num_des * max(e.seconds for e in ests) / jobs
        memory += max(e.memory_bytes for e in ests) * min(jobs, num_des)
    from simulator.studies.sweep_files import sweep_disk_bytes
    probe = sorted({int(i) for i in np.linspace(0, grid.num_points - 1, min(16, grid.num_points))}) \
        if grid.num_points else []
    return seconds, memory, sweep_disk_bytes(grid.num_points, [grid.point(p)[1] for p in probe])
