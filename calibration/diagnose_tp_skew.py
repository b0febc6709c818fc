"""Diagnostic: a TP forward timed on rank 0, on the last rank to launch, and back to back.

    python -m calibration.diagnose_tp_skew --tp 2 --out skew.json [--device cpu]

At tp > 1 a forward's first collective waits for the last rank to launch it, so a forward timed
from one rank's launch (as `calibration.tp_forwards` times the profile's tables) includes how
much later the other ranks started. This times the Llama-3.1-8B-shape TP target's forward and its
EAGLE-3 draft's step (context 1024, num_tokens 1, 2, 3, 4, 8; one CUDA graph each on GPUs,
eager on gloo CPU processes) three ways, 30 samples each, every rank in lock step:
  rank0           host sync, CUDA events around one replay, rank 0's time (the tables' method);
  min_over_ranks  the same samples, per sample the smallest time over the ranks: the rank that
                  launched last waits on no other (how calibration/collectives.py times collectives);
  back_to_back    10 replays between one pair of events, per replay: the launch skew is paid once
                  per 10 forwards.
Medians are printed and written (atomically) with the per-rank medians. Left out: tp > 2 runs
are supported but were not run on GPUs (only 2-GPU machines were lent).
"""

from __future__ import annotations

import argparse
import datetime
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as torch_mp

from calibration import bench_ops
from calibration.collectives import _free_port, _spawn_env, console, join_group
from calibration.live import _capture
from calibration.live_grid import CONTEXT_LEN
from calibration.shapes import TP_SIZES
from calibration.tp_models import TPDraftModel, TPTargetModel
from simulator.profile import write_json_atomic
from simulator.units import US_PER_MS, US_PER_S

NUM_TOKENS = (1, 2, 3, 4, 8)
NUM_SAMPLES, BACK_TO_BACK = 30, 10


def _timer(dev: torch.device):
    """fn(callable, calls) -> us per call: CUDA events on GPUs, perf_counter on CPU."""
    if dev.type == "cuda":
        def timed(fn, calls: int) -> float:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(dev)
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) * US_PER_MS / calls
    else:
        def timed(fn, calls: int) -> float:
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            return (time.perf_counter() - t0) * US_PER_S / calls
    return timed


def _replayable(fn, dev: torch.device):
    """A CUDA graph's replay of `fn` (live._capture), or fn itself on CPU (after one call)."""
    if dev.type != "cuda":
        fn()
        return fn
    return _capture(fn)[0].replay


def _worker(rank: int, tp: int, backend: str, queue) -> None:
    dev, dtype = join_group(rank, tp, backend)
    on_cuda = dev.type == "cuda"
    try:
        torch.manual_seed(0)
        target_shape, draft_shape = TP_SIZES["8b" if on_cuda else "tiny"]
        max_len = CONTEXT_LEN + max(NUM_TOKENS)
        makes = {"forward": bench_ops.models_forward(target_shape, dev, dtype, max_len,
                                                     model=TPTargetModel(target_shape, None, dev, dtype, 0, 0)),
                 "draft": bench_ops.draft_forward(draft_shape, dev, dtype, max_len, False,
                                                  model=TPDraftModel(draft_shape, None, dev, dtype, 1))}
        timed = _timer(dev)
        for phase, make in makes.items():
            for n in NUM_TOKENS:
                replay = _replayable(make(n, CONTEXT_LEN), dev)
                single = torch.tensor([timed(replay, 1) for _ in range(NUM_SAMPLES)], dtype=torch.float64)
                b2b = torch.tensor([timed(replay, BACK_TO_BACK) for _ in range(NUM_SAMPLES // 3)], dtype=torch.float64)
                mine = single.to(dev)  # NCCL gathers device tensors
                ranks = [torch.zeros_like(mine) for _ in range(tp)]
                dist.all_gather(ranks, mine)
                per_rank = torch.stack([r.cpu() for r in ranks]).numpy()
                if rank == 0:
                    queue.put({"phase": phase, "num_tokens": n, "context_len": CONTEXT_LEN,
                               "rank0_us": float(np.median(per_rank[0])),
                               "min_over_ranks_us": float(np.median(per_rank.min(axis=0))),
                               "back_to_back_us": float(np.median(b2b.numpy())),
                               "per_rank_median_us": np.median(per_rank, axis=1).tolist()})
                del replay
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True, help="JSON file to write")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = ap.parse_args(argv)
    if args.tp < 2:
        ap.error(f"--tp must be >= 2, got {args.tp}")
    if args.out.is_dir():
        ap.error(f"--out {args.out} is a folder; give a .json file")
    if args.device == "cuda" and torch.cuda.device_count() < args.tp:
        ap.error(f"--tp {args.tp} needs {args.tp} GPUs; {torch.cuda.device_count()} visible (--device cpu runs gloo)")
    backend = "nccl" if args.device == "cuda" else "gloo"
    queue, rows = torch_mp.get_context("spawn").SimpleQueue(), []
    with _spawn_env(_free_port(), backend):
        torch_mp.start_processes(_worker, args=(args.tp, backend, queue), nprocs=args.tp, join=True,
                                 start_method="spawn")
    while not queue.empty():
        rows.append(queue.get())
    write_json_atomic(args.out, {"created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                                 "tp_size": args.tp, "backend": backend, "rows": rows})
    print(f"{'phase':8} {'n':>3} {'rank0_us':>10} {'min_ranks_us':>12} {'b2b_us':>9}  per-rank medians")
    for r in rows:
        print(f"{r['phase']:8} {r['num_tokens']:>3} {r['rank0_us']:>10.1f} {r['min_over_ranks_us']:>12.1f} "
              f"{r['back_to_back_us']:>9.1f}  {[round(x, 1) for x in r['per_rank_median_us']]}")


if __name__ == "__main__":
    main()
