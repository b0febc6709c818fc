"""`specdecsim calibrate`: measure this machine into points and a profile, and the tools around it.

    specdecsim calibrate [--quick] [--resume/--no-resume] [--out PATH] [--points PATH] [--tp N ...]
    specdecsim calibrate import-nccl-tests LOG... --profile P --out OUT [--in-place]
    specdecsim calibrate merge --points P... --out OUT [--gpu-count N --interconnect T --topology T]
    specdecsim calibrate collectives | tp-forwards | forwards-batch | loop-overhead | loop-reps | moe | session ...
                                                                  (measuring commands: calibration/cli/bench.py)
    specdecsim calibrate from-runs SCENARIO RUN... --out FITTED.yaml [--fit P,P]   (an engine's own logs)
    specdecsim calibrate from-traces DIR --out PROFILE.json [--roofline-from h200_datasheet] [--name N]
    specdecsim calibrate moe-kernel-times SCENARIO LOG --out OUT.yaml   (an engine's MoE benchmark output)
    specdecsim calibrate engine --engine vllm --out PROFILE.json [--few]  (inside the engine: calibration/cli/engine.py)

Parses, checks, runs and writes; no modelled numbers here. torch is imported only inside the
measuring commands, so importing this module (and `import-nccl-tests`, `merge`) works without it.
The commands are grouped by what they do: measuring ones in `calibration.cli.bench`, ones that
build from files already there in `calibration.cli.build`; the full calibration (the group's own
callback) is here, and so is the mounting of the others, in the order `--help` lists them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from calibration.cli import bench, build, engine, engine_queue
from calibration.cli.common import (FORCE_HELP, check_device, check_output, check_points_file, console, err_console,
                                    fail, need_torch, print_profile)
from simulator.files import PROFILE_OUTPUT

calibrate_app = typer.Typer(invoke_without_command=True, add_completion=False,
                            help="Measure this machine into a calibration profile, and the tools around it.")


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
    print_profile(profile, out)
    for key, note in profile.notes.items():
        console.print(f"  {escape(key)}: {escape(note)}", highlight=False)


for _name, _command in (("import-nccl-tests", build.import_nccl_tests), ("merge", build.merge),
                        ("collectives", bench.collectives), ("tp-forwards", bench.tp_forwards),
                        ("forwards-batch", bench.forwards_batch), ("loop-overhead", bench.loop_overhead),
                        ("loop-reps", bench.loop_reps), ("moe", bench.moe), ("engine-moe", bench.engine_moe), ("session", bench.session),
                        ("from-runs", build.from_runs), ("from-traces", build.from_traces),
                        ("moe-kernel-times", build.moe_kernel_times), ("engine", engine.calibrate_engine)):
    calibrate_app.command(_name)(_command)
calibrate_app.command("engine-process", hidden=True)(engine_queue.engine_process)
calibrate_app.command("engine-queue")(engine_queue.engine_queue)
calibrate_app.command("engine-queue-run")(engine_queue.engine_queue_run)
