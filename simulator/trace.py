"""Chrome / Perfetto trace of a simulation (JSON Object Format, 'X' complete events, ts/dur in us),
streamed to its file as the run goes, for a window of cycles.

A `TraceSink` receives the spans of the cycles inside its window while the DES runs
(`simulator.des.simulation.DesRun`): per-kernel spans on every GPU stream at kernel granularity
(from the closed-form engine, `RankPlan.run_spans`), one span per forward at forward granularity,
and one span per cycle on a 'cycles' thread (its accept lengths in `args`). Cycles outside the
window are simulated but produce nothing, so memory stays bounded whatever the run's length.

`TraceWriter` writes each span as one line of JSON to a temp file beside the target, moved over
the target when the run ends and deleted when it fails (`simulator.files.atomic_file`): a reader
never sees half a trace. `TraceRecorder` keeps the spans in memory (tests, small runs).
Which cycles a trace covers is `simulator.trace_window`; `simulator.estimate.trace_estimate` says
how many events and bytes a window holds before the run starts.

Times are written with 3 decimals (ns resolution). Strict JSON: a non-finite time raises.
Source: Trace Event Format, https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from pathlib import Path

import numpy as np

from simulator import __version__
from simulator.des.records import TraceEvent
from simulator.files import OUTPUT_KEY, TRACE_OUTPUT, atomic_file
from simulator.trace_window import TraceWindow

CYCLES_TID = 0  # the thread of the cycle spans; GPU streams are 1..
# ---- sinks --------------------------------------------------------------------------------------------
class TraceSink(ABC):
    """What the DES hands the spans of the cycles in `window` to (DesRun calls these methods).

    Args:
        window: the cycles to keep; None = every cycle.
    """

    def __init__(self, window: TraceWindow | None = None):
        self.window = window
        self.start_cycle = 0 if window is None else window.start_cycle
        self.stop_cycle = 2**63 if window is None else window.stop_cycle
        self.tids: dict[str, int] = {}

    def streams(self, names: list[str]) -> None:
        """The GPU streams, in order (thread ids 1.. in that order)."""
        for name in names:
            if name not in self.tids:
                self.tids[name] = len(self.tids) + 1

    @abstractmethod
    def kernels(self, plan, streams: list[str], start_us: np.ndarray, dur_us: np.ndarray) -> None:
        """One cycle's kernel spans: `plan` a `RankPlan` (its labels and member mask), start_us and
        dur_us of shape (len(streams), plan.num_kernels) (`RankPlan.run_spans`).

        Raises:
            ArithmeticError: a span's time is not finite.
        """

    @abstractmethod
    def span(self, name: str, cat: str, stream: str, start_us: float, dur_us: float) -> None:
        """One span on a stream (a forward, or a kernel of the SimPy kernel streams)."""

    @abstractmethod
    def cycle(self, cycle_idx: int, start_us: float, end_us: float, accept_lengths: list[int],
              num_tokens: int) -> None:
        """One cycle, sync to sync, on the cycles thread."""


def _check_finite(start_us: np.ndarray, dur_us: np.ndarray) -> None:
    if not (np.isfinite(start_us).all() and np.isfinite(dur_us).all()):
        raise ArithmeticError("the simulation gave a non-finite kernel time; no trace is written")


def _thread_name(stream: str) -> str:
    return f"GPU {stream}" if stream.isdigit() else "GPU (the TP group as one stream)"


class TraceWriter(TraceSink):
    """Streams the trace to `path` (a context manager: the file appears, whole, when the block ends
    without an exception; nothing appears when it raises).

    Args:
        path: the .json to write. window: as TraceSink.

    Raises (on entering):
        OutputPathError: `path` is not a regular file or cannot be placed (simulator.files.atomic_file).
    """

    def __init__(self, path: Path, window: TraceWindow | None = None):
        super().__init__(window)
        self.path = Path(path)
        self.num_events = 0
        self._file = None
        self._ctx = None
        self._prefixes: dict[int, tuple[object, list[list[str]]]] = {}

    def __enter__(self) -> "TraceWriter":
        self._ctx = atomic_file(self.path, text=True)
        self._file = self._ctx.__enter__()
        other = {OUTPUT_KEY: TRACE_OUTPUT, "version": __version__}
        if self.window is not None:
            other["cycles"] = str(self.window)
        self._file.write('{"displayTimeUnit": "ms", "otherData": ' + json.dumps(other) + ',\n"traceEvents": [\n')
        self._sep = ""
        self._meta(CYCLES_TID, "cycles")
        return self

    def __exit__(self, kind, value, tb) -> bool:
        if kind is None:
            self._file.write("\n]}\n")
        ctx, self._ctx, self._file = self._ctx, None, None
        return bool(ctx.__exit__(kind, value, tb))

    def _write(self, lines: list[str]) -> None:
        if lines:
            self._file.write(self._sep + ",\n".join(lines))
            self._sep = ",\n"
            self.num_events += len(lines)

    def _meta(self, tid: int, name: str) -> None:
        self._write([json.dumps({"name": "thread_name", "ph": "M", "pid": 0, "tid": tid, "args": {"name": name}}),
                     json.dumps({"name": "thread_sort_index", "ph": "M", "pid": 0, "tid": tid,
                                 "args": {"sort_index": tid}})])

    def streams(self, names: list[str]) -> None:
        new = [n for n in names if n not in self.tids]
        super().streams(names)
        for n in new:
            self._meta(self.tids[n], _thread_name(n))

    def _prefix(self, plan, streams: list[str]) -> list[list[str]]:
        """Per stream, per kernel: the event line up to its ts (memoised per plan)."""
        hit = self._prefixes.get(id(plan))
        if hit is None or hit[0] is not plan:
            labels = [json.dumps(name) + ',"cat":' + json.dumps(cat) for name, cat in plan.labels]
            rows = [[f'{{"name":{lab},"ph":"X","pid":0,"tid":{self.tids[s]},"ts":' for lab in labels]
                    for s in streams]
            hit = (plan, rows)
            self._prefixes[id(plan)] = hit
        return hit[1]

    def kernels(self, plan, streams, start_us, dur_us) -> None:
        _check_finite(start_us, dur_us)
        prefix = self._prefix(plan, streams)
        for r in range(len(streams)):
            idx = np.flatnonzero(plan.member[r])
            row = prefix[r]
            self._write([f'{row[i]}{ts:.3f},"dur":{du:.3f}}}' for i, ts, du
                         in zip(idx.tolist(), start_us[r, idx].tolist(), dur_us[r, idx].tolist())])

    def span(self, name, cat, stream, start_us, dur_us) -> None:
        _check_finite(np.array([start_us]), np.array([dur_us]))
        self._write([f'{{"name":{json.dumps(name)},"cat":{json.dumps(cat)},"ph":"X","pid":0,'
                     f'"tid":{self.tids[stream]},"ts":{start_us:.3f},"dur":{dur_us:.3f}}}'])

    def cycle(self, cycle_idx, start_us, end_us, accept_lengths, num_tokens) -> None:
        _check_finite(np.array([start_us]), np.array([end_us]))
        self._write([f'{{"name":"cycle {cycle_idx}","cat":"cycle","ph":"X","pid":0,"tid":{CYCLES_TID},'
                     f'"ts":{start_us:.3f},"dur":{end_us - start_us:.3f},'
                     f'"args":{{"accept_lengths":{json.dumps(list(accept_lengths))},"num_tokens":{num_tokens}}}}}'])


class TraceRecorder(TraceSink):
    """Keeps the spans in memory: `events` (TraceEvent, stream spans) and `cycle_spans`
    ((cycle_idx, start_us, end_us) per cycle)."""

    def __init__(self, window: TraceWindow | None = None):
        super().__init__(window)
        self.events: list[TraceEvent] = []
        self.cycle_spans: list[tuple[int, float, float]] = []

    def kernels(self, plan, streams, start_us, dur_us) -> None:
        _check_finite(start_us, dur_us)
        for r, s in enumerate(streams):
            for i in np.flatnonzero(plan.member[r]).tolist():
                name, cat = plan.labels[i]
                self.events.append(TraceEvent(name, cat, s, float(start_us[r, i]), float(dur_us[r, i])))

    def span(self, name, cat, stream, start_us, dur_us) -> None:
        self.events.append(TraceEvent(name, cat, stream, start_us, dur_us))

    def cycle(self, cycle_idx, start_us, end_us, accept_lengths, num_tokens) -> None:
        self.cycle_spans.append((cycle_idx, start_us, end_us))
