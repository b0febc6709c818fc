"""Per-op GPU latency tables, host overheads and roofline constants (whole forwards: bench/forwards.py).

Every measured point goes to a `PointStore`, so an interrupted run resumes where it stopped:
  op:{op.key}:{axis=value,...}          one op at one grid point (record: latency_us, p10/p90, ...)
  host:{what}                           host-side costs (launch per op name, graph replay, sync)
  roofline:{what}                       HBM copy bandwidth, bf16 / fp8 matmul rate
  meta:model:{name}                     the ModelShape measured (for the decomposition check)

GPU timing is pure device time (`calibration.timing.time_gpu_us`): R repetitions of the op are
captured in one CUDA graph, which is replayed between CUDA events (>= 20 replays; median, p10,
p90 of the per-repetition time). Ops whose data fits in L2 rotate among several input sets
inside the graph, so the cache does not serve them. On CPU (tests) the same code times with
time.perf_counter (`timing.time_cpu_us`).

Left out: MLA attention and MoE experts (roofline-only), collectives (calibration/bench/collectives.py).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Iterable

import torch
from rich.progress import Progress

from calibration.build.store import PointStore
from calibration.models import op_runners, ops_torch
from calibration.shapes import is_draft
from calibration.timing import (Clock, TimingSettings, capture_graph, elapsed_us, gpu_sleep_cycles, sync,
                                time_cpu_us, time_gpu_us)
from simulator.config import ModelShape
from simulator.costs.forward_ops import draft_forward_ops, target_forward_ops
from simulator.costs.ops import Op, accept_ops
from simulator.units import BYTES_PER_GB, BYTES_PER_MB, FLOPS_PER_TFLOP, US_PER_S

L2_BYTES = 60 * BYTES_PER_MB  # H200 L2 is 60 MB (NVIDIA H100/H200 architecture whitepaper)
MAX_INPUT_SETS = 8
NUM_DRAFT_TOKENS = tuple(range(2, 9))  # accept-op keys: chains of 1..7 draft steps
NUM_GRAPH_KERNELS = 100  # empty kernels in the graph whose replay and per-kernel gap are timed


@dataclass(frozen=True)
class OpGrid:
    """Grid of lookup coordinates. Token ops: num_tokens (= batch_size * tokens per request)."""

    # Every count up to 24: kernels choose tiles by token count, so odd counts can cost more than
    # their even neighbours (seen on the H200: verify over 3, 5, 7, 9 tokens ~10% above 2, 4, 6, 8).
    num_tokens: tuple[int, ...] = tuple(range(1, 25)) + (32, 48, 64, 96, 128, 256, 512)
    attn_batch_size: tuple[int, ...] = (1, 4, 16)
    attn_num_tokens: tuple[int, ...] = tuple(range(1, 10)) + (12, 16, 32, 64)
    attn_context_len: tuple[int, ...] = (512, 1024, 2048, 8192, 32768)
    # Shapes of these TP sizes get the grid above; others the coarse grid (powers of two). TP 2
    # joined after the live tp-2 runs on 2 H200s showed verify over odd token counts 13% above
    # the coarse grid's interpolation (docs/validation.md).
    dense_tp_sizes: tuple[int, ...] = (1, 2)
    forward_num_tokens: tuple[int, ...] = tuple(range(1, 10)) + (12, 16, 32, 64)
    forward_context_len: tuple[int, ...] = (512, 1024, 2048, 8192)

    def axes_points(self, op: Op) -> list[dict[str, int]]:
        """Grid points of `op`'s axes, in C order of (batch_size, num_tokens, context_len)."""
        if set(op.axes) == {"num_tokens"}:
            return [{"num_tokens": t} for t in self.num_tokens]
        return [{"batch_size": b, "num_tokens": n, "context_len": c} for b in self.attn_batch_size
                for n in self.attn_num_tokens for c in self.attn_context_len]


DEFAULT_GRID = OpGrid()
COARSE_GRID = OpGrid(num_tokens=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512), attn_num_tokens=(1, 2, 4, 8, 16, 32, 64),
                     attn_context_len=(512, 2048, 8192, 32768), dense_tp_sizes=())
QUICK_GRID = OpGrid(num_tokens=(1, 4, 16, 64), attn_batch_size=(1, 4), attn_num_tokens=(1, 4, 16),
                    attn_context_len=(512, 2048), forward_num_tokens=(1, 4, 16), forward_context_len=(512, 2048),
                    dense_tp_sizes=())


def model_ops(m: ModelShape, tp_size: int) -> list[Op]:
    """Distinct runnable compute ops (by key) of `m` sharded over `tp_size`; [] if heads do not divide.

    A draft contributes its draft step and draft extend forwards; a target its forward and the
    accept ops for num_draft_tokens in NUM_DRAFT_TOKENS.
    """
    if m.num_attention_heads % tp_size:
        return []
    if is_draft(m):
        ops = (draft_forward_ops(m, tp_size, 1, 1, 512, extend=True)
               + draft_forward_ops(m, tp_size, 1, 1, 512, extend=False))
    else:
        ops = target_forward_ops(m, tp_size, 1, 1, 512)
        for d in NUM_DRAFT_TOKENS:
            ops += accept_ops(1, d)
    return list({o.key: o for o in ops if op_runners.runnable(o)}.values())


def point_key(op_key: str, axes: dict[str, int]) -> str:
    return f"op:{op_key}:" + ",".join(f"{k}={v}" for k, v in sorted(axes.items()))


def enumerate_points(models: Iterable[ModelShape], tp_sizes: Iterable[int], grid: OpGrid) -> list[tuple[str, Op]]:
    """(point key, op at that point) for every op key of every model x tp, deduplicated."""
    ops: dict[str, Op] = {}
    dense: set[str] = set()
    for m in models:
        for tp in tp_sizes:
            for op in model_ops(m, tp):
                ops.setdefault(op.key, op)
                if tp in grid.dense_tp_sizes:
                    dense.add(op.key)
    coarse = dataclasses.replace(COARSE_GRID, forward_num_tokens=grid.forward_num_tokens,
                                 forward_context_len=grid.forward_context_len)
    points = []
    for op in ops.values():
        use = grid if (op.key in dense or not grid.dense_tp_sizes) else coarse
        for axes in use.axes_points(op):
            points.append((point_key(op.key, axes), dataclasses.replace(op, axes=axes)))
    return points


# Ops that read data a real forward finds cold (weights, each layer's KV cache): rotate enough
# input sets to cover twice the L2 whatever their size. Elementwise ops read activations the
# previous kernel just wrote, which a forward finds in L2; they keep the smaller rotation.
COLD_DATA_OPS = ("gemm", "lm_head", "fc", "router", "attention")
MAX_COLD_INPUT_SETS = 64


def num_input_sets(op: Op) -> int:
    """Input sets to rotate so an op's data (bytes at its axes) does not sit in L2 across calls."""
    data_bytes = max(op.bytes_at(op.axes), 1.0)
    cap = MAX_COLD_INPUT_SETS if op.name in COLD_DATA_OPS else MAX_INPUT_SETS
    return 1 if data_bytes >= L2_BYTES else min(cap, math.ceil(2 * L2_BYTES / data_bytes))


def measure_point(op: Op, device: torch.device, dtype: torch.dtype, settings: TimingSettings) -> dict:
    """Time `op` at its own axes; returns the store record (without the command)."""
    sets = num_input_sets(op) if device.type == "cuda" else 1
    runners = [op_runners.make_op_runner(op, device, dtype, seed=s) for s in range(sets)]
    timed = time_gpu_us(runners, settings) if device.type == "cuda" else time_cpu_us(runners, settings)
    return {"op_key": op.key, "op_name": op.name, "axes": dict(op.axes), **timed,
            "num_input_sets": sets, "dtype": str(dtype).removeprefix("torch."), "note": runners[0].note}


def bench_ops(store: PointStore, models: Iterable[ModelShape], tp_sizes: Iterable[int], grid: OpGrid,
              device: torch.device, dtype: torch.dtype, settings: TimingSettings, command: str) -> int:
    """Measure every (op key, grid point) not yet in `store`; returns how many were measured now."""
    models = list(models)
    for m in models:
        store.add(f"meta:model:{m.name}", m.model_dump(mode="json"))
    todo = [(k, op) for k, op in enumerate_points(models, tp_sizes, grid) if not store.done(k)]
    with Progress() as progress:
        task = progress.add_task("op latency", total=len(todo))
        for key, op in todo:
            store.add(key, {**measure_point(op, device, dtype, settings), "command": command})
            progress.advance(task)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return len(todo)


def _host_issue_us(fn: Callable[[], object], device: torch.device, num_calls: int) -> float:
    """Host wall time per call of `num_calls` calls issued without synchronising, GPU nearly idle."""
    fn()
    sync(device)
    t0 = time.perf_counter()
    for _ in range(num_calls):
        fn()
    host_us = (time.perf_counter() - t0) * US_PER_S / num_calls
    sync(device)
    return host_us


def bench_host(store: PointStore, models: Iterable[ModelShape], device: torch.device, dtype: torch.dtype,
               command: str, num_calls: int = 200) -> None:
    """Host overheads: eager issue cost per op name (tiny shapes), graph replay, d2h sync, empty kernel."""
    by_name: dict[str, Op] = {}
    for m in models:
        for op in model_ops(m, 1):
            by_name.setdefault(op.name, op)
    for name, op in by_name.items():
        key = f"host:launch:{name}"
        if not store.done(key):
            axes = {a: 1 if a != "context_len" else 64 for a in op.axes}
            fn = op_runners.make_op_runner(dataclasses.replace(op, axes=axes), device, dtype)
            store.add(key, {"op_name": name, "latency_us": _host_issue_us(fn, device, num_calls), "command": command})
    x = torch.ones(1, device=device)
    if not store.done("host:d2h_sync"):
        samples = []
        for _ in range(50):
            sync(device)
            t0 = time.perf_counter()
            x.add(1).item()
            samples.append((time.perf_counter() - t0) * US_PER_S)
        store.add("host:d2h_sync", {"latency_us": statistics.median(samples), "command": command,
                                    "note": "includes issuing one tiny add kernel"})
    if device.type == "cuda" and not store.done("host:d2h_sync_busy"):
        store.add("host:d2h_sync_busy", {"latency_us": _d2h_after_busy_us(device), "command": command,
                                         "note": "wall minus GPU time of [2 ms kernel, tiny add, .item()]"})
    if device.type != "cuda":
        for key in ("host:graph_replay", "host:empty_kernel", "host:graph_kernel_gap"):
            if not store.done(key):
                store.add(key, {"latency_us": _host_issue_us(lambda: x.add(1), device, num_calls),
                                "command": command, "note": "CPU stand-in: no CUDA"})
        return
    if not store.done("host:empty_kernel"):
        store.add("host:empty_kernel", {"latency_us": _host_issue_us(lambda: torch.cuda._sleep(0), device, num_calls),
                                        "command": command})
    graph, _ = capture_graph(lambda: [torch.cuda._sleep(0) for _ in range(NUM_GRAPH_KERNELS)], num_warmup=0)
    if not store.done("host:graph_replay"):
        store.add("host:graph_replay", {"latency_us": _host_issue_us(graph.replay, device, num_calls),
                                        "command": command})
    if not store.done("host:graph_kernel_gap"):
        per_kernel_us = statistics.median(elapsed_us(graph.replay, 1, device) / NUM_GRAPH_KERNELS
                                          for _ in range(20))
        store.add("host:graph_kernel_gap", {"latency_us": per_kernel_us, "command": command,
                                            "note": "device time per empty kernel inside a graph"})


def _d2h_after_busy_us(device: torch.device, busy_us: float = 2000.0, reps: int = 30) -> float:
    """Host cost of a device->host sync that waits on a long GPU job, as a decode loop's does.

    A host that waits milliseconds in a sync wakes later than one that waits microseconds;
    this times [a ~busy_us kernel, a tiny add, .item()] by wall clock and subtracts the GPU time
    of the kernel and the add (CUDA events): the rest is issue + wake-up + copy, median over reps.
    """
    x = torch.ones(1, device=device)
    cycles, _ = gpu_sleep_cycles(busy_us, device)
    clock = Clock(device)
    samples = []
    for _ in range(reps):
        clock.sync()
        clock.reset()
        t0 = time.perf_counter()
        start = clock.mark()
        torch.cuda._sleep(cycles)
        y = x.add(1)
        end = clock.mark()
        y.item()
        wall_us = (time.perf_counter() - t0) * US_PER_S
        samples.append(wall_us - clock.us(start, end))
    return statistics.median(samples)


def bench_roofline(store: PointStore, device: torch.device, command: str, quick: bool = False) -> None:
    """HBM copy bandwidth (bytes read + written) and dense bf16 / fp8 matmul rates on random data."""
    cuda = device.type == "cuda"
    settings = TimingSettings(num_replays=20, target_replay_us=2000.0, max_reps=8)
    timer = time_gpu_us if cuda else time_cpu_us
    if not store.done("roofline:hbm_copy"):
        size_bytes = (1 << 30) if cuda else (64 << 20)
        src = torch.randn(size_bytes // 4, device=device)
        dst = torch.empty_like(src)
        t = timer([lambda: dst.copy_(src)], settings)
        store.add("roofline:hbm_copy", {"size_bytes": size_bytes, "moved_bytes": 2 * size_bytes, **t,
                                        "bandwidth_gb_per_s": 2 * size_bytes / BYTES_PER_GB / (t["latency_us"] / US_PER_S),
                                        "command": command})
        del src, dst
    dim = (4096 if quick else 8192) if cuda else 256
    dtype = torch.bfloat16 if cuda else torch.float32
    a, b = torch.randn(dim, dim, device=device, dtype=dtype), torch.randn(dim, dim, device=device, dtype=dtype)
    flops = 2.0 * dim ** 3
    if not store.done("roofline:bf16_matmul"):
        t = timer([lambda: a @ b], settings)
        store.add("roofline:bf16_matmul", {"dim": dim, "dtype": str(dtype), **t, "command": command,
                                           "tflops": flops / FLOPS_PER_TFLOP / (t["latency_us"] / US_PER_S)})
    if cuda and not store.done("roofline:fp8_matmul"):
        try:
            a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
            one = torch.ones((), device=device)
            t = timer([lambda: ops_torch.gemm_fp8(a8, b8, one, one)], settings)
            store.add("roofline:fp8_matmul", {"dim": dim, **t, "command": command,
                                              "tflops": flops / FLOPS_PER_TFLOP / (t["latency_us"] / US_PER_S)})
        except (RuntimeError, AttributeError, TypeError) as e:
            store.add("roofline:fp8_matmul", {"dim": dim, "error": f"{type(e).__name__}: {e}", "command": command})
