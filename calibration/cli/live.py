"""`specdecsim live`: the live speculative grid on a GPU, or over a tensor-parallel group of GPUs.

    specdecsim live --out DIR [--quick | --noise] [--device cuda] [--cycles N] [--warmup N]
    specdecsim live --tp N --out DIR [--quick | --noise] [--sizes 8b,1b] [--eager] [--device cuda|cpu]
    specdecsim live --batch-grid --out DIR [--sizes 8b] [--batches 1,2,4,8,16,32,64] [--device cuda]
    specdecsim live --serving --out DIR [--sizes 8b] [--concurrency 1,4,16,32] [--num-steps 3] [--requests N]

Without --tp: the single-GPU grid (calibration/live/grid.py); on a device without CUDA only its
eager points run (CUDA graphs need a GPU). --batch-grid: the single-GPU batch grid (grid.batch_grid:
CUDA graphs at each batch size, num_steps 1, 3, 5 at acceptance 0.7, paired baselines, 3
interleaved repeats); on a CPU it runs eager (a smoke run of the same points). With --tp N: N spawned ranks (calibration/live/tp_grid.py),
NCCL with one GPU each, or gloo CPU processes with --device cpu. --serving: the live loop as a
closed-loop server at each concurrency (calibration/live/serving.py; speculative and baseline, one
LiveServingRun JSON each; eager on a CPU). One LiveRun JSON per point;
points already in DIR are skipped (resume). Parses, checks, runs and writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from calibration.cli.common import (TP_DEVICES, check_at_least, check_batches, check_choice, check_device, check_gpus, check_sizes,
                                    err_console, fail, must_be_int_list, need_torch, out_path, refuse_file)


def live(
    out: Annotated[str, typer.Option(help="Folder for one LiveRun JSON per point (resumes).")],
    quick: Annotated[bool, typer.Option(help="A few points, fewer cycles (< 1 min on one GPU).")] = False,
    noise: Annotated[bool, typer.Option(help="Every CUDA-graph point 3 times in interleaved passes, each "
                                             "speculative run followed by a paired baseline "
                                             "(run-to-run noise).")] = False,
    device: Annotated[str, typer.Option(help="torch device; with --tp: cuda or cpu (gloo).")] = "cuda",
    cycles: Annotated[Optional[int], typer.Option(help="Timed cycles per point (>= 1).")] = None,
    warmup: Annotated[Optional[int], typer.Option(help="Warm-up cycles per point (>= 0).")] = None,
    tp: Annotated[Optional[int], typer.Option(help="Run the tensor-parallel grid over this many ranks "
                                                   "(one GPU each on CUDA; 1 is a smoke run of that path); with "
                                                   "--engine / --from-points the engine's TP group (one process a "
                                                   "rank; from points: the group to read, default the only "
                                                   "one).")] = None,
    sizes: Annotated[Optional[str], typer.Option(help="With --tp or --batch-grid: comma-separated model sizes of "
                                                      "calibration.shapes.TP_SIZES (default 8b,1b; "
                                                      "--batch-grid: 8b).")] = None,
    batch_grid: Annotated[bool, typer.Option("--batch-grid", help="The batch grid: CUDA graphs at each of "
                                                                  "--batches, num_steps 1, 3, 5 at acceptance "
                                                                  "0.7, paired baselines, 3 interleaved "
                                                                  "repeats.")] = False,
    batches: Annotated[Optional[str], typer.Option(help="With --batch-grid: comma-separated batch sizes "
                                                        "(default 1,2,4,8,16,32,64).")] = None,
    eager: Annotated[bool, typer.Option(help="With --tp on CUDA: eager instead of CUDA graphs.")] = False,
    serving: Annotated[bool, typer.Option("--serving", help="Closed-loop serving runs at each --concurrency "
                                                            "(continuous batching, seeded output lengths), "
                                                            "speculative and baseline.")] = False,
    concurrency: Annotated[Optional[str], typer.Option(help="With --serving: comma-separated requests in flight "
                                                            "(default 1,4,16,32).")] = None,
    num_steps: Annotated[Optional[int], typer.Option(help="With --serving: draft steps of the speculative runs "
                                                          "(default 3).")] = None,
    requests: Annotated[Optional[int], typer.Option(help="With --serving: requests per run (default "
                                                         "max(24, 12 x concurrency)).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace files in OUT that have a point's name but are "
                                                         "not LiveRun records.")] = False,
    engine: Annotated[Optional[str], typer.Option(help="Live runs of a serving engine instead of the project's "
                                                       "loop: vllm or sglang (installed on this GPU host) or fake (no "
                                                       "GPU); "
                                                       "num_steps 1,2,3,4,6 x --batches x prompts 1k/4k, "
                                                       "acceptance 0.5/0.7/0.9, paired baselines, 2 repeats.")] = None,
    points: Annotated[Optional[Path], typer.Option(help="With --engine: resumable points file (default "
                                                        "OUT/points.jsonl).")] = None,
    from_points: Annotated[Optional[list[Path]], typer.Option(help="Records from an engine's points files "
                                                                   "(plain or .gz), no engine run.")] = None,
    engine_profile: Annotated[Optional[str], typer.Option(help="With --engine / --from-points: the engine profile "
                                                               "the records' scenarios name.")] = None,
    target: Annotated[str, typer.Option(help="With --engine / --from-points: the target config under "
                                             "data/models/engine/.")] = "llama-3.1-8b-instruct",
    draft: Annotated[str, typer.Option(help="With --engine / --from-points: the EAGLE-3 draft config under "
                                            "data/models/engine/.")] = "eagle3-llama-3.1-8b",
    topk: Annotated[int, typer.Option(help="With --engine sglang / --from-points: draft branches per step "
                                           "(SGLang's speculative_eagle_topk); 1 is a chain.")] = 1,
    num_draft_tokens: Annotated[Optional[int], typer.Option(help="With --topk > 1: tokens verified per request "
                                                                 "(SGLang's speculative_num_draft_tokens).")] = None,
    no_overlap: Annotated[bool, typer.Option("--no-overlap", help="With --engine sglang / --from-points: SGLang's "
                                                                  "overlap scheduler off.")] = False,
    draft_tp: Annotated[Optional[int], typer.Option("--draft-tp", help="With --engine / --from-points and --tp: the "
                                                                       "draft's TP asked of the engine, 1 or --tp "
                                                                       "(vLLM's draft_tensor_parallel_size).")] = None,
) -> None:
    """Run the live speculative grid (real forwards, seeded acceptance oracle) and write one record per point."""
    out = out_path("--out", out, folder=True)
    if engine is not None or from_points:
        if quick or noise or batch_grid or serving or cycles is not None or warmup is not None:
            fail("--engine / --from-points run the engine's own grid: leave out --quick, --noise, --batch-grid, "
                 "--serving, --cycles, --warmup")
        refuse_file("--out", out)
        from calibration.cli.engine import live_engine
        live_engine(out, engine, points, from_points, engine_profile, batches, force, target, draft,
                    topk=topk, num_draft_tokens=num_draft_tokens, no_overlap=no_overlap, tp=tp, draft_tp=draft_tp)
        return
    if draft_tp is not None:
        fail("--draft-tp goes with --engine or --from-points (the project's loop takes the placement from its grid)")
    if topk != 1 or num_draft_tokens is not None or no_overlap:
        fail("--topk, --num-draft-tokens and --no-overlap go with --engine sglang or --from-points")
    if points is not None or engine_profile is not None:
        fail(f"{'--points' if points is not None else '--engine-profile'} goes with --engine or --from-points")
    if quick + noise + batch_grid + serving > 1:
        fail("--quick, --noise, --batch-grid and --serving are different grids: give one")
    for opt, v in (("--concurrency", concurrency), ("--num-steps", num_steps), ("--requests", requests)):
        if v is not None and not serving:
            fail(f"{opt} goes with --serving")
    if serving and (tp is not None or cycles is not None or warmup is not None or eager):
        fail("--serving runs on one GPU with its own step counts: leave out --tp, --cycles, --warmup, --eager")
    if batches is not None and not batch_grid:
        fail("--batches goes with --batch-grid")
    if batch_grid and tp is not None:
        fail("--batch-grid runs on one GPU: leave out --tp")
    check_at_least("--cycles", cycles, 1)
    check_at_least("--warmup", warmup, 0)
    check_at_least("--tp", tp, 1)
    refuse_file("--out", out)
    check_at_least("--num-steps", num_steps, 1)
    check_at_least("--requests", requests, 1)
    need_torch("specdecsim live")
    if serving:
        _serving(out, device, sizes if sizes is not None else "8b",
                 concurrency if concurrency is not None else "1,4,16,32", num_steps or 3, requests, force)
    elif batch_grid:
        if eager:
            fail("--eager goes with --tp (the batch grid runs CUDA graphs; on a CPU, eager)")
        _batch_grid(out, device, cycles, warmup, sizes if sizes is not None else "8b",
                    batches if batches is not None else "1,2,4,8,16,32,64", force)
    elif tp is None:
        if sizes is not None or eager:
            fail(f"{'--sizes' if sizes is not None else '--eager'} goes with --tp (the single-GPU grid is fixed)")
        _single_gpu(out, quick, noise, device, cycles, warmup, force)
    else:
        _tensor_parallel(out, quick, noise, device, cycles, warmup, tp, sizes or "8b,1b", eager, force)


def _refuse_foreign(out: Path, points, force: bool) -> None:
    """Exit 2 when a file in `out` has a point's record name but is not a LiveRun (and not --force)."""
    from calibration.live.grid import foreign_records
    foreign = foreign_records(out, points)
    if foreign and not force:
        fail(f"--out {out}: {len(foreign)} file(s) with a point's name are not LiveRun records (e.g. {foreign[0]}); "
             "--force replaces them")


def _single_gpu(out: Path, quick: bool, noise: bool, device: str, cycles: int | None, warmup: int | None,
                force: bool) -> None:
    dev = check_device(device)
    from calibration.live import grid as live_grid
    num_cycles, warmup_cycles = live_grid.cycle_counts(quick, cycles, warmup)
    points = live_grid.noise_grid() if noise else live_grid.grid(quick)
    if dev.type != "cuda":
        graph_points = [p for p in points if p.graph]
        points = [p for p in points if not p.graph]
        if graph_points:
            err_console.print(f"--device {escape(device)}: {len(graph_points)} CUDA-graph points left out "
                              "(they need a GPU); the eager points run")
        if not points:
            fail(f"--device {device}: every point of this grid runs CUDA graphs, which need a GPU")
    _run_points(points, out, num_cycles, warmup_cycles, device, force)


def _run_points(points, out: Path, num_cycles: int, warmup_cycles: int, device: str, force: bool) -> None:
    """Run a grid's points into `out` (refusing foreign files first); exit 1 naming failed points."""
    from calibration.live import grid as live_grid
    _refuse_foreign(out, points, force)
    failed = live_grid.run_grid(points, out, num_cycles, warmup_cycles, device)
    for name, error in failed:
        err_console.print(f"[red]failed: {escape(name)}: {escape(error)}")
    if failed:
        raise typer.Exit(1)


def _batch_grid(out: Path, device: str, cycles: int | None, warmup: int | None, sizes: str, batches: str,
                force: bool) -> None:
    from calibration.shapes import SIZES
    size_keys = check_sizes("--sizes", sizes, SIZES)
    batch_sizes = check_batches("--batches", batches)
    dev = check_device(device)
    from calibration.live import grid as live_grid
    num_cycles, warmup_cycles = live_grid.cycle_counts(False, cycles, warmup)
    points = live_grid.batch_grid(size_keys, batch_sizes)
    if dev.type != "cuda":
        import dataclasses
        err_console.print(f"--device {escape(device)}: the batch grid runs eager here (CUDA graphs need a GPU)")
        points = [dataclasses.replace(p, graph=False) for p in points]
    _run_points(points, out, num_cycles, warmup_cycles, device, force)


def _serving(out: Path, device: str, sizes: str, concurrency: str, num_steps: int, requests: int | None,
             force: bool) -> None:
    from calibration.shapes import SIZES
    size_keys = check_sizes("--sizes", sizes, SIZES)
    levels = must_be_int_list("--concurrency", concurrency, 1, 1024)
    if num_steps > 16:
        fail(f"--num-steps must be 1..16, got {num_steps}")
    if requests is not None and requests > 100_000:
        fail(f"--requests must be 1..100000, got {requests}")
    dev = check_device(device)
    from calibration.live import serving as live_serving
    points = live_serving.serving_grid(size_keys, levels, num_steps, graph=dev.type == "cuda", num_requests=requests)
    if dev.type != "cuda":
        err_console.print(f"--device {escape(device)}: the serving runs go eager here (CUDA graphs need a GPU)")
    names = [out / f"{p.name}.json" for p in points]
    foreign = [f for f in names if (f.exists() or f.is_symlink()) and live_serving.load_serving_record(f) is None]
    if foreign and not force:
        fail(f"--out {out}: {len(foreign)} file(s) with a run's name are not LiveServingRun records (e.g. "
             f"{foreign[0]}); --force replaces them")
    failed = live_serving.run_serving_grid(points, out, device)
    for name, error in failed:
        err_console.print(f"[red]failed: {escape(name)}: {escape(error)}")
    if failed:
        raise typer.Exit(1)


def _tensor_parallel(out: Path, quick: bool, noise: bool, device: str, cycles: int | None, warmup: int | None,
                     tp: int, sizes: str, eager: bool, force: bool) -> None:
    from calibration.shapes import TP_SIZES
    check_choice("--device", device, TP_DEVICES)
    size_keys = check_sizes("--sizes", sizes, TP_SIZES)
    if device == "cuda":
        check_gpus(f"--tp {tp}", tp)
    from calibration.live import grid as live_grid
    from calibration.live import tp_grid
    num_cycles, warmup_cycles = live_grid.cycle_counts(quick, cycles, warmup)
    graph = device == "cuda" and not eager
    points = tp_grid.noise_grid(size_keys, graph, tp) if noise else tp_grid.grid(quick, size_keys, graph, tp)
    try:
        tp_grid.check_tp_points(points, tp, num_cycles, warmup_cycles)
    except ValueError as e:
        fail(f"--tp {tp} --sizes: {e}")
    _refuse_foreign(out, points, force)
    missing = tp_grid.run_tp_grid(points, out, tp, device, num_cycles, warmup_cycles)
    for name in missing:
        err_console.print(f"[red]not written: {escape(name)}")
    if missing:
        raise typer.Exit(1)
