"""Host time per cycle of the live loop as a function of the GPU time per cycle, with real models.

    python -m calibration.loop_overhead --points data/points/h200.jsonl [--passes 3]

Why: the serving loop's cost beyond GPU work (the device->host copy of the accept result, the
host's wake-up, bookkeeping, the next launch) is not a constant. On the lent H200 it grew from
about 110 us per step (a 2 ms decode) to about 320 us per cycle (an 11 ms speculative cycle)
(docs/validation.md); a GPU sleep standing in for the model (`live.measure_loop_overhead_us`
with busy_us) showed the growth for the speculative loop but not for the baseline loop.

What: `calibration.live.run_live` (CUDA graphs, batch 1, context 1024) on a probe target of
Llama-3.2-3B width (hidden 3072, 24 heads, 8 kv heads, intermediate 8192, vocab 128256; HF
config of meta-llama/Llama-3.2-3B) at PROBE_LAYERS depths, so the GPU time per cycle spans
about 0.7-11 ms, with its EAGLE-3 one-layer draft (num_steps 4, iid acceptance 0.7), and the
no-speculation decode loop. The probe's widths differ from the validation targets (8B, 1B), so
the validation grid is not used to calibrate itself. Per point: gpu_us = the GPU phases per
cycle (draft_extend + draft + verify + accept, or decode), overhead_us = sync + host per cycle.
The depths run in `passes` interleaved passes; each pass is one PointStore record (resumable),
and `build_profile` takes the median over passes into `HostOverheads.loop_overhead`.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from calibration.shapes import eagle3_draft, probe_shape
from calibration.store import PointStore
from simulator.config import Scenario

PROBE_LAYERS = (2, 14, 28, 56, 84, 112, 140)
PROBE_NUM_STEPS, PROBE_RATE, PROBE_CONTEXT_LEN = 4, 0.7, 1024
PROBE_CYCLES, PROBE_WARMUP = 64, 8
GPU_PHASES = {"spec": ("draft_extend", "draft", "verify", "accept"), "baseline": ("decode",)}
console = Console()


def probe_scenario(num_layers: int) -> Scenario:
    """The probe point: target probe_shape(num_layers), one-layer EAGLE-3 draft, CUDA graphs."""
    target = probe_shape(num_layers)
    draft = eagle3_draft(target)
    s = PROBE_NUM_STEPS
    return Scenario(name=f"loop-probe-L{num_layers}", target=target, draft=draft,
                    spec=dict(num_steps=s, topk=1, num_draft_tokens=s + 1),
                    acceptance=dict(kind="iid", acceptance_rate=PROBE_RATE),
                    workload=dict(batch_size=1, context_len=PROBE_CONTEXT_LEN), fidelity=dict(num_cycles=PROBE_CYCLES, warmup_cycles=PROBE_WARMUP), serving_engine=dict(cuda_graph=True), seed=0)


def point_key(loop: str, num_layers: int, pass_idx: int) -> str:
    return f"host:loop_overhead_real:{loop}:L{num_layers}:pass{pass_idx}"


def measure(store: PointStore, device: str = "cuda", passes: int = 3, layers: tuple[int, ...] = PROBE_LAYERS,
            command: str = "") -> int:
    """Run every missing (pass, depth, loop) point into `store`; returns how many ran.

    Raises:
        RuntimeError: no CUDA device (the table is of CUDA-graph loops).
    """
    todo = [(k, n, loop) for k in range(passes) for n in layers for loop in ("spec", "baseline")
            if not store.done(point_key(loop, n, k))]
    if not todo:
        return 0
    import torch

    from calibration.live import LiveSession, run_live
    if not torch.cuda.is_available() and device.startswith("cuda"):
        raise RuntimeError("loop_overhead needs a CUDA GPU (it times CUDA-graph loops)")
    session, ran = LiveSession(device), 0
    for k, n, loop in todo:
        rec = run_live(probe_scenario(n), loop == "spec", PROBE_CYCLES, PROBE_WARMUP, device, 1, session)
        ph = rec.phase_us
        gpu_us = sum(ph[p] for p in GPU_PHASES[loop])
        store.add(point_key(loop, n, k), {
            "loop": loop, "num_layers": n, "pass": k, "gpu_us": gpu_us, "overhead_us": ph["sync"] + ph["host"],
            "sync_us": ph["sync"], "host_us": ph["host"], "tok_per_s": rec.tok_per_s, "command": command,
            "note": "calibration.loop_overhead: run_live on the probe target, CUDA graphs"})
        ran += 1
        console.print(f"pass {k} L{n} {loop}: gpu {gpu_us:.0f} us, overhead {ph['sync'] + ph['host']:.0f} us")
    return ran


def table_from_records(records: dict[str, dict], loop: str) -> tuple[list[float], list[float]] | None:
    """(gpu_us, overhead_us) per depth, medians over passes, sorted by gpu_us; None if absent."""
    by_depth: dict[int, list[dict]] = {}
    for key, r in records.items():
        if key.startswith(f"host:loop_overhead_real:{loop}:"):
            by_depth.setdefault(r["num_layers"], []).append(r)
    if len(by_depth) < 2:
        return None
    rows = sorted((statistics.median(r["gpu_us"] for r in rs), statistics.median(r["overhead_us"] for r in rs))
                  for rs in by_depth.values())
    return [g for g, _ in rows], [o for _, o in rows]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=Path, required=True, help="PointStore JSONL to add the points to (resumes)")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args(argv)
    if args.passes < 1:
        ap.error(f"--passes must be >= 1, got {args.passes}")
    store = PointStore(args.points)
    t0 = time.perf_counter()
    try:
        ran = measure(store, args.device, args.passes,
                      command=f"python -m calibration.loop_overhead --points {args.points} --passes {args.passes}")
    except RuntimeError as e:
        raise SystemExit(f"error: {e}") from None
    console.print(f"ran {ran} points in {time.perf_counter() - t0:.0f} s")
    records = store.records()
    t = Table(title="live-loop host time per cycle vs GPU time per cycle (median over passes)")
    for c in ("loop", "gpu_us", "overhead_us"):
        t.add_column(c, justify="right")
    for loop in ("spec", "baseline"):
        tab = table_from_records(records, loop)
        for g, o in zip(*(tab or ([], []))):
            t.add_row(loop, f"{g:.0f}", f"{o:.0f}")
    console.print(t)


if __name__ == "__main__":
    main()
