"""Diagnostic: a TP forward timed on rank 0, on the last rank to launch, and back to back.

    specdecsim diagnose tp-skew --tp 2 --out skew.json [--device cpu]

At tp > 1 a forward's first collective waits for the last rank to launch it, so a forward timed
from one rank's launch (as calibration/bench/tp_forwards.py timed the first tp-2 tables) includes
how much later the other ranks started. This times the Llama-3.1-8B-shape TP target's forward and its
EAGLE-3 draft's step (context 1024, num_tokens 1, 2, 3, 4, 8; one CUDA graph each on GPUs,
eager on gloo CPU processes) three ways, 30 samples each, every rank in lock step:
  rank0           host sync, CUDA events around one replay, rank 0's time (the tables' method);
  min_over_ranks  the same samples, per sample the smallest time over the ranks: the rank that
                  launched last waits on no other (how bench/collectives.py and bench/tp_forwards.py time);
  back_to_back    10 replays between one pair of events, per replay: the launch skew is paid once
                  per 10 forwards.
Medians are printed and written (atomically) with the per-rank medians. Left out: tp > 2 runs
are supported but were not run on GPUs (only 2-GPU machines were lent).
"""

from __future__ import annotations

import datetime
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from calibration.bench.forwards import draft_forward, models_forward
from calibration.group import gather_samples, join_group, spawn_ranks
from calibration.live.grid import CONTEXT_LEN
from calibration.models.llama import DRAFT_WEIGHT_SEED, TARGET_WEIGHT_SEED
from calibration.models.tp_llama import TPDraftModel, TPTargetModel
from calibration.shapes import TP_SIZES
from calibration.timing import capture_graph, elapsed_us
from simulator.files import DIAGNOSTIC_OUTPUT, OUTPUT_KEY, write_json_atomic

NUM_TOKENS = (1, 2, 3, 4, 8)
NUM_SAMPLES, BACK_TO_BACK = 30, 10
INPUT_SEED = 0  # torch.manual_seed of the inputs: equal on every rank


def _replayable(fn, dev: torch.device):
    """A CUDA graph's replay of `fn` (timing.capture_graph), or fn itself on CPU (after one call)."""
    if dev.type != "cuda":
        fn()
        return fn
    return capture_graph(fn)[0].replay


def _worker(rank: int, tp: int, backend: str, num_tokens: tuple[int, ...], num_samples: int, queue) -> None:
    """One rank: every (phase, n in num_tokens) timed three ways, num_samples single replays and
    num_samples // 3 back-to-back runs each; rank 0 puts one row each on the queue."""
    dev, dtype = join_group(rank, tp, backend)
    try:
        torch.manual_seed(INPUT_SEED)
        target_shape, draft_shape = TP_SIZES["8b" if dev.type == "cuda" else "tiny"]
        max_len = CONTEXT_LEN + max(num_tokens)
        target = TPTargetModel(target_shape, None, dev, dtype, TARGET_WEIGHT_SEED, num_aux_states=0)
        makes = {"forward": models_forward(target_shape, dev, dtype, max_len, model=target),
                 "draft": draft_forward(draft_shape, dev, dtype, max_len, False,
                                        model=TPDraftModel(draft_shape, None, dev, dtype, DRAFT_WEIGHT_SEED))}
        for phase, make in makes.items():
            for n in num_tokens:
                replay = _replayable(make(n, CONTEXT_LEN), dev)
                single = [elapsed_us(replay, 1, dev) for _ in range(num_samples)]
                b2b = [elapsed_us(replay, BACK_TO_BACK, dev) for _ in range(max(1, num_samples // 3))]
                per_rank = gather_samples(single, dev)
                if rank == 0:
                    queue.put({"phase": phase, "num_tokens": n, "context_len": CONTEXT_LEN,
                               "rank0_us": float(np.median(per_rank[0])),
                               "min_over_ranks_us": float(np.median(per_rank.min(axis=0))),
                               "back_to_back_us": float(np.median(b2b)),
                               "per_rank_median_us": np.median(per_rank, axis=1).tolist()})
                del replay
    finally:
        dist.destroy_process_group()


def measure_tp_skew(out: Path, tp_size: int, device_kind: str) -> dict:
    """Spawn `tp_size` ranks (device_kind 'cuda': NCCL, one GPU each; 'cpu': gloo), time every
    (phase, num_tokens) three ways, write {created_utc, tp_size, backend, rows} to `out`
    (atomically) and return it. NUM_TOKENS and NUM_SAMPLES are read here, at the call, and handed
    to the ranks (the tests shrink them)."""
    backend = "nccl" if device_kind == "cuda" else "gloo"
    rows: list[dict] = []
    spawn_ranks(_worker, (tp_size, backend, tuple(NUM_TOKENS), NUM_SAMPLES), tp_size, backend, rows.append)
    result = {OUTPUT_KEY: DIAGNOSTIC_OUTPUT, "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "tp_size": tp_size, "backend": backend, "rows": rows}
    write_json_atomic(out, result)
    return result


def print_tp_skew(result: dict) -> None:
    """One line per row: the three medians and the per-rank medians (us)."""
    print(f"{'phase':8} {'n':>3} {'rank0_us':>10} {'min_ranks_us':>12} {'b2b_us':>9}  per-rank medians")
    for r in result["rows"]:
        print(f"{r['phase']:8} {r['num_tokens']:>3} {r['rank0_us']:>10.1f} {r['min_over_ranks_us']:>12.1f} "
              f"{r['back_to_back_us']:>9.1f}  {[round(x, 1) for x in r['per_rank_median_us']]}")
