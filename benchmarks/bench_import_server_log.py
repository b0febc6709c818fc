"""`specdecsim calibrate from-runs` on a generated SGLang server log of a day: time and peak memory.

    python benchmarks/bench_import_server_log.py [--lines 1000000] [--keep DIR]

Writes a server log of LINES lines (decode-batch lines at batch 1-64, speculative and not, with
prefill lines between, as SGLang's scheduler prints them: simulator.evidence.importers.sglang), runs
the fit on it as a user would (a fresh process of `python -m simulator.cli calibrate from-runs`
with the test suite's SGLang Llama-8B scenario) and prints, for a tenth of the log and for all of
it: the lines, the file's size, the wall time and the process's peak resident memory. The goal
(issue 27): a million lines in under 60 s, memory flat in the log's size.
"""

from __future__ import annotations

import argparse
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "tests" / "data" / "engine_fit" / "sglang_llama8b_h100.yaml"
BATCHES = (1, 2, 4, 8, 16, 32, 64)


def write_log(path: Path, lines: int, seed: int = 0) -> None:
    """A server log: 9 decode lines in 10 (a third without speculation), a prefill line in 10."""
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(lines):
            t = f"[2026-01-01 {i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d} TP0]"
            if i % 10 == 9:
                f.write(f"{t} Prefill batch. #new-seq: 1, #new-token: 512, #cached-token: 0, token usage: 0.01, "
                        "#running-req: 3, #queue-req: 0,\n")
                continue
            b = rng.choice(BATCHES)
            if i % 3 == 0:
                f.write(f"{t} Decode batch. #running-req: {b}, #token: {300 * b}, token usage: 0.01, cuda graph: "
                        f"True, gen throughput (token/s): {140.0 * b * (1 - 0.004 * b) * rng.uniform(0.97, 1.03):.2f}"
                        ", #queue-req: 0,\n")
            else:
                al = 3.0 * rng.uniform(0.92, 1.08)
                f.write(f"{t} Decode batch. #running-req: {b}, #token: {300 * b}, token usage: 0.01, accept len: "
                        f"{al:.2f}, accept rate: 0.60, cuda graph: True, gen throughput (token/s): "
                        f"{95.0 * b * al * (1 - 0.004 * b) * rng.uniform(0.97, 1.03):.2f}, #queue-req: 0,\n")


def run_fit(log: Path, out: Path) -> tuple[float, float, int]:
    """(wall s, peak RSS MiB, exit code) of one `calibrate from-runs` process on the log."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "simulator.cli", "calibrate", "from-runs", str(SCENARIO), str(log),
                           "--out", str(out), "--force"], cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # the largest child so far
    if proc.returncode != 0:
        print(proc.stdout[-2000:], proc.stderr[-2000:], file=sys.stderr)
    return wall, peak_kib / 1024, proc.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--keep", type=Path, default=None, help="Folder to keep the logs in (default: a temp one).")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = args.keep or Path(tmp)
        d.mkdir(parents=True, exist_ok=True)
        rows = []
        for n in (max(1, args.lines // 10), args.lines):  # smaller first: ru_maxrss is the peak so far
            log = d / f"server_{n}.log"
            write_log(log, n)
            wall, peak, rc = run_fit(log, d / f"fitted_{n}.yaml")
            rows.append((n, log.stat().st_size / 2**20, wall, peak, rc))
    print(f"{'lines':>10} {'log MiB':>8} {'wall s':>7} {'peak RSS MiB':>13} {'exit':>5}")
    for n, mib, wall, peak, rc in rows:
        print(f"{n:>10,} {mib:>8.1f} {wall:>7.1f} {peak:>13.0f} {rc:>5}")
    (n1, _, _, p1, _), (n2, _, w2, p2, _) = rows
    print(f"\n{n2:,} lines in {w2:.1f} s (goal < 60 s); peak memory {p2:.0f} MiB at {n2:,} lines vs {p1:.0f} MiB "
          f"at {n1:,} ({p2 / p1:.2f}x for {n2 / n1:.0f}x the lines)")


if __name__ == "__main__":
    main()
