"""Trace cost: CPU seconds, peak memory and file size of `specdecsim simulate --trace` at kernel granularity.

    python benchmarks/bench_trace.py [--scenario scenarios/tp1_draft.yaml] [--set key=value ...]

Runs `specdecsim simulate SCENARIO --set fidelity.granularity=kernel` in a child process
without a trace, with the default trace window, and with every cycle (`--trace-cycles 0:`),
and prints per run: CPU seconds (user + sys), peak resident memory, events and bytes written
(and the estimate printed before the run), and the CPU microseconds the trace added per event.
The trace estimate's constants (simulator/estimate.py: `_EVENT_WRITE_S`, the bytes per span) come from here.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]


def run(args: list[str]) -> tuple[float, float, str]:
    """(CPU s, peak RSS in MiB, stderr) of `specdecsim ARGS` in a child process."""
    proc = subprocess.Popen([sys.executable, "-m", "simulator.cli", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "400"})
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"specdecsim {' '.join(args)} failed ({proc.returncode}): {err}")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, err


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default=str(ROOT / "scenarios" / "tp1_draft.yaml"))
    ap.add_argument("--set", dest="sets", action="append", default=[], help="more --set overrides")
    args = ap.parse_args()
    base = ["simulate", args.scenario, "--set", "fidelity.granularity=kernel"]
    for s in args.sets:
        base += ["--set", s]
    t = Table(title=f"specdecsim {' '.join(base[:2])} at kernel granularity {' '.join(args.sets)}",
              title_justify="left")
    for col in ("trace", "CPU s", "peak RSS MiB", "events", "MiB written", "MiB estimated",
                "trace CPU us / event"):
        t.add_column(col, justify="right")
    with tempfile.TemporaryDirectory() as tmp:  # every child runs before this process loads a trace: a
        # child forked from a large parent would report the parent's memory as its peak
        bare_s, bare_mib, _ = run(base)
        t.add_row("none", f"{bare_s:.2f}", f"{bare_mib:.0f}", "", "", "", "")
        runs = []
        for i, (label, extra) in enumerate((("default window", []),
                                            ("every cycle (--trace-cycles 0:)", ["--trace-cycles", "0:"]))):
            path = Path(tmp) / f"t{i}.json"
            runs.append((label, path, *run(base + ["--trace", str(path), "--force"] + extra)))
        for label, path, cpu_s, mib, err in runs:
            with path.open() as f:
                num_events = len(json.load(f)["traceEvents"])  # valid JSON, whole
            est = re.search(r"about ([\d,]+) events, ([\d,.]+) MiB", err)
            window = re.search(r"trace: (.*?);", err)
            t.add_row(f"{label}: {window.group(1) if window else '?'}", f"{cpu_s:.2f}", f"{mib:.0f}",
                      f"{num_events:,}", f"{path.stat().st_size / 2**20:.1f}", est.group(2) if est else "?",
                      f"{(cpu_s - bare_s) / num_events * 1e6:.2f}")
    Console(width=200).print(t)


if __name__ == "__main__":
    main()
