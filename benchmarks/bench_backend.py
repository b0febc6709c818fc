"""Local vs Ray backend: the same sweeps on both, their CSVs compared byte for byte, and the time each took.

    python benchmarks/bench_backend.py [--ray-cpus 2] [--skip-des]

Sweeps (scenarios/tp1_draft.yaml): closed form, num_steps 1..8 x acceptance 0.30..0.90 step 0.05 x
batch 1..512 (10 powers of 2) = 1,040 points, no DES spot-check; DES, num_steps 1..4 x acceptance
0.6, 0.8 x 2 placements = 16 points at 500 cycles. Backends: local jobs 1, local jobs 2, Ray (a
local instance of --ray-cpus CPUs, started for the row). Each row runs in a child process:
wall seconds of the Ray start-up (`RayBackend.__enter__`) and of the sweep; CPU seconds (user +
sys) of the whole row, start-up included, of the child and every process under it: the local
pool's workers once reaped, Ray's daemons and workers read live before the instance is shut down
(psutil, which ray ships; Ray does not reap them through the child). "same CSV" compares
sweep.csv bytes with the local jobs 1 row's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "tp1_draft.yaml"
SWEEPS = {
    "closed_form": (["spec.num_steps=1..8", "acceptance.acceptance_rate=0.3:0.9:0.05",
                     "workload.batch_size=1,2,4,8,16,32,64,128,256,512"], []),
    "des": (["spec.num_steps=1..4", "acceptance.acceptance_rate=0.6,0.8", "placement=shared_tp,tp1_colocated"],
            ["fidelity.num_cycles=500"]),
}


def run_row(solver: str, backend_name: str, jobs: int, out: Path) -> None:
    """In the child: one sweep, writing out/sweep.csv; prints {start_s, sweep_s, cpu_s, points, workers}."""
    from simulator.studies.backend import make_backend
    from simulator.studies.sweep import run_sweep
    grid, overrides = SWEEPS[solver]
    backend = make_backend(backend_name, jobs)
    t0 = time.perf_counter()
    with backend:
        t1 = time.perf_counter()
        res = run_sweep(SCENARIO, grid, solver=solver, out_dir=out, des_sample=0, overrides=overrides,
                        progress=False, backend=backend)
        t2 = time.perf_counter()
        ray_cpu_s = ray_tree_cpu_s() if backend_name == "ray" else 0.0
    c = os.times()
    cpu_s = c.user + c.system + c.children_user + c.children_system + ray_cpu_s
    print(json.dumps(dict(start_s=t1 - t0, sweep_s=t2 - t1, cpu_s=cpu_s, points=len(res.rows), workers=res.jobs)))


def ray_tree_cpu_s() -> float:
    """CPU seconds of the live processes under this one (Ray's daemons and workers)."""
    import psutil  # ships with ray (ray/thirdparty_files), importable once ray is imported
    total = 0.0
    for proc in psutil.Process().children(recursive=True):
        try:
            c = proc.cpu_times()
        except psutil.Error:  # exited meanwhile
            continue
        total += c.user + c.system + c.children_user + c.children_system
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ray-cpus", type=int, default=2)
    ap.add_argument("--skip-des", action="store_true")
    ap.add_argument("--row", nargs=4, metavar=("SOLVER", "BACKEND", "JOBS", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.row:
        solver, backend, jobs, out = args.row
        run_row(solver, backend, int(jobs), Path(out))
        return
    console = Console(width=110)
    t = Table(title="sweep on each backend (child process per row)", title_justify="left")
    for c in ("solver", "points", "backend", "workers", "ray start s", "sweep s", "CPU s", "same CSV"):
        t.add_column(c, justify="right")
    rows = [(s, b, j) for s in SWEEPS if not (s == "des" and args.skip_des)
            for b, j in (("local", 1), ("local", 2), ("ray", args.ray_cpus))]
    with tempfile.TemporaryDirectory() as tmp:
        reference: dict[str, bytes] = {}
        for solver, backend, jobs in rows:
            out = Path(tmp) / f"{solver}-{backend}-{jobs}"
            p = subprocess.run([sys.executable, __file__, "--row", solver, backend, str(jobs), str(out)],
                               capture_output=True, text=True, check=True)
            r = json.loads(p.stdout.strip().splitlines()[-1])
            csv = (out / "sweep.csv").read_bytes()
            reference.setdefault(solver, csv)
            same = "yes" if csv == reference[solver] else "NO"
            t.add_row(solver, f"{r['points']:,}", backend, str(r["workers"]),
                      f"{r['start_s']:.1f}" if backend == "ray" else "-", f"{r['sweep_s']:.2f}", f"{r['cpu_s']:.1f}", same)
    console.print(t)


if __name__ == "__main__":
    main()
