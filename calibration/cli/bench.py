"""`specdecsim calibrate` commands that measure one thing on this machine into a points file
(torch, imported inside each command): collectives, tp-forwards, forwards-batch, loop-overhead,
loop-reps, moe (a diagnostic JSON of its own) and session (forwards re-timed, then the noise grid).

    specdecsim calibrate collectives --points P [--world-size N ...] [--quick] [--device cuda|cpu]
    specdecsim calibrate tp-forwards --points P [--tp N ...] [--sizes 8b,1b] [--quick] [--device cuda|cpu]
    specdecsim calibrate forwards-batch --points P [--sizes 8b,1b] [--batches 1,2,4,8,16,32,64] [--quick]
    specdecsim calibrate loop-overhead --points P [--passes 3]    (the probe target, real models)
    specdecsim calibrate loop-reps --points P                     (tiny-model loop overheads and curve)
    specdecsim calibrate moe --out moe.json [--shape kimi-k2-tp8 ... | --shape all] [--dtype bf16|fp8]
    specdecsim calibrate engine-moe --engine-src DIR --out OUT.jsonl [--shape S ...] [--tokens 1,2,4]
                                                                  (SGLang's own Triton MoE kernels)
    specdecsim calibrate session --points P --out LIVE_DIR        (forwards re-timed, then the noise grid)

The benchmarks are `calibration.bench` (collectives, tp_forwards, forwards, loop_overhead, moe, engine_moe) and
`calibration.live.grid`; `calibration.cli.calibrate` mounts these commands. Parses, checks, runs and
writes; no modelled numbers here.
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from calibration.cli.common import (FORCE_HELP, TP_DEVICES, check_at_least, check_batches, check_choice, check_device,
                                    check_gpus, check_output, check_points_file, check_sizes, console, err_console,
                                    fail, int_list, need_torch, refuse_file)
from simulator.files import DIAGNOSTIC_OUTPUT

PointsOption = Annotated[Path, typer.Option(help="PointStore JSONL to add the points to (resumes).")]


def points_store(points: Path):
    """The PointStore at `points`; exit 2 when it names a folder or a file that is not a points file."""
    check_points_file("--points", points)
    from calibration.build.store import PointStore
    return PointStore(points)


def collectives(
    points: PointsOption,
    world_size: Annotated[Optional[list[int]], typer.Option(help="Ranks per group; repeat for several "
                                                                 "(default 2 .. the GPUs there are).")] = None,
    quick: Annotated[bool, typer.Option(help="Fewer sizes and samples.")] = False,
    device: Annotated[str, typer.Option(help="cuda (NCCL, one GPU per rank) or cpu (gloo processes).")] = "cuda",
    mode: Annotated[Optional[list[str]], typer.Option(help="eager, graph or eager_stream (back-to-back eager calls); "
                                                           "repeat for several (default eager and graph).")] = None,
    op: Annotated[Optional[list[str]], typer.Option(help="allreduce, broadcast or all_gather (NCCL / gloo), or "
                                                         "custom_allreduce (vLLM's own kernel, on CUDA where vLLM "
                                                         "is installed; points kept beside the profile's tables); "
                                                         "repeat for several (default the first three).")] = None,
    size_bytes: Annotated[Optional[list[int]], typer.Option(help="Per-rank message sizes; repeat for several "
                                                                 "(default the standard grid).")] = None,
) -> None:
    """Allreduce / broadcast / all_gather latency tables over spawned ranks, into a points file."""
    from calibration.bench.collectives import ELEMENT_BYTES, ENGINE_OPS, MAX_SIZE_BYTES, MEASURED_OPS, MODES
    check_choice("--device", device, TP_DEVICES)
    for m in mode or []:
        check_choice("--mode", m, MODES)
    for o in op or []:
        check_choice("--op", o, MEASURED_OPS + ENGINE_OPS)
        if o in ENGINE_OPS and device != "cuda":
            fail(f"--op {o}: vLLM's custom allreduce kernel runs on CUDA GPUs only (--device cuda)")
    backend = "nccl" if device == "cuda" else "gloo"
    itemsize, largest = ELEMENT_BYTES[backend], MAX_SIZE_BYTES[backend]
    for s in size_bytes or []:
        if not 0 < s <= largest or s % itemsize:
            fail(f"--size-bytes {s}: expected a multiple of {itemsize} bytes ({'bf16' if itemsize == 2 else 'float32'}"
                 f" elements on --device {device}) in {itemsize}..{largest:,}")
    sizes = list(world_size or [])
    if any(w < 2 for w in sizes):
        fail(f"--world-size must be >= 2, got {sizes}")
    if device == "cpu" and sizes and max(sizes) > max(os.cpu_count() or 2, 2):
        fail(f"--world-size {max(sizes)}: expected 2..{max(os.cpu_count() or 2, 2)} on --device cpu "
             "(one gloo process per CPU core here)")
    if device == "cuda":
        check_gpus("--device cuda", max(sizes or [2]))
    store = points_store(points)
    from calibration.bench.collectives import measure_collectives
    try:
        n = measure_collectives(store, quick=quick, world_sizes=sizes or None, backend=backend, modes=mode or None,
                                ops=tuple(op or MEASURED_OPS), sizes_bytes=size_bytes or None)
    except (ValueError, RuntimeError) as e:
        fail(str(e), code=1)
    console.print(f"stored {n} points in {escape(str(points))}")


def tp_forwards(
    points: PointsOption,
    tp: Annotated[Optional[list[int]], typer.Option(help="TP sizes; repeat for several (default 2 .. the GPUs "
                                                         "there are).")] = None,
    sizes: Annotated[str, typer.Option(help="Comma-separated (target, draft) pairs of "
                                            "calibration.shapes.SIZES.")] = "8b",
    quick: Annotated[bool, typer.Option(help="The quick forward grid (num_tokens 1, 4, 16).")] = False,
    device: Annotated[str, typer.Option(help="cuda (NCCL, one GPU per rank) or cpu (gloo processes, wall "
                                             "clock).")] = "cuda",
) -> None:
    """Whole target forwards, draft steps and extends over TP groups, into a points file."""
    import os

    from calibration.shapes import SIZES
    check_choice("--device", device, TP_DEVICES)
    size_keys = check_sizes("--sizes", sizes, SIZES)
    check_points_file("--points", points)
    torch = need_torch()
    num_gpus = torch.cuda.device_count() if device == "cuda" else 0
    if device == "cuda" and num_gpus < 2:
        fail(f"--device cuda needs >= 2 GPUs; {num_gpus} visible (--device cpu runs gloo processes)")
    tps = list(tp or range(2, num_gpus + 1))
    if any(t < 2 for t in tps):
        fail(f"--tp sizes must be >= 2, got {tps}")
    most = num_gpus if device == "cuda" else max(os.cpu_count() or 2, 2)
    if max(tps) > most:
        fail(f"--tp {max(tps)} needs {max(tps)} {'GPUs' if device == 'cuda' else 'CPU cores'}; {most} here")
    from calibration.bench.ops import DEFAULT_GRID, QUICK_GRID
    from calibration.bench.tp_forwards import measure_tp_forwards
    n = measure_tp_forwards(points_store(points), [m for s in size_keys for m in SIZES[s]], tps,
                            QUICK_GRID if quick else DEFAULT_GRID, backend="nccl" if device == "cuda" else "gloo")
    console.print(f"stored {n} points in {escape(str(points))}")


def forwards_batch(
    points: PointsOption,
    sizes: Annotated[str, typer.Option(help="Comma-separated (target, draft) pairs of calibration.shapes.TP_SIZES "
                                            "(8b, 1b; tiny for a CPU smoke run).")] = "8b,1b",
    batches: Annotated[str, typer.Option(help="Comma-separated batch sizes (requests per forward).")] =
        "1,2,4,8,16,32,64",
    quick: Annotated[bool, typer.Option(help="Context 1024 only (default 1024 and 2048), fewer samples.")] = False,
    device: Annotated[Optional[str], typer.Option(help="torch device; default cuda when available (on the CPU: "
                                                       "wall clock).")] = None,
) -> None:
    """Whole target forwards, draft steps and extends at batch 1..64 (CUDA graphs), into a points file
    whose batch points build whole-forward tables with a batch axis."""
    from calibration.shapes import TP_SIZES
    size_keys = check_sizes("--sizes", sizes, TP_SIZES)
    batch_sizes = check_batches("--batches", batches)
    torch = need_torch()
    dev = check_device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    store = points_store(points)
    from calibration.bench.forwards import BATCH_CONTEXT_LEN, QUICK_BATCH_CONTEXT_LEN, bench_batch_forwards
    from calibration.provenance import command_line
    from calibration.timing import TimingSettings
    before = len(store)
    bench_batch_forwards(store, [m for s in size_keys for m in TP_SIZES[s]], dev, command_line(), batch_sizes,
                         QUICK_BATCH_CONTEXT_LEN if quick else BATCH_CONTEXT_LEN,
                         settings=TimingSettings(num_replays=8) if quick else None)
    console.print(f"stored {len(store) - before} points in {escape(str(points))} ({len(store)} in all)")


def loop_overhead(
    points: PointsOption,
    passes: Annotated[int, typer.Option(help="Interleaved passes over the probe depths.")] = 3,
    device: Annotated[str, typer.Option(help="torch device (CUDA: the table is of CUDA-graph loops).")] = "cuda",
) -> None:
    """The live loop's host time per cycle against its GPU time, on a probe target at several depths."""
    import time

    check_at_least("--passes", passes, 1)
    check_device(device)
    from calibration.bench.loop_overhead import measure, table_from_records
    store = points_store(points)
    t0 = time.perf_counter()
    try:
        ran = measure(store, device, passes)
    except RuntimeError as e:
        fail(str(e))
    console.print(f"ran {ran} points in {time.perf_counter() - t0:.0f} s")
    t = Table(title="live-loop host time per cycle vs GPU time per cycle (median over passes)")
    for c in ("loop", "gpu_us", "overhead_us"):
        t.add_column(c, justify="right")
    for kind in ("spec", "baseline"):
        for g, o in zip(*(table_from_records(store.records(), kind) or ([], []))):
            t.add_row(kind, f"{g:.0f}", f"{o:.0f}")
    console.print(t)


def loop_reps(
    points: PointsOption,
    device: Annotated[str, typer.Option(help="torch device (the curve needs CUDA).")] = "cuda",
) -> None:
    """Tiny-model loop overheads (the profile's host figures) and their curve over GPU waits.

    Five interleaved repeats of the speculative and baseline loops, idle and with a 5 ms GPU
    sleep, and the curve over GPU sleeps of 0-20 ms, into a points file (CUDA).
    """
    dev = check_device(device)
    from calibration.bench.loop_overhead import measure_loop_overhead_curve, measure_loop_overheads
    from calibration.provenance import command_line
    store = points_store(points)
    before = len(store)
    measure_loop_overheads(store, dev, command_line())
    measure_loop_overhead_curve(store, dev, command_line())
    waits = sorted(k for k in store.records() if k.startswith(("host:loop_overhead:", "host:loop_wait:")))
    console.print(f"stored {len(store) - before} points in {escape(str(points))}; "
                  f"{len(waits)} loop-overhead points there in all")


def engine_moe(
    engine_src: Annotated[Path, typer.Option(help="An unpacked sglang package: the folder holding sglang/ "
                                                  "(its kernels/ops/moe and layers/moe/moe_runner/triton_utils).")],
    out: Annotated[Path, typer.Option(help="JSON lines to append to (an interrupted run keeps its records; "
                                           "a re-run skips them).")],
    shape: Annotated[Optional[list[str]], typer.Option(help="NAME:E:K:N:TOPK:QUANT[:default], repeatable (N: "
                                                            "intermediate size per rank; QUANT fp8_block128 or "
                                                            "fp8_tensor); default Qwen3-235B, DeepSeek-V3 and "
                                                            "Kimi-K2 at TP8.")] = None,
    tokens: Annotated[str, typer.Option(help="Token counts, comma-separated, 1..65536.")] = "1,2,4,8,16,24,32,64",
    routings: Annotated[int, typer.Option(help="Routings cycled through (experts differ from call to call), "
                                               "1..64.")] = 8,
) -> None:
    """Time SGLang's own Triton fused-MoE kernels on this GPU (calibration/bench/engine_moe.py): the
    records feed `specdecsim calibrate moe-kernel-times` and serving_engine.moe_layer_latency_us."""
    from calibration.bench.engine_moe import DEFAULT_SHAPES, check_engine_src, check_shape, run
    try:
        check_engine_src(engine_src)
        shapes = list(shape or DEFAULT_SHAPES)
        for spec in shapes:
            check_shape(spec)
        int_list("--tokens", tokens, 1, 65536, "token counts in")  # as written: ASCII digits, no empty item
        counts = [int(t) for t in tokens.split(",")]
    except ValueError as e:
        fail(str(e) if str(e).startswith("--") else f"--tokens {tokens!r}: comma-separated integers")
    if not counts or not all(1 <= t <= 65536 for t in counts):
        fail(f"--tokens {tokens!r}: token counts in 1..65536")
    check_at_least("--routings", routings, 1)
    if routings > 64:
        fail(f"--routings {routings}: at most 64")
    if out.exists() and not out.is_file():
        fail(f"--out {out}: not a regular file")
    need_torch()
    try:
        failed = run(engine_src, out, shapes, counts, routings)
    except ValueError as e:
        fail(str(e))
    if failed:
        fail(f"{failed} shape(s) failed (tracebacks above); the others' records are in {out}")


def moe(
    out: Annotated[Path, typer.Option(help="JSON to write (atomically).")],
    shape: Annotated[list[str] | None, typer.Option(
        help="MoE layer shape, repeatable: qwen3-30b-a3b-tp1, deepseek-v3-tp8, kimi-k2-tp8, tiny, <shape>-tiny, "
             "or all (the three model shapes).")] = None,
    dtype: Annotated[str, typer.Option(help="Expert weights and GEMMs: bf16 (grouped GEMM) or fp8 (e4m3 weights, "
                                            "rowwise scales, scaled grouped GEMM or a per-expert scaled GEMM loop).")
                     ] = "bf16",
    device: Annotated[str, typer.Option(help="torch device.")] = "cuda",
    profile: Annotated[str, typer.Option(help="Profile whose device-copy bandwidth is the reference.")] = "h200",
    force: Annotated[bool, typer.Option("--force", help=FORCE_HELP)] = False,
) -> None:
    """MoE routed experts at small token counts: grouped-GEMM time and the HBM bandwidth it reaches."""
    check_output("--out", out, DIAGNOSTIC_OUTPUT, force)
    torch = need_torch()
    from calibration.bench.moe import DTYPES, MODEL_SHAPES, SHAPES, bench, fp8_kernel, tiny_variant
    from simulator.files import OUTPUT_KEY, write_json_atomic
    from simulator.profile import load_profile, resolve_profile_path
    from simulator.units import BYTES_PER_GB

    known = {**SHAPES, **{f"{k}-tiny": tiny_variant(v) for k, v in SHAPES.items() if k != "tiny"}}
    names = shape or ["kimi-k2-tp8"]
    names = [n for name in names for n in (MODEL_SHAPES if name == "all" else (name,))]
    for name in names:
        check_choice("--shape", name, tuple(sorted(known)) + ("all",))
    check_choice("--dtype", dtype, DTYPES)
    dev = check_device(device)
    if dtype == "fp8" and fp8_kernel(dev) is None:
        fail(f"--dtype fp8: neither torch._scaled_grouped_mm nor torch._scaled_mm runs on {dev} "
             f"(torch {torch.__version__})")
    try:
        hbm = load_profile(resolve_profile_path(profile)).roofline.hbm_bandwidth_gb_per_s
    except (FileNotFoundError, ValueError) as e:
        fail(f"--profile: {e}")
    rows = [r for name in names for r in bench(known[name], device, hbm_gb_per_s=hbm, dtype=dtype)]
    write_json_atomic(out, {
        OUTPUT_KEY: DIAGNOSTIC_OUTPUT, "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "torch_version": torch.__version__, "reference_profile": profile, "reference_hbm_gb_per_s": hbm,
        "dtype": dtype, "shapes": names, "rows": rows})
    for name in names:
        sub = [r for r in rows if r["shape"] == known[name].name]
        t = Table(title=f"MoE routed experts, {name}, {sub[0]['dtype']} ({sub[0]['kernel']})")
        for c in ("tokens", "distinct experts", "us", "GB read", "GB/s", "vs copy"):
            t.add_column(c, justify="right")
        for r in sub:
            t.add_row(str(r["num_tokens"]), f"{r['distinct_experts']:.1f}", f"{r['latency_us']:.1f}",
                      f"{r['weight_bytes'] / BYTES_PER_GB:.3f}", f"{r['achieved_gb_per_s']:,.0f}",
                      f"{r['efficiency_vs_copy']:.2f}" if r["efficiency_vs_copy"] else "-")
        console.print(t)
    console.print(f"wrote {escape(str(out))}")


def session(
    points: PointsOption,
    out: Annotated[Path, typer.Option(help="Folder for the noise grid's LiveRun records (resumes).")],
    device: Annotated[str, typer.Option(help="torch device (the noise grid is of CUDA-graph points).")] = "cuda",
) -> None:
    """Whole forwards re-timed, then the noise grid, in one session of one GPU.

    The tp-1 graph whole forwards (targets, drafts' step and extend; contexts 1024, 2048) timed
    afresh into a points file, then the interleaved noise grid into a records folder, so a
    profile with those forwards and the records share the machine's state.
    """
    refuse_file("--out", out)
    dev = check_device(device)
    from calibration.bench.forwards import time_session_forwards
    from calibration.live.grid import NUM_CYCLES, WARMUP_CYCLES, noise_grid, run_grid
    from calibration.provenance import command_line
    from calibration.shapes import DEFAULT_MODELS
    store = points_store(points)
    time_session_forwards(store, list(DEFAULT_MODELS), dev, command_line())
    console.print(f"{len(store)} points in {escape(str(points))}")
    failed = run_grid(noise_grid(), out, NUM_CYCLES, WARMUP_CYCLES, device)
    for point, error in failed:
        err_console.print(f"[red]failed: {escape(point)}: {escape(error)}")
    if failed:
        raise typer.Exit(1)
