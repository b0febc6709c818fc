"""`specdecsim calibrate`: measure this machine into points and a profile, and the tools around it.

    specdecsim calibrate [--quick] [--resume/--no-resume] [--out PATH] [--points PATH] [--tp N ...]
    specdecsim calibrate import-nccl-tests LOG... --profile P --out OUT [--in-place]
    specdecsim calibrate merge --points P... --out OUT [--gpu-count N --interconnect T --topology T]
    specdecsim calibrate collectives --points P [--world-size N ...] [--quick] [--device cuda|cpu]
    specdecsim calibrate tp-forwards --points P [--tp N ...] [--sizes 8b,1b] [--quick] [--device cuda|cpu]
    specdecsim calibrate forwards-batch --points P [--sizes 8b,1b] [--batches 1,2,4,8,16,32,64] [--quick]
    specdecsim calibrate loop-overhead --points P [--passes 3]    (the probe target, real models)
    specdecsim calibrate loop-reps --points P                     (tiny-model loop overheads and curve)
    specdecsim calibrate moe --out moe.json [--shape kimi-k2-tp8 ... | --shape all] [--dtype bf16|fp8]
    specdecsim calibrate session --points P --out LIVE_DIR        (forwards re-timed, then the noise grid)
    specdecsim calibrate from-runs SCENARIO RUN... --out FITTED.yaml [--fit P,P]   (an engine's own logs)
    specdecsim calibrate from-traces DIR --out PROFILE.json [--roofline-from h200_datasheet] [--name N]

Parses, checks, runs and writes; no modelled numbers here. torch is imported only inside the
measuring commands, so importing this module (and `import-nccl-tests`, `merge`) works without it.
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from calibration.cli.common import (TP_DEVICES, check_at_least, check_batches, check_choice, check_device, check_gpus, check_sizes,
                                    FORCE_HELP, check_output, check_points_file, console, err_console, fail,
                                    need_torch, refuse_file)
from simulator.files import DIAGNOSTIC_OUTPUT, PROFILE_OUTPUT

calibrate_app = typer.Typer(invoke_without_command=True, add_completion=False,
                            help="Measure this machine into a calibration profile, and the tools around it.")
PointsOption = Annotated[Path, typer.Option(help="PointStore JSONL to add the points to (resumes).")]


def _store(points: Path):
    """The PointStore at `points`; exit 2 when it names a folder or a file that is not a points file."""
    check_points_file("--points", points)
    from calibration.build.store import PointStore
    return PointStore(points)


def _print_profile(profile, out: Path) -> None:
    console.print(f"[green]wrote {escape(str(out))}[/]: {len(profile.ops)} op tables, {len(profile.forwards)} "
                  f"forward tables, {len(profile.collectives)} collective tables")


@calibrate_app.callback()
def calibrate(
    ctx: typer.Context,
    quick: Annotated[bool, typer.Option(help="Small grid (about 1 minute on an H200).")] = False,
    resume: Annotated[bool, typer.Option(help="Keep points already measured (--no-resume moves them aside).")] = True,
    out: Annotated[Path, typer.Option(help="Profile JSON to write (not a shipped one unless you mean it).")] = Path(
        "data/profiles/local.json"),
    points: Annotated[Optional[Path], typer.Option(help="Resumable points file (JSONL); default OUT with "
                                                         "the suffix .points.jsonl.")] = None,
    tp: Annotated[Optional[list[int]], typer.Option(help="TP sizes whose sharded shapes are measured; "
                                                         "repeat for several (default 1 2 4 8).")] = None,
    scenario: Annotated[Optional[list[Path]], typer.Option(help="Measure these scenarios' target and draft "
                                                                "shapes; repeat for several.")] = None,
    device: Annotated[Optional[str], typer.Option(help="torch device; default cuda when available.")] = None,
    forwards: Annotated[bool, typer.Option(help="Also time whole forwards (tp 1; tp 2+ over the GPUs "
                                                "there are).")] = True,
    name: Annotated[Optional[str], typer.Option(help="Profile name; default the file stem.")] = None,
    force: Annotated[bool, typer.Option("--force", help=FORCE_HELP)] = False,
) -> None:
    """Calibrate this machine (per-op, host, roofline, forwards, collectives) and write a profile."""
    if ctx.invoked_subcommand is not None:
        return
    need_torch()
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from calibration import calibrate as calibration_run
    from simulator.scenario import UserInputError

    points = points or calibration_run.default_points_path(out)
    check_output("--out", out, PROFILE_OUTPUT, force)
    check_points_file("--points", points)
    if device is not None:
        check_device(device)
    tp_sizes = list(tp or [1, 2, 4, 8])
    if any(t < 1 for t in tp_sizes):
        fail(f"--tp sizes must be >= 1, got {tp_sizes}")
    try:
        models = calibration_run.scenario_models(list(scenario)) if scenario else None
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                      console=err_console, transient=True) as progress:
            progress.add_task(f"calibrating into {points} (tp {tp_sizes}{', quick' if quick else ''})", total=None)
            profile = calibration_run.run_calibration(out, points, quick=quick, resume=resume, models=models,
                                                      tp_sizes=tp_sizes, device=device, name=name, forwards=forwards)
    except (UserInputError, ValueError, OSError) as e:
        fail(f"{type(e).__name__}: {e}" if not isinstance(e, UserInputError) else str(e))
    _print_profile(profile, out)
    for key, note in profile.notes.items():
        console.print(f"  {escape(key)}: {escape(note)}", highlight=False)


@calibrate_app.command("import-nccl-tests")
def import_nccl_tests(
    logs: Annotated[list[Path], typer.Argument(help="nccl-tests logs (all_reduce_perf, broadcast_perf, "
                                                    "all_gather_perf, sendrecv_perf output).")],
    profile: Annotated[str, typer.Option(help="Existing profile to merge into: a shipped name (h200) or a JSON path.")],
    out: Annotated[Path, typer.Option(help="Profile JSON to write (may be the same as --profile).")],
    in_place: Annotated[bool, typer.Option("--in-place", help="Use the in-place time column.")] = False,
    op: Annotated[Optional[str], typer.Option(help="Collective, when the log does not say: allreduce, "
                                                   "broadcast, all_gather, send_recv.")] = None,
    world_size: Annotated[Optional[int], typer.Option(help="Ranks, when the log's '#  Rank' lines do not "
                                                           "show them all.")] = None,
    mode: Annotated[Optional[str], typer.Option(help="eager or graph, overriding the log's 'graph: K'.")] = None,
    command: Annotated[Optional[str], typer.Option(help="The nccl-tests command line, when the log lacks it.")] = None,
    force: Annotated[bool, typer.Option("--force", help=FORCE_HELP)] = False,
) -> None:
    """Merge nccl-tests latency tables into a profile (tables of the same op, world size, mode are replaced)."""
    from pydantic import ValidationError

    from calibration.build.nccl_tests import import_into_profile
    from simulator.profile import resolve_profile_path
    from simulator.scenario import format_validation_error

    check_choice("--mode", mode, ("eager", "graph"))
    check_output("--out", out, PROFILE_OUTPUT, force)
    missing = [str(p) for p in logs if not p.is_file()]
    if missing:
        fail(f"nccl-tests log not found: {', '.join(missing)}")
    try:
        profile_path = resolve_profile_path(profile)
    except FileNotFoundError as e:
        fail(str(e))
    try:
        merged = import_into_profile(profile_path, logs, out, in_place=in_place, op=op, world_size=world_size,
                                     mode=mode, command=command)
    except ValidationError as e:
        fail(format_validation_error(f"{profile_path} (with {', '.join(map(str, logs))})", e))
    except (ValueError, OSError) as e:
        fail(str(e))
    imported = {str(p) for p in logs}
    table = Table(title=f"collective tables in {out}")
    for col in ("op", "world_size", "mode", "sizes", "latency_us (first..last)", "from"):
        table.add_column(col)
    for t in merged.collectives:
        table.add_row(t.op, str(t.world_size), t.mode, f"{t.size_bytes[0]}..{t.size_bytes[-1]} B ({len(t.size_bytes)})",
                      f"{t.latency_us[0]:.2f}..{t.latency_us[-1]:.1f}",
                      "imported" if t.provenance.source in imported else "kept")
    console.print(table)
    console.print(f"[green]wrote {escape(str(out))}")


@calibrate_app.command("merge")
def merge(
    points: Annotated[list[Path], typer.Option(help="PointStore JSONL files, merged in order (a later file's "
                                                    "point replaces an earlier one's).")],
    out: Annotated[Path, typer.Option(help="Profile JSON to write (atomically).")],
    name: Annotated[Optional[str], typer.Option(help="Profile name; default the file stem.")] = None,
    gpu_count: Annotated[Optional[int], typer.Option(help="Override hardware.gpu_count.")] = None,
    interconnect: Annotated[Optional[str], typer.Option(help="Override hardware.interconnect.")] = None,
    topology: Annotated[Optional[str], typer.Option(help="Override hardware.topology.")] = None,
    catalog_gpu: Annotated[Optional[str], typer.Option(help="Hardware-catalog id of the measured GPU (specdecsim "
                                                            "hardware), so the profile can be carried to another "
                                                            "GPU.")] = None,
    catalog_box: Annotated[Optional[str], typer.Option(help="Hardware-catalog id of the box the collectives were "
                                                            "measured on (specdecsim hardware), so a box with another "
                                                            "interconnect prices them from its links.")] = None,
    force: Annotated[bool, typer.Option("--force", help=FORCE_HELP)] = False,
) -> None:
    """Build one profile from several points files (e.g. one GPU's op tables + a multi-GPU machine's collectives)."""
    from calibration.build.merge import merge_points
    from simulator.inputs import UserInputError
    from simulator.hardware import default_catalog
    from simulator.profile import save_profile

    check_at_least("--gpu-count", gpu_count, 1)
    if any(out.absolute() == p.absolute() for p in points):
        fail(f"--out {out} is one of the --points files; the profile goes to a file of its own")
    check_output("--out", out, PROFILE_OUTPUT, force)
    for p in points:
        check_points_file("--points", p)
    if catalog_gpu is not None:
        try:
            default_catalog().gpu(catalog_gpu)
        except UserInputError as e:
            fail(f"--catalog-gpu: {e}")
    if catalog_box is not None:
        try:
            default_catalog().box(catalog_box)
        except UserInputError as e:
            fail(f"--catalog-box: {e}")
    missing = [str(p) for p in points if not p.is_file()]
    if missing:
        fail(f"--points: no such points file: {', '.join(missing)}")
    update = {k: v for k, v in (("gpu_count", gpu_count), ("interconnect", interconnect), ("topology", topology),
                                ("catalog_gpu", catalog_gpu), ("catalog_box", catalog_box)) if v is not None}
    from pydantic import ValidationError

    from simulator.inputs import format_validation_error
    try:
        profile = merge_points(points, name or out.stem, update)
    except ValidationError as e:  # a measured value out of the profile's range (NaN, negative, ...)
        fail(format_validation_error(f"profile built from {', '.join(map(str, points))}", e))
    except (ValueError, OSError) as e:
        fail(str(e))
    except (KeyError, TypeError) as e:  # a point record without a field build_profile reads
        fail(f"--points {', '.join(map(str, points))}: a point record lacks or mistypes the field {e}")
    save_profile(profile, out)
    _print_profile(profile, out)


@calibrate_app.command("collectives")
def collectives(
    points: PointsOption,
    world_size: Annotated[Optional[list[int]], typer.Option(help="Ranks per group; repeat for several "
                                                                 "(default 2 .. the GPUs there are).")] = None,
    quick: Annotated[bool, typer.Option(help="Fewer sizes and samples.")] = False,
    device: Annotated[str, typer.Option(help="cuda (NCCL, one GPU per rank) or cpu (gloo processes).")] = "cuda",
    mode: Annotated[Optional[list[str]], typer.Option(help="eager, graph or eager_stream (back-to-back eager calls); "
                                                           "repeat for several (default eager and graph).")] = None,
    op: Annotated[Optional[list[str]], typer.Option(help="allreduce, broadcast or all_gather; repeat for several "
                                                         "(default all).")] = None,
    size_bytes: Annotated[Optional[list[int]], typer.Option(help="Per-rank message sizes; repeat for several "
                                                                 "(default the standard grid).")] = None,
) -> None:
    """Allreduce / broadcast / all_gather latency tables over spawned ranks, into a points file."""
    from calibration.bench.collectives import ELEMENT_BYTES, MAX_SIZE_BYTES, MEASURED_OPS, MODES
    check_choice("--device", device, TP_DEVICES)
    for m in mode or []:
        check_choice("--mode", m, MODES)
    for o in op or []:
        check_choice("--op", o, MEASURED_OPS)
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
    store = _store(points)
    from calibration.bench.collectives import measure_collectives
    try:
        n = measure_collectives(store, quick=quick, world_sizes=sizes or None, backend=backend, modes=mode or None,
                                ops=tuple(op or MEASURED_OPS), sizes_bytes=size_bytes or None)
    except (ValueError, RuntimeError) as e:
        fail(str(e), code=1)
    console.print(f"stored {n} points in {escape(str(points))}")


@calibrate_app.command("tp-forwards")
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
    n = measure_tp_forwards(_store(points), [m for s in size_keys for m in SIZES[s]], tps,
                            QUICK_GRID if quick else DEFAULT_GRID, backend="nccl" if device == "cuda" else "gloo")
    console.print(f"stored {n} points in {escape(str(points))}")


@calibrate_app.command("forwards-batch")
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
    store = _store(points)
    from calibration.bench.forwards import BATCH_CONTEXT_LEN, QUICK_BATCH_CONTEXT_LEN, bench_batch_forwards
    from calibration.provenance import command_line
    from calibration.timing import TimingSettings
    before = len(store)
    bench_batch_forwards(store, [m for s in size_keys for m in TP_SIZES[s]], dev, command_line(), batch_sizes,
                         QUICK_BATCH_CONTEXT_LEN if quick else BATCH_CONTEXT_LEN,
                         settings=TimingSettings(num_replays=8) if quick else None)
    console.print(f"stored {len(store) - before} points in {escape(str(points))} ({len(store)} in all)")


@calibrate_app.command("loop-overhead")
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
    store = _store(points)
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


@calibrate_app.command("loop-reps")
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
    store = _store(points)
    before = len(store)
    measure_loop_overheads(store, dev, command_line())
    measure_loop_overhead_curve(store, dev, command_line())
    waits = sorted(k for k in store.records() if k.startswith(("host:loop_overhead:", "host:loop_wait:")))
    console.print(f"stored {len(store) - before} points in {escape(str(points))}; "
                  f"{len(waits)} loop-overhead points there in all")


@calibrate_app.command("moe")
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


@calibrate_app.command("session")
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
    store = _store(points)
    time_session_forwards(store, list(DEFAULT_MODELS), dev, command_line())
    console.print(f"{len(store)} points in {escape(str(points))}")
    failed = run_grid(noise_grid(), out, NUM_CYCLES, WARMUP_CYCLES, device)
    for point, error in failed:
        err_console.print(f"[red]failed: {escape(point)}: {escape(error)}")
    if failed:
        raise typer.Exit(1)


FROM_RUNS_MARK = "# written by specdecsim calibrate from-runs\n"


@calibrate_app.command("from-runs")
def from_runs(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML of the runs' set-up (serving_engine kind sglang, "
                                                  "vllm or trtllm; hardware; models; spec).")],
    runs: Annotated[list[Path], typer.Argument(help="Engine outputs: SGLang server logs or bench output, vLLM "
                                                    "spec-decode logs, /metrics scrapes or bench output, "
                                                    "trtllm-bench reports (simulator.engine_runs).")],
    out: Annotated[Path, typer.Option(help="Scenario YAML to write: SCENARIO with the fitted engine fields.")],
    fit: Annotated[Optional[str], typer.Option(help="Comma-separated engine fields to fit (default per engine: "
                                                    "host_decode_step_us, host_cycle_us[, host_draft_step_us]); "
                                                    "also kernel_efficiency.")] = None,
    run_format: Annotated[str, typer.Option("--format", help="Format of every RUN file, or auto.")] = "auto",
    force: Annotated[bool, typer.Option("--force", help="Replace an existing --out file.")] = False,
) -> None:
    """Fit a serving engine's host times (and optionally its kernel efficiency) to its own runs:
    each run's throughput, batch and acceptance are read from its log; the scenario gives the rest.
    Prints the fitted values with standard errors and each run's error, and writes SCENARIO with
    them as --out (a baseline and one speculative run are enough for the two default fields)."""
    import yaml

    from simulator.engine_fit import FIT_PARAMS, fit_engine, run_observations
    from simulator.engine_runs import FORMATS, load_runs
    from simulator.files import write_text_atomic
    from simulator.inputs import UserInputError
    from simulator.scenario import load_scenario, read_scenario_dict

    if run_format != "auto":
        check_choice("--format", run_format, FORMATS)
    if out.is_dir():
        fail(f"--out {out}: is a folder; give the scenario YAML file to write")
    if out.exists() and not out.is_file():
        fail(f"--out {out}: not a regular file")
    if any(out.resolve() == p.resolve() for p in [scenario, *runs] if p.exists()):
        fail(f"--out {out}: is one of the inputs; write the fitted scenario elsewhere")
    if out.exists() and not force and not out.read_text(errors="replace").startswith(FROM_RUNS_MARK):
        fail(f"--out {out}: exists and is not an earlier from-runs output; --force replaces it")
    if fit is not None and not fit.strip(", "):
        fail("--fit: empty; give comma-separated engine fields, e.g. host_cycle_us,host_decode_step_us")
    for p in [scenario, *runs]:
        if p.is_dir():
            fail(f"{p}: is a folder, expected a file")
        if not p.is_file():
            fail(f"{p}: not found")
    try:
        sc = load_scenario(scenario)
        kind = sc.serving_engine.kind
        if kind == "live_loop":
            fail(f"{scenario}: serving_engine.kind live_loop: the live loop's host times are the profile's own "
                 f"(specdecsim calibrate); from-runs fits an engine kind ({', '.join(('sglang', 'vllm', 'trtllm'))})")
        if kind not in FIT_PARAMS and fit is None:
            fail(f"{scenario}: serving_engine.kind {kind}: give --fit (fields to fit), or use an engine kind "
                 f"({', '.join(FIT_PARAMS)})")
        params = tuple(p.strip() for p in fit.split(",") if p.strip()) if fit else FIT_PARAMS[kind]
        observed = [r for path in runs for r in load_runs(path, run_format)]
        other = sorted({r.engine for r in observed if r.engine not in (kind, None)})
        if other:
            console.print(f"[yellow]note:[/] runs of {', '.join(other)} fitted with a {kind} scenario", highlight=False)
        obs = run_observations(sc, observed, str(scenario))
        result = fit_engine(kind, obs, params)
    except UserInputError as e:
        fail(str(e))
    console.print(escape(result.table()), highlight=False)
    data = read_scenario_dict(scenario)
    for role in ("target", "draft"):  # config.json paths stay valid from --out's folder
        model = data.get(role)
        if isinstance(model, dict) and isinstance(model.get("config_path"), str) and not Path(model["config_path"]).is_absolute():
            model["config_path"] = os.path.relpath((scenario.parent / model["config_path"]).resolve(),
                                                   out.parent.resolve())
    engine = dict(data.get("serving_engine") or {})
    engine.update({k: round(v, 3) for k, v in result.params.items()})
    data["serving_engine"] = engine
    header = FROM_RUNS_MARK + "".join(f"# {line}\n" for line in
                     [f"from {scenario} and {len(runs)} run file(s):"]
                     + [f"  {p}" for p in runs] + result.table().splitlines())
    write_text_atomic(out, header + yaml.safe_dump(data, sort_keys=False))
    console.print(f"[green]wrote {escape(str(out))}[/]")


@calibrate_app.command("from-traces")
def from_traces(
    traces: Annotated[Path, typer.Argument(help="Folder `specdecsim diagnose trace --out` wrote (index.json and "
                                                "one torch.profiler trace per point).")],
    out: Annotated[Path, typer.Option(help="Profile JSON to write.")],
    roofline_from: Annotated[str, typer.Option(help="Profile (name or path) whose roofline prices what the "
                                                    "traces do not cover.")] = "h200_datasheet",
    name: Annotated[Optional[str], typer.Option(help="Profile name; default traces-<model>.")] = None,
    force: Annotated[bool, typer.Option("--force", help=FORCE_HELP)] = False,
) -> None:
    """A profile from the traces alone: whole-forward tables and host times of the traced loop
    (simulator/trace_profile.py); scenarios use it with costs.source whole_forward."""
    from simulator.inputs import UserInputError
    from simulator.profile import save_profile
    from simulator.trace_profile import profile_from_traces

    if not traces.is_dir():
        fail(f"{traces}: not a folder of traces (give the --out folder of `specdecsim diagnose trace`)")
    check_output("--out", out, PROFILE_OUTPUT, force)
    try:
        profile = profile_from_traces(traces, roofline_profile=roofline_from, name=name)
    except (UserInputError, FileNotFoundError) as e:
        fail(str(e))
    save_profile(profile, out)
    _print_profile(profile, out)
    h = profile.host
    console.print(f"host: schedule {h.host_schedule_us:.1f} us (baseline {h.baseline_host_schedule_us:.1f}), "
                  f"d2h sync {h.d2h_sync_us:.1f} us, graph replay {h.graph_replay_us:.1f} us", highlight=False)
