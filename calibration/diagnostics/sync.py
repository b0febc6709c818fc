"""Diagnostic: the live loop's host time per cycle (sync + host phases) with a blocking sync
(`.tolist()` waits in the CUDA driver) against a spinning one (Python polls a CUDA event).

    specdecsim diagnose sync [--passes 3]   (CUDA only; prints a table)

For the live grid's targets (Llama-3.1-8B and 3.2-1B shapes), CUDA graphs, batch 1: the
speculative loop (num_steps 4, iid 0.7) and the baseline decode loop, 64 timed cycles, each
(mode, loop) run once per pass, passes interleaved.
"""

from __future__ import annotations

import statistics

from rich.console import Console
from rich.table import Table

from calibration.live.grid import GridPoint
from calibration.live.run import LiveSession, run_live

SYNC_MODES = ("blocking", "spin")
NUM_CYCLES, WARMUP_CYCLES = 64, 8


def measure_sync(passes: int = 3) -> dict[tuple[str, str, str], list[tuple[float, float, float]]]:
    """(size, loop, sync mode) -> [(sync_us, host_us, GPU phases us) per pass], mean per cycle,
    on the current CUDA device."""
    rows: dict[tuple[str, str, str], list[tuple[float, float, float]]] = {}
    for size in ("8b", "1b"):
        session = LiveSession("cuda")
        for _ in range(passes):
            for spec in (True, False):
                p = GridPoint(size, True, 1, 4 if spec else None, 0.7 if spec else None)
                sc = p.scenario(NUM_CYCLES, WARMUP_CYCLES)
                for mode in SYNC_MODES:
                    session.loop(sc, spec).sync_mode = mode
                    r = run_live(sc, spec, NUM_CYCLES, WARMUP_CYCLES, "cuda", 1, session)
                    gpu = sum(v for k, v in r.phase_us.items() if k not in ("sync", "host"))
                    rows.setdefault((size, "spec" if spec else "baseline", mode), []).append(
                        (r.phase_us["sync"], r.phase_us["host"], gpu))
    return rows


def print_sync(rows: dict[tuple[str, str, str], list[tuple[float, float, float]]]) -> None:
    """Medians over passes of sync, host, their sum (min-max) and the GPU phases, per row."""
    t = Table(title="us per cycle: median over passes (min-max of sync + host)")
    for c in ("target", "loop", "sync mode", "sync", "host", "sync + host", "gpu phases"):
        t.add_column(c, justify="right")
    for (size, loop, mode), v in rows.items():
        tot = [a + b for a, b, _ in v]
        t.add_row(size, loop, mode, f"{statistics.median(a for a, _, _ in v):.0f}",
                  f"{statistics.median(b for _, b, _ in v):.0f}",
                  f"{statistics.median(tot):.0f} ({min(tot):.0f}-{max(tot):.0f})",
                  f"{statistics.median(g for _, _, g in v):.0f}")
    Console(width=140).print(t)
