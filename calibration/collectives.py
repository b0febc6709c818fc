"""Collective latency tables (allreduce, broadcast, all_gather) measured through torch.distributed.

One process per rank, started with torch.multiprocessing (spawn), rendezvous on a free localhost
port. On CUDA: NCCL, one GPU per rank (ranks 0..w-1 use cuda:0..w-1), bf16 tensors, eager and CUDA
graph modes. On CPU (tests, or `backend='gloo'`): gloo, fp32 tensors, eager only. Every spawned
process runs with NVLink SHARP / multicast off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1).

Points go to the PointStore as `coll:{op}:{world_size}:{mode}:{size_bytes}` with record
{op, world_size, mode, size_bytes, latency_us, p10_latency_us, p90_latency_us, command, ...};
size_bytes is the per-rank input (all_gather: each rank's contribution; broadcast: the root's
buffer). Rank 0 sends each finished point to the parent process, which stores it at once, so a
rerun skips what is stored.

Timing of one sample: all ranks meet at a barrier (and synchronize the device), then time
`ops_per_sample` back-to-back collectives (CUDA events on GPU, perf_counter on CPU) and divide.
Eager: 1 collective per sample (host launch cost included, as in an eager forward). Graph: the
collectives are captured in one CUDA graph and the graph is replayed per sample. A sample's
latency is the MINIMUM over ranks: a rank that arrived early also waits for the last one, and
the simulator models that skew itself (a collective completes at max(arrival) + latency,
DESIGN.md). Warm-up, then >= 50 samples (100 by default); the record keeps median, p10 and p90.

Left out: send_recv, reduce_scatter, custom allreduce kernels (SGLang/vLLM one-shot/two-shot),
and GPU subsets other than the first w devices (the topology of other subsets may differ).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import shlex
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as torch_mp
from rich.console import Console

from calibration.store import PointStore
from simulator.units import BYTES_PER_KIB, US_PER_MS, US_PER_S

MEASURED_OPS = ("allreduce", "broadcast", "all_gather")
POW2_SIZES_BYTES = tuple(2 ** k for k in range(10, 27))  # 1 KiB .. 64 MiB
QUICK_POW2_SIZES_BYTES = tuple(4 ** k * BYTES_PER_KIB for k in range(9))  # 1 KiB, 4 KiB, .. 64 MiB
# Hidden sizes of the models in scenarios: Llama-3.2-1B (2048), Llama-3.1-8B (4096), Kimi-K2 /
# DeepSeek-V3 (7168), Llama-3.1-70B (8192).
FORWARD_HIDDEN_SIZES = (2048, 4096, 7168, 8192)
FORWARD_NUM_TOKENS = tuple(range(1, 65))
QUICK_FORWARD_NUM_TOKENS = (1, 2, 4, 8, 16, 32, 64)
ACTIVATION_BYTES = 2  # bf16 hidden states, as a TP forward allreduces them
# Never enable NVLink SHARP / multicast in a spawned process (the machines lent forbid it).
DISABLE_MULTICAST_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                         "NVSHMEM_DISABLE_NVLS": "1"}
console = Console(stderr=True)


@dataclass(frozen=True)
class CollectiveTiming:
    """How many times to run each point."""

    num_warmup: int = 10
    num_repeats: int = 100  # samples per point (median, p10, p90 over them)
    eager_ops_per_sample: int = 1
    graph_ops_per_sample: int = 10  # collectives captured in one CUDA graph
    timeout_s: float = 600.0  # process-group timeout: a hung rank fails the run instead of hanging it


def point_key(op: str, world_size: int, mode: str, size_bytes: int) -> str:
    """PointStore key of one collective point (read by calibration.build_profile)."""
    return f"coll:{op}:{world_size}:{mode}:{size_bytes}"


def forward_sizes_bytes(num_tokens: Sequence[int] = FORWARD_NUM_TOKENS,
                        hidden_sizes: Sequence[int] = FORWARD_HIDDEN_SIZES) -> tuple[int, ...]:
    """Bytes one TP allreduce of a forward sends per rank: num_tokens x hidden_size x 2 (bf16)."""
    return tuple(sorted({n * h * ACTIVATION_BYTES for n in num_tokens for h in hidden_sizes}))


def default_sizes_bytes(quick: bool = False) -> tuple[int, ...]:
    """Powers of two 1 KiB..64 MiB (every 4x when quick) plus the forward sizes, sorted, unique."""
    if quick:
        return tuple(sorted(set(QUICK_POW2_SIZES_BYTES) | set(forward_sizes_bytes(QUICK_FORWARD_NUM_TOKENS))))
    return tuple(sorted(set(POW2_SIZES_BYTES) | set(forward_sizes_bytes())))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _spawn_env(port: int, backend: str) -> Iterator[None]:
    """os.environ for the spawned ranks (inherited at start), restored afterwards."""
    changes = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), **DISABLE_MULTICAST_ENV}
    for name, value in DISABLE_MULTICAST_ENV.items():
        if os.environ.get(name, value) != value:
            console.print(f"[yellow]{name}={os.environ[name]} overridden to {value} (multicast stays off)")
    if backend == "gloo" and "GLOO_SOCKET_IFNAME" not in os.environ and Path("/sys/class/net/lo").exists():
        changes["GLOO_SOCKET_IFNAME"] = "lo"  # one host: loopback, whatever the hostname resolves to
    saved = {k: os.environ.get(k) for k in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _collective(op: str, size_bytes: int, world_size: int, device: torch.device, dtype: torch.dtype):
    """A no-argument callable running one `op` whose per-rank input is `size_bytes`."""
    numel = size_bytes // dtype.itemsize
    x = torch.zeros(numel, dtype=dtype, device=device)  # zeros: repeated sums stay finite
    if op == "allreduce":
        return lambda: dist.all_reduce(x)
    if op == "broadcast":
        return lambda: dist.broadcast(x, src=0)
    if op == "all_gather":
        out = torch.empty(numel * world_size, dtype=dtype, device=device)
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # renamed in torch 2.13
        return lambda: gather(out, x)
    raise ValueError(f"op {op!r} not measured; one of {MEASURED_OPS}")


def _sync(on_cuda: bool) -> None:
    dist.barrier()
    if on_cuda:
        torch.cuda.synchronize()


def _sample_us(fn, num_calls: int, on_cuda: bool) -> float:
    """Time of `num_calls` calls of fn after a barrier, per call (us)."""
    _sync(on_cuda)
    if not on_cuda:
        t0 = time.perf_counter()
        for _ in range(num_calls):
            fn()
        return (time.perf_counter() - t0) * US_PER_S / num_calls
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(num_calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * US_PER_MS / num_calls


def _graph_of(fn, num_calls: int, num_warmup: int):
    """fn captured `num_calls` times in one CUDA graph; returns the graph's replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture stream, as torch.cuda.graphs asks
        for _ in range(num_warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    _sync(True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(num_calls):
            fn()
    _sync(True)
    return graph


def _measure_point(op: str, mode: str, size_bytes: int, world_size: int, device: torch.device,
                   dtype: torch.dtype, timing: CollectiveTiming) -> list[float]:
    """Per-sample latencies (us), minimum over ranks, identical on every rank."""
    on_cuda = device.type == "cuda"
    fn = _collective(op, size_bytes, world_size, device, dtype)
    for _ in range(timing.num_warmup):
        fn()
    graph = None
    if mode == "graph":
        graph = _graph_of(fn, timing.graph_ops_per_sample, timing.num_warmup)
        samples = [_sample_us(graph.replay, 1, True) / timing.graph_ops_per_sample
                   for _ in range(timing.num_repeats)]
    else:
        samples = [_sample_us(fn, timing.eager_ops_per_sample, on_cuda) for _ in range(timing.num_repeats)]
    t = torch.tensor(samples, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    del graph
    return t.cpu().tolist()


def join_group(rank: int, world_size: int, backend: str, timeout_s: float = 600.0) -> tuple[torch.device, torch.dtype]:
    """In a spawned rank: multicast off, join the process group (MASTER_ADDR / MASTER_PORT set by
    `_spawn_env`) and return (device, dtype): cuda:{rank} and bf16 with NCCL, CPU and float32 with
    gloo (the rank gets its share of the cores)."""
    os.environ.update(DISABLE_MULTICAST_ENV)
    on_cuda = backend == "nccl"
    dev = torch.device("cuda", rank) if on_cuda else torch.device("cpu")
    if on_cuda:
        torch.cuda.set_device(dev)
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
    dist.init_process_group(backend, rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=timeout_s),
                            **({"device_id": dev} if on_cuda else {}))
    return dev, torch.bfloat16 if on_cuda else torch.float32


def _worker(rank: int, world_size: int, backend: str, points: list[tuple[str, str, int]], timing: CollectiveTiming,
            command: str, queue) -> None:
    """One rank: join the group, measure every point, rank 0 puts (key, record) on the queue."""
    device, dtype = join_group(rank, world_size, backend, timing.timeout_s)
    on_cuda = device.type == "cuda"
    try:
        device_name = torch.cuda.get_device_name(device) if on_cuda else "cpu"
        for op, mode, size_bytes in points:
            samples = np.asarray(_measure_point(op, mode, size_bytes, world_size, device, dtype, timing))
            if rank != 0:
                continue
            p10, p50, p90 = np.percentile(samples, [10, 50, 90])
            ops_per_sample = timing.graph_ops_per_sample if mode == "graph" else timing.eager_ops_per_sample
            queue.put((point_key(op, world_size, mode, size_bytes), {
                "op": op, "world_size": world_size, "mode": mode, "size_bytes": size_bytes,
                "latency_us": float(p50), "p10_latency_us": float(p10), "p90_latency_us": float(p90),
                "command": command, "backend": backend, "dtype": str(dtype).removeprefix("torch."),
                "device": device_name, "num_repeats": timing.num_repeats, "num_warmup": timing.num_warmup,
                "ops_per_sample": ops_per_sample, "timing": "median over samples of the minimum over ranks"}))
    finally:
        dist.destroy_process_group()


def _drain(queue, store: PointStore) -> int:
    n = 0
    while not queue.empty():
        key, record = queue.get()
        store.add(key, record)
        n += 1
    return n


def _measure_world(store: PointStore, world_size: int, backend: str, points: list[tuple[str, str, int]],
                   timing: CollectiveTiming, command: str) -> int:
    """Spawn `world_size` ranks for `points`; store each point as rank 0 reports it. Returns points stored."""
    return spawn_ranks_into_store(_worker, (world_size, backend, points, timing, command), world_size, backend, store)


def spawn_ranks_into_store(worker, args: tuple, world_size: int, backend: str, store: PointStore) -> int:
    """Run `worker(rank, *args, queue)` in `world_size` spawned processes (a free local port,
    multicast off) and append every (key, record) a rank puts on the queue to `store` as it comes,
    so an interrupted run keeps what was measured. Returns points stored.

    Raises:
        torch.multiprocessing.ProcessRaisedException / ProcessExitedException: a rank failed.
    """
    queue = torch_mp.get_context("spawn").SimpleQueue()
    written = 0
    with _spawn_env(_free_port(), backend):
        procs = torch_mp.start_processes(worker, args=(*args, queue), nprocs=world_size, join=False,
                                         start_method="spawn")
        try:
            while not procs.join(timeout=0.2):
                written += _drain(queue, store)
        finally:
            written += _drain(queue, store)
    return written


def _world_sizes(world_sizes: Sequence[int] | None, max_world_size: int) -> list[int]:
    wanted = sorted(set(world_sizes)) if world_sizes is not None else list(range(2, max_world_size + 1))
    dropped = [w for w in wanted if not 2 <= w <= max_world_size]
    if dropped:
        console.print(f"collectives: world sizes {dropped} skipped (need 2 <= world size <= {max_world_size})")
    return [w for w in wanted if 2 <= w <= max_world_size]


def measure_collectives(store: PointStore, quick: bool = False, world_sizes: Sequence[int] | None = None,
                        backend: str | None = None, command: str | None = None, *,
                        ops: Sequence[str] = MEASURED_OPS, sizes_bytes: Sequence[int] | None = None,
                        modes: Sequence[str] | None = None, timing: CollectiveTiming | None = None) -> int:
    """Measure collective latencies for every world size, op, mode and size not yet in `store`.

    Args:
        store: PointStore; points already there are skipped (resume).
        quick: fewer sizes (powers of 4, forwards of 1..64 tokens by powers of 2) and 50 samples.
        world_sizes: default every size from 2 to the number of GPUs; sizes above it are skipped.
        backend: 'nccl' (default with >= 2 CUDA GPUs) or 'gloo' (CPU processes; tests). Without CUDA and
            without backend='gloo' nothing is measured.
        command: provenance command recorded with each point (default: this process's command line).
        ops: subset of ('allreduce', 'broadcast', 'all_gather').
        sizes_bytes: per-rank input sizes; default `default_sizes_bytes(quick)`.
        modes: default ('eager', 'graph') with NCCL, ('eager',) with gloo.
        timing: warm-up, samples, collectives per sample, timeout.

    Returns:
        Number of points measured and stored by this call (0 when there is nothing to measure).

    Raises:
        ValueError: an unknown op, mode or backend, graph mode with gloo, or a size that is not a
            whole number of elements.
        RuntimeError: after trying every world size and mode, naming those in which a rank failed
            (points stored before the failure are kept).
    """
    if backend is None:
        if not torch.cuda.is_available():
            console.print("collectives: no CUDA here, nothing measured (backend='gloo' times CPU processes)")
            return 0
        backend = "nccl"
    if backend not in ("nccl", "gloo"):
        raise ValueError(f"backend {backend!r}: use 'nccl' or 'gloo'")
    if backend == "nccl":
        max_world_size = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if max_world_size < 2:
            console.print(f"collectives: {max_world_size} CUDA GPU(s); a collective needs 2, nothing measured "
                          "(the profile gets no collective tables)")
            return 0
    else:
        max_world_size = max(os.cpu_count() or 2, 2)
    modes = tuple(modes or (("eager", "graph") if backend == "nccl" else ("eager",)))
    bad = [m for m in modes if m not in ("eager", "graph")] + [o for o in ops if o not in MEASURED_OPS]
    if bad:
        raise ValueError(f"unknown modes/ops {bad}; modes: eager, graph; ops: {', '.join(MEASURED_OPS)}")
    if "graph" in modes and backend != "nccl":
        raise ValueError("graph mode needs CUDA (backend 'nccl')")
    sizes = tuple(sorted(set(sizes_bytes or default_sizes_bytes(quick))))
    itemsize = 2 if backend == "nccl" else 4
    if any(s <= 0 or s % itemsize for s in sizes):
        raise ValueError(f"sizes must be positive multiples of {itemsize} bytes, got {sizes}")
    timing = timing or CollectiveTiming(num_warmup=5 if quick else 10, num_repeats=50 if quick else 100)
    command = command or shlex.join([Path(sys.executable).name, *sys.argv])
    total, failures = 0, []
    for world_size in _world_sizes(world_sizes, max_world_size):
        for mode in modes:  # one group of processes per mode: a graph-capture failure keeps the eager points
            points = [(op, mode, s) for op in ops for s in sizes if not store.done(point_key(op, world_size, mode, s))]
            if not points:
                console.print(f"collectives: world size {world_size} {mode}: all points already stored")
                continue
            t0 = time.perf_counter()
            console.print(f"collectives: world size {world_size} {mode} ({backend}): {len(points)} points")
            try:
                written = _measure_world(store, world_size, backend, points, timing, command)
            except (torch_mp.ProcessRaisedException, torch_mp.ProcessExitedException) as e:
                first_line = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
                failures.append(f"world size {world_size} {mode}: {first_line}")
                console.print(f"[red]collectives: world size {world_size} {mode} failed: {first_line}")
                continue
            console.print(f"collectives: world size {world_size} {mode}: stored {written} points in "
                          f"{time.perf_counter() - t0:.1f} s")
            total += written
    if failures:
        raise RuntimeError(f"{len(failures)} collective group(s) failed ({total} points stored): "
                           + "; ".join(failures))
    return total
