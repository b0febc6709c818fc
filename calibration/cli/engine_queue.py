"""`specdecsim calibrate engine-queue`, `engine-queue-run` and `engine-process`: a device session's
engine processes written beforehand as ProcessPlan files (from a campaign file,
calibration/engines/campaigns/), run one after another, each its own engine process.

    specdecsim calibrate engine-queue NAME OUT_DIR [--force]
    specdecsim calibrate engine-queue-run OUT_DIR POINTS.jsonl [--deadline-s S]

Parses, checks, runs and writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from calibration.cli.common import check_choice, console, fail
from calibration.cli.engine import _check_deadline, _check_engine_installed, _points_path
from calibration.engines.campaigns import campaign_names


def engine_process(
    plan: Annotated[Path, typer.Argument(help="ProcessPlan JSON (written by the campaign).")],
    points: Annotated[Path, typer.Argument(help="Points file to append to (resumes).")],
) -> None:
    """One engine process of a campaign: start the engine once, measure the plan's points."""
    from pydantic import ValidationError

    from calibration.engines.plans import ProcessPlan
    from calibration.engines.worker import run_plan
    from simulator.inputs import UserInputError, format_validation_error, read_json

    try:
        p = ProcessPlan.model_validate(read_json(plan, "ProcessPlan file"), strict=True)
    except ValidationError as e:
        fail(format_validation_error(str(plan), e))
    except UserInputError as e:
        fail(str(e))
    from calibration.engines.tp_launch import POINTS_FAILED_RC, in_group, run_group
    if (p.tensor_parallel_size > 1 or p.group_launch) and not in_group():  # one process a rank
        rc, line = run_group(plan, points, p.label, p.tensor_parallel_size, log=lambda s: print(s, flush=True))
        if line is not None:
            from calibration.engines.worker import append_line
            append_line(points, line)
        if rc:
            raise typer.Exit(rc)
        return
    run_plan(p, points, points.parent / "engine_models", log=lambda s: print(s, flush=True))
    from calibration.engines.worker import done_keys
    done = done_keys(points)
    if any((p.label, q.key) not in done for q in p.point_plans()):
        raise typer.Exit(POINTS_FAILED_RC)  # some point failed: its error line says why


def engine_queue(
    name: Annotated[str, typer.Argument(help="The queue: " + ", ".join(campaign_names()) + " (the h200xN-tp "
                                             "ones TP groups: a machine of that many GPUs; "
                                             "calibration/engines/campaigns/NAME.yaml).")],
    out: Annotated[Path, typer.Argument(help="Folder to write its ProcessPlan files into, in run order.")],
    force: Annotated[bool, typer.Option("--force", help="Replace a queue written there before (a folder holding "
                                                        "only queue files, NNN_label.json).")] = False,
) -> None:
    """Write a device session's engine processes as ProcessPlan files (run by engine-queue-run)."""
    import re

    from calibration.engines.queue import check_queue, queue_plans, write_queue
    from simulator.inputs import UserInputError
    check_choice("NAME", name, tuple(campaign_names()))
    plans = queue_plans(name)
    try:
        check_queue(plans)  # before a queue there is replaced
    except UserInputError as e:
        fail(f"campaign {name}: {e}")
    if out.exists() and not out.is_dir():
        fail(f"{out}: not a folder")
    held = sorted(out.iterdir()) if out.is_dir() else []
    if held:
        ours = all(f.is_file() and re.fullmatch(r"\d{3}_[A-Za-z0-9][A-Za-z0-9._-]*\.json", f.name) for f in held)
        if not (force and ours):
            fail(f"{out}: not empty; a queue is written into a new or empty folder (its files run in name order, "
                 "so two queues in one folder would interleave)" + (
                     "; --force replaces the queue there" if ours else
                     "; it holds other files than a queue's, which --force does not replace"))
        for f in held:
            f.unlink()
    for f in write_queue(plans, out):
        console.print(escape(str(f)), highlight=False)


def engine_queue_run(
    plans: Annotated[Path, typer.Argument(help="Folder of ProcessPlan files (engine-queue), run in name order.")],
    points: Annotated[Path, typer.Argument(help="Points file to append to (resumes: measured points are skipped).")],
    deadline_s: Annotated[Optional[float], typer.Option(help="Start no engine process after this many seconds, "
                                                             "and end one still running then.")] = None,
) -> None:
    """Run a queue of engine processes one after another (calibration/engines/campaign.run_queue)."""
    from calibration.engines.campaign import MIN_PROCESS_S, load_queue, run_queue
    from simulator.inputs import UserInputError
    if not plans.is_dir():
        fail(f"{plans}: not a folder of ProcessPlan files")
    _check_deadline(deadline_s)
    if deadline_s is not None and deadline_s <= MIN_PROCESS_S + 1:
        fail(f"--deadline-s {deadline_s:g}: more than {MIN_PROCESS_S + 1:g} (no engine process is started with "
             f"less than {MIN_PROCESS_S:g} s left)")
    _points_path(points, points, "POINTS")
    try:
        queue = load_queue(plans)
    except UserInputError as e:  # a plan file's problems, one a line: kept apart on the one error line
        fail("; ".join(str(e).splitlines()))
    for f in sorted({p.points_file for p in queue if p.points_file}):
        _points_path(points.parent / f, points.parent / f, "points_file")
    for engine in sorted({p.engine for p in queue}):
        first = next(p.label for p in queue if p.engine == engine)
        _check_engine_installed(engine, f"{plans}: {first} and the other {engine} plans")
    status = run_queue(plans, points, deadline_s, log=lambda s: print(s, flush=True), plans=queue)
    bad = {k: v for k, v in status.items() if v not in ("done", "skipped")}
    if bad:
        files = sorted({str(points.parent / p.points_file) if p.points_file else str(points)
                        for p in queue if p.label in bad})
        fail(f"engine processes not finished: {bad} (the log above says why; points, and a failed point's "
             f"error line, in {', '.join(files)})")
