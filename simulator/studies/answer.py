"""The answer a sweep or search is run for, first: where speculation pays, and the best num_steps.

- Best num_steps with no speculation as a candidate (`best_of`): per combination of the other grid
  fields, the num_steps with the highest tok/s, or 0 (no speculation) where the no-speculation
  baseline is at least as fast as every num_steps swept; the runner-up (a num_steps or 0) and the
  gap between them in % of the runner-up's tok/s; a gap under NEAR_TIE_FRAC is a near tie.
- Break-even acceptance rate (`break_even_rows`): per combination of the grid fields other than
  num_steps and the acceptance rate, the acceptance rate above which speculation beats no
  speculation at the best of the swept num_steps (the scenario's where not swept). Two methods,
  each row says which:
  `closed_form`: scipy.optimize.brentq on speedup(rate) - 1 over [0, 1] per num_steps (the
  closed form, `simulator.analytic`; speedup grows with the rate), the smallest root;
  `grid`: linear interpolation of the swept speedups between the swept rates (a serving sweep
  that swept the acceptance rate: its speedups are the serving DES's, which has no closed form);
  a serving sweep that did not sweep it gets the closed form at the mean running batch the
  serving DES reported at each load (`closed_form_at_mean_batch`).
  Acceptance models with one rate only (iid, tree: `acceptance.acceptance_rate`). The solving is
  `simulator.studies.break_even`'s; this module holds the picking and the words (no project imports).
"""

from __future__ import annotations

import json
from typing import Any, Callable

NEAR_TIE_FRAC = 0.01  # best and runner-up closer than this (fraction of the runner-up's tok/s): a near tie
NO_SPECULATION = "0 (no speculation)"
RATE_FIELD = "acceptance.acceptance_rate"
NUM_STEPS_FIELD = "spec.num_steps"
MAX_BREAK_EVEN_SOLVES = 256  # closed-form root solves (combination x num_steps) a study makes at most
BREAK_EVEN_XTOL = 1e-4


# ---- best num_steps, no speculation included ---------------------------------------------------------
def best_of(spec: list[tuple[int, float, float]], baseline: float) -> dict[str, Any]:
    """The best of a combination's candidates: `spec` (num_steps, tok/s, speedup) in row order and
    no speculation at `baseline` tok/s (module docstring). Ties keep the earlier row; no
    speculation wins a tie with a num_steps.

    Returns:
        {best_num_steps (0: no speculation), tok_per_s, speedup, best_speculative_num_steps,
        best_speculative_speedup, runner_up_num_steps, runner_up_gap_pct, near_tie}.
    """
    ranked = sorted(spec, key=lambda c: -c[1])  # stable: ties keep row order
    top = ranked[0]
    if baseline >= top[1]:
        best, runner = (0, baseline, 1.0), top
    else:
        second = ranked[1] if len(ranked) > 1 else None
        best, runner = top, (second if second is not None and second[1] > baseline else (0, baseline, 1.0))
    gap = (best[1] / runner[1] - 1.0) * 100.0
    return {"best_num_steps": best[0], "tok_per_s": best[1], "speedup": best[2],
            "best_speculative_num_steps": top[0], "best_speculative_speedup": top[2],
            "runner_up_num_steps": runner[0], "runner_up_gap_pct": gap, "near_tie": gap < NEAR_TIE_FRAC * 100.0}


def steps_word(num_steps: int) -> str:
    return NO_SPECULATION if num_steps == 0 else str(num_steps)


def near_tie_words(row: dict) -> str:
    """'near tie: 5 vs 4, 0.7% apart' for a near-tie best row; '' otherwise."""
    if not row.get("near_tie"):
        return ""
    return (f"near tie: {steps_word(row['best_num_steps'])} vs {steps_word(row['runner_up_num_steps'])}, "
            f"{row['runner_up_gap_pct']:.1f}% apart")


def best_per_combination(rows, group_by: list[str], tok_col: str, speedup_col: str, baseline_col: str) -> list[dict]:
    """`best_of` per combination of `group_by` values over rows with `num_steps` (rows without tok_col
    skipped), combinations in first-seen order; the best row's `extrapolation` carried (for no
    speculation: that of the best num_steps, which decided it).

    Returns:
        Rows {*group_by, best_num_steps, tok_col, speedup_col, baseline_col, best_speculative_num_steps,
        best_speculative_speedup, runner_up_num_steps, runner_up_gap_pct, near_tie, extrapolation}.
    """
    groups: dict[str, list[dict]] = {}
    for r in rows:
        if r.get(tok_col) is None:
            continue
        groups.setdefault(json.dumps([r.get(c) for c in group_by], default=str), []).append(r)
    out = []
    for members in groups.values():
        top = max(members, key=lambda r: r[tok_col])  # first of the highest
        b = best_of([(m["num_steps"], m[tok_col], m[speedup_col]) for m in members], top[baseline_col])
        chosen = next((m for m in members if m["num_steps"] == b["best_num_steps"]), top)
        out.append(best_row({c: top.get(c) for c in group_by}, b, tok_col, speedup_col, baseline_col,
                            top[baseline_col], chosen.get("extrapolation") or ""))
    return out


def best_row(combo: dict, b: dict, tok_col: str, speedup_col: str, baseline_col: str, baseline: float,
             extrapolation: str) -> dict:
    """One row of a best-num_steps table (`best_per_combination`'s columns)."""
    return {**combo, "best_num_steps": b["best_num_steps"], tok_col: b["tok_per_s"], speedup_col: b["speedup"],
            baseline_col: baseline, "best_speculative_num_steps": b["best_speculative_num_steps"],
            "best_speculative_speedup": b["best_speculative_speedup"],
            "runner_up_num_steps": b["runner_up_num_steps"], "runner_up_gap_pct": b["runner_up_gap_pct"],
            "near_tie": b["near_tie"], "extrapolation": extrapolation}


# ---- break-even acceptance rate ------------------------------------------------------------------------
def solve_break_even(speedup_at: Callable[[float], float]) -> tuple[float | None, str]:
    """(rate, how) where speedup_at(rate) = 1 on [0, 1] (brentq): how is 'root', or 'pays at any
    rate' (rate 0.0) / 'never pays' (None) where no root lies between."""
    from scipy.optimize import brentq
    lo, hi = speedup_at(0.0) - 1.0, speedup_at(1.0) - 1.0
    if lo > 0:
        return 0.0, "pays at any rate"
    if hi <= 0:
        return None, "never pays"
    return float(brentq(lambda a: speedup_at(a) - 1.0, 0.0, 1.0, xtol=BREAK_EVEN_XTOL)), "root"


def grid_break_even(points: list[tuple[float, float]]) -> tuple[float | None, str]:
    """(rate, how) from swept (rate, speedup) pairs: the first crossing of 1 from below, linearly
    interpolated; 'below the smallest swept rate' / 'never pays' (None) where none lies between."""
    pts = sorted(points)
    if pts[0][1] > 1.0:
        return pts[0][0], "below the smallest swept rate"
    for (a0, s0), (a1, s1) in zip(pts, pts[1:]):
        if s0 <= 1.0 < s1:
            return a0 + (1.0 - s0) * (a1 - a0) / (s1 - s0), "root"
    return None, "never pays"


def break_even_sentences(rows: list[dict]) -> list[str]:
    """The break-even rows as sentences, one per combination of the fields other than the batch or
    load: 'speculation pays above acceptance rate 0.15 at batch 1 (num_steps 1), 0.40 at batch
    128 (num_steps 1; beyond measured: ...)'."""
    groups: dict[str, list[dict]] = {}
    skip = {"at", "at_value", "break_even_acceptance_rate", "how", "num_steps", "method", "extrapolation",
            "workload.batch_size"}
    for r in rows:
        rest = {k: v for k, v in r.items() if k not in skip and not k.endswith(r["at"])}
        groups.setdefault(json.dumps(rest, default=str), []).append(r)
    out = []
    for key, rs in groups.items():
        rest = json.loads(key)
        head = ", ".join(f"{k.split('.')[-1]} {v}" for k, v in rest.items())
        parts = []
        for r in sorted(rs, key=lambda r: (r["at_value"] is None, r["at_value"] if isinstance(r["at_value"], (int, float)) else 0)):
            where = f"at {r['at']} {r['at_value']}"
            rate, how = r["break_even_acceptance_rate"], r["how"]
            if rate is None:
                what = f"none {where} (never pays, not even at 1.0)" if r["method"] != "grid" else \
                    f"none {where} (never pays at a swept rate)"
            elif how == "pays at any rate":
                what = f"0 {where} (pays at any rate)"
            elif how == "below the smallest swept rate":
                what = f"below {rate:.2f} {where} (pays at every swept rate)"
            else:
                what = f"{rate:.2f} {where}"
            extra = [f"num_steps {r['num_steps']}"] if r["num_steps"] is not None else []
            if r["extrapolation"]:
                extra.append(f"beyond measured: {r['extrapolation']}")
            parts.append(what + (f" ({'; '.join(extra)})" if extra else ""))
        method = rs[0]["method"]
        how_words = ("closed form, brentq on speedup(acceptance rate) = 1 at the best num_steps" if method == "closed_form"
                     else "interpolated between the swept acceptance rates" if method == "grid"
                     else "closed form at the mean running batch of each load, brentq")
        out.append(f"{head + ': ' if head else ''}speculation pays above acceptance rate {', '.join(parts)} "
                   f"[{how_words}]")
    return out

