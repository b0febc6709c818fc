"""The one clock of the calibration: CUDA events on a GPU, perf_counter on the CPU; CUDA graphs.

  Clock              timestamps on the GPU stream (a pool of CUDA events) or the host; us between two;
  elapsed_us         us per call of `fn` called back to back between two timestamps, after a device sync;
  sample_stats       median, p10 and p90 of samples: what every measured point records;
  capture_graph      warm up on a side stream, capture one CUDA graph, replay it once;
  time_gpu_us        device time of one call: R calls in one CUDA graph, replayed between events;
  time_cpu_us        wall time of one call (CPU tensors);
  gpu_sleep_cycles   the `torch.cuda._sleep` cycle count that lasts a given time.

Every benchmark, the live loop and the diagnostics time through these, so a figure means the
same thing wherever it was taken. Wall-clock timings of a whole loop (host included) use
`time.perf_counter` directly.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from simulator.units import US_PER_MS, US_PER_S

GRAPH_WARMUP_CALLS = 2  # eager calls on a side stream before each capture (torch.cuda.graphs docs)
SLEEP_PROBE_CYCLES = 1_000_000  # torch.cuda._sleep cycles timed once to find the GPU's cycles per us


def sync(device: torch.device) -> None:
    """Wait for `device`'s queued work (CUDA); nothing on the CPU."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


class Clock:
    """Timestamps on the GPU stream (CUDA events) or the host (perf_counter); us between them.

    CUDA events come from a pool reused after each `reset()` (no allocation while timing).

    Args:
        device: the device whose stream is timed ('cuda', 'cuda:1', 'cpu').
    """

    def __init__(self, device: torch.device | str):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self._events: list = []
        self._next = 0

    def reset(self) -> None:
        """Reuse the pool's events from the first one on."""
        self._next = 0

    def mark(self):
        """A timestamp: a CUDA event recorded on the current stream, or perf_counter seconds."""
        if not self.cuda:
            return time.perf_counter()
        if self._next == len(self._events):
            self._events.append(torch.cuda.Event(enable_timing=True))
        ev = self._events[self._next]
        self._next += 1
        ev.record()
        return ev

    def us(self, a, b) -> float:
        """Microseconds from mark `a` to mark `b` (both CUDA events must have completed)."""
        return a.elapsed_time(b) * US_PER_MS if self.cuda else (b - a) * US_PER_S

    def sync(self) -> None:
        """Wait for the device (CUDA); nothing on the CPU."""
        sync(self.device)


def elapsed_us(fn: Callable[[], object], num_calls: int, device: torch.device | str) -> float:
    """Microseconds per call of `num_calls` back-to-back calls of `fn`.

    A device sync first, then a timestamp, the calls and a timestamp: on a GPU CUDA events
    around the calls (device time, launch gaps included), on the CPU perf_counter.

    Raises:
        ValueError: num_calls < 1.
    """
    if num_calls < 1:
        raise ValueError(f"num_calls must be >= 1, got {num_calls}")
    clock = Clock(device)
    clock.sync()
    start = clock.mark()
    for _ in range(num_calls):
        fn()
    end = clock.mark()
    clock.sync()
    return clock.us(start, end) / num_calls


def sample_stats(samples_us) -> dict[str, float]:
    """{latency_us, p10_latency_us, p90_latency_us}: median, 10th and 90th percentile of samples (us)."""
    p10, p50, p90 = np.percentile(np.asarray(samples_us, dtype=float), [10, 50, 90])
    return {"latency_us": float(p50), "p10_latency_us": float(p10), "p90_latency_us": float(p90)}


def capture_graph(fn: Callable, *args, num_warmup: int = GRAPH_WARMUP_CALLS):
    """Warm `fn(*args)` up on a side stream, capture one call as a CUDA graph, replay it once
    (so its outputs are valid). Returns (graph, fn's output: the graph's static output tensors).

    Raises:
        RuntimeError: from torch when `fn` cannot be captured.
    """
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(num_warmup):
            fn(*args)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(*args)
    graph.replay()
    return graph, out


@dataclass(frozen=True)
class TimingSettings:
    """How hard to time each point. `target_replay_us`: device time of one graph replay (R reps)."""

    num_replays: int = 20
    target_replay_us: float = 300.0
    max_reps: int = 64
    num_warmup: int = 2


def time_cpu_us(runners: list[Callable[[], object]], settings: TimingSettings) -> dict:
    """Wall-clock time of one call (CPU tensors): sample_stats over `num_replays` calls (rotating
    runners) after `num_warmup` warm-up calls; mode 'cpu_wall'."""
    for r in runners[: settings.num_warmup]:
        r()
    samples = [elapsed_us(runners[i % len(runners)], 1, "cpu") for i in range(settings.num_replays)]
    return {**sample_stats(samples), "num_reps": 1, "mode": "cpu_wall"}


def time_gpu_us(runners: list[Callable[[], object]], settings: TimingSettings) -> dict:
    """Device time of one call: R calls (rotating runners) in a CUDA graph, replayed between events.

    R is chosen so one replay lasts about `target_replay_us` (at most `max_reps`, at least one call
    of every runner); sample_stats over `num_replays` replays of the per-call time. Falls back to
    eager calls between events (mode 'eager_events') if the calls cannot be captured.
    """
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture stream, as torch.cuda.graphs asks
        for r in runners * settings.num_warmup:
            r()
    torch.cuda.current_stream().wait_stream(side)
    device = torch.device("cuda", torch.cuda.current_device())
    est_us = max(elapsed_us(runners[0], 3, device), 0.5)
    reps = min(settings.max_reps, max(len(runners), math.ceil(settings.target_replay_us / est_us)))

    def run_reps() -> None:
        for i in range(reps):
            runners[i % len(runners)]()
    try:
        graph, _ = capture_graph(run_reps, num_warmup=0)
        replay, mode = graph.replay, "graph"
    except RuntimeError:
        graph, replay, mode = None, run_reps, "eager_events"
    replay()
    samples = [elapsed_us(replay, 1, device) / reps for _ in range(settings.num_replays)]
    del graph
    return {**sample_stats(samples), "num_reps": reps, "mode": mode}


def gpu_sleep_cycles(busy_us: float, device: torch.device | str = "cuda") -> tuple[int, float]:
    """(cycles, measured us) of a `torch.cuda._sleep` lasting about `busy_us`: one probe sleep
    gives the cycles per us, then the median of 5 sleeps of the chosen length is measured."""
    probe_us = max(elapsed_us(lambda: torch.cuda._sleep(SLEEP_PROBE_CYCLES), 1, device), 1e-3)
    cycles = int(busy_us * SLEEP_PROBE_CYCLES / probe_us)
    measured = statistics.median(elapsed_us(lambda: torch.cuda._sleep(cycles), 1, device) for _ in range(5))
    return cycles, measured
