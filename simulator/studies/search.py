"""Configuration search: the best placement, draft shape, TP size and batch for an objective.

The search space is a product of scenario fields, each given as a sweep grid spec
(`simulator.studies.grid.parse_grid`: `field=1..8`, `field=a,b,c`, `field=0.3:0.9:0.1`). By default:

- `tp_size`: the divisors of the scenario's GPU count (the box's `gpus_per_node` when
  `hardware.box` is given, else the scenario's tp_size, plus one for a dedicated draft GPU)
  that divide the target's attention heads;
- `placement`: shared_tp, tp1_colocated (tp_size > 1 only: at tp_size 1 it is shared_tp) and
  tp1_dedicated where tp_size + 1 GPUs fit in that count;
- `spec.num_steps`: 1..8; `spec.topk`: 1, and with acceptance kind `tree` also 2, 4, 8;
  `spec.num_draft_tokens`: a chain's num_steps + 1, a tree's values in TREE_DRAFT_TOKENS that
  lie in num_steps + 1 .. the tree's node count. Chains only otherwise: an iid, positional or
  empirical acceptance says nothing about a second candidate per depth.

Acceptance across the space: a tree's per-candidate rate with topk 1 is an iid chain at that
rate; positional rates are cut to the first num_steps depths (num_steps above their length is
left out); empirical acceptance holds for its own num_steps only. Any other field (the batch
policy: `workload.batch_size`, `serving.spec_off_above_batch`, ...) keeps the scenario's value
unless given with `--space`, which replaces a default axis or adds one. Combinations a scenario
refuses (heads that a draft TP size does not divide, say) are left out and counted.

Objectives: `simulator.studies.objectives.OBJECTIVES`. Points run through the closed form (`simulator.studies.points.run_points`, vectorised per
cost model); constraints (`max_tpot_ms`, `max_gpus`) mark points infeasible.

The Pareto front is taken over the feasible points: (tok/s per user, tok/s per GPU), both
maximised, for the throughput objectives; (objective, GPUs used), GPUs minimised, for goodput
and TPOT.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulator import __version__
from simulator.studies.backend import Backend, LocalBackend
from simulator.config import Placement, PlacementKind, Scenario
from simulator.files import OUTPUT_KEY, write_csv_atomic, write_json_atomic, write_text_atomic
from simulator.studies.grid import GridAxis, parse_grid
from simulator.studies.objectives import OBJECTIVES
from simulator.inputs import quote
from simulator.scenario import UserInputError, apply_overrides, read_scenario_dict, scenario_from_dict

SEARCH_OUTPUT = "search/1"
DEFAULT_NUM_STEPS = tuple(range(1, 9))
TREE_TOPK = (2, 4, 8)
TREE_DRAFT_TOKENS = (4, 8, 16, 32, 64)
SPACE_FIELDS = ("tp_size", "placement", "spec.num_steps", "spec.topk", "spec.num_draft_tokens")
DEFAULT_PLACEMENTS = ("shared_tp", "tp1_colocated", "tp1_dedicated")
MAX_SEARCH_POINTS = 20_000
TABLE_COLUMNS = ("placement", "tp_size", "num_gpus", "num_steps", "topk", "num_draft_tokens", "batch_size")
METRIC_COLUMNS = ("tok_per_s", "tok_per_s_per_user", "tok_per_s_per_gpu", "tpot_p50_ms", "speedup", "accept_length",
                  "cycle_time_us")


@dataclass
class SearchResult:
    """What `run_search` produced: every point's row (CSV columns), the order, the front."""

    rows: list[dict]
    columns: list[str]
    objective: str
    ranked: list[int]  # point_idx of feasible points, best first
    pareto: list[int]  # point_idx on the Pareto front, in the order of its first axis
    pareto_axes: tuple[tuple[str, bool], tuple[str, bool]]  # (column, maximise) x 2
    space: dict[str, list]
    notes: list[str]
    num_skipped: int
    elapsed_s: float
    paths: list[Path] = field(default_factory=list)
    answer: dict = field(default_factory=dict)  # simulator.studies.search_answer.search_answer

    @property
    def best(self) -> dict | None:
        return self.rows[self.ranked[0]] if self.ranked else None


# ---- the space --------------------------------------------------------------------------------------
def gpu_count(sc: Scenario) -> int:
    """GPUs the search may use: the box's, else the scenario's own (a dedicated draft GPU included)."""
    if sc.hardware.box is not None:
        from simulator.hardware import default_catalog
        return default_catalog().box(sc.hardware.box).gpus_per_node
    return sc.placement.num_gpus(sc.tp_size)


def _placement(value, tp_size: int) -> Placement | None:
    """A --space placement value as the typed placement at `tp_size`; None for a value that is not
    one (the point's validation then says what is wrong with it)."""
    try:
        return Placement.model_validate(Placement.parse(value, tp_size))
    except ValueError:
        return None


def parse_space(specs: list[str]) -> dict[str, GridAxis]:
    """`--space` specs by field (the sweep's grid syntax and checks); a field given twice is an error."""
    out: dict[str, GridAxis] = {}
    for s in specs:
        try:
            ax = parse_grid(s)
        except UserInputError as e:
            raise UserInputError(str(e).replace("--grid ", "--space ", 1)) from None
        if ax.field in out:
            raise UserInputError(f"--space {quote(s)}: {ax.field} is already given by {quote(out[ax.field].spec)}")
        out[ax.field] = ax
    return out


def _spec_combos(steps: tuple, topks: tuple, ndts: tuple | None) -> list[tuple[int, int, int]]:
    """(num_steps, topk, num_draft_tokens) that make a valid spec: a chain's ndt is num_steps + 1."""
    out = []
    for s, k in itertools.product(steps, topks):
        if k == 1:
            out.append((s, 1, s + 1))
            continue
        max_nodes = 1 + k + (s - 1) * k * k
        for n in (ndts if ndts is not None else TREE_DRAFT_TOKENS):
            if s + 1 <= n <= max_nodes:
                out.append((s, k, n))
    return list(dict.fromkeys(out))


def default_space(base: Scenario, given: dict[str, GridAxis]) -> tuple[dict[str, tuple], list[str]]:
    """The space's values by field (given axes override the defaults) and notes on what was chosen."""
    notes = []
    acc = base.acceptance
    n_gpus = gpu_count(base)
    heads = base.target.num_attention_heads
    tps = tuple(t for t in range(1, n_gpus + 1) if n_gpus % t == 0 and heads % t == 0)
    notes.append(f"{n_gpus} GPUs ({'box ' + base.hardware.box if base.hardware.box else 'the scenario'}): "
                 f"tp_size {', '.join(map(str, tps))} (divisors the target's {heads} heads allow)")
    if acc.kind == "tree":
        topks = (1, *TREE_TOPK)
        notes.append("acceptance kind tree: chains (topk 1, iid at the per-candidate rate) and trees "
                     f"(topk {', '.join(map(str, TREE_TOPK))}, num_draft_tokens in {list(TREE_DRAFT_TOKENS)})")
    else:
        topks = (1,)
        notes.append(f"acceptance kind {acc.kind}: chains only (topk 1); a tree needs acceptance kind tree, "
                     "whose rate is per candidate")
    steps = DEFAULT_NUM_STEPS
    if acc.kind == "positional":
        steps = tuple(s for s in steps if s <= len(acc.acceptance_rates))
        notes.append(f"positional acceptance: num_steps up to its {len(acc.acceptance_rates)} rates")
    elif acc.kind == "empirical":
        steps = (base.spec.num_steps,)
        notes.append(f"empirical acceptance: num_steps {base.spec.num_steps} only (its histogram's)")
    values: dict[str, tuple] = {"tp_size": tps, "placement": DEFAULT_PLACEMENTS, "spec.num_steps": steps,
                                "spec.topk": topks, "spec.num_draft_tokens": None}
    for f, ax in given.items():
        values[f] = ax.values
    if base.serving is None and "workload.batch_size" not in given:
        notes.append(f"batch_size {base.workload.batch_size} (the scenario's; --space workload.batch_size=1,8,32 "
                     "searches it)")
    return values, notes


def _acceptance_for(acc: dict, num_steps: int, topk: int) -> dict:
    """The scenario's acceptance fitted to a point's spec (see the module docstring)."""
    if acc.get("kind") == "tree" and topk == 1:
        return {"kind": "iid", "acceptance_rate": acc["acceptance_rate"]}
    if acc.get("kind") == "positional":
        return {**acc, "acceptance_rates": list(acc["acceptance_rates"])[:num_steps]}
    return acc


def expand_space(base_dict: dict, base: Scenario, values: dict[str, tuple | None], source: str,
                 base_dir: Path) -> tuple[list[tuple[dict, Scenario]], int, str]:
    """Every valid point as (its values by field, Scenario), the number left out, the first reason.

    Raises:
        UserInputError: more than MAX_SEARCH_POINTS combinations, or no valid point.
    """
    n_gpus = gpu_count(base) if base.hardware.box else max(gpu_count(base), *values["tp_size"])
    extra = [f for f in values if f not in SPACE_FIELDS]
    specs = _spec_combos(values["spec.num_steps"], values["spec.topk"], values["spec.num_draft_tokens"])
    places = [(t, p) for t in values["tp_size"] for p in values["placement"]]
    total = len(specs) * len(places) * math.prod(len(values[f]) for f in extra)
    if total > MAX_SEARCH_POINTS:
        raise UserInputError(f"--space: {total:,} combinations; a search takes at most {MAX_SEARCH_POINTS:,} "
                             "(restrict a field with --space)")
    if base.acceptance.kind != "tree" and any(k > 1 for k in values["spec.topk"]):
        raise UserInputError("--space spec.topk: topk > 1 needs acceptance kind tree (a rate per candidate); "
                             f"the scenario's is {base.acceptance.kind}")
    points, skipped, reason = [], 0, ""
    seen: set[str] = set()
    for (t, p), (s, k, n), rest in itertools.product(places, specs, itertools.product(*(values[f] for f in extra))):
        pl = _placement(p, t)
        if pl is not None and pl.kind is PlacementKind.COLOCATED and pl.draft_tp_size == 1 and t == 1:
            skipped += 1  # the same GPU as shared_tp
            continue
        if pl is not None and pl.dedicated and pl.num_gpus(t) > n_gpus:
            skipped += 1
            reason = reason or f"tp_size {t} + a dedicated draft GPU needs {pl.num_gpus(t)} GPUs of {n_gpus}"
            continue
        point = {"tp_size": t, "placement": p, "spec.num_steps": s, "spec.topk": k, "spec.num_draft_tokens": n,
                 **dict(zip(extra, rest))}
        data = copy.deepcopy(base_dict)
        data["acceptance"] = _acceptance_for(data["acceptance"], s, k)
        data = apply_overrides(data, [f"{f}={json.dumps(v)}" for f, v in point.items()], source)
        try:
            sc = scenario_from_dict(data, source, base_dir)
        except UserInputError as e:
            skipped += 1
            reason = reason or f"({', '.join(f'{f}={v}' for f, v in point.items())}): {str(e).splitlines()[0]}"
            continue
        key = sc.model_dump_json()
        if key in seen:
            skipped += 1
            continue
        seen.add(key)
        points.append((point, sc))
    if not points:
        raise UserInputError(f"--space: no valid configuration; {reason or 'the space is empty'}")
    return points, skipped, reason


# ---- metrics, ranking, the front --------------------------------------------------------------------
def point_row(idx: int, point: dict, sc: Scenario, m: dict) -> dict:
    """One CSV row: the point's fields, its descriptive columns and metrics (see METRIC_COLUMNS)."""
    gpus = sc.placement.num_gpus(sc.tp_size)
    tpot = m.get("serving_tpot_p50_ms") if m.get("serving_tpot_p50_ms") is not None else m["tpot_ms"]
    row = {"point_idx": idx, "placement": sc.placement.label, "tp_size": sc.tp_size, "num_gpus": gpus,
           "num_steps": sc.spec.num_steps, "topk": sc.spec.topk, "num_draft_tokens": sc.spec.num_draft_tokens,
           "batch_size": sc.workload.batch_size,
           **{f: v for f, v in point.items() if f not in SPACE_FIELDS},
           "tok_per_s": m["tok_per_s"], "tok_per_s_per_user": m["tok_per_s"] / sc.workload.batch_size,
           "tok_per_s_per_gpu": m["tok_per_s"] / gpus, "tpot_p50_ms": tpot, "speedup": m["speedup"],
           "accept_length": m["accept_length"], "cycle_time_us": m["cycle_time_us"]}
    row.update({k: v for k, v in m.items() if k.startswith("serving_")})
    return row


def pareto_front(rows: list[dict], axes: tuple[tuple[str, bool], tuple[str, bool]]) -> list[int]:
    """Indices (into rows) of the non-dominated rows over two (column, maximise) axes.

    A row is dominated when another is at least as good on both axes and better on one. Returns
    them sorted by the first axis, best first; equal rows are all kept.
    """
    def key(r: dict) -> tuple[float, float]:
        return tuple(float(r[c]) if up else -float(r[c]) for c, up in axes)

    order = sorted(range(len(rows)), key=lambda i: key(rows[i]), reverse=True)
    front, best_y, best_x = [], -math.inf, math.inf
    for i in order:
        x, y = key(rows[i])
        if y > best_y or (y == best_y and x == best_x):
            front.append(i)
            best_y, best_x = y, x
    return front


def rank(rows: list[dict], objective: str) -> list[int]:
    """Feasible rows' indices, best objective first (ties: more tok/s per GPU, then fewer GPUs)."""
    col, up = OBJECTIVES[objective]
    feasible = [i for i, r in enumerate(rows) if r["feasible"] and r.get(col) is not None]
    return sorted(feasible, key=lambda i: ((-1 if up else 1) * rows[i][col], -rows[i]["tok_per_s_per_gpu"],
                                           rows[i]["num_gpus"], i))


def pareto_axes(objective: str) -> tuple[tuple[str, bool], tuple[str, bool]]:
    if objective in ("goodput", "tpot_p50_ms"):
        return OBJECTIVES[objective], ("num_gpus", False)
    return ("tok_per_s_per_user", True), ("tok_per_s_per_gpu", True)


# ---- the search -----------------------------------------------------------------------------------
def _memory_columns(rows: list[dict], items) -> None:
    """memory_gb_per_gpu and fits_memory of each row (simulator.memory: weights and KV cache on
    the fullest GPU; a point past the GPU's physical memory does not fit)."""
    from simulator.studies.points import memory_of
    for r, (_, sc, path) in zip(rows, items):
        r["memory_gb_per_gpu"], r["fits_memory"] = memory_of(sc, path)


def run_search(scenario_path: Path, objective: str = "tok_per_s_per_user", space: list[str] | None = None,
               overrides: list[str] | None = None, profile: str | None = None, max_tpot_ms: float | None = None,
               max_gpus: int | None = None, jobs: int = 1, progress: bool = False,
               confirm: Callable[[float, float], None] | None = None, backend: Backend | None = None) -> SearchResult:
    """Evaluate every configuration of the space and rank them by the objective.

    Args:
        scenario_path: scenario YAML. objective: one of OBJECTIVES. space: `--space` grid specs.
        overrides: `--set` strings applied first. profile: profile name/path override.
        max_tpot_ms: points with a larger tpot_p50_ms are infeasible. max_gpus: likewise GPUs used.
        jobs: worker processes of the local backend; used when backend is None.
        confirm: called with (estimated seconds, bytes) of the serving DES runs (objective
            goodput) before they run; it may raise to stop.
        backend: where points run (simulator.studies.backend; None: `LocalBackend(jobs)`); entered here.

    Raises:
        UserInputError: bad objective, space field or value, constraint, scenario, profile or
            jobs; a backend that cannot start.
    """
    from simulator.studies.points import point_items, run_points
    t0 = time.perf_counter()
    backend = LocalBackend(jobs) if backend is None else backend
    if objective not in OBJECTIVES:
        raise UserInputError(f"--objective {quote(objective)}: expected one of {', '.join(OBJECTIVES)}")
    if max_tpot_ms is not None and not (math.isfinite(max_tpot_ms) and max_tpot_ms > 0):
        raise UserInputError(f"--max-tpot-ms {max_tpot_ms}: expected a number > 0")
    if max_gpus is not None and max_gpus < 1:
        raise UserInputError(f"--max-gpus {max_gpus}: expected 1 or more")
    given = parse_space(list(space or []))
    scenario_path = Path(scenario_path)
    base_dict = apply_overrides(read_scenario_dict(scenario_path), list(overrides or []), str(scenario_path))
    base = scenario_from_dict(copy.deepcopy(base_dict), str(scenario_path), scenario_path.parent)
    serving = objective == "goodput"
    if serving and base.serving is None:
        raise UserInputError("--objective goodput needs serving mode (a `serving:` section in the scenario)")
    if serving and max_tpot_ms is not None and base.serving.slo.tpot_ms is None:
        base_dict = apply_overrides(base_dict, [f"serving.slo.tpot_ms={max_tpot_ms}"], str(scenario_path))
    values, notes = default_space(base, given)
    points, skipped, reason = expand_space(base_dict, base, values, str(scenario_path), scenario_path.parent)
    if skipped and reason:
        notes.append(f"{skipped} combinations left out, e.g. {reason}")
    items, _ = point_items([sc for _, sc in points], profile, scenario_path)
    with backend:
        metrics = run_points("closed_form", items, backend, progress, label="search (closed form)",
                             with_serving=False)
        if serving:
            metrics = _serving(items, metrics, backend, progress, confirm)
    rows = [point_row(i, pt, sc, metrics[i]) for i, (pt, sc) in enumerate(points)]
    _memory_columns(rows, items)
    from simulator.studies.extrapolation import row_extrapolation
    for r, (_, sc, path) in zip(rows, items):
        r["extrapolation"] = row_extrapolation(sc, path, r)
    for r in rows:
        r["feasible"] = ((max_tpot_ms is None or r["tpot_p50_ms"] <= max_tpot_ms)
                         and (max_gpus is None or r["num_gpus"] <= max_gpus) and r["fits_memory"])
    if not all(r["fits_memory"] for r in rows):
        notes.append(f"{sum(not r['fits_memory'] for r in rows)} configurations do not fit in GPU memory (weights and "
                     "KV cache past the GPU's): infeasible (simulator.memory)")
    ranked = rank(rows, objective)
    axes = pareto_axes(objective)
    feasible = [r for r in rows if r["feasible"] and all(r.get(c) is not None for c, _ in axes)]
    front = [feasible[i]["point_idx"] for i in pareto_front(feasible, axes)]
    on_front = set(front)
    rank_of = {idx: n + 1 for n, idx in enumerate(ranked)}
    for r in rows:
        r["pareto"] = r["point_idx"] in on_front
        r["rank"] = rank_of.get(r["point_idx"])
        r["scenario_json"] = json.dumps(points[r["point_idx"]][1].model_dump(mode="json"), separators=(",", ":"))
    columns = list(dict.fromkeys(k for r in rows for k in r))
    columns = [c for c in columns if c != "scenario_json"] + ["scenario_json"]
    shown = {f: list(v) for f, v in values.items() if v is not None}
    from simulator.studies.search_answer import search_answer
    answer = search_answer(rows, ranked, objective, [sc for _, sc in points], [path for _, _, path in items])
    return SearchResult(rows=rows, columns=columns, objective=objective, ranked=ranked, pareto=front,
                        pareto_axes=axes, space=shown, notes=notes, num_skipped=skipped,
                        elapsed_s=time.perf_counter() - t0, answer=answer)


def _serving(items: list, metrics: dict[int, dict], backend: Backend, progress: bool,
             confirm: Callable[[float, float], None] | None) -> dict[int, dict]:
    """The serving DES of every point (goodput), estimated from the first point's run time."""
    from simulator.studies.points import serving_metrics
    t = time.perf_counter()
    first = serving_metrics(items[0][1], items[0][2])
    per_point_s = time.perf_counter() - t
    if confirm is not None:
        confirm(per_point_s * (len(items) - 1) / backend.num_workers, 0.0)
    metrics[items[0][0]].update(first)
    from simulator.studies.points import run_points
    rest = run_points("closed_form", items[1:], backend, progress, label="search (serving DES)", with_serving=True)
    for idx, m in rest.items():
        metrics[idx].update({k: v for k, v in m.items() if k.startswith("serving_")})
    return metrics


def write_search(result: SearchResult, out_dir: Path, scenario_path: Path, overrides: list[str] | None,
                 constraints: dict[str, Any], top: int) -> list[Path]:
    """search.csv (every point), search.json (space, objective, best, top, front) and index.html."""
    out_dir = Path(out_dir)
    csv_path, json_path, html_path = out_dir / "search.csv", out_dir / "search.json", out_dir / "index.html"
    write_csv_atomic(csv_path, result.rows, result.columns)

    def brief(i: int) -> dict:
        return {k: v for k, v in result.rows[i].items() if k != "scenario_json"}

    meta = {OUTPUT_KEY: SEARCH_OUTPUT, "version": __version__, "scenario_path": str(scenario_path),
            "overrides": list(overrides or []), "objective": result.objective,
            "objective_column": OBJECTIVES[result.objective][0], "maximise": OBJECTIVES[result.objective][1],
            "constraints": constraints, "space": result.space, "notes": result.notes,
            "num_points": len(result.rows), "num_feasible": sum(r["feasible"] for r in result.rows),
            "num_skipped": result.num_skipped, "elapsed_s": result.elapsed_s, "csv": csv_path.name,
            "answer": result.answer or None,
            "best": brief(result.ranked[0]) if result.ranked else None,
            "top": [brief(i) for i in result.ranked[:top]],
            "pareto_axes": [{"column": c, "maximise": up} for c, up in result.pareto_axes],
            "pareto": [brief(i) for i in result.pareto],
            "best_scenario": json.loads(result.rows[result.ranked[0]]["scenario_json"]) if result.ranked else None}
    write_json_atomic(json_path, meta, allow_nan=False)
    from simulator.studies.plots import search_html
    write_text_atomic(html_path, search_html(result.rows, result.pareto, result.pareto_axes,
                                             result.ranked[0] if result.ranked else None, result.objective))
    result.paths = [csv_path, json_path, html_path]
    return result.paths
