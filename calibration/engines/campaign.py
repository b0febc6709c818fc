"""The engine processes of a calibration and a live grid, one per engine configuration.

`run_processes` runs each ProcessPlan as its own Python process (`calibration.engines.worker`),
one after another (they share the GPU), appending to one points file; a process that outlives
its share of the time left is ended and the next one starts. The fake engine can run in this
process instead (tests).

`interleave(calibrate, live)` orders the processes calibration-then-live per configuration, so
that a campaign cut short by the machine's time still holds matched pairs: the engine-native
profile of a `num_steps` and its fresh validation runs, each from its own process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from calibration.engines.plans import ProcessPlan
from calibration.engines.worker import done_keys, run_plan

ENGINE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
              "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "PYTHONUNBUFFERED": "1"}
MIN_PROCESS_S = 20.0  # a process given less time than this is not started


def interleave(calibrate: list[ProcessPlan], live: list[ProcessPlan], first_num_steps: int | None = None) -> list[ProcessPlan]:
    """Calibration and live processes paired by num_steps (the first given num_steps first, then
    the baseline, then the rest in the order given)."""
    by_k: dict[int, list[ProcessPlan]] = {}
    for p in calibrate + live:
        by_k.setdefault(p.num_steps, []).append(p)
    ks = [p.num_steps for p in calibrate] + [p.num_steps for p in live]
    order = ([first_num_steps] if first_num_steps in by_k else []) + [0] + ks
    out, seen = [], set()
    for k in order:
        if k in by_k and k not in seen:
            seen.add(k)
            out += sorted(by_k[k], key=lambda p: p.session != "calibrate")
    return out


def run_processes(plans: list[ProcessPlan], points: Path, deadline_s: float | None = None,
                  in_process: bool = False, log=print) -> dict[str, str]:
    """Run every plan's engine process in turn; {label: 'done' | 'skipped' | 'timeout' | 'failed rc=N'}.

    Args:
        deadline_s: seconds from now after which no process is started and a running one is ended.
        in_process: run the worker here (the fake engine's tests) instead of a child process.
    """
    start = time.monotonic()
    status: dict[str, str] = {}
    plan_dir = points.parent / "plans"
    plan_dir.mkdir(parents=True, exist_ok=True)
    for plan in plans:
        left = None if deadline_s is None else deadline_s - (time.monotonic() - start)
        done = done_keys(points)
        if all((plan.label, p.key) in done for p in plan.point_plans()):
            status[plan.label] = "skipped"
            continue
        if left is not None and left < MIN_PROCESS_S:
            status[plan.label] = "not started (time)"
            log(f"{plan.label}: not started, {left:.0f} s left")
            continue
        if in_process:
            run_plan(plan, points, points.parent / "engine_models", log=log)
            status[plan.label] = "done"
            continue
        f = plan_dir / f"{plan.label}.json"
        f.write_text(plan.model_dump_json(indent=1), encoding="utf-8")
        cmd = [sys.executable, "-m", "calibration.engines.worker", str(f), str(points)]
        log(f"{plan.label}: starting ({len(plan.points)} points{'' if left is None else f', {left:.0f} s left'})")
        t0 = time.monotonic()
        try:
            rc = subprocess.run(cmd, env={**os.environ, **ENGINE_ENV}, timeout=left).returncode
            status[plan.label] = "done" if rc == 0 else f"failed rc={rc}"
        except subprocess.TimeoutExpired:
            status[plan.label] = "timeout"
        log(f"{plan.label}: {status[plan.label]} after {time.monotonic() - t0:.0f} s")
    return status


def main(argv: list[str]) -> int:
    """python -m calibration.engines.campaign PLANS.json POINTS.jsonl [DEADLINE_S]: the plans (a JSON
    list of ProcessPlan objects) run in the order given."""
    plans = [ProcessPlan.model_validate(p) for p in json.loads(Path(argv[0]).read_text(encoding="utf-8"))]
    deadline = float(argv[2]) if len(argv) > 2 else None
    status = run_processes(plans, Path(argv[1]), deadline_s=deadline, log=lambda s: print(s, flush=True))
    print(json.dumps(status), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
