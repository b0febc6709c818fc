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
Eager: 1 collective per sample (host launch cost included, as in an eager forward). Eager_stream:
`eager_stream_ops_per_sample` eager collectives back to back between the two events, no sync between
them, so the host enqueues the next call while the device runs the last (the timing of public
collective benchmarks that loop eager calls between two CUDA events, e.g. Triton-distributed's
`perf_func`); per call it costs max(host launch, device time + the gap between stream kernels).
Graph: the collectives are captured in one CUDA graph and the graph is replayed per sample. A sample's
latency is the MINIMUM over ranks: a rank that arrived early also waits for the last one, and
the simulator models that skew itself (a collective completes at max(arrival) + latency,
DESIGN.md). Warm-up, then >= 50 samples (100 by default); the record keeps median, p10 and p90.

`custom_allreduce` (issue 28): the serving engine's own custom allreduce kernel, vLLM's
`CustomAllreduce` (vllm/distributed/device_communicators/custom_all_reduce.py: one-shot / two-shot over
P2P buffers, what vLLM's TP group runs for small messages on a fully connected NVLink box), on a GPU
host where vLLM is installed, bf16, eager (the input copied into its registered buffer, as outside a
graph) and graph (captured under its `capture()`, the registered path of a CUDA-graph forward). vLLM
decides itself whether it runs (world sizes 2, 4, 6, 8; P2P between every pair; below its max_size):
where it declines, the group fails with vLLM's reason and no point is stored. Its points are kept in
the points file beside NCCL's and not built into the profile's tables (the engine-native profiles of
a TP group hold the collectives inside the engine's measured parts; these are for the collective
model and docs/hardware.md).

Left out: send_recv, reduce_scatter, SGLang's custom allreduce (its sgl-kernel build of the same
kernels), and GPU subsets other than the first w devices (the topology of other subsets may differ).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.distributed as dist
import torch.multiprocessing as torch_mp
from rich.console import Console

from calibration.build.store import PointStore
from calibration.group import DEFAULT_TIMEOUT_S, gather_samples, join_group, spawn_ranks_into_store
from calibration.provenance import command_line
from calibration.timing import capture_graph, elapsed_us, sample_stats
from simulator.units import BYTES_PER_KIB

MEASURED_OPS = ("allreduce", "broadcast", "all_gather")
ENGINE_OPS = ("custom_allreduce",)  # an engine's own kernel (module docstring): NCCL only, vLLM installed
MODES = ("eager", "graph", "eager_stream")
PROFILE_MODES = ("eager", "graph")  # the modes a profile's collective tables hold (simulator.profile.CollectiveTable)
POW2_SIZES_BYTES = tuple(2 ** k for k in range(10, 27))  # 1 KiB .. 64 MiB
QUICK_POW2_SIZES_BYTES = tuple(4 ** k * BYTES_PER_KIB for k in range(9))  # 1 KiB, 4 KiB, .. 64 MiB
# Hidden sizes of the models in scenarios: Llama-3.2-1B (2048), Llama-3.1-8B (4096), Kimi-K2 /
# DeepSeek-V3 (7168), Llama-3.1-70B (8192).
FORWARD_HIDDEN_SIZES = (2048, 4096, 7168, 8192)
FORWARD_NUM_TOKENS = tuple(range(1, 65))
QUICK_FORWARD_NUM_TOKENS = (1, 2, 4, 8, 16, 32, 64)
ACTIVATION_BYTES = 2  # bf16 hidden states, as a TP forward allreduces them
ELEMENT_BYTES = {"nccl": 2, "gloo": 4}  # bf16 with NCCL, float32 with gloo (calibration.group.join_group)
# Per-rank message size limits: nccl-tests' usual largest (-e 8G) on GPUs; gloo ranks are CPU processes
# sharing the host's memory (an all_gather holds world_size x the message per rank), so 256 MiB there.
MAX_SIZE_BYTES = {"nccl": 2**33, "gloo": 2**28}
console = Console(stderr=True)


@dataclass(frozen=True)
class CollectiveTiming:
    """How many times to run each point."""

    num_warmup: int = 10
    num_repeats: int = 100  # samples per point (median, p10, p90 over them)
    eager_ops_per_sample: int = 1
    eager_stream_ops_per_sample: int = 20  # back-to-back eager collectives between the events (mode eager_stream)
    graph_ops_per_sample: int = 10  # collectives captured in one CUDA graph
    timeout_s: float = DEFAULT_TIMEOUT_S  # a hung rank fails the run instead of hanging it


def point_key(op: str, world_size: int, mode: str, size_bytes: int) -> str:
    """PointStore key of one collective point (read by calibration.build.profile)."""
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


def engine_custom_allreduce(device: torch.device):
    """vLLM's CustomAllreduce over this process's group (a gloo group beside it for its handshakes).

    Raises:
        RuntimeError: vLLM is not installed, or it declines to run its kernel here (its reason).
    """
    try:
        from vllm.distributed.device_communicators.custom_all_reduce import CustomAllreduce
    except ImportError as e:
        raise RuntimeError(f"custom_allreduce is vLLM's kernel: vLLM is not importable here ({e})") from None
    ca = CustomAllreduce(group=dist.new_group(backend="gloo"), device=device)
    if ca.disabled:
        raise RuntimeError("vLLM's custom allreduce declined this group (its checks: world size 2/4/6/8, P2P "
                           "between every GPU pair; see vLLM's warning above)")
    return ca


def _collective(op: str, size_bytes: int, world_size: int, device: torch.device, dtype: torch.dtype, ca=None):
    """A no-argument callable running one `op` whose per-rank input is `size_bytes` (`ca`: the
    engine's custom allreduce, for op custom_allreduce)."""
    numel = size_bytes // dtype.itemsize
    x = torch.zeros(numel, dtype=dtype, device=device)  # zeros: repeated sums stay finite
    if op == "custom_allreduce":
        if ca is None or not ca.should_custom_ar(x):
            raise RuntimeError(f"vLLM's custom allreduce does not take {size_bytes:,} bytes (its max_size "
                               f"{getattr(ca, 'max_size', 0):,})")
        return lambda: ca.custom_all_reduce(x)
    if op == "allreduce":
        return lambda: dist.all_reduce(x)
    if op == "broadcast":
        return lambda: dist.broadcast(x, src=0)
    if op == "all_gather":
        out = torch.empty(numel * world_size, dtype=dtype, device=device)
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # renamed in torch 2.13
        return lambda: gather(out, x)
    raise ValueError(f"op {op!r} not measured; one of {MEASURED_OPS}")


def _sample_us(fn, num_calls: int, device: torch.device) -> float:
    """Time of `num_calls` calls of fn after a barrier (and a device sync), per call (us)."""
    dist.barrier()
    return elapsed_us(fn, num_calls, device)


def _measure_point(op: str, mode: str, size_bytes: int, world_size: int, device: torch.device,
                   dtype: torch.dtype, timing: CollectiveTiming, ca=None) -> list[float]:
    """Per-sample latencies (us), minimum over ranks, identical on every rank."""
    import contextlib
    fn = _collective(op, size_bytes, world_size, device, dtype, ca)
    graph = None
    if mode == "graph":
        n = timing.graph_ops_per_sample
        with ca.capture() if op == "custom_allreduce" else contextlib.nullcontext():  # its registered buffers
            for _ in range(timing.num_warmup):
                fn()
            graph, _ = capture_graph(lambda: [fn() for _ in range(n)], num_warmup=1)
        dist.barrier()
        samples = [_sample_us(graph.replay, 1, device) / n for _ in range(timing.num_repeats)]
    else:
        for _ in range(timing.num_warmup):
            fn()
        n = timing.eager_stream_ops_per_sample if mode == "eager_stream" else timing.eager_ops_per_sample
        samples = [_sample_us(fn, n, device) for _ in range(timing.num_repeats)]
    del graph
    return gather_samples(samples, device).min(axis=0).tolist()


def _worker(rank: int, world_size: int, backend: str, points: list[tuple[str, str, int]], timing: CollectiveTiming,
            command: str, queue) -> None:
    """One rank: join the group, measure every point, rank 0 puts (key, record) on the queue."""
    device, dtype = join_group(rank, world_size, backend, timing.timeout_s)
    on_cuda = device.type == "cuda"
    try:
        device_name = torch.cuda.get_device_name(device) if on_cuda else "cpu"
        ca = engine_custom_allreduce(device) if any(op in ENGINE_OPS for op, _, _ in points) else None
        for op, mode, size_bytes in points:
            samples = _measure_point(op, mode, size_bytes, world_size, device, dtype, timing, ca)
            if rank != 0:
                continue
            ops_per_sample = {"graph": timing.graph_ops_per_sample, "eager_stream": timing.eager_stream_ops_per_sample
                              }.get(mode, timing.eager_ops_per_sample)
            queue.put((point_key(op, world_size, mode, size_bytes), {
                "op": op, "world_size": world_size, "mode": mode, "size_bytes": size_bytes,
                **sample_stats(samples), "command": command, "backend": backend, "dtype": str(dtype).removeprefix("torch."),
                "device": device_name, "num_repeats": timing.num_repeats, "num_warmup": timing.num_warmup,
                "ops_per_sample": ops_per_sample, "timing": "median over samples of the minimum over ranks"}))
    finally:
        dist.destroy_process_group()


def _measure_world(store: PointStore, world_size: int, backend: str, points: list[tuple[str, str, int]],
                   timing: CollectiveTiming, command: str) -> int:
    """Spawn `world_size` ranks for `points`; store each point as rank 0 reports it. Returns points stored."""
    return spawn_ranks_into_store(_worker, (world_size, backend, points, timing, command), world_size, backend, store)


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
        ops: subset of ('allreduce', 'broadcast', 'all_gather', 'custom_allreduce'); custom_allreduce
            (vLLM's kernel) on CUDA only, its points not built into profile tables.
        sizes_bytes: per-rank input sizes; default `default_sizes_bytes(quick)`.
        modes: subset of MODES; default ('eager', 'graph') with NCCL, ('eager',) with gloo. eager_stream
            points are kept in the points file but not built into profile tables (PROFILE_MODES).
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
    bad = [m for m in modes if m not in MODES] + [o for o in ops if o not in MEASURED_OPS + ENGINE_OPS]
    if bad:
        raise ValueError(f"unknown modes/ops {bad}; modes: {', '.join(MODES)}; ops: "
                         f"{', '.join(MEASURED_OPS + ENGINE_OPS)}")
    if "graph" in modes and backend != "nccl":
        raise ValueError("graph mode needs CUDA (backend 'nccl')")
    if backend != "nccl" and any(o in ENGINE_OPS for o in ops):
        raise ValueError("custom_allreduce is an engine's CUDA kernel: it needs CUDA GPUs (backend 'nccl')")
    sizes = tuple(sorted(set(sizes_bytes or default_sizes_bytes(quick))))
    itemsize, largest = ELEMENT_BYTES[backend], MAX_SIZE_BYTES[backend]
    if any(not 0 < s <= largest or s % itemsize for s in sizes):
        raise ValueError(f"sizes must be multiples of {itemsize} bytes in {itemsize}..{largest:,}, got {sizes}")
    timing = timing or CollectiveTiming(num_warmup=5 if quick else 10, num_repeats=50 if quick else 100)
    command = command or command_line()
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
