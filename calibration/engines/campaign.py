"""The engine processes of a calibration and a live grid, one per engine configuration.

`run_processes` runs each ProcessPlan as its own Python process (`specdecsim calibrate
engine-process`, calibration.engines.worker),
one after another (they share the GPU), appending to one points file; a process that outlives
its share of the time left is ended and the next one starts. The fake engine can run in this
process instead (tests).

The order of the processes is `calibration.engines.plans.interleave`'s.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from calibration.engines.plans import ProcessPlan
from calibration.engines.tp_launch import POINTS_FAILED_RC
from calibration.engines.worker import done_keys, run_plan

ENGINE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
              "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "PYTHONUNBUFFERED": "1"}
MIN_PROCESS_S = 20.0  # a process given less time than this is not started


def run_processes(plans: list[ProcessPlan], points: Path, deadline_s: float | None = None,
                  in_process: bool = False, log=print) -> dict[str, str]:
    """Run every plan's engine process in turn; {label: 'done' | 'skipped' | 'timeout' | 'failed rc=N'}.

    Args:
        deadline_s: seconds from now after which no process is started and a running one is ended.
        in_process: run the worker here (the fake engine's tests) instead of a child process.
    """
    start = time.monotonic()
    status: dict[str, str] = {}
    plan_dir = points.parent / f"{points.name}.plans"  # the plan each process ran, beside its points
    queue_points = points
    for plan in plans:
        points = queue_points.parent / plan.points_file if plan.points_file else queue_points
        left = None if deadline_s is None else deadline_s - (time.monotonic() - start)
        done = done_keys(points)
        if all((plan.label, p.key) in done for p in plan.point_plans()):
            status[plan.label] = "skipped"
            continue
        if left is not None and left < MIN_PROCESS_S:
            status[plan.label] = "not started (time)"
            log(f"{plan.label}: not started, {max(0.0, left):.0f} s left")
            continue
        if in_process and plan.tensor_parallel_size == 1 and not plan.group_launch:  # a group: a process a rank
            run_plan(plan, points, points.parent / "engine_models", log=log)
            status[plan.label] = "done"
            continue
        plan_dir.mkdir(parents=True, exist_ok=True)
        f = plan_dir / f"{plan.label}.json"
        f.write_text(plan.model_dump_json(indent=1), encoding="utf-8")
        cmd = [sys.executable, "-m", "simulator.cli", "calibrate", "engine-process", str(f), str(points)]
        log(f"{plan.label}: starting ({len(plan.points)} points{'' if left is None else f', {left:.0f} s left'})")
        t0 = time.monotonic()
        try:
            rc = subprocess.run(cmd, env={**os.environ, **ENGINE_ENV}, timeout=left).returncode
            status[plan.label] = ("done" if rc == 0 else "points failed (error lines)" if rc == POINTS_FAILED_RC
                                  else f"failed rc={rc}")
        except subprocess.TimeoutExpired:
            status[plan.label] = "timeout"
        log(f"{plan.label}: {status[plan.label]} after {time.monotonic() - t0:.0f} s")
    return status


def load_queue(plan_dir: Path) -> list[ProcessPlan]:
    """The ProcessPlan files of `plan_dir` in name order, each validated.

    Raises:
        UserInputError: no plan file, or one that is not a ProcessPlan (naming the file and field).
    """
    from pydantic import ValidationError

    from simulator.inputs import UserInputError, format_validation_error, read_json
    files = sorted(Path(plan_dir).glob("*.json"))
    if not files:
        raise UserInputError(f"{plan_dir}: holds no ProcessPlan files (*.json; `specdecsim calibrate engine-queue` "
                             "writes them)")
    plans = []
    for f in files:
        try:
            plans.append(ProcessPlan.model_validate(read_json(f, "ProcessPlan file"), strict=True))
        except ValidationError as e:
            raise UserInputError(format_validation_error(str(f), e)) from None
    labels = [p.label for p in plans]
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        raise UserInputError(f"{plan_dir}: more than one plan labelled {', '.join(twice)}")
    return plans


def run_queue(plan_dir: Path, points: Path, deadline_s: float | None = None, log=print,
              plans: list[ProcessPlan] | None = None) -> dict[str, str]:
    """Run the ProcessPlan JSON files of `plan_dir` in name order (a session's queue, written
    beforehand: `specdecsim calibrate engine-queue`), resuming from `points`."""
    plans = load_queue(plan_dir) if plans is None else plans
    status = run_processes(plans, Path(points), deadline_s=deadline_s, log=log)
    log(f"queue done: {status}")
    return status

