"""Serving metrics in sweep rows, and the load at which speculation stops paying.

`serving_columns` flattens a ServingResult into the `serving_*` columns of sweep.csv (latencies in
ms, as ServingResult gives them; rates per second; `serving_baseline_*`: the no-speculation run). `crossover` reads swept rows:
for each combination of the other grid fields, along the load field in increasing order, the first
value where speculative output tokens/s <= the no-speculation baseline's (same scenario,
speculation off, same workload seeds). `serving_best_num_steps` picks, per combination, the
num_steps with the highest serving output tokens/s.
"""

from __future__ import annotations

import json
from typing import Any

from simulator.serving.metrics import ServingResult

SERVING_COLUMNS = ("serving_output_tok_per_s", "serving_baseline_output_tok_per_s", "serving_speedup",
                   "serving_tok_per_s_per_user", "serving_ttft_p50_ms", "serving_ttft_p99_ms",
                   "serving_tpot_p50_ms", "serving_tpot_p99_ms", "serving_baseline_tpot_p50_ms",
                   "serving_itl_p50_ms", "serving_itl_p99_ms",
                   "serving_e2e_latency_p50_ms", "serving_e2e_latency_p99_ms", "serving_queue_p50_ms",
                   "serving_goodput_request_per_s", "serving_goodput_tok_per_s", "serving_slo_attained_frac",
                   "serving_mean_batch_size", "serving_spec_step_frac", "serving_num_requests")
LOAD_FIELDS = ("serving.arrivals.concurrency", "serving.arrivals.rate_per_s")


def serving_columns(r: ServingResult) -> dict[str, Any]:
    """The SERVING_COLUMNS of one result."""
    out: dict[str, Any] = {"serving_output_tok_per_s": r.output_tok_per_s,
                           "serving_baseline_output_tok_per_s": r.baseline_output_tok_per_s,
                           "serving_speedup": r.speedup, "serving_tok_per_s_per_user": r.tok_per_s_per_user}
    for name in ("ttft", "tpot", "itl", "e2e_latency"):
        p = getattr(r, f"{name}_ms")
        out[f"serving_{name}_p50_ms"] = p.p50 if p is not None else None
        out[f"serving_{name}_p99_ms"] = p.p99 if p is not None else None
    out["serving_baseline_tpot_p50_ms"] = r.baseline_tpot_ms.p50 if r.baseline_tpot_ms is not None else None
    out.update(serving_queue_p50_ms=r.queue_ms.p50, serving_goodput_request_per_s=r.goodput_request_per_s,
               serving_goodput_tok_per_s=r.goodput_tok_per_s, serving_slo_attained_frac=r.slo_attained_frac,
               serving_mean_batch_size=r.mean_batch_size, serving_spec_step_frac=r.spec_step_frac,
               serving_num_requests=r.num_requests)
    return out


def crossover(rows: list[dict], load_field: str, group_by: list[str]) -> list[dict]:
    """Where speculation stops paying along `load_field`, per combination of `group_by`.

    Args:
        rows: sweep rows with `load_field`, serving_output_tok_per_s and
            serving_baseline_output_tok_per_s.
        load_field: the swept load (serving.arrivals.concurrency, ...). group_by: other grid fields.

    Returns:
        Rows {*group_by, load_field, crossover: first load value with speculative tok/s <= baseline
        tok/s (None: speculation pays at every swept load), last_paying: the largest load value below
        it where speculation paid (None: none), speedups: [[load, speedup], ...] in load order}.
    """
    groups: dict[str, list[dict]] = {}
    for r in rows:
        if r.get("serving_baseline_output_tok_per_s") is None:
            continue
        key = json.dumps([r.get(c) for c in group_by], default=str)
        groups.setdefault(key, []).append(r)
    out = []
    for members in groups.values():
        members = sorted(members, key=lambda r: r[load_field])
        cross, last = None, None
        for r in members:
            if r["serving_output_tok_per_s"] <= r["serving_baseline_output_tok_per_s"]:
                cross = r[load_field]
                break
            last = r[load_field]
        out.append({**{c: members[0].get(c) for c in group_by}, "load_field": load_field, "crossover": cross,
                    "last_paying": last,
                    "speedups": [[r[load_field], r["serving_output_tok_per_s"] / r["serving_baseline_output_tok_per_s"]]
                                 for r in members]})
    return out


def serving_best_num_steps(rows: list[dict], group_by: list[str]) -> list[dict]:
    """For each combination of `group_by` values (the swept load among them), the num_steps with the
    highest serving output tok/s, or 0 (no speculation) where the no-speculation run's is at least as
    high (`simulator.studies.answer.best_per_combination`: runner-up, gap, near ties too).

    Args:
        rows: sweep rows with `num_steps` and serving_output_tok_per_s (rows without it are skipped).
        group_by: columns that define a combination (the load, and what else is held fixed).

    Returns:
        Rows {*group_by, best_num_steps, serving_output_tok_per_s, serving_speedup,
        serving_baseline_output_tok_per_s, best_speculative_num_steps, best_speculative_speedup,
        runner_up_num_steps, runner_up_gap_pct, near_tie, extrapolation}, in first-seen order; ties
        keep the first row.
    """
    from simulator.studies.answer import best_per_combination
    return best_per_combination(rows, group_by, "serving_output_tok_per_s", "serving_speedup",
                                "serving_baseline_output_tok_per_s")
