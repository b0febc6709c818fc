"""CPU seconds of `specdecsim --help` and `specdecsim simulate scenarios/tp1_draft.yaml`, beside the goal.

    python benchmarks/bench_cli.py [--repeat 7]

Each command runs once to warm the bytecode caches, then `--repeat` times as a subprocess
(`python -m simulator.cli ...`, interpreter start-up and imports included); a row is the median
CPU seconds (user + sys of the child) over those runs. The children write and read bytecode
caches (__pycache__) as Python does by default, whatever PYTHONDONTWRITEBYTECODE says here: with
it set, every run compiles the project's modules from source again (about 0.1 s on the 2-core
CI machine), which is not what an installed specdecsim costs. The goal is 0.5 s each. Two rows below them time no command of ours, so that a reader
on another machine can place the figures: the interpreter starting and exiting, and the
libraries `simulate` cannot run without (numpy, pydantic, PyYAML, SimPy, typer, rich) imported
alone.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "tp1_draft.yaml"
GOAL_S = 0.5
COMMANDS = [("specdecsim --help", ["-m", "simulator.cli", "--help"]),
            ("specdecsim simulate scenarios/tp1_draft.yaml", ["-m", "simulator.cli", "simulate", str(SCENARIO)])]
FLOORS = [("python -c pass (start-up)", ["-c", "pass"]),
          ("numpy, pydantic, yaml, simpy, typer, rich imported alone",
           ["-c", "import numpy, pydantic, yaml, simpy, typer.main, typer._adapters, rich.console, rich.table"])]


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def median_cpu_s(args: list[str], repeat: int) -> float:
    """Median CPU seconds (user + sys) of `python *args` over `repeat` runs after a warm-up run."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    runs = []
    for _ in range(repeat + 1):
        t0 = _children_cpu_s()
        subprocess.run([sys.executable, *args], check=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        runs.append(_children_cpu_s() - t0)
    return statistics.median(runs[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    rows = [(name, median_cpu_s(argv, args.repeat), True) for name, argv in COMMANDS]
    rows += [(name, median_cpu_s(argv, args.repeat), False) for name, argv in FLOORS]
    width = max(len(r[0]) for r in rows)
    print(f"{'command':<{width}}  {'CPU s':>6}  goal (median of {args.repeat} runs)")
    for name, seconds, goal in rows:
        verdict = (f"<= {GOAL_S:.1f}  {'met' if seconds <= GOAL_S else 'NOT met'}") if goal else "-"
        print(f"{name:<{width}}  {seconds:6.2f}  {verdict}")


if __name__ == "__main__":
    main()
