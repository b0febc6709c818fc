"""DES speed: SimPy events per second and simulated GPU time per wall-clock second.

    python benchmarks/bench_simulate.py [--cycles N]

Runs the batch-1 Llama-3.1-8B scenario (scenarios/llama8b_h200.yaml, per-op costs) at the three engine
granularities and prints a table (cycle granularity aggregates a block of cycles per event,
so its events/s says little; its cycles/s and sim/wall are the figures). Targets (issue: core simulator): >= 200k events/s and
>= 1e4 x faster than the GPU time simulated.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import simpy
from rich.console import Console
from rich.table import Table

from simulator.acceptance import build_acceptance
from simulator.costs.forward import CostModel
from simulator.des.simulation import DesRun
from simulator.des.cycle_level import run_cycle_level
from simulator.scenario import load_profile_for, load_scenario
from simulator.units import US_PER_S

ROOT = Path(__file__).resolve().parents[1]


class CountingEnvironment(simpy.Environment):
    """A SimPy environment that counts processed events."""

    def __init__(self):
        super().__init__()
        self.num_events = 0

    def step(self):
        self.num_events += 1
        return super().step()


def bench(overrides: list[str], cycles: int) -> dict:
    path = ROOT / "scenarios" / "llama8b_h200.yaml"
    sc = load_scenario(path, ["costs.source=per_op"] + overrides + [f"fidelity.num_cycles={cycles}"])
    prof, _ = load_profile_for(sc, base_dir=path.parent)
    cost = CostModel(sc, prof)
    acc = build_acceptance(sc.acceptance, sc.spec)
    cost.cycle_forwards(1)  # build the cost tables outside the timed region
    for j in range(1, sc.spec.num_steps + 2):
        cost.cycle_forwards(j)
    env = CountingEnvironment()
    t0 = time.perf_counter()
    if sc.fidelity.granularity == "cycle":
        run_cycle_level(cost, acc, np.random.default_rng(0), cycles, 0, env=env)
    else:
        DesRun(cost, acc, np.random.default_rng(0), np.random.default_rng(1), env=env).run(cycles, 0)
    wall_s = time.perf_counter() - t0
    sim_s = env.now / US_PER_S
    return dict(events=env.num_events, wall_s=wall_s, events_per_s=env.num_events / wall_s,
                sim_s=sim_s, speed_ratio=sim_s / wall_s, cycles_per_s=cycles / wall_s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=20_000)
    args = ap.parse_args()
    runs = [("cycle granularity, CUDA graph", ["fidelity.granularity=cycle"], args.cycles * 50),
            ("forward granularity, CUDA graph", [], args.cycles),
            ("forward granularity, eager", ["serving_engine.cuda_graph=false"], args.cycles),
            ("kernel granularity, CUDA graph", ["fidelity.granularity=kernel"], max(1, args.cycles // 50)),
            ("kernel granularity, eager", ["fidelity.granularity=kernel", "serving_engine.cuda_graph=false"],
             max(1, args.cycles // 50))]
    t = Table(title="DES speed (batch 1, Llama-3.1-8B + EAGLE-3, num_steps=4)", title_justify="left")
    for col in ("granularity", "cycles", "events", "wall s", "events/s", "cycles/s", "simulated s", "sim / wall"):
        t.add_column(col, justify="right")
    for name, over, cycles in runs:
        r = bench(over, cycles)
        t.add_row(name, f"{cycles:,}", f"{r['events']:,}", f"{r['wall_s']:.2f}", f"{r['events_per_s']:,.0f}",
                  f"{r['cycles_per_s']:,.0f}", f"{r['sim_s']:.2f}", f"{r['speed_ratio']:,.0f}x")
    Console(width=200).print(t)


if __name__ == "__main__":
    main()
