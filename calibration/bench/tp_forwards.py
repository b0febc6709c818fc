"""Whole target and draft forwards over a tensor-parallel group: the profile's ForwardTables at tp > 1.

    specdecsim calibrate tp-forwards --tp 2 --sizes 8b --points data/points/h200_tp2_forwards.jsonl

At tp 1 the calibration times the whole target forward on one GPU (`bench.forwards.bench_forwards`,
`fwd:{model}:1:{mode}:{n}:{c}` points). At tp > 1 a forward is the sharded matmuls of every rank
plus its allreduces and the lm_head all_gather, and the per-op sum of those (op tables timed one
kernel at a time on one GPU, collectives timed alone) misses what the kernels do to each other
and what a collective costs between the kernels of a forward. This module times the forward of
`calibration.models.tp_llama.TPTargetModel` itself: one process per rank (NCCL, cuda:{rank}; gloo on
CPU for tests), the same points as tp 1 (`fwd:{model}:{tp}:graph:{n}:{c}`, batch 1, no EAGLE-3
hidden-state capture): one forward captured in a CUDA graph with its collectives, replayed
between CUDA events, 20 samples (wall clock on CPU), every rank in lock step (`time_min_over_ranks`:
fixed warm-up and replay counts). A sample is the minimum over the ranks, so the hosts' launch
skew is left out (the simulator keeps host time apart).

Rank 0 sends each point to the parent process, which appends it to the PointStore: an
interrupted run keeps what it measured, and a rerun measures only the missing points.
`calibration.build.profile.forward_tables` turns the points into ForwardTable(tp_size=tp);
`simulator/costs/forward.py` uses it for the target's verify and decode forwards when the
scenario's costs.source is whole_forward (`specdecsim validate --costs-source whole_forward`).

Drafts (placement shared_tp: the draft sharded over the same group) get the same treatment with
`TPDraftModel`: a draft step ('draft' table) and a draft extend ('draft_extend') over the grid,
`fwd:{model}:{tp}:graph:{phase}:{n}:{c}` points (`bench.forwards.draft_forward`).

The tp-2 points committed in data/points/h200_tp_forwards.jsonl were timed before the
minimum over ranks, from rank 0's launch (their `impl` does not say "minimum over ranks"): at
tp 2 on the H200s that reads 0.0-1.3% above the minimum (`specdecsim diagnose tp-skew`,
data/live/h200_diagnostics/tp2_skew.json); a rerun with --points to a new file replaces them.

Left out: eager mode (the live TP loop runs CUDA graphs).
"""

from __future__ import annotations

import dataclasses
import os
import time

import torch
import torch.distributed as dist

from calibration.bench.forwards import draft_forward, forward_key, models_forward
from calibration.bench.ops import DEFAULT_GRID, OpGrid
from calibration.build.store import PointStore
from calibration.group import DEFAULT_TIMEOUT_S, console, gather_samples, join_group, spawn_ranks_into_store
from calibration.models.llama import DRAFT_WEIGHT_SEED, TARGET_WEIGHT_SEED
from calibration.models.tp_llama import TPDraftModel, TPTargetModel, check_shardable
from calibration.provenance import collect_hardware_info, command_line
from calibration.shapes import is_draft
from calibration.timing import TimingSettings, capture_graph, elapsed_us, sample_stats
from simulator.config import ModelShape

INPUT_SEED = 0  # torch.manual_seed of the input ids (and draft inputs): equal on every rank
MODE = {"nccl": "graph", "gloo": "eager"}  # CUDA graphs on GPUs; gloo (CPU) cannot capture


def phases(model: ModelShape) -> tuple[str, ...]:
    """Whole-forward tables of a model: a target's 'forward'; a draft's 'draft' and 'draft_extend'."""
    return ("draft", "draft_extend") if is_draft(model) else ("forward",)


def point_keys(model: ModelShape, tp_size: int, grid: OpGrid, mode: str) -> list[tuple[str, int, int]]:
    """(store key, num_tokens, context_len) of every whole-forward point of `model` at `tp_size`."""
    return [(forward_key(model.name, tp_size, mode, n, c, ph), n, c) for ph in phases(model)
            for n in grid.forward_num_tokens for c in grid.forward_context_len]


def time_min_over_ranks(fn, dev: torch.device, settings: TimingSettings, group=None) -> dict:
    """Time one call of `fn` (a forward with collectives) on every rank of `group` in lock step:
    one CUDA graph of one call (`timing.capture_graph`; CPU: `fn` itself after
    `settings.num_warmup` calls), then `settings.num_replays` samples of device sync + one replay
    between CUDA events (perf_counter on CPU). Each sample's time is the minimum over the ranks
    (`group.gather_samples`): the rank that launched last waits on no other, so the launch skew
    of the hosts, which the simulator keeps on the host side, is left out, as
    calibration/bench/collectives.py times collectives (`specdecsim diagnose tp-skew`: rank 0's
    own time was 0.0-1.3% above this at tp 2).

    Returns {latency_us, p10_latency_us, p90_latency_us} (median, percentiles over samples) and
    mode ('graph' or 'cpu_wall'); the same on every rank.
    """
    on_cuda = dev.type == "cuda"
    if on_cuda:
        fn = capture_graph(fn)[0].replay
    else:
        for _ in range(settings.num_warmup):
            fn()
    samples = [elapsed_us(fn, 1, dev) for _ in range(settings.num_replays)]
    fastest = gather_samples(samples, dev, group).min(axis=0)
    return {**sample_stats(fastest), "mode": "graph" if on_cuda else "cpu_wall"}


def _worker(rank: int, tp_size: int, backend: str, model: ModelShape, grid: OpGrid, settings: TimingSettings,
            command: str, timeout_s: float, queue) -> None:
    """One rank: join the group, build this rank's shard of `model`, time every forward of `grid`."""
    dev, dtype = join_group(rank, tp_size, backend, timeout_s)
    try:
        torch.manual_seed(INPUT_SEED)  # the same input ids (and draft inputs) on every rank
        max_len = max(grid.forward_context_len) + max(grid.forward_num_tokens)
        if is_draft(model):
            draft = TPDraftModel(model, None, dev, dtype, DRAFT_WEIGHT_SEED)
            makes = {ph: draft_forward(model, dev, dtype, max_len, ph == "draft_extend", model=draft)
                     for ph in phases(model)}
        else:
            target = TPTargetModel(model, None, dev, dtype, TARGET_WEIGHT_SEED, num_aux_states=0)
            makes = {"forward": models_forward(model, dev, dtype, max_len, model=target)}
        mode = MODE[backend]
        for ph, make in makes.items():
            impl = (f"calibration.models.tp_llama.TP{'Draft' if ph != 'forward' else 'Target'}Model over {tp_size} ranks "
                    f"({backend}), median over samples of the minimum over ranks")
            for n in grid.forward_num_tokens:
                for c in grid.forward_context_len:
                    t = time_min_over_ranks(make(n, c), dev, settings)
                    if rank == 0:
                        queue.put((forward_key(model.name, tp_size, mode, n, c, ph),
                                   {"model": model.name, "tp_size": tp_size, "mode": mode, "phase": ph,
                                    "num_tokens": n, "context_len": c,
                                    **{k: t[k] for k in ("latency_us", "p10_latency_us", "p90_latency_us")},
                                    "timing_mode": t["mode"], "impl": impl, "command": command}))
    finally:
        dist.destroy_process_group()


def measure_tp_forwards(store: PointStore, models: list[ModelShape], tp_sizes: list[int], grid: OpGrid = DEFAULT_GRID,
                        backend: str | None = None, command: str | None = None,
                        settings: TimingSettings | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> int:
    """Time whole target forwards of `models` at every TP size of `tp_sizes` not yet in `store`.

    Args:
        store: PointStore; points already there are skipped (resume).
        models: target shapes (table 'forward') and EAGLE-3 draft shapes (tables 'draft' and
            'draft_extend'; drafts without num_fc_input_hidden_states are skipped).
        tp_sizes: group sizes >= 2; sizes above the GPUs there are (CPU processes with gloo), or that a
            model's heads, KV heads, intermediate size or vocabulary do not divide by, are skipped.
        grid: forward_num_tokens x forward_context_len.
        backend: 'nccl' (default with >= 2 CUDA GPUs: CUDA-graph points) or 'gloo' (CPU processes,
            wall clock, recorded as mode 'eager'; tests).
        command: provenance recorded with each point (default: this process's command line).
        settings: timing (timing.TimingSettings; one forward per replay whatever max_reps says).
        timeout_s: process-group timeout: a hung rank fails the run instead of hanging it.

    Returns:
        Points measured and stored by this call (0 with fewer than 2 GPUs and no backend='gloo').

    Raises:
        ValueError: an unknown backend.
        torch.multiprocessing.ProcessRaisedException: a rank failed (points stored before are kept).
    """
    if backend is None:
        if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
            console.print("tp forwards: fewer than 2 CUDA GPUs, nothing measured")
            return 0
        backend = "nccl"
    if backend not in ("nccl", "gloo"):
        raise ValueError(f"backend {backend!r}: use 'nccl' or 'gloo'")
    max_world = torch.cuda.device_count() if backend == "nccl" else max(os.cpu_count() or 2, 2)
    settings = dataclasses.replace(settings or TimingSettings(), max_reps=1, target_replay_us=0.0)
    command = command or command_line()
    written = 0
    for tp in sorted(set(tp_sizes)):
        if not 2 <= tp <= max_world:
            console.print(f"tp forwards: tp {tp} skipped (need 2 <= tp <= {max_world})")
            continue
        for m in models:
            if is_draft(m) and m.num_fc_input_hidden_states < 1:
                continue  # not an EAGLE-3 draft the live loop runs: per-op only
            try:
                check_shardable(m, tp, "draft" if is_draft(m) else "target")
            except ValueError as e:
                console.print(f"tp forwards: {m.name} tp {tp} skipped: {e}")
                continue
            keys = point_keys(m, tp, grid, MODE[backend])
            todo_n = sorted({n for k, n, _ in keys if not store.done(k)})
            if not todo_n:
                console.print(f"tp forwards: {m.name} tp {tp}: all points already stored")
                continue
            if not store.done(f"meta:model:{m.name}"):
                store.add(f"meta:model:{m.name}", m.model_dump(mode="json"))
            # whole num_tokens rows (every context) are remeasured together; rows already complete are skipped
            sub = dataclasses.replace(grid, forward_num_tokens=tuple(todo_n))
            t0 = time.perf_counter()
            console.print(f"tp forwards: {m.name} tp {tp} ({backend}): {len(todo_n) * len(grid.forward_context_len)} "
                          "points")
            written += spawn_ranks_into_store(_worker, (tp, backend, m, sub, settings, command, timeout_s), tp,
                                              backend, store)
            console.print(f"tp forwards: {m.name} tp {tp}: done in {time.perf_counter() - t0:.1f} s")
    if written:
        hw = collect_hardware_info()
        store.add(f"meta:hardware:tp_forwards:{backend}", {**hw, "command": command})
    return written
