"""Serving-mode speed: wall time of a long simulated serving run.

    python benchmarks/bench_serving.py [--duration-s 600] [--concurrency 64]

Runs scenarios/serving_concurrency.yaml (Llama-3.1-8B, EAGLE-3, per-op costs on the shipped
h200 profile) closed loop at the given concurrency for the given simulated time, speculative and
without speculation, and prints a table: wall seconds cold (cost models built as the run needs
them) and warm (the same StepCosts again: the engine loop alone), cost models built, engine
steps, requests and simulated seconds per wall second. Target (issue: serving mode): a 10-minute
simulated run at 64 concurrent requests in under 30 s of wall time.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from simulator.scenario import load_profile_for, load_scenario
from simulator.serving.costs import StepCosts
from simulator.serving.run import run_serving

ROOT = Path(__file__).resolve().parents[1]


def bench(duration_s: float, concurrency: int) -> list[dict]:
    path = ROOT / "scenarios" / "serving_concurrency.yaml"
    sc = load_scenario(path, [f"serving.duration_s={duration_s}", f"serving.arrivals.concurrency={concurrency}"])
    prof, _ = load_profile_for(sc, base_dir=path.parent)
    rows = []
    for speculative in (True, False):
        costs = StepCosts(sc, prof)
        t0 = time.perf_counter()
        rec = run_serving(sc, prof, speculative, costs)
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        run_serving(sc, prof, speculative, costs)
        warm = time.perf_counter() - t0
        simulated_s = float(rec.step_end_us[-1]) / 1e6
        rows.append(dict(run="speculative" if speculative else "no speculation", cold_s=cold, warm_s=warm,
                         cost_models=len(costs._models), steps=len(rec.step_start_us),
                         requests=len(rec.arrival_us), simulated_s=simulated_s,
                         tokens=int(rec.output_tokens.sum()), sim_per_wall=simulated_s / cold))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration-s", type=float, default=600.0)
    ap.add_argument("--concurrency", type=int, default=64)
    args = ap.parse_args()
    rows = bench(args.duration_s, args.concurrency)
    t = Table(title=f"serving mode: closed loop, concurrency {args.concurrency}, {args.duration_s:g} s simulated "
                    "(Llama-3.1-8B, EAGLE-3, h200 per-op)", title_justify="left")
    for c in ("run", "wall s (cold)", "wall s (warm: engine only)", "cost models", "engine steps", "requests",
              "simulated s", "sim s / wall s"):
        t.add_column(c, justify="right")
    for r in rows:
        t.add_row(r["run"], f"{r['cold_s']:.2f}", f"{r['warm_s']:.2f}", str(r["cost_models"]), f"{r['steps']:,}",
                  f"{r['requests']:,}", f"{r['simulated_s']:.1f}", f"{r['sim_per_wall']:.0f}")
    Console(width=150).print(t)
    total = sum(r["cold_s"] for r in rows)
    print(f"both runs (what `specdecsim simulate` does for the serving block): {total:.2f} s wall; "
          f"target < 30 s per run: {'met' if max(r['cold_s'] for r in rows) < 30 else 'NOT met'}")


if __name__ == "__main__":
    main()
