"""PyTorch profiler traces (Chrome / Perfetto JSON): GPU kernel time per cycle phase, and host gaps.

A trace from `torch.profiler.profile(...).export_chrome_trace(path)` is `{"traceEvents": [...]}`
(a bare list of events is read too). The events used are complete events (`"ph": "X"`, `ts` and
`dur` in us):
- phases: ranges of cat "gpu_user_annotation" (record_function ranges as the GPU ran them) or,
  where the trace has none with a phase name, of cat "user_annotation" (the host's ranges);
- kernels: cat "kernel", "gpu_memcpy" and "gpu_memset";
- launches: cat "cuda_runtime" / "cuda_driver", whose `args.correlation` equals their kernel's.

A range's phase comes from its name: the first of `draft_extend`, `verify`, `draft`, `decode`,
`accept`, `sync` that the lower-cased name contains. A kernel belongs to the innermost phase range
that holds (GPU ranges: its start time; host ranges: the launch with its correlation id, or,
without one, its start time). Kernels of a CUDA graph carry the correlation id of their
`cudaGraphLaunch`, so a host range around a replay holds them all. A trace without kernels (a
CPU run) uses its outermost `cpu_op` events as kernels.

Cycles: where the trace has ranges named `cycle` (or '<prefix>::cycle'), each kernel belongs to
the host cycle range holding its launch (a kernel without a launch: its start time, since every
cycle of the live loop ends in a blocking sync; a trace without host cycle ranges: the GPU cycle
range holding its start) and kernels outside every cycle range are left out; then the run also states the cycle's
wall time (`cycle_us`, mean host range duration), each cycle's phase spans in order
(`cycle_phase_span_us`) and, with `sync` ranges, `sync_tail_us`: the end of the cycle's last
kernel to the end of the host's sync range (host and GPU timestamps share Kineto's clock; CUPTI
converts them). Without cycle ranges, cycles start at each range of the first phase of the
cycle (draft when the trace has it, else verify, else decode).

Per cycle: the phase's kernel time (sum of durations), its span (first kernel start to last kernel
end), and the host gap: the cycle's span minus the time any kernel ran (GPU idle between
kernels inside one cycle). The ObservedRun holds their means over cycles, and the mean host time
of one `cudaGraphLaunch` call where there are any. Left out: the host time of each phase, overlap
between streams beyond the union of busy time, and traces larger than
simulator.inputs.MAX_TRACE_BYTES (read_text refuses them).

Source: PyTorch torch/autograd/profiler_util.py and the Kineto trace (libkineto
output_json.cpp) for the categories; torch.profiler.record_function for the annotation ranges.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from simulator.evidence.importers.observed import ObservedRun, observed_run
from simulator.inputs import UserInputError, quote

PHASES = ("draft_extend", "verify", "draft", "decode", "accept", "sync")  # matched in this order: 'draft_extend' first
CYCLE_START = ("draft", "verify", "decode")  # without 'cycle' ranges, the first present opens a cycle
CYCLE_RANGE = "cycle"  # a range named so (or '<prefix>::cycle') holds one whole cycle
GRAPH_LAUNCH = "cudaGraphLaunch"
KERNEL_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver"}
EXPECTED = ("a torch.profiler Chrome trace: {'traceEvents': [{'ph': 'X', 'cat': 'kernel' | 'user_annotation' | "
            "..., 'name', 'ts', 'dur', 'args': {'correlation'}}, ...]}")


def phase_of(name: str) -> str | None:
    """The cycle phase a range's name stands for, or None."""
    lower = name.lower()
    return next((p for p in PHASES if p in lower), None)


def _events(data: Any, path: str) -> list[dict]:
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise UserInputError(f"{path}: no 'traceEvents' list; expected {EXPECTED}")
    out = []
    for i, ev in enumerate(events):
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        ts, dur = ev.get("ts"), ev.get("dur")
        for key, value in (("ts", ts), ("dur", dur)):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise UserInputError(f"{path}: traceEvents[{i}] ({quote(ev.get('name', ''))}): {key} is "
                                     f"{quote(value)}, not a number of us; expected {EXPECTED}")
        if dur < 0:
            raise UserInputError(f"{path}: traceEvents[{i}]: dur {dur} < 0; expected {EXPECTED}")
        corr = ev["args"].get("correlation") if isinstance(ev.get("args"), dict) else None
        if corr is not None and (isinstance(corr, bool) or not isinstance(corr, int)):
            raise UserInputError(f"{path}: traceEvents[{i}] ({quote(ev.get('name', ''))}): args.correlation is "
                                 f"{quote(corr)}, not an integer id; expected {EXPECTED}")
        out.append(ev)
    return out


def _innermost(ranges: list[tuple[float, float, str, int]], t: float) -> tuple[str, int] | None:
    """(phase, range index) of the shortest range holding time t."""
    best = None
    for idx, (start, end, phase, _) in enumerate(ranges):
        if start <= t <= end and (best is None or end - start < ranges[best][1] - ranges[best][0]):
            best = idx
    return None if best is None else (ranges[best][2], best)


def _kernel_events(events: list[dict]) -> tuple[list[dict], bool]:
    """(the trace's kernels, on_cpu): GPU kernels, memcpys and memsets; a trace with none (a CPU
    run: the CPU is the device) gives its outermost `cpu_op` events instead, per thread."""
    kernels = [ev for ev in events if ev.get("cat") in KERNEL_CATS]
    if kernels:
        return kernels, False
    ops = sorted((ev for ev in events if ev.get("cat") == "cpu_op"),
                 key=lambda ev: (str(ev.get("tid")), float(ev["ts"]), -float(ev["dur"])))
    outer, last = [], {}
    for ev in ops:
        tid, end = str(ev.get("tid")), float(ev["ts"]) + float(ev["dur"])
        if tid in last and end <= last[tid]:
            continue  # nested in the previous outermost op of this thread
        outer.append(ev)
        last[tid] = end
    return outer, True


def _named(events: list[dict], cat: str, name: str) -> list[tuple[float, float]]:
    """(start, end) of the ranges of `cat` whose name's last '::' part is `name`, in time order."""
    return sorted((float(ev["ts"]), float(ev["ts"]) + float(ev["dur"])) for ev in events
                  if ev.get("cat") == cat and str(ev.get("name", "")).lower().split("::")[-1] == name)


def _holding(ranges: list[tuple[float, float]], t: float) -> int | None:
    """Index of the range of `ranges` (disjoint, in order) that holds time t, or None."""
    return next((i for i, (a, z) in enumerate(ranges) if a <= t <= z), None)


def parse_trace(data: Any, path: str) -> list[ObservedRun]:
    """One ObservedRun (engine 'live_loop') with per-phase GPU time per cycle from a parsed trace.

    Args:
        data: the trace JSON (dict with 'traceEvents', or the event list). path: for messages.

    Returns:
        [ObservedRun] with phase_gpu_us, phase_span_us (us per cycle, by phase), host_gap_us,
        num_cycles, graph_launch_us where the trace has cudaGraphLaunch calls, and with host
        'cycle' ranges cycle_us, cycle_phase_span_us (and sync_tail_us with 'sync' ranges);
        speculative = the trace has a draft or verify range.

    Raises:
        UserInputError: no traceEvents list, an 'X' event whose ts or dur is not a number, no range
            named after a phase, or no kernel inside one.
    """
    events = _events(data, path)
    gpu_ranges = [ev for ev in events if ev.get("cat") == "gpu_user_annotation" and phase_of(str(ev.get("name", "")))]
    on_gpu = bool(gpu_ranges)
    source = gpu_ranges or [ev for ev in events if ev.get("cat") == "user_annotation"
                            and phase_of(str(ev.get("name", "")))]
    if not source:
        raise UserInputError(f"{path}: no user_annotation range named after a phase ({', '.join(PHASES)}); "
                             f"expected {EXPECTED}")
    ranges = sorted((float(ev["ts"]), float(ev["ts"]) + float(ev["dur"]), phase_of(str(ev["name"])), i)
                    for i, ev in enumerate(source))
    launch_ts = {ev["args"]["correlation"]: float(ev["ts"]) for ev in events
                 if ev.get("cat") in LAUNCH_CATS and isinstance(ev.get("args"), dict) and "correlation" in ev["args"]}
    host_cycles = _named(events, "user_annotation", CYCLE_RANGE)
    gpu_cycles = _named(events, "gpu_user_annotation", CYCLE_RANGE)
    kernel_events, on_cpu = _kernel_events(events)
    kernels = []  # (start_us, end_us, phase, range index, cycle from a cycle range or None)
    for ev in kernel_events:
        corr = ev.get("args", {}).get("correlation") if isinstance(ev.get("args"), dict) else None
        launched = launch_ts.get(corr) if corr is not None else None
        t = float(ev["ts"]) if on_gpu or launched is None else launched
        hit = _innermost(ranges, t)
        if hit is None:
            continue
        if host_cycles:  # a cycle ends in a blocking sync: its kernels also start inside its host range
            cycle = _holding(host_cycles, launched if launched is not None else float(ev["ts"]))
        elif gpu_cycles:
            cycle = _holding(gpu_cycles, float(ev["ts"]))
        else:
            cycle = -1  # no cycle ranges: cycles open at the first phase of the cycle
        if cycle is not None:
            kernels.append((float(ev["ts"]), float(ev["ts"]) + float(ev["dur"]), *hit, cycle))
    if not kernels:
        raise UserInputError(f"{path}: no kernel falls inside a phase range; expected {EXPECTED}")

    present = {r[2] for r in ranges}
    by_ranges = kernels[0][4] == -1
    if by_ranges:
        opener = next(p for p in CYCLE_START if p in present) if present & set(CYCLE_START) else ranges[0][2]
        cycle_of_range, cycle = [], -1
        for _, _, phase, _ in ranges:
            cycle += phase == opener
            cycle_of_range.append(max(cycle, 0))
        kernels = [(a, z, ph, r, cycle_of_range[r]) for a, z, ph, r, _ in kernels]
    cycle_ids = sorted({k[4] for k in kernels})
    num_cycles = max(cycle_ids) + 1 if by_ranges else len(cycle_ids)

    by_cycle: dict[int, list[tuple[float, float]]] = defaultdict(list)
    phase_sum: dict[str, float] = defaultdict(float)
    phase_spans: dict[tuple[str, int], list[float]] = {}
    for start, end, phase, _, c in kernels:
        by_cycle[c].append((start, end))
        phase_sum[phase] += end - start
        span = phase_spans.setdefault((phase, c), [start, end])
        span[0], span[1] = min(span[0], start), max(span[1], end)
    span_sum: dict[str, float] = defaultdict(float)
    per_cycle: dict[int, dict[str, float]] = defaultdict(dict)
    for (phase, c), (start, end) in phase_spans.items():
        span_sum[phase] += end - start
        per_cycle[c][phase] = end - start
    gaps = [_idle_us(intervals) for intervals in by_cycle.values()]
    launches = [float(ev["dur"]) for ev in events if ev.get("cat") in LAUNCH_CATS
                and str(ev.get("name", "")) == GRAPH_LAUNCH]
    timed = host_cycles and not by_ranges
    return [observed_run(
        engine="live_loop", source_file=path, source_format="torch_profiler_trace",
        speculative=bool(present & {"draft", "verify", "draft_extend"}),
        phase_gpu_us={p: phase_sum[p] / num_cycles for p in PHASES if p in phase_sum},
        phase_span_us={p: span_sum[p] / num_cycles for p in PHASES if p in span_sum},
        host_gap_us=sum(gaps) / num_cycles, num_cycles=num_cycles,
        cycle_us=sum(z - a for a, z in (host_cycles[c] for c in cycle_ids)) / len(cycle_ids) if timed else None,
        cycle_phase_span_us=[per_cycle[c] for c in cycle_ids] if timed else None,
        graph_launch_us=sum(launches) / len(launches) if launches else None,
        sync_tail_us=_sync_tail_us(events, by_cycle, host_cycles, cycle_ids) if timed else None)]


def _sync_tail_us(events: list[dict], by_cycle: dict[int, list[tuple[float, float]]],
                  host_cycles: list[tuple[float, float]], cycle_ids: list[int]) -> float | None:
    """Mean over host 'sync' ranges of (range end - end of the last kernel of its cycle that ended
    before it), or None without sync ranges. GPU and host timestamps share Kineto's clock."""
    tails = []
    for a, z in _named(events, "user_annotation", "sync"):
        c = _holding(host_cycles, a)
        ends = [end for _, end in by_cycle.get(c, []) if end <= z] if c in cycle_ids else []
        if ends:
            tails.append(z - max(ends))
    return sum(tails) / len(tails) if tails else None


def _idle_us(intervals: list[tuple[float, float]]) -> float:
    """Span of the intervals minus the length of their union: the GPU's idle time between them."""
    intervals = sorted(intervals)
    busy, cur_start, cur_end = 0.0, *intervals[0]
    for start, end in intervals[1:]:
        if start > cur_end:
            busy += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    busy += cur_end - cur_start
    return (max(e for _, e in intervals) - intervals[0][0]) - busy
