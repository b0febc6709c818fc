"""CPU seconds of a 10^6-point closed-form sweep, beside its goal and the numpy limit (issue 17).

    python benchmarks/bench_big_sweep.py [--repeat 1] [--tmp DIR] [--reference] [--phases]

Rows (CPU = user + sys of the whole command, the best of --repeat runs; peak RSS of that run):
- `specdecsim sweep scenarios/tp1_draft.yaml --grid spec.num_steps=1..8
  --grid acceptance.acceptance_rate=0.30:0.95:0.0005 --grid workload.batch_size=1..96`:
  8 x 1,301 x 96 = 999,168 points, the default 5-point DES spot-check included, a subprocess
  (start-up and imports included) writing sweep.csv (about 3.3 GB: each row carries its
  scenario's JSON), best_num_steps.csv and sweep.json to a temporary folder under --tmp;
  goal: 60 CPU s on the 2-core CI machine;
- the limit: the same grid's closed form as bare numpy (iid pmfs, renewal function, extend-length
  pmf, expected cycle time, tok/s and speedup) on cycle times taken from the 768 cost models
  beforehand, in this process, with no imports, validation, breakdown, DES spot-check or files;
- with --reference: the point-by-point path (`run_sweep(..., point_by_point=True)`, what every
  closed-form sweep ran before the grouped path) on batch sizes 1..9 only (93,672 points; it
  keeps about 20 kB per point, so the whole grid would not fit), in a subprocess, for scale;
- with --phases: where the sweep's CPU time goes, its steps run one by one in this process
  (grid grouped and checked, cost models and closed form, row tables, sweep.csv written).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "tp1_draft.yaml"
NUM_STEPS, BATCH_SIZES = range(1, 9), range(1, 97)
RATES = "0.30:0.95:0.0005"
GRID = [f"spec.num_steps={NUM_STEPS[0]}..{NUM_STEPS[-1]}", f"acceptance.acceptance_rate={RATES}",
        f"workload.batch_size={BATCH_SIZES[0]}..{BATCH_SIZES[-1]}"]
GOAL_S = 60.0
REFERENCE = ("import sys; from pathlib import Path; from simulator.studies.sweep import run_sweep; "
             "run_sweep(Path(sys.argv[1]), sys.argv[3:], out_dir=Path(sys.argv[2]), progress=False, "
             "point_by_point=True)")


def run_cpu(args: list[str], repeat: int) -> tuple[float, float]:
    """(best CPU seconds, peak RSS MiB of that run) of `python *args` over `repeat` runs (os.wait4)."""
    best = (float("inf"), 0.0)
    for _ in range(repeat):
        with tempfile.TemporaryFile() as err:
            proc = subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            if proc.returncode != 0:
                err.seek(0)
                sys.exit(f"{' '.join(args)} failed ({proc.returncode}): {err.read().decode(errors='replace')[-2000:]}")
        cpu_s = usage.ru_utime + usage.ru_stime
        if cpu_s < best[0]:
            best = (cpu_s, usage.ru_maxrss / 1024)  # ru_maxrss: KiB on Linux
    return best


def numpy_limit_cpu_s(repeat: int) -> tuple[float, int]:
    """(best CPU seconds, points) of the bare numpy closed form over GRID."""
    from simulator.analytic import baseline_step_us, cycle_time_us
    from simulator.studies.grid import parse_grid
    from simulator.scenario import load_profile_for, load_scenario
    from simulator.studies.points import build_cost_model
    base = load_scenario(SCENARIO, [])
    _, path = load_profile_for(base, None, base_dir=SCENARIO.parent, source=str(SCENARIO))
    rates = np.array(parse_grid(GRID[1]).values)
    n = len(rates)
    cycle_us, step_us = {}, {}  # (num_steps, batch) -> (num_steps + 1,) cycle time by extend length; batch -> step
    for s in NUM_STEPS:
        for b in BATCH_SIZES:
            sc = load_scenario(SCENARIO, [f"spec.num_steps={s}", f"spec.num_draft_tokens={s + 1}",
                                          f"workload.batch_size={b}"])
            cost = build_cost_model(sc, str(path.resolve()))
            cycle_us[s, b] = np.array([cycle_time_us(cost, j) for j in range(1, s + 2)])
            step_us.setdefault(b, baseline_step_us(cost))
    M = base.workload.max_new_tokens
    best = float("inf")
    for _ in range(repeat):
        r = resource.getrusage(resource.RUSAGE_SELF)
        t0 = r.ru_utime + r.ru_stime
        for s in NUM_STEPS:
            survive = rates[:, None] ** np.arange(s + 1)
            pmf = survive * np.concatenate([np.repeat(1 - rates[:, None], s, axis=1), np.ones((n, 1))], axis=1)
            m = np.zeros((n, M + s + 1))
            for x in range(1, M + 1):
                m[:, x + s] = 1.0 + np.einsum("ij,ij->i", pmf, m[:, x - 1:x + s][:, ::-1])
            cdf = np.cumsum(pmf, axis=1)
            for b in BATCH_SIZES:
                ext = np.diff(np.concatenate([np.zeros((n, 1)), cdf ** b], axis=1), axis=1)
                tok_per_s = b * M / m[:, M + s] / (ext @ cycle_us[s, b]) * 1e6
                speedup = tok_per_s / (b / step_us[b] * 1e6)
                assert np.all(np.isfinite(speedup))
        r = resource.getrusage(resource.RUSAGE_SELF)
        best = min(best, r.ru_utime + r.ru_stime - t0)
    return best, len(NUM_STEPS) * n * len(BATCH_SIZES)


def phases_cpu_s(tmp: Path | None) -> list[tuple[str, float]]:
    """CPU seconds of each step of the grouped sweep over GRID (`simulator.studies.sweep_grouped.run_grouped`
    without the DES spot-check), in this process."""
    from simulator.studies.grid import parse_grids
    from simulator.studies.grid_groups import group_grid
    from simulator.scenario import apply_overrides, read_scenario_dict
    from simulator.studies.points import point_items
    from simulator.studies.sweep_grouped import MAX_GROUPED_GRID_POINTS, GroupedRows, best_num_steps_rows, evaluate

    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime
    marks = [("", cpu())]
    axes = parse_grids(GRID, MAX_GROUPED_GRID_POINTS)
    base = apply_overrides(read_scenario_dict(SCENARIO), [], str(SCENARIO))
    grid = group_grid(base, axes, str(SCENARIO), SCENARIO.parent)
    items, _ = point_items(grid.groups, None, SCENARIO, indices=grid.first_points().tolist())
    marks.append((f"grid grouped and checked ({len(grid.groups)} groups x {len(grid.acceptances)} acceptances)", cpu()))
    numbers = evaluate(grid, [path for _, _, path in items], progress=False)
    marks.append(("cost models and closed form", cpu()))
    rows = GroupedRows(numbers, [a.field for a in axes])
    best_num_steps_rows(numbers, [a.field for a in axes])
    marks.append(("row tables and best num_steps", cpu()))
    with tempfile.TemporaryDirectory(dir=tmp) as out:
        rows.write_csv(Path(out) / "sweep.csv", progress=False)
        marks.append(("sweep.csv written (csv module, atomic, fsync)", cpu()))
    return [(name, t - marks[i][1]) for i, (name, t) in enumerate(marks[1:])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--tmp", type=Path, default=None, help="folder for the sweep's outputs (about 3.3 GB)")
    parser.add_argument("--reference", action="store_true", help="also run the point-by-point path on 93,672 points")
    parser.add_argument("--phases", action="store_true", help="also time the sweep's steps one by one")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(dir=args.tmp) as out:
        sweep = ["-m", "simulator.cli", "sweep", str(SCENARIO), *(a for g in GRID for a in ("--grid", g)),
                 "--out", out, "--force"]
        cpu_s, rss = run_cpu(sweep, args.repeat)
        csv_gb = (Path(out) / "sweep.csv").stat().st_size / 1e9
        limit_s, points = numpy_limit_cpu_s(args.repeat)
        rows.append((f"sweep {points:,} points, closed form + 5 DES (subprocess; sweep.csv {csv_gb:.2f} GB)",
                     cpu_s, rss, f"<= {GOAL_S:.0f}"))
    if args.reference:
        small = [*GRID[:2], "workload.batch_size=1..9"]
        with tempfile.TemporaryDirectory(dir=args.tmp) as out:
            ref_s, ref_rss = run_cpu(["-c", REFERENCE, str(SCENARIO), out, *small], args.repeat)
        small_points = len(NUM_STEPS) * points // (len(NUM_STEPS) * len(BATCH_SIZES)) * 9
        rows.append((f"point by point (the old path), {small_points:,} points (subprocess)", ref_s, ref_rss, "-"))
    rows.append((f"bare numpy closed form, {points:,} points (the limit)", limit_s, None, "-"))
    width = max(len(r[0]) for r in rows)
    print(f"{'command':<{width}}  {'CPU s':>7}  {'peak MiB':>8}  goal")
    for name, seconds, mib, goal in rows:
        met = "" if goal == "-" else ("  met" if seconds <= float(goal[3:]) else "  NOT met")
        print(f"{name:<{width}}  {seconds:7.2f}  {'-' if mib is None else f'{mib:.0f}':>8}  {goal}{met}")
    if args.phases:
        steps = phases_cpu_s(args.tmp)
        width = max(len(name) for name, _ in steps)
        print(f"\n{'step of the sweep (in this process, no DES)':<{width}}  {'CPU s':>7}")
        for name, seconds in steps:
            print(f"{name:<{width}}  {seconds:7.2f}")


if __name__ == "__main__":
    main()
