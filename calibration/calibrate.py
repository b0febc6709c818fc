"""`specdecsim calibrate`: per-op tables, host overheads, roofline, whole forwards, collectives and
whole forwards over TP groups (when more than one GPU is), then the profile.

    specdecsim calibrate --out data/profiles/h200.json --points data/points/h200.jsonl
    (as calibration/h200_run.sh runs it; the default --out is data/profiles/local.json, its points
    data/profiles/local.points.jsonl)

Points go to an append-only PointStore first, so an interrupted run picks up where it stopped
(`--no-resume` moves the old points file aside and starts over). Budget on one H200: the
default grid (about 3,400 op points, 4 models x tp 1/2/4/8; token counts 1-24 at tp 1 and 2):
about 7 minutes by the estimate the run prints (0.12 s per op point), plus the whole forwards
(targets; drafts' step and extend) and, on 2 GPUs, the tp-2 forwards (calibration/bench/tp_forwards.py:
88 s for both targets and drafts on the lent 2x H200); `--quick` (about 450 points) in about 1 minute.
"""

from __future__ import annotations

import datetime
import warnings
from pathlib import Path

import torch
from rich.console import Console

from calibration.bench import ops as bench_ops
from calibration.bench.collectives import measure_collectives
from calibration.bench.forwards import bench_model_forwards
from calibration.bench.loop_overhead import (measure_host_schedule_us, measure_loop_overhead_curve,
                                             measure_loop_overheads)
from calibration.bench.ops import DEFAULT_GRID, QUICK_GRID, OpGrid
from calibration.bench.tp_forwards import measure_tp_forwards
from calibration.build.profile import write_profile
from calibration.build.store import PointStore
from calibration.provenance import collect_hardware_info, command_line as this_command_line
from calibration.shapes import DEFAULT_MODELS, is_draft
from calibration.timing import TimingSettings
from simulator.config import ModelShape
from simulator.profile import CalibrationProfile
from simulator.units import BYTES_PER_GB

console = Console(stderr=True)
EST_S_PER_OP_POINT = 0.12  # rough wall time per op point on an H200 (runner set-up, capture, 20 replays)
MEMORY_HEADROOM = 1.2  # caches and activations on top of a whole-forward model's weights


def _collectives(store: PointStore, quick: bool, tp_sizes: list[int], command: str) -> None:
    """Collective tables for every TP size > 1 (bench/collectives.py); a failure is a warning."""
    try:
        measure_collectives(store, quick=quick, world_sizes=[w for w in tp_sizes if w > 1], command=command)
    except Exception as e:  # noqa: BLE001 - the op points are stored; build the profile anyway
        warnings.warn(f"collectives failed, profile built without them: {type(e).__name__}: {e}", stacklevel=2)


def _tp_forwards(store: PointStore, models: list[ModelShape], tp_sizes: list[int], grid: OpGrid,
                 settings: TimingSettings, command: str) -> None:
    """Whole forwards over TP groups of 2+ GPUs (bench/tp_forwards.py), when there are."""
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        return
    try:
        measure_tp_forwards(store, models, [t for t in tp_sizes if t > 1], grid, command=command, settings=settings)
    except Exception as e:  # noqa: BLE001 - the op points are stored; build the profile anyway
        warnings.warn(f"tp forwards failed, profile built without them: {type(e).__name__}: {e}", stacklevel=2)


def available_memory_bytes(dev: torch.device) -> int | None:
    """Free memory where the models will live: CUDA mem_get_info, else /proc/meminfo MemAvailable
    (None where neither is known)."""
    if dev.type == "cuda":
        return int(torch.cuda.mem_get_info(dev)[0])
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_memory(models: list[ModelShape], dev: torch.device, dtype: torch.dtype, forwards: bool) -> None:
    """Raise ValueError before measuring when a whole-forward model cannot fit in memory.

    Need: the largest target's weight bytes (simulator.costs.forward_ops op list at 1 token) at this
    dtype, times MEMORY_HEADROOM for caches and activations.
    """
    if not forwards:
        return
    from simulator.costs.forward_ops import target_forward_ops
    elem = torch.tensor([], dtype=dtype).element_size()
    need = {m.name: MEMORY_HEADROOM * sum(op.bytes for op in target_forward_ops(m, 1, 1, 1, 1))
            / m.weight_dtype_bytes * elem for m in models if not is_draft(m)}
    have = available_memory_bytes(dev)
    if not need or have is None:
        return
    name, big = max(need.items(), key=lambda kv: kv[1])
    if big > have:
        raise ValueError(f"the whole forward of {name} needs about {big / BYTES_PER_GB:.0f} GB ({dtype} on {dev}); "
                         f"{have / BYTES_PER_GB:.0f} GB free: calibrate smaller models (--scenario) or pass "
                         "--no-forwards")


def default_points_path(out_profile: Path) -> Path:
    """The points file that goes with a profile: data/profiles/local.json ->
    data/profiles/local.points.jsonl (never a shipped machine's points file)."""
    return Path(out_profile).with_suffix(".points.jsonl")


def _fresh_points(points_path: Path) -> None:
    """Move an existing points file aside (never delete measurements)."""
    if points_path.exists():
        stamp = datetime.datetime.now().strftime("%Y%m%dT%H%M%S")
        aside = points_path.with_name(f"{points_path.name}.{stamp}.bak")
        points_path.rename(aside)
        console.print(f"[yellow]moved old points to {aside}")


def run_calibration(out_profile: Path, points_path: Path, quick: bool = False, resume: bool = True,
                    models: list[ModelShape] | None = None, tp_sizes: list[int] = (1, 2, 4, 8),
                    device: str | None = None, *, grid: OpGrid | None = None,
                    settings: TimingSettings | None = None, name: str | None = None,
                    command_line: str | None = None, forwards: bool = True) -> CalibrationProfile:
    """Measure everything into `points_path`, then build and atomically write the profile.

    Args:
        out_profile: profile JSON to write.
        points_path: PointStore JSONL (kept; resumable).
        quick: QUICK_GRID and lighter timing (about 1 minute on an H200).
        resume: keep points already in `points_path`; False moves the file aside first.
        models: shapes to measure (default: Llama-3.1-8B, Llama-3.2-1B and their EAGLE-3 drafts).
        tp_sizes: TP degrees whose sharded op shapes are measured (on one GPU).
        device: 'cuda', 'cuda:1', 'cpu'; default CUDA when available.
        grid, settings: override the grid and timing (tests use tiny ones).
        name: profile name (default: the output file's stem).
        forwards: also time whole forwards at tp 1 (targets; drafts' step and extend) and, with
            2+ GPUs, over TP groups of each size in tp_sizes the GPUs allow (bench/tp_forwards.py).

    Returns:
        The profile written.
    """
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    models = list(models or DEFAULT_MODELS)
    tp_sizes = list(tp_sizes)
    grid = grid or (QUICK_GRID if quick else DEFAULT_GRID)
    settings = settings or TimingSettings(target_replay_us=100.0 if quick else 300.0)
    command = command_line or this_command_line()
    check_memory(models, dev, dtype, forwards)
    if not resume:
        _fresh_points(Path(points_path))
    store = PointStore(points_path)
    here = collect_hardware_info()
    before = store.records().get("meta:hardware")
    if before and before.get("gpu_name") != here.get("gpu_name"):
        raise ValueError(f"points file {points_path} holds points measured on {before.get('gpu_name')!r}; this "
                         f"machine is {here.get('gpu_name')!r}: give another --points (or --no-resume to move "
                         "the old file aside)")
    num_points = len(bench_ops.enumerate_points(models, tp_sizes, grid))
    if num_points == 0:
        raise ValueError(f"no op shape of {', '.join(m.name for m in models)} shards over tp {tp_sizes} "
                         "(attention heads and kv heads must divide by the TP size)")
    console.print(f"{num_points} op points ({len(store)} points already stored) on {dev}; "
                  f"estimate {num_points * EST_S_PER_OP_POINT / 60:.1f} min on an H200")
    store.add("meta:hardware", here)
    bench_ops.bench_roofline(store, dev, command, quick=quick)
    bench_ops.bench_host(store, models, dev, dtype, command)
    if not store.done("host:schedule"):
        store.add("host:schedule", {"latency_us": measure_host_schedule_us(dev), "command": command,
                                    "note": "live loop per-cycle bookkeeping (SpecLoop.commit), tiny models"})
    measure_loop_overheads(store, dev, command)
    measure_loop_overhead_curve(store, dev, command)
    bench_ops.bench_ops(store, models, tp_sizes, grid, dev, dtype, settings, command)
    if forwards:
        for m in models:
            bench_model_forwards(store, m, grid, dev, dtype, settings, command)
    _collectives(store, quick, tp_sizes, command)
    if forwards:
        _tp_forwards(store, models, tp_sizes, grid, settings, command)
    return write_profile(store.records(), Path(out_profile), name or Path(out_profile).stem,
                         description=f"{'quick ' if quick else ''}calibration on {dev}", command_line=command)


def scenario_models(paths: list[Path]) -> list[ModelShape]:
    """The target and draft shapes of the scenarios at `paths`, each name once, in order.

    Raises:
        simulator.scenario.UserInputError: a scenario that does not load or validate.
    """
    from simulator.scenario import load_scenario
    shapes: dict[str, ModelShape] = {}
    for p in paths:
        sc = load_scenario(p)
        shapes.setdefault(sc.target.name, sc.target)
        shapes.setdefault(sc.draft.name, sc.draft)
    return list(shapes.values())
