"""Chrome / Perfetto trace of a simulation (JSON Object Format, 'X' complete events, ts/dur in us).

Source: Trace Event Format, https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU
"""

from __future__ import annotations

from pathlib import Path

from simulator import __version__
from simulator.des.records import CycleLog, TraceEvent
from simulator.files import OUTPUT_KEY, TRACE_OUTPUT, write_json_atomic


def chrome_trace(events: list[TraceEvent], cycles: CycleLog | None = None) -> dict:
    """Trace dict: one thread per GPU stream, plus a 'cycles' thread with one span per cycle;
    `otherData` (the format's free metadata) marks it as a specdecsim trace."""
    streams = sorted({e.stream for e in events}, key=lambda s: (len(s), s))
    tid = {s: i + 1 for i, s in enumerate(streams)}
    out = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": tid[s], "args": {"name": f"gpu stream {s}"}}
           for s in streams]
    out += [{"name": e.name, "cat": e.cat, "ph": "X", "pid": 0, "tid": tid[e.stream],
             "ts": e.start_us, "dur": e.dur_us} for e in events]
    if cycles is not None and len(cycles):
        out.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "cycles"}})
        out += [{"name": f"cycle {i} accept {cycles.accept_lengths[i].tolist()}", "cat": "cycle", "ph": "X",
                 "pid": 0, "tid": 0, "ts": float(cycles.start_us[i]), "dur": float(cycles.end_us[i] - cycles.start_us[i])}
                for i in range(len(cycles))]
    return {"traceEvents": out, "displayTimeUnit": "ms",
            "otherData": {OUTPUT_KEY: TRACE_OUTPUT, "version": __version__}}


def write_trace(path: Path, events: list[TraceEvent], cycles: CycleLog | None = None) -> None:
    """Write the trace (strict JSON: no NaN)."""
    write_json_atomic(path, chrome_trace(events, cycles), allow_nan=False)
