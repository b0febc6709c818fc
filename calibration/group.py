"""Process groups of spawned ranks on one host: the one place that starts them and joins them.

  DISABLE_MULTICAST_ENV   NVLink SHARP / multicast off in every spawned process (the lent
                          machines forbid it): NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
                          NVSHMEM_DISABLE_NVLS=1;
  spawn_ranks             run `worker(rank, *args, queue)` in `world_size` spawned processes
                          (a free local port, multicast off) and hand every item a rank puts on the
                          queue to a callback as it comes; spawn_ranks_into_store appends them to a
                          PointStore, so an interrupted run keeps what was measured;
  join_group              in a spawned rank: join the group, pick this rank's device and dtype;
  group_rank_world        (rank, size) of a group, (0, 1) without torch.distributed;
  gather_samples          every rank's samples, (world_size, num_samples), on every rank.

One process per rank: NCCL with one GPU per rank (rank r uses cuda:r), or gloo CPU processes
(tests). Left out: several hosts, GPU subsets other than the first world_size devices.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import socket
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as torch_mp
from rich.console import Console

from calibration.build.store import PointStore

DISABLE_MULTICAST_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                         "NVSHMEM_DISABLE_NVLS": "1"}
DEFAULT_TIMEOUT_S = 600.0  # process-group timeout: a hung rank fails the run instead of hanging it
QUEUE_POLL_S = 0.2  # how often the parent drains the queue while the ranks run
console = Console(stderr=True)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def spawn_env(port: int, backend: str) -> Iterator[None]:
    """os.environ for the spawned ranks (inherited at start): the rendezvous address, multicast
    off (a different value set by the user is overridden, and said so), loopback for gloo;
    restored afterwards."""
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


def join_group(rank: int, world_size: int, backend: str,
               timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[torch.device, torch.dtype]:
    """In a spawned rank: multicast off, join the process group (MASTER_ADDR / MASTER_PORT set by
    `spawn_env`) and return (device, dtype): cuda:{rank} and bf16 with NCCL, CPU and float32 with
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


def group_rank_world(group=None) -> tuple[int, int]:
    """(rank within `group`, group size) of this process; (0, 1) when torch.distributed is not
    initialised (a single-process "group")."""
    if not dist.is_available() or not dist.is_initialized():
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


def gather_samples(samples_us: list[float], device: torch.device, group=None) -> np.ndarray:
    """Every rank's samples (the same count on each), (world_size, num_samples) float64, on every
    rank of `group` (all_gather of a tensor on `device`: NCCL gathers device tensors)."""
    mine = torch.tensor(samples_us, dtype=torch.float64, device=device)
    ranks = [torch.zeros_like(mine) for _ in range(group_rank_world(group)[1])]
    dist.all_gather(ranks, mine, group=group)
    return torch.stack(ranks).cpu().numpy()


def _drain(queue, receive: Callable[[object], None]) -> int:
    n = 0
    while not queue.empty():
        receive(queue.get())
        n += 1
    return n


def spawn_ranks(worker: Callable, args: tuple, world_size: int, backend: str,
                receive: Callable[[object], None] = lambda item: None) -> int:
    """Run `worker(rank, *args, queue)` in `world_size` spawned processes (a free local port,
    multicast off) and call `receive(item)` for every item a rank puts on the queue, as it comes.
    Returns the items received.

    Raises:
        torch.multiprocessing.ProcessRaisedException / ProcessExitedException: a rank failed
            (items received before are kept).
    """
    queue = torch_mp.get_context("spawn").SimpleQueue()
    received = 0
    with spawn_env(free_port(), backend):
        procs = torch_mp.start_processes(worker, args=(*args, queue), nprocs=world_size, join=False,
                                         start_method="spawn")
        try:
            while not procs.join(timeout=QUEUE_POLL_S):
                received += _drain(queue, receive)
        finally:
            received += _drain(queue, receive)
    return received


def spawn_ranks_into_store(worker: Callable, args: tuple, world_size: int, backend: str, store: PointStore) -> int:
    """`spawn_ranks` whose ranks put (key, record) points: each is appended to `store` as it
    comes. Returns points stored."""
    return spawn_ranks(worker, args, world_size, backend, lambda item: store.add(*item))
