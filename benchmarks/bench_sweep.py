"""Sweep speed: a 1,008-configuration closed-form sweep and a small DES sweep at 1 and 2 jobs.

    python benchmarks/bench_sweep.py [--jobs 1,2] [--skip-des]

Scenario: scenarios/tp1_draft.yaml (Llama-3.1-70B TP8 + EAGLE-3 draft, profile h200_datasheet).
Closed-form grid: num_steps 1..8 x acceptance 0.30..0.95 step 0.05 x 3 placements x batch 1, 4, 16
= 1,008 points. Target: <= 10 s on 2 cores (jobs 2). Caches (cost models, profiles) are cleared
before each row; module imports are warm after the first row (the first row's time includes
importing scipy.stats and the solvers, as a CLI run would).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from simulator.studies import points, sweep

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "tp1_draft.yaml"
ANALYTIC_GRID = ["spec.num_steps=1..8", "acceptance.acceptance_rate=0.3:0.95:0.05",
                 "placement=shared_tp,tp1_colocated,tp1_dedicated", "workload.batch_size=1,4,16"]
DES_GRID = ["spec.num_steps=1..4", "acceptance.acceptance_rate=0.6,0.8", "placement=shared_tp,tp1_colocated"]
TARGET_S = 10.0


def time_sweep(grid: list[str], solver: str, jobs: int, des_sample: int) -> tuple[int, float]:
    """(points, wall seconds) of one run_sweep call, outputs not written."""
    points.clear_caches()
    t0 = time.perf_counter()
    res = sweep.run_sweep(SCENARIO, grid, solver=solver, jobs=jobs, out_dir=None, des_sample=des_sample,
                          progress=False)
    return len(res.rows), time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", default="1,2", help="comma-separated job counts")
    ap.add_argument("--skip-des", action="store_true")
    args = ap.parse_args()
    job_counts = [int(j) for j in args.jobs.split(",")]
    console = Console()
    t = Table(title=f"sweep speed ({os.cpu_count()} CPUs here; scenario {SCENARIO.name})", title_justify="left")
    for c in ("solver", "configs", "des spot-check", "jobs", "seconds", "configs/s"):
        t.add_column(c, justify="right")
    rows = [("closed_form", ANALYTIC_GRID, j, 0) for j in job_counts] + [("closed_form", ANALYTIC_GRID, max(job_counts), 5)]
    if not args.skip_des:
        rows += [("des", DES_GRID, j, 0) for j in job_counts]
    for solver, grid, jobs, des_sample in rows:
        n, s = time_sweep(grid, solver, jobs, des_sample)
        t.add_row(solver, f"{n:,}", str(des_sample) if solver == "closed_form" else "-", str(jobs), f"{s:.2f}",
                  f"{n / s:,.1f}")
        if solver == "closed_form" and jobs == 2 and des_sample == 0:
            verdict = "met" if s <= TARGET_S else "MISSED"
            console.print(f"target <= {TARGET_S:.0f} s for {n:,} closed-form configs on 2 jobs: {verdict} ({s:.2f} s)")
    console.print(t)


if __name__ == "__main__":
    main()
