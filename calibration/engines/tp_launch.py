"""A TP group of engine processes: one process a rank, each on its own GPU (issue 28).

An engine process whose plan has `tensor_parallel_size` N > 1 starts N copies of itself
(`specdecsim calibrate engine-process PLAN POINTS`), one a rank, with torchrun's variables
(`RANK`, `LOCAL_RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`) and `SPECDECSIM_TP_GROUP`, and
watches them:
- vLLM and the fake engine run SPMD: every rank starts its own engine (vLLM's
  `distributed_executor_backend="external_launcher"`, each rank scheduling for itself, as torchrun
  users run it) and runs the same points in the same order; the step loop decides by step counts,
  never by time, so the ranks stay in step;
- SGLang's ranks are its own schedulers (`Scheduler(tp_rank=r)`): rank 0 is fed and read, the
  others receive its requests through SGLang's own broadcast and serve until rank 0 stops;
- only rank 0 writes points; a rank that fails ends the group (the others would wait in a
  collective forever): the group is terminated, and the caller appends an error line naming the
  rank, its exit code and its log's last lines to the points file.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

GROUP_ENV = "SPECDECSIM_TP_GROUP"  # set in a rank's environment: the rank variables are this group's
GRACE_S = 30.0  # how long the other ranks may outlive the first to end before they are ended
REAP_S = 2.0  # after a rank failed, how long the others have to end by themselves before they are ended
POLL_S = 0.2
LOG_TAIL_CHARS = 2000
POINTS_FAILED_RC = 3  # an engine process whose engine ran but left some of its points unmeasured (error lines)


def in_group() -> bool:
    """Whether this process is a rank of a TP group started here (`run_group`), of any size."""
    return os.environ.get(GROUP_ENV) == "1"


def group_rank() -> tuple[int, int]:
    """(rank, world size) of this process in a TP group started here; (0, 1) outside one."""
    if not in_group():
        return 0, 1
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rank_env(rank: int, world: int, port: int) -> dict[str, str]:
    return {GROUP_ENV: "1", "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}


def _tail(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-LOG_TAIL_CHARS:]
    except OSError:
        return ""


def _die_with_parent() -> None:
    """In a rank, before it runs (Linux): end it when its launcher ends, however that ends (a
    campaign's deadline kills the launcher outright); elsewhere nothing."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _raise_on_term(signum, frame):
    raise SystemExit(128 + signum)


def _end(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + 10.0
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def run_group(plan_file: Path, points: Path, label: str, world: int, log=print,
              timeout_s: float | None = None) -> tuple[int, dict | None]:
    """Run the plan's ranks and wait for them. Returns the exit code of the group (rank 0's, or 1
    where another rank failed or the group outlived `timeout_s`) and the error line to append to the
    points file where a rank failed (None where rank 0's own error lines say it all)."""
    port = free_port()
    log_dir = Path(points).parent / f"{Path(points).name}.plans"
    log_dir.mkdir(parents=True, exist_ok=True)
    procs, logs, files = [], [], []
    cmd = [sys.executable, "-m", "simulator.cli", "calibrate", "engine-process", str(plan_file), str(points)]
    stopped = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):  # the launcher's end is the group's (the finally below)
        try:
            stopped[sig] = signal.signal(sig, _raise_on_term)
        except (ValueError, OSError):  # not the main thread
            pass
    still_running: list[int] = []
    try:
        for r in range(world):
            lp = log_dir / f"{label}.rank{r}.log"
            logs.append(lp)
            f = None
            if r:  # rank 0 prints where this process prints; the others each to a log of their own
                f = open(lp, "w", encoding="utf-8")  # noqa: SIM115 - closed below, after the rank ends
                files.append(f)
            procs.append(subprocess.Popen(cmd, env={**os.environ, **rank_env(r, world, port)},
                                          stdout=f, stderr=subprocess.STDOUT if f else None,
                                          preexec_fn=_die_with_parent if os.name == "posix" else None))
        others = ("" if world == 1 else f"; rank 1 logs to {logs[1]}" if world == 2 else
                  f"; ranks 1-{world - 1} log to {log_dir}/{label}.rank1..{world - 1}.log")
        log(f"{label}: TP group of {world} rank{'s' if world > 1 else ''} started{others}")
        start, first_end = time.monotonic(), None
        while any(p.poll() is None for p in procs):
            now = time.monotonic()
            failed = [r for r, p in enumerate(procs) if p.poll() not in (None, 0)]
            if first_end is None and any(p.poll() is not None for p in procs):
                first_end = now
            if failed or (first_end is not None and now - first_end > GRACE_S) or \
                    (timeout_s is not None and now - start > timeout_s):
                break
            time.sleep(POLL_S)
        if failed:  # the others' own ends first: a rank that died takes a moment to be reaped, and the rank it
            # took down can fail first (its peer's socket closed), which would leave the cause unnamed
            end_by = time.monotonic() + REAP_S
            while time.monotonic() < end_by and any(p.poll() is None for p in procs):
                time.sleep(POLL_S)
        still_running = [r for r, p in enumerate(procs) if p.poll() is None]
    finally:
        _end(procs)  # also on an exception or a signal here: no rank outlives its launcher
        for f in files:
            f.close()
        for sig, handler in stopped.items():
            signal.signal(sig, handler)
    rcs = [p.returncode for p in procs]
    ended = (-15, -9)  # terminated or killed here, with the group
    culprits = [r for r, rc in enumerate(rcs) if rc not in (0, *ended)]
    if not culprits and any(rcs):
        culprits = [r for r, rc in enumerate(rcs) if rc]  # hung past the grace or the timeout
    for r, rc in enumerate(rcs):
        if rc:
            log(f"{label} rank {r}: {'ended with the group' if rc in ended and r not in culprits else f'exit code {rc}'}")
    line = None
    stuck = [r for r in still_running if r and rcs[0] not in (0, *ended)]
    if stuck:  # rank 0 ended on an error while these still ran: stopped, or waiting in a collective
        r = stuck[0]
        line = dict(kind="error", label=label, key=f"tp_group_rank{r}",
                    error=f"rank {r} of {world} was still running when rank 0 ended (exit code {rcs[0]}): a rank "
                          "stopped or waiting in a collective holds the group; the group was ended",
                    trace=_tail(logs[r]))
    elif [r for r in culprits if r] or (culprits and rcs[0] != POINTS_FAILED_RC):
        # a rank other than 0 that failed on its own is named even where rank 0 wrote its own error lines (they
        # say which points failed, not why); rank 0 alone is named where it ended without writing them
        r = next((r for r in culprits if r), culprits[0])
        line = dict(kind="error", label=label, key=f"tp_group_rank{r}",
                    error=f"rank {r} of {world}: exit code {rcs[r]}; the group was ended", trace=_tail(logs[r]))
    if not any(rcs):
        return 0, None
    return (rcs[0] if rcs[0] not in (0, *ended) else 1), line
