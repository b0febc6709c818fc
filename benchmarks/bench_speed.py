"""CPU seconds of the two everyday commands, beside their goals and the numpy limit.

    python benchmarks/bench_speed.py [--repeat 3]

Rows (CPU = user + sys of the whole command, the best of --repeat runs):
- `specdecsim simulate scenarios/tp1_draft.yaml`, a subprocess (start-up and imports included);
- the closed-form sweep num_steps 1..8 x acceptance 0.30..0.95 step 0.005 (1,048 points, the
  default 5-point DES spot-check included), a subprocess writing to a temporary folder;
- the limit: the same grid's closed form as bare numpy (iid pmfs, renewal function, extend-length
  pmf, expected cycle time) on cycle times taken from the cost model beforehand, in this process,
  with no imports, validation, DES spot-check or files.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "tp1_draft.yaml"
GRID = ["spec.num_steps=1..8", "acceptance.acceptance_rate=0.30:0.95:0.005"]
SIMULATE_GOAL_S = 1.5
SWEEP_GOAL_S = 3.0


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _self_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def command_cpu_s(args: list[str], repeat: int) -> float:
    """Best CPU seconds (user + sys) of `python -m simulator.cli *args` over `repeat` runs."""
    best = float("inf")
    for _ in range(repeat):
        t0 = _children_cpu_s()
        subprocess.run([sys.executable, "-m", "simulator.cli", *args], check=True, cwd=ROOT,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        best = min(best, _children_cpu_s() - t0)
    return best


def numpy_limit_cpu_s(repeat: int) -> tuple[float, int]:
    """(best CPU seconds, points) of the bare numpy closed form over GRID."""
    from simulator.analytic import baseline_step_us, cycle_time_us
    from simulator.costs.forward import CostModel
    from simulator.scenario import load_profile_for, load_scenario
    base = load_scenario(SCENARIO, [])
    profile, _ = load_profile_for(base, None, base_dir=SCENARIO.parent, source=str(SCENARIO))
    rates = np.round(0.30 + 0.005 * np.arange(131), 12)
    cycle_us = {}  # num_steps -> (num_steps + 1,) cycle time by extend length
    for s in range(1, 9):
        sc = load_scenario(SCENARIO, [f"spec.num_steps={s}", f"spec.num_draft_tokens={s + 1}"])
        cost = CostModel(sc, profile)
        cycle_us[s] = np.array([cycle_time_us(cost, j) for j in range(1, s + 2)])
    step_us = baseline_step_us(cost)
    b, M = base.workload.batch_size, base.workload.max_new_tokens
    best = float("inf")
    for _ in range(repeat):
        t0 = _self_cpu_s()
        for s in range(1, 9):
            survive = rates[:, None] ** np.arange(s + 1)
            pmf = survive * np.concatenate([np.repeat(1 - rates[:, None], s, axis=1), np.ones((131, 1))], axis=1)
            m = np.zeros((131, M + s + 1))
            for x in range(1, M + 1):
                m[:, x + s] = 1.0 + np.einsum("ij,ij->i", pmf, m[:, x - 1:x + s][:, ::-1])
            ext = np.diff(np.concatenate([np.zeros((131, 1)), np.cumsum(pmf, axis=1) ** b], axis=1), axis=1)
            tok_per_s = b * M / m[:, M + s] / (ext @ cycle_us[s]) * 1e6
            speedup = tok_per_s / (b / step_us * 1e6)
            assert np.all(np.isfinite(speedup))
        best = min(best, _self_cpu_s() - t0)
    return best, 8 * 131


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    simulate_s = command_cpu_s(["simulate", str(SCENARIO)], args.repeat)
    with tempfile.TemporaryDirectory() as out:
        sweep_args = ["sweep", str(SCENARIO), *(a for g in GRID for a in ("--grid", g)), "--out", out, "--force"]
        sweep_s = command_cpu_s(sweep_args, args.repeat)
    limit_s, points = numpy_limit_cpu_s(args.repeat)
    rows = [("simulate tp1_draft (subprocess)", simulate_s, f"<= {SIMULATE_GOAL_S:.1f}"),
            (f"sweep {points:,} points, closed form + 5 DES (subprocess)", sweep_s, f"<= {SWEEP_GOAL_S:.1f}"),
            (f"bare numpy closed form, {points:,} points (the limit)", limit_s, "-")]
    width = max(len(r[0]) for r in rows)
    print(f"{'command':<{width}}  {'CPU s':>7}  goal")
    for name, seconds, goal in rows:
        met = "" if goal == "-" else ("  met" if seconds <= float(goal[3:]) else "  NOT met")
        print(f"{name:<{width}}  {seconds:7.2f}  {goal}{met}")


if __name__ == "__main__":
    main()
