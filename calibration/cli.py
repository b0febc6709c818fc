"""`specdecsim calibrate`: measure this machine into a profile, or import nccl-tests logs into one.

    specdecsim calibrate [--quick] [--resume/--no-resume] [--out PATH] [--points PATH] [--tp N ...]
    specdecsim calibrate import-nccl-tests LOG... --profile P --out OUT [--in-place]

Parses, loads, runs and writes; no modelled numbers here. torch is imported only inside the
measuring command, so importing this module (and `import-nccl-tests`) works without it.
Bad input ends with one line naming the problem and exit code 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

calibrate_app = typer.Typer(invoke_without_command=True, add_completion=False,
                            help="Measure this machine into a calibration profile, or import nccl-tests logs.")
console = Console()
err_console = Console(stderr=True)
TORCH_MISSING = "specdecsim calibrate needs torch: pip install 'specdecsim[calibrate]'"


def fail(message: str, code: int = 2) -> None:
    """Print one error line (no traceback) and exit."""
    err_console.print(f"[bold red]error:[/] {escape(' '.join(message.split()))}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


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
    forwards: Annotated[bool, typer.Option(help="Also time whole target forwards (tp 1).")] = True,
    name: Annotated[Optional[str], typer.Option(help="Profile name; default the file stem.")] = None,
) -> None:
    """Calibrate this machine (per-op, host, roofline, forwards, collectives) and write a profile."""
    if ctx.invoked_subcommand is not None:
        return
    try:
        import torch
    except ImportError:
        fail(TORCH_MISSING)
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from calibration.run import _scenario_models, default_points_path, run_calibration
    from simulator.scenario import UserInputError

    points = points or default_points_path(out)
    for opt, path in (("--out", out), ("--points", points)):
        if path.is_dir():
            fail(f"{opt} {path} is a folder, expected a file path")
    if device is not None:
        try:
            dev = torch.device(device)
        except RuntimeError as e:
            fail(f"--device {device!r}: {e}")
        if dev.type == "cuda" and not torch.cuda.is_available():
            fail(f"--device {device}: no CUDA GPU here (--device cpu measures on the CPU)")
    tp_sizes = list(tp or [1, 2, 4, 8])
    if any(t < 1 for t in tp_sizes):
        fail(f"--tp sizes must be >= 1, got {tp_sizes}")
    try:
        models = _scenario_models(list(scenario)) if scenario else None
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                      console=err_console, transient=True) as progress:
            progress.add_task(f"calibrating into {points} (tp {tp_sizes}{', quick' if quick else ''})", total=None)
            profile = run_calibration(out, points, quick=quick, resume=resume, models=models, tp_sizes=tp_sizes,
                                      device=device, name=name, forwards=forwards)
    except (UserInputError, ValueError, OSError) as e:
        fail(f"{type(e).__name__}: {e}" if not isinstance(e, UserInputError) else str(e))
    console.print(f"[green]wrote {escape(str(out))}[/]: {len(profile.ops)} op tables, {len(profile.forwards)} forward tables, "
                  f"{len(profile.collectives)} collective tables")
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
) -> None:
    """Merge nccl-tests latency tables into a profile (tables of the same op, world size, mode are replaced)."""
    from calibration.nccl_tests import import_into_profile

    if mode is not None and mode not in ("eager", "graph"):
        fail(f"--mode must be eager or graph, got {mode!r}")
    missing = [str(p) for p in logs if not p.is_file()]
    if missing:
        fail(f"nccl-tests log not found: {', '.join(missing)}")
    from pydantic import ValidationError

    from simulator.profile import resolve_profile_path
    from simulator.scenario import format_validation_error
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


def live(
    out: Annotated[Path, typer.Option(help="Folder for one LiveRun JSON per point (resumes).")],
    quick: Annotated[bool, typer.Option(help="A few points, fewer cycles (< 1 min on one GPU).")] = False,
    device: Annotated[str, typer.Option(help="torch device.")] = "cuda",
    cycles: Annotated[Optional[int], typer.Option(help="Timed cycles per point.")] = None,
    warmup: Annotated[Optional[int], typer.Option(help="Warm-up cycles per point.")] = None,
    noise: Annotated[bool, typer.Option(help="The CUDA-graph batch-1 grid, 3 runs per point (noise).")] = False,
) -> None:
    """Run the live speculative grid on a GPU (real forwards, seeded acceptance oracle); needs torch."""
    try:
        from calibration.live_grid import main as live_grid_main
    except ImportError as e:
        fail(f"specdecsim live needs torch: pip install 'specdecsim[calibrate]' ({e})")
    argv = ["--out", str(out), "--device", device] + (["--quick"] if quick else []) + (["--noise"] if noise else [])
    argv += (["--cycles", str(cycles)] if cycles else []) + (["--warmup", str(warmup)] if warmup else [])
    live_grid_main(argv)


def register(app: typer.Typer) -> None:
    """Mount the calibration commands on the `specdecsim` app."""
    app.add_typer(calibrate_app, name="calibrate")
    app.command("live")(live)
