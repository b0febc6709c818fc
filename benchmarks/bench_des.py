"""Per-rank kernel DES speed: CPU seconds of the TP8 jitter scenario and kernel steps per second.

    python benchmarks/bench_des.py [--reference-cycles N]

1. `specdecsim simulate scenarios/tp8_jitter.yaml` (TP8, draft sharded, kernel granularity,
   per-rank streams, jitter_cv 0.1, 2,000 cycles plus the jittered baseline's 2,000 steps) in a
   child process: its CPU seconds (user + sys), against the goal of 60 s on a 2-core machine.
2. The speculative run alone, at kernel granularity: the closed form (`simulator.des.per_rank`)
   and, over --reference-cycles cycles, the SimPy kernel-by-kernel streams it replaces
   (`DesRun(kernel_processes=True)`, what every kernel-granularity run used before). Rates are
   given as SimPy events/s and as kernel steps/s (kernels x GPU streams simulated per second),
   the figure that compares the two engines.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from bench_simulate import CountingEnvironment  # a sibling script: benchmarks/ is sys.path[0] when run
from rich.console import Console
from rich.table import Table

from simulator.acceptance import build_acceptance
from simulator.costs.forward import CostModel
from simulator.des.simulation import DesRun
from simulator.scenario import load_profile_for, load_scenario

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "tp8_jitter.yaml"
GOAL_CPU_S = 60.0




def cli_cpu_s() -> float:
    """CPU seconds (user + sys) of `specdecsim simulate scenarios/tp8_jitter.yaml` in a child."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-m", "simulator.cli", "simulate", str(SCENARIO)], check=True,
                   stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def engine_rate(kernel_processes: bool, num_cycles: int) -> dict:
    """One speculative run at kernel granularity: CPU s, SimPy events/s, kernel steps/s."""
    sc = load_scenario(SCENARIO, [f"fidelity.num_cycles={num_cycles}"])
    prof, _ = load_profile_for(sc, base_dir=SCENARIO.parent)
    cost = CostModel(sc, prof)
    for j in range(1, sc.spec.num_steps + 2):  # build the cost tables outside the timed region
        cost.cycle_forwards(j)
    env = CountingEnvironment()
    run = DesRun(cost, build_acceptance(sc.acceptance, sc.spec), np.random.default_rng(0), np.random.default_rng(1),
                 env=env, kernel_processes=kernel_processes)
    t0 = time.process_time()
    run.run(num_cycles, 0)
    cpu_s = time.process_time() - t0
    streams = len(run.streams)
    steps = sum(len(f.kernels) for c in run.cycles for f in cost.cycle_forwards(c.extend_tokens_per_request)) * streams
    return dict(cpu_s=cpu_s, events_per_s=env.num_events / cpu_s, steps_per_s=steps / cpu_s,
                cycle_time_us=float(np.mean([c.end_us - c.start_us for c in run.cycles])))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference-cycles", type=int, default=50,
                    help="cycles of the SimPy kernel-by-kernel reference (0: skip it)")
    args = ap.parse_args()
    cpu_s = cli_cpu_s()
    console = Console(width=160)
    console.print(f"specdecsim simulate scenarios/tp8_jitter.yaml: {cpu_s:.1f} CPU s (goal {GOAL_CPU_S:.0f}) "
                  f"{'ok' if cpu_s <= GOAL_CPU_S else 'OVER'}")
    t = Table(title="speculative run at kernel granularity, TP8 per rank, jitter_cv 0.1", title_justify="left")
    for col in ("engine", "cycles", "CPU s", "CPU s / 1000 cycles", "SimPy events/s", "kernel steps/s",
                "mean cycle us"):
        t.add_column(col, justify="right")
    runs = [("closed form (per_rank.RankPlan)", False, 2000)]
    if args.reference_cycles:
        runs.append(("SimPy kernel streams", True, args.reference_cycles))
    for name, kernel_processes, cycles in runs:
        r = engine_rate(kernel_processes, cycles)
        t.add_row(name, f"{cycles:,}", f"{r['cpu_s']:.2f}", f"{r['cpu_s'] / cycles * 1000:.2f}",
                  f"{r['events_per_s']:,.0f}", f"{r['steps_per_s']:,.0f}", f"{r['cycle_time_us']:,.1f}")
    console.print(t)


if __name__ == "__main__":
    main()
