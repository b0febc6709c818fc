"""The answer a search is run for, first (simulator.studies.answer's words for a search):

- no speculation where it wins: the best configuration's speedup over no speculation at its own
  batch and GPUs (`speedup`) at or below 1: run without speculation ("0 (no speculation)");
- a near tie: #1 and #2 within NEAR_TIE_FRAC of each other by the objective;
- the break-even acceptance rate per batch size searched: at each batch, the best-ranked
  configuration's placement, TP size and topk over the num_steps searched with them (the closed
  form, `simulator.studies.answer.closed_form_break_even`);
- extrapolation: how many configurations lie beyond the profile's measured range (column
  `extrapolation`, simulator.studies.extrapolation), and whether #1 does.
"""

from __future__ import annotations

from typing import Any

from simulator.studies.answer import MAX_BREAK_EVEN_SOLVES, NEAR_TIE_FRAC, NO_SPECULATION
from simulator.studies.break_even import closed_form_break_even, has_one_rate
from simulator.studies.objectives import OBJECTIVES


def describe_row(r: dict) -> str:
    tp = f"{r['tp_size']}+1" if r["num_gpus"] > r["tp_size"] else str(r["tp_size"])
    return (f"{r['placement']} tp {tp} num_steps {r['num_steps']} topk {r['topk']} num_draft_tokens "
            f"{r['num_draft_tokens']} batch {r['batch_size']}")


def search_answer(rows: list[dict], ranked: list[int], objective: str, scenarios: list, paths: list[str]) -> dict[str, Any]:
    """{lines: the answer's sentences, best_num_steps (0: no speculation), near_tie, break_even, num_extrapolated}."""
    from simulator.studies.extrapolation import summary
    out: dict[str, Any] = {"lines": [], "best_num_steps": None, "near_tie": None, "break_even": [],
                           "num_extrapolated": sum(bool(r.get("extrapolation")) for r in rows)}
    if not ranked:
        return out
    col, up = OBJECTIVES[objective]
    best = rows[ranked[0]]
    if best["speedup"] <= 1.0:
        out["best_num_steps"] = 0
        out["lines"].append(f"{NO_SPECULATION}: the best configuration ({describe_row(best)}) runs at "
                            f"{best['speedup']:.2f}x of no speculation at its batch and GPUs: run without speculation")
    else:
        out["best_num_steps"] = best["num_steps"]
        out["lines"].append(f"best: {describe_row(best)}, {best['speedup']:.2f}x over no speculation")
    if len(ranked) > 1:
        second = rows[ranked[1]]
        a, b = float(best[col]), float(second[col])
        gap = abs(a / b - 1.0) if b else float("inf")
        if gap < NEAR_TIE_FRAC:
            out["near_tie"] = {"runner_up_point_idx": second["point_idx"], "gap_pct": gap * 100.0}
            out["lines"].append(f"near tie: #1 vs #2 ({describe_row(second)}), {gap * 100:.1f}% apart by {objective}")
    if best.get("extrapolation"):
        out["lines"].append(f"#1 lies beyond the profile's measured range: {best['extrapolation']}")
    out["break_even"] = _break_even(rows, ranked, scenarios, paths)
    if out["break_even"]:
        parts = []
        for be in out["break_even"]:
            rate = be["break_even_acceptance_rate"]
            what = "none (never pays)" if rate is None else f"{rate:.2f}"
            extra = f"{be['placement']} tp {be['tp_size']}, num_steps {be['num_steps']}" if be["num_steps"] else \
                f"{be['placement']} tp {be['tp_size']}"
            if be["extrapolation"]:
                extra += f"; beyond measured: {be['extrapolation']}"
            parts.append(f"{what} at batch {be['batch_size']} ({extra})")
        out["lines"].append("speculation pays above acceptance rate " + ", ".join(parts) +
                            " [closed form, brentq on speedup(acceptance rate) = 1 over the searched num_steps of "
                            "the best placement and TP size at each batch]")
    note = summary([r.get("extrapolation") or "" for r in rows], "configurations")
    if note:
        out["lines"].append(note)
    return out


def _break_even(rows: list[dict], ranked: list[int], scenarios: list, paths: list[str]) -> list[dict]:
    """Per batch size searched: the best-ranked row's placement, TP size and topk; the break-even rate
    over the num_steps searched with them."""
    from simulator.studies.extrapolation import point_extrapolation
    if not scenarios or not has_one_rate(scenarios[0]):
        return []
    out, solves = [], 0
    seen: set = set()
    for i in ranked:
        r = rows[i]
        if r["batch_size"] in seen:
            continue
        seen.add(r["batch_size"])
        same = {rows[j]["num_steps"]: j for j in range(len(rows))
                if (rows[j]["batch_size"], rows[j]["placement"], rows[j]["tp_size"], rows[j]["topk"],
                    rows[j]["num_gpus"]) == (r["batch_size"], r["placement"], r["tp_size"], r["topk"], r["num_gpus"])
                and all(rows[j].get(k) == r.get(k) for k in r if "." in k)}
        if solves + len(same) > MAX_BREAK_EVEN_SOLVES:
            break
        solves += len(same)
        rate, k, how = closed_form_break_even({s: scenarios[j] for s, j in same.items()}, paths[i])
        j = same.get(k, i)
        out.append({"batch_size": r["batch_size"], "placement": r["placement"], "tp_size": r["tp_size"],
                    "topk": r["topk"], "num_steps": k, "break_even_acceptance_rate": rate, "how": how,
                    "method": "closed_form", "extrapolation": point_extrapolation(scenarios[j], paths[j])})
    return sorted(out, key=lambda b: b["batch_size"])
