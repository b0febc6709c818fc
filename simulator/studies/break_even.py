"""The break-even acceptance rate of a sweep's or search's combinations (simulator.studies.answer
says what it is and the words): the closed form solved per num_steps, or the swept grid interpolated."""

from __future__ import annotations

import json
from typing import Any, Callable

from simulator.studies.answer import (MAX_BREAK_EVEN_SOLVES, NUM_STEPS_FIELD, RATE_FIELD, grid_break_even,
                                      solve_break_even)
from simulator.studies.extrapolation import at_batch, point_extrapolation


def with_rate(sc, rate: float):
    """The scenario at another acceptance rate (validated anew)."""
    from simulator.config import Scenario
    data = sc.model_dump(mode="json")
    data["acceptance"]["acceptance_rate"] = float(rate)
    return Scenario.model_validate(data)


def closed_form_break_even(scenarios: dict[int, Any], profile_path: str) -> tuple[float | None, int | None, str]:
    """(rate, num_steps, how): the smallest break-even rate over a combination's scenarios by num_steps
    (`solve_break_even` on the closed form's speedup)."""
    from simulator.studies.points import analytic_metrics
    best: tuple[float | None, int | None, str] = (None, None, "never pays")
    for k, sc in sorted(scenarios.items()):
        rate, how = solve_break_even(lambda a, sc=sc: analytic_metrics(with_rate(sc, a), profile_path)["speedup"])
        if rate is not None and (best[0] is None or rate < best[0]):
            best = (rate, k, how)
    return best


def has_one_rate(sc) -> bool:
    return getattr(sc.acceptance, "acceptance_rate", None) is not None and sc.acceptance.kind in ("iid", "tree")


def break_even_rows(rows, grid_fields: list[str], axes_values: list[tuple], profile_path_of: Callable[[dict], str],
                    scenario_of: Callable[[dict], Any], load_field: str | None = None) -> tuple[list[dict], str | None]:
    """Break-even rows of a sweep (module docstring) and a note where some were not computed.

    Args:
        rows: the sweep's rows (a list, or GroupedRows: only the rows of the first swept rate are read).
        grid_fields, axes_values: the swept fields and their values, in grid order.
        profile_path_of, scenario_of: a row's resolved profile path and Scenario.
        load_field: a serving sweep's swept load (None: not a serving sweep).

    Returns:
        ([{*combo fields, at, at_value, break_even_acceptance_rate, how, num_steps, method, extrapolation}], note)
    """
    import itertools
    import numpy as np
    serving = load_field is not None
    shape = [len(v) for v in axes_values]
    rate_axis = grid_fields.index(RATE_FIELD) if RATE_FIELD in grid_fields else None
    combo_fields = [f for f in grid_fields if f not in (NUM_STEPS_FIELD, RATE_FIELD)]
    grid_method = serving and rate_axis is not None
    ranges = [range(n) if i != rate_axis or grid_method else range(1) for i, n in enumerate(shape)]
    by_combo: dict[str, dict] = {}
    for multi in itertools.product(*ranges):
        r = rows[int(np.ravel_multi_index(multi, shape))] if shape else rows[0]
        key = json.dumps([r.get(f) for f in combo_fields], default=str)
        c = by_combo.setdefault(key, {"combo": {f: r.get(f) for f in combo_fields}, "rows": {}})
        c["rows"].setdefault(r["num_steps"], []).append(r)
    first = next(iter(by_combo.values()), None)
    if first is None:
        return [], None
    sc0 = scenario_of(next(iter(first["rows"].values()))[0])
    if not has_one_rate(sc0):
        return [], (f"break-even acceptance rate: not computed (acceptance kind {sc0.acceptance.kind} has no single "
                    "acceptance_rate to solve for)")
    out, left = [], 0
    solves = 0
    for c in by_combo.values():
        rep = next(iter(c["rows"].values()))[0]
        at, at_value = (load_field.split(".")[-1], rep.get(load_field)) if serving else ("batch", rep.get("batch_size"))
        if grid_method:
            per_k = [grid_break_even([(r["acceptance_rate"], r["serving_speedup"]) for r in rs
                                      if r.get("serving_speedup") is not None]) + (k,)
                     for k, rs in sorted(c["rows"].items())]
            found = [p for p in per_k if p[0] is not None]
            rate, how, k = min(found, key=lambda p: p[0]) if found else (None, "never pays", None)
            method, ext = "grid", rep.get("extrapolation") or ""
        else:
            if solves + len(c["rows"]) > MAX_BREAK_EVEN_SOLVES:
                left += 1
                continue
            solves += len(c["rows"])
            scs, ext = {}, ""
            for k, rs in c["rows"].items():
                sc = scenario_of(rs[0])
                if serving:
                    sc = at_batch(sc.model_copy(update={"serving": None}),
                                  round(rs[0].get("serving_mean_batch_size") or sc.workload.batch_size))
                scs[k] = sc
            rate, k, how = closed_form_break_even(scs, profile_path_of(rep))
            if serving:
                at_batch_size = next(iter(scs.values())).workload.batch_size
                method = f"closed_form_at_mean_batch {at_batch_size}"
            else:
                method = "closed_form"
            ext = point_extrapolation(scs[k] if k is not None else next(iter(scs.values())), profile_path_of(rep))
        out.append({**c["combo"], "at": at, "at_value": at_value, "break_even_acceptance_rate": rate, "how": how,
                    "num_steps": k, "method": method, "extrapolation": ext})
    note = (f"break-even acceptance rate computed for {len(out)} of {len(out) + left} combinations (at most "
            f"{MAX_BREAK_EVEN_SOLVES} closed-form solves); sweep fewer combinations for the rest") if left else None
    return out, note


def sweep_break_even(rows, axes, profile_path_of, load_field: str | None) -> tuple[list[dict], str | None]:
    """`break_even_rows` of a sweep's rows (GridAxis list `axes`; scenarios read from scenario_json)."""
    from simulator.studies.sweep_files import row_scenario
    return break_even_rows(rows, [a.field for a in axes], [a.values for a in axes], profile_path_of,
                           lambda r: row_scenario(r, f"sweep point {r['point_idx']}"), load_field)
