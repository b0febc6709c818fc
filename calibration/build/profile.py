"""Turn a PointStore of measured points into a validated `CalibrationProfile` (simulator.profile).

Reads the keys the benchmarks write (calibration/bench/ops.py and forwards.py module docstrings;
bench/collectives.py: `coll:{op}:{world_size}:{mode}:{size_bytes}`), builds one table per op
key / collective / forward, and fails loudly when a table's grid has a hole (a missing point is
never filled in). RooflineParams take HBM bandwidth and matmul rates from the measured points;
link bandwidth and collective base latency are fitted from allreduce points when there are any,
else assumed from the H200 datasheet (provenance says which). Also checks the decomposition:
the per-op sum of a target forward against its whole-forward measurement, into profile.notes.

Runs on CPU (numpy/scipy only); torch is only asked for version strings when importable.
"""

from __future__ import annotations

import datetime
import itertools
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

from calibration.provenance import collect_hardware_info, command_line as this_command_line, git_commit
from simulator.config import ModelShape
from simulator.costs.forward_ops import draft_forward_ops, target_forward_ops
from simulator.profile import (OP_AXES, CalibrationProfile, CollectiveTable, ForwardTable, HardwareInfo,
                               HostOverheads, LoopOverheadCurve, OpTable, Provenance, RooflineParams, save_profile)
from simulator.units import BYTES_PER_US_PER_GB_PER_S

ROOFLINE_ONLY_OPS = ("mla_attention", "moe_experts")
# Used only when no collective was measured (single GPU).
ASSUMED_LINK_BANDWIDTH_GB_PER_S = 450.0
ASSUMED_COLLECTIVE_BASE_LATENCY_US = 10.0
ASSUMED_LINK_SOURCE = (
    "NVIDIA H200 datasheet (nvidia.com/en-us/data-center/h200): NVLink 900 GB/s per GPU, total of both "
    "directions, so 450 GB/s per direction taken as the collective bus bandwidth; "
    "collective_base_latency_us = 10 is an order-of-magnitude assumption for a small in-node NCCL "
    "allreduce, not a measurement")


def _provenance(rec: dict, note: str = "") -> Provenance:
    return Provenance(kind="measured", command=rec.get("command") or "specdecsim calibrate", note=note)


def _full_grid(name: str, axes: list[str], points: dict[tuple, float]) -> tuple[dict[str, list], list[float]]:
    """Grid values per axis and the C-order latencies; ValueError naming the missing points."""
    grid = {a: sorted({p[i] for p in points}) for i, a in enumerate(axes)}
    missing = [p for p in itertools.product(*grid.values()) if p not in points]
    if missing:
        raise ValueError(f"{name}: {len(missing)} grid point(s) missing, e.g. "
                         f"{[dict(zip(axes, p)) for p in missing[:5]]}; re-run the calibration to fill them")
    return grid, [points[p] for p in itertools.product(*grid.values())]


def op_tables(records: dict[str, dict]) -> list[OpTable]:
    """One OpTable per op key from the `op:` points."""
    by_key: dict[str, list[dict]] = defaultdict(list)
    for k, rec in records.items():
        if k.startswith("op:"):
            by_key[rec["op_key"]].append(rec)
    tables = []
    for op_key, recs in by_key.items():
        axes = [a for a in OP_AXES if a in recs[0]["axes"]]
        points = {tuple(r["axes"][a] for a in axes): r["latency_us"] for r in recs}
        grid, lat = _full_grid(f"op {op_key}", axes, points)
        notes = sorted({r.get("note", "") for r in recs} - {""})
        note = "; ".join([f"timing {'/'.join(sorted({r['mode'] for r in recs}))}, dtype {recs[0].get('dtype')}"]
                         + notes)
        tables.append(OpTable(key=op_key, axes=axes, grid={a: [float(v) for v in g] for a, g in grid.items()},
                              latency_us=lat, provenance=_provenance(recs[0], note)))
    return tables


def collective_tables(records: dict[str, dict]) -> list[CollectiveTable]:
    """One CollectiveTable per (op, world_size, mode) from the `coll:` points."""
    groups: dict[tuple, dict[int, dict]] = defaultdict(dict)
    for k, rec in records.items():
        # eager_stream points: the comm model's fit; an engine's custom allreduce: beside the tables (bench/collectives.py)
        if k.startswith("coll:") and rec["mode"] in ("eager", "graph") and rec["op"] != "custom_allreduce":
            groups[(rec["op"], int(rec["world_size"]), rec["mode"])][int(rec["size_bytes"])] = rec
    tables = []
    for (op, world_size, mode), by_size in sorted(groups.items()):
        sizes = sorted(by_size)
        recs = [by_size[s] for s in sizes]
        p10 = [r.get("p10_latency_us") for r in recs]
        p90 = [r.get("p90_latency_us") for r in recs]
        tables.append(CollectiveTable(
            op=op, world_size=world_size, mode=mode, size_bytes=sizes, latency_us=[r["latency_us"] for r in recs],
            p10_latency_us=None if None in p10 else p10, p90_latency_us=None if None in p90 else p90,
            provenance=_provenance(recs[0])))
    return tables


def forward_tables(records: dict[str, dict]) -> list[ForwardTable]:
    """One ForwardTable per (model, tp_size, mode, phase) from the batch-1 `fwd:` points (records
    without a phase are a target's forward), and one with a batch_size axis per (model, tp_size,
    mode, phase) from the points that carry `batch_size` (bench.forwards.bench_batch_forwards)."""
    groups: dict[tuple, dict[tuple, dict]] = defaultdict(dict)
    for k, rec in records.items():
        if k.startswith("fwd:"):
            batched = "batch_size" in rec
            key = (rec["model"], int(rec["tp_size"]), rec["mode"], rec.get("phase", "forward"), batched)
            point = (int(rec["batch_size"]),) if batched else ()
            groups[key][point + (rec["num_tokens"], rec["context_len"])] = rec
    tables = []
    for (model, tp, mode, phase, batched), pts in sorted(groups.items()):
        axes = (["batch_size"] if batched else []) + ["num_tokens", "context_len"]
        grid, lat = _full_grid(f"{phase} {model} tp{tp} {mode}" + (" (batch axis)" if batched else ""), axes,
                               {p: r["latency_us"] for p, r in pts.items()})
        shape_of = [len(grid[a]) for a in axes]
        first = next(iter(pts.values()))
        values = np.asarray(lat).reshape(shape_of).tolist()
        meta = records.get(f"meta:model:{model}")
        shape = {k: v for k, v in meta.items() if k not in ("name", "config_path")} if meta else None
        tables.append(ForwardTable(model=model, tp_size=tp, mode=mode, phase=phase,
                                   batch_size=[int(b) for b in grid["batch_size"]] if batched else None,
                                   num_tokens=grid["num_tokens"], context_len=grid["context_len"],
                                   latency_us=values, shape=shape,
                                   provenance=_provenance(first, first.get("impl", ""))))
    return tables


def host_overheads(records: dict[str, dict]) -> HostOverheads:
    """HostOverheads from the `host:` points.

    Raises:
        ValueError: if a needed host point is missing.
    """
    launch = {r["op_name"]: r["latency_us"] for k, r in records.items() if k.startswith("host:launch:")}
    needed = ("host:graph_replay", "host:d2h_sync", "host:empty_kernel", "host:graph_kernel_gap")
    missing = [k for k in needed if k not in records]
    if missing or not launch:
        raise ValueError(f"host overhead points missing: {missing or ['host:launch:*']}; run bench.ops.bench_host")
    default_us = float(np.median(list(launch.values())))
    return HostOverheads(
        op_launch_us=launch, default_launch_us=default_us,
        graph_replay_us=records["host:graph_replay"]["latency_us"],
        # op tables are timed as graphs of repeated ops, so their per-kernel gaps are already in them
        graph_kernel_gap_us=0.0,
        # a cycle's sync waits on milliseconds of GPU work: take the sync measured after a busy GPU
        d2h_sync_us=records.get("host:d2h_sync_busy", records["host:d2h_sync"])["latency_us"],
        **loop_schedule_us(records),
        loop_overhead_curve=loop_overhead_curve(records),
        provenance=_provenance(records["host:graph_replay"],
                               note=f"default_launch_us = median of op_launch_us; empty-kernel launch "
                                    f"{records['host:empty_kernel']['latency_us']:.2f} us; device time per "
                                    f"empty kernel in a graph {records['host:graph_kernel_gap']['latency_us']:.2f} us "
                                    "(already inside the op tables, so graph_kernel_gap_us = 0); host_schedule_us = "
                                    + ("the live loop's per-cycle bookkeeping "
                                       "(calibration.bench.loop_overhead.measure_host_schedule_us)"
                                       if "host:schedule" in records else "not measured, 0")))


def loop_schedule_us(records: dict[str, dict]) -> dict[str, float]:
    """host_schedule_us (speculative cycle) and baseline_host_schedule_us (decode step).

    From the live loop's own overhead with tiny models (wall per cycle minus the GPU time of its
    graphs; the median of its repeats where there are several), less what the simulator charges apart: one graph replay and the device->host sync
    (here the short-wait sync, host:d2h_sync, since the tiny loop's GPU work is short).
    Without that point, the bookkeeping alone (host:schedule) or 0.

    A loop whose host waits milliseconds at the sync (the `:busy` points, a GPU sleep standing
    in for a real model) pays more per cycle than one that waits microseconds; those points are
    preferred where measured, less the busy-GPU sync (host:d2h_sync_busy).
    """
    out = {"host_schedule_us": records.get("host:schedule", {}).get("latency_us", 0.0)}
    replay = records["host:graph_replay"]["latency_us"]
    for kind, field in (("spec", "host_schedule_us"), ("baseline", "baseline_host_schedule_us")):
        busy = loop_overhead_us(records, f"host:loop_overhead:{kind}:busy")
        idle = loop_overhead_us(records, f"host:loop_overhead:{kind}")
        if busy is not None and "host:d2h_sync_busy" in records:
            out[field] = max(0.0, busy - replay - records["host:d2h_sync_busy"]["latency_us"])
        elif idle is not None:
            out[field] = max(0.0, idle - replay - records["host:d2h_sync"]["latency_us"])
    return out


def loop_overhead_curve(records: dict[str, dict]) -> LoopOverheadCurve | None:
    """HostOverheads.loop_overhead_curve from the host:loop_wait points, or None (< 2 waits).

    Per loop and wait: the median over repeats of gpu_us (x) and of overhead_us less one graph
    replay and the busy-GPU sync (y, what the simulator charges as host_schedule_us). Repeats
    whose GPU sleep came out under half its target are left out (see loop_overhead_us).
    """
    if "host:d2h_sync_busy" not in records or "host:graph_replay" not in records:
        return None
    rest = records["host:graph_replay"]["latency_us"] + records["host:d2h_sync_busy"]["latency_us"]
    out = {}
    for kind in ("spec", "baseline"):
        by_wait: dict[float, list[dict]] = {}
        for k, r in records.items():
            if k.startswith(f"host:loop_wait:{kind}:") and r.get("busy_us", 0.0) >= 0.5 * r.get("busy_target_us", 0.0):
                by_wait.setdefault(r["busy_target_us"], []).append(r)
        pts = sorted((float(np.median([r["gpu_us"] for r in rs])),
                      max(0.0, float(np.median([r["overhead_us"] for r in rs])) - rest)) for rs in by_wait.values())
        if len(pts) < 2:
            return None
        out[kind] = pts
    return LoopOverheadCurve(gpu_us=[x for x, _ in out["spec"]], host_schedule_us=[y for _, y in out["spec"]],
                             baseline_gpu_us=[x for x, _ in out["baseline"]],
                             baseline_host_schedule_us=[y for _, y in out["baseline"]])


LOOP_BUSY_US = 5000.0  # GPU sleep standing in for a real model in the `:busy` loop-overhead points


def loop_overhead_us(records: dict[str, dict], key: str) -> float | None:
    """Median overhead_us of the repeats `key:rep<i>` where measured, else the single `key` point.
    A `:busy` repeat whose GPU sleep came out under half of LOOP_BUSY_US (its cycle count was
    calibrated while the GPU clock ramped) measured another wait and is left out."""
    reps = [r["overhead_us"] for k, r in records.items() if k.startswith(f"{key}:rep")
            and not (key.endswith(":busy") and r.get("busy_us", LOOP_BUSY_US) < 0.5 * LOOP_BUSY_US)]
    if reps:
        return float(np.median(reps))
    return records[key]["overhead_us"] if key in records else None


def fit_link(tables: list[CollectiveTable]) -> tuple[float, float, str] | None:
    """(link_bandwidth_gb_per_s, collective_base_latency_us, note) fitted to allreduce tables, or None.

    Ring model t_us = base_us + size_bytes * 2 (w - 1) / w / bw_bytes_per_us, non-negative least
    squares over every allreduce point (graph mode when measured, else eager).
    Source: nccl-tests doc/PERFORMANCE.md (busbw = algbw * 2(n-1)/n).
    """
    ar = [t for t in tables if t.op == "allreduce"]
    mode = "graph" if any(t.mode == "graph" for t in ar) else "eager"
    ar = [t for t in ar if t.mode == mode]
    rows = [(1.0, s * 2 * (t.world_size - 1) / t.world_size, lat)
            for t in ar for s, lat in zip(t.size_bytes, t.latency_us)]
    if len(rows) < 2:
        return None
    a = np.asarray(rows)
    (base_us, us_per_byte), _ = nnls(a[:, :2], a[:, 2])
    if us_per_byte <= 0:
        return None
    bw_gb_per_s = 1.0 / us_per_byte / BYTES_PER_US_PER_GB_PER_S
    worlds = sorted({t.world_size for t in ar})
    return bw_gb_per_s, base_us, f"ring fit to {len(rows)} {mode} allreduce points, world sizes {worlds}"


def roofline_params(records: dict[str, dict], collectives: list[CollectiveTable],
                    ops: list[OpTable]) -> RooflineParams:
    """RooflineParams: measured HBM and matmul rates; link fitted or assumed (see module docstring)."""
    for k in ("roofline:hbm_copy", "roofline:bf16_matmul"):
        if k not in records:
            raise ValueError(f"roofline point {k} missing; run bench.ops.bench_roofline")
    fp8 = records.get("roofline:fp8_matmul", {}).get("tflops")
    floor_us = min((min(t.latency_us) for t in ops), default=3.0)
    cmd = records["roofline:hbm_copy"].get("command") or "specdecsim calibrate"
    note = (f"hbm_bandwidth = device copy (read+write) of {records['roofline:hbm_copy']['size_bytes']} bytes; "
            f"tflops = {records['roofline:bf16_matmul']['dim']}^3 matmul; efficiencies 1 because the rates "
            f"are achieved ones; kernel_floor_us = fastest op point measured")
    link = fit_link(collectives)
    if link is None:
        bw, base = ASSUMED_LINK_BANDWIDTH_GB_PER_S, ASSUMED_COLLECTIVE_BASE_LATENCY_US
        prov = Provenance(kind="assumed", command=cmd, source=ASSUMED_LINK_SOURCE,
                          note=note + "; link_bandwidth_gb_per_s and collective_base_latency_us assumed (no "
                                      "collective measured)")
    else:
        bw, base, fit_note = link
        prov = Provenance(kind="fitted", command=cmd, note=f"{note}; link: {fit_note}")
    return RooflineParams(
        hbm_bandwidth_gb_per_s=records["roofline:hbm_copy"]["bandwidth_gb_per_s"],
        bf16_tflops=records["roofline:bf16_matmul"]["tflops"], fp8_tflops=fp8,
        bandwidth_efficiency=1.0, compute_efficiency=1.0, kernel_floor_us=min(floor_us, 1000.0),
        link_bandwidth_gb_per_s=bw, collective_base_latency_us=base, provenance=prov)


def decomposition_notes(records: dict[str, dict], forwards: list[ForwardTable]) -> dict[str, str]:
    """Per-op sum of target_forward_ops (batch 1, compute ops) vs each whole-forward table.

    Relative error (sum - whole) / whole at every grid point; goal |error| <= 5%.
    """
    by_point = {(r["op_key"], tuple(sorted(r["axes"].items()))): r["latency_us"]
                for k, r in records.items() if k.startswith("op:")}
    notes = {}
    for fwd in forwards:
        if fwd.batch_size is not None:  # op points are timed at batch 1: the batch-1 tables are checked
            continue
        meta = records.get(f"meta:model:{fwd.model}")
        name = f"decomposition:{fwd.model}:tp{fwd.tp_size}:{fwd.mode}" + (
            "" if fwd.phase == "forward" else f":{fwd.phase}")
        if meta is None:
            notes[name] = "no meta:model record; not checked"
            continue
        shape = ModelShape.model_validate(meta)
        errs, missing = [], set()
        for i, n in enumerate(fwd.num_tokens):
            for j, c in enumerate(fwd.context_len):
                total_us = 0.0
                ops = (target_forward_ops(shape, fwd.tp_size, 1, n, c) if fwd.phase == "forward"
                       else draft_forward_ops(shape, fwd.tp_size, 1, n, c, fwd.phase == "draft_extend"))
                for op in ops:
                    if op.is_collective or op.key.split(":")[0] in ROOFLINE_ONLY_OPS:
                        continue
                    lat = by_point.get((op.key, tuple(sorted(op.axes.items()))))
                    if lat is None:
                        missing.add(op.key)
                    else:
                        total_us += lat
                errs.append(((total_us - fwd.latency_us[i][j]) / fwd.latency_us[i][j], n, c))
        if missing:
            notes[name] = f"op points missing for {sorted(missing)[:5]}; not checked"
            continue
        worst = max(errs, key=lambda e: abs(e[0]))
        med = float(np.median([abs(e[0]) for e in errs]))
        verdict = "within" if abs(worst[0]) <= 0.05 else "OUTSIDE"
        notes[name] = (f"per-op sum vs whole forward (batch 1, compute ops only): median |err| {med:.1%}, "
                       f"max {worst[0]:+.1%} at num_tokens={worst[1]}, context_len={worst[2]}; "
                       f"{verdict} the 5% goal"
                       + ("" if fwd.tp_size == 1 else " (the whole forward includes its collectives; the sum not)"))
    return notes


def build_profile(records: dict[str, dict], name: str, description: str = "",
                  command_line: str | None = None, hardware: dict | None = None) -> CalibrationProfile:
    """A validated CalibrationProfile from store records (`PointStore.records()`).

    Args:
        records: key -> record, as the benchmarks (calibration/bench/) write them.
        name: profile name (e.g. 'h200').
        hardware: HardwareInfo fields; default the `meta:hardware` record, else this machine.

    Raises:
        ValueError: a table grid with a hole, or missing host / roofline points.
        pydantic.ValidationError: a value out of the schema's range.
    """
    ops = op_tables(records)
    collectives = collective_tables(records)
    forwards = forward_tables(records)
    hw = hardware or records.get("meta:hardware") or collect_hardware_info()
    notes = decomposition_notes(records, forwards)
    fp8_notes = sorted({t.key for t in ops if "fp8" in t.provenance.note})
    if fp8_notes:
        notes["precision"] = f"fp8 keys timed in another precision, see each table's note: {fp8_notes}"
    notes["not_measured"] = (f"{', '.join(ROOFLINE_ONLY_OPS)} are roofline-only; collectives come from "
                             "calibration/bench/collectives.py when it ran")
    return CalibrationProfile(
        name=name, description=description,
        created_utc=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        git_commit=git_commit(), command_line=command_line or this_command_line(),
        hardware=HardwareInfo(**{k: v for k, v in hw.items() if k in HardwareInfo.model_fields}),
        roofline=roofline_params(records, collectives, ops), host=host_overheads(records),
        collectives=collectives, ops=ops, forwards=forwards, notes=notes)


def write_profile(records: dict[str, dict], out_path: Path, name: str, **kwargs) -> CalibrationProfile:
    """build_profile and save it atomically (simulator.profile.save_profile)."""
    profile = build_profile(records, name, **kwargs)
    save_profile(profile, out_path)
    return profile
