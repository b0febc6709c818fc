"""Records of a simulation run: facts appended as they happen, turned into metrics afterwards.

`CycleRecord` (one per speculative cycle or baseline decode step), `RequestRecord` (one per
finished request), `CycleLog` (the cycles in numpy columns, what `simulator.metrics` reads) and
`TraceEvent` (a span on a GPU stream, for Chrome/Perfetto traces). Times are in us.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CycleRecord:
    """One cycle, sync to sync. accept_lengths: (batch_size,) raw accept lengths this cycle."""

    cycle_idx: int
    start_us: float
    end_us: float
    accept_lengths: tuple[int, ...]
    num_tokens: int  # committed after truncation at max_new_tokens
    extend_tokens_per_request: int
    busy_us: tuple[tuple[str, float], ...]  # ((bucket, us), ...) GPU busy time of stream 0


@dataclass(frozen=True)
class RequestRecord:
    """A request that finished: decode time of its max_new_tokens tokens."""

    start_us: float
    end_us: float
    num_tokens: int


@dataclass(frozen=True)
class CycleLog:
    """Measured cycles in columns (n = cycles, b = batch_size); times in us."""

    start_us: np.ndarray  # shape: (n,)
    end_us: np.ndarray  # shape: (n,)
    accept_lengths: np.ndarray  # shape: (n, b), raw accept lengths
    num_tokens: np.ndarray  # shape: (n,), committed after truncation at max_new_tokens
    extend_tokens: np.ndarray  # shape: (n,), draft-extend tokens per request
    busy_us: dict  # bucket -> shape (n,) GPU busy time

    @staticmethod
    def from_records(records: list[CycleRecord]) -> "CycleLog":
        buckets = sorted({k for r in records for k, _ in r.busy_us})
        busy = {k: np.array([dict(r.busy_us).get(k, 0.0) for r in records]) for k in buckets}
        return CycleLog(np.array([r.start_us for r in records]), np.array([r.end_us for r in records]),
                        np.array([r.accept_lengths for r in records]), np.array([r.num_tokens for r in records]),
                        np.array([r.extend_tokens_per_request for r in records]), busy)

    def __len__(self) -> int:
        return len(self.start_us)


@dataclass(frozen=True)
class TraceEvent:
    """A span on a stream (Chrome trace 'X' event)."""

    name: str
    cat: str
    stream: str
    start_us: float
    dur_us: float
