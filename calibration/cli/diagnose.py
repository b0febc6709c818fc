"""`specdecsim diagnose`: the GPU diagnostics of calibration/diagnostics/, one command each.

    specdecsim diagnose drift --out drift.json [--profile h200] [--skip-overhead]   (CUDA)
    specdecsim diagnose sync [--passes 3]                                          (CUDA)
    specdecsim diagnose tp-skew --out skew.json [--tp 2] [--device cuda|cpu]
    specdecsim diagnose verify                                                     (CUDA)
    specdecsim diagnose host-cores --out cores.json [--seconds 60] [--interval-s 1]  (CPU)
    specdecsim diagnose trace --out DIR [--model 8b|1b|tiny] [--steps 1,..,8] [--cycles 24] [--batch 1]
                              [--context-len 1024] [--device cuda|cpu] [--force]

Parses, checks, runs and writes; the measuring is in calibration/diagnostics/.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from calibration.cli.common import (FORCE_HELP, TP_DEVICES, check_at_least, check_choice, check_gpus, check_output,
                                    fail, int_list, need_cuda, need_torch)
from simulator.files import DIAGNOSTIC_OUTPUT, HOST_CORES_OUTPUT

diagnose_app = typer.Typer(no_args_is_help=True, add_completion=False,
                           help="Diagnostics for when a live figure and the profile disagree (the GPU; "
                                "host-cores: the host CPUs).")


@diagnose_app.command("drift")
def drift(
    out: Annotated[Path, typer.Option(help="JSON file to write (atomically).")],
    profile: Annotated[str, typer.Option(help="Profile whose whole-forward tables are the reference.")] = "h200",
    skip_overhead: Annotated[bool, typer.Option("--skip-overhead", help="Only the forward drift.")] = False,
    force: Annotated[bool, typer.Option("--force", help=FORCE_HELP)] = False,
) -> None:
    """This GPU's whole forwards now against the profile, and the loop's host time per GPU wait."""
    check_output("--out", out, DIAGNOSTIC_OUTPUT, force)
    need_cuda("specdecsim diagnose drift")
    from calibration.diagnostics.drift import measure_drift, print_drift
    print_drift(measure_drift(out, profile, skip_overhead))


@diagnose_app.command("sync")
def sync(passes: Annotated[int, typer.Option(help="Interleaved passes (medians over them).")] = 3) -> None:
    """The live loop's host time per cycle with a blocking against a spinning device->host sync."""
    check_at_least("--passes", passes, 1)
    need_cuda("specdecsim diagnose sync")
    from calibration.diagnostics.sync import measure_sync, print_sync
    print_sync(measure_sync(passes))


@diagnose_app.command("tp-skew")
def tp_skew(
    out: Annotated[Path, typer.Option(help="JSON file to write (atomically).")],
    tp: Annotated[int, typer.Option(help="Ranks (one GPU each on CUDA).")] = 2,
    device: Annotated[str, typer.Option(help="cuda (NCCL) or cpu (gloo processes).")] = "cuda",
    force: Annotated[bool, typer.Option("--force", help=FORCE_HELP)] = False,
) -> None:
    """A TP forward timed on rank 0, on the last rank to launch, and back to back."""
    check_at_least("--tp", tp, 2)
    check_choice("--device", device, TP_DEVICES)
    check_output("--out", out, DIAGNOSTIC_OUTPUT, force)
    need_torch("specdecsim diagnose tp-skew")
    if device == "cuda":
        check_gpus(f"--tp {tp}", tp)
    elif tp > 2 * (os.cpu_count() or 1):
        fail(f"--tp {tp}: more gloo ranks than twice this machine's {os.cpu_count()} CPUs")
    from calibration.models.tp_llama import check_shardable
    from calibration.shapes import TP_SIZES
    try:  # the shapes tp_skew times (8b on CUDA, tiny on CPU) must shard over tp ranks
        for role, shape in zip(("target", "draft"), TP_SIZES["8b" if device == "cuda" else "tiny"]):
            check_shardable(shape, tp, role)
    except ValueError as e:
        fail(f"--tp {tp}: {e}")
    from calibration.diagnostics.tp_skew import measure_tp_skew, print_tp_skew
    print_tp_skew(measure_tp_skew(out, tp, device))


@diagnose_app.command("host-cores")
def host_cores(
    out: Annotated[Path, typer.Option(help="JSON file to write (atomically, at most once a second and at the end).")],
    seconds: Annotated[float, typer.Option(help="How long to keep measuring, s (0.1-3600).")] = 60.0,
    interval_s: Annotated[float, typer.Option(help="Seconds from one round's start to the next (0-600).")] = 1.0,
    force: Annotated[bool, typer.Option("--force", help=FORCE_HELP)] = False,
) -> None:
    """Each CPU's speed at a fixed piece of Python work, round after round (CPU only): a slow core or a slow machine."""
    if not 0.1 <= seconds <= 3600:
        fail(f"--seconds {seconds!r}: must be 0.1-3600")
    if not 0 <= interval_s <= 600:
        fail(f"--interval-s {interval_s!r}: must be 0-600")
    if str(out) == "-":
        fail("--out -: give a file (the table goes to standard output)")
    check_output("--out", out, HOST_CORES_OUTPUT, force)
    if not hasattr(os, "sched_setaffinity"):
        fail("specdecsim diagnose host-cores pins a thread to each CPU: this system has no sched_setaffinity")
    from calibration.diagnostics.host_cores import measure_host_cores, print_host_cores
    rounds: list = []
    try:
        result = measure_host_cores(out, seconds, interval_s, rounds)
    except KeyboardInterrupt:
        print(f"interrupted: {out} holds the {len(rounds)} round(s) measured", flush=True)
        raise
    print_host_cores(result)


@diagnose_app.command("verify")
def verify() -> None:
    """The live loop's verify graph against the calibration's whole forward, cold and back to back."""
    need_cuda("specdecsim diagnose verify")
    from calibration.diagnostics.verify import measure_verify, print_verify
    print_verify(measure_verify())


@diagnose_app.command("trace")
def trace(
    out: Annotated[Path, typer.Option(help="Folder to write the traces and index.json into.")],
    model: Annotated[str, typer.Option(help="Target and draft pair: 8b, 1b (the live grid's) or tiny (CPU tests).")] = "8b",
    steps: Annotated[str, typer.Option(help="Comma-separated num_steps, one traced point each.")] = "1,2,3,4,5,6,7,8",
    cycles: Annotated[int, typer.Option(help="Traced cycles per point (after the warm-up).")] = 24,
    warmup: Annotated[int, typer.Option(help="Untimed cycles before the trace.")] = 8,
    batch: Annotated[int, typer.Option(help="Requests per forward.")] = 1,
    context_len: Annotated[int, typer.Option(help="KV-cache length every forward attends.")] = 1024,
    device: Annotated[str, typer.Option(help="cuda (CUDA graphs) or cpu (eager).")] = "cuda",
    force: Annotated[bool, typer.Option("--force", help="Replace trace files already in --out.")] = False,
) -> None:
    """torch.profiler traces of the live loop (baseline and each num_steps), ranges per phase and cycle."""
    from calibration.shapes import TP_SIZES
    check_choice("--model", model, tuple(TP_SIZES))
    check_choice("--device", device, TP_DEVICES)
    check_at_least("--cycles", cycles, 1)
    check_at_least("--warmup", warmup, 1)
    check_at_least("--batch", batch, 1)
    num_steps = int_list("--steps", steps, 1, 64)
    if context_len < 2 * (num_steps[-1] + 1):
        fail(f"--context-len {context_len} must be >= 2 * (num_steps + 1) = {2 * (num_steps[-1] + 1)}")
    if out.exists() and not out.is_dir():
        fail(f"--out {out} exists and is not a folder")
    need_torch("specdecsim diagnose trace")
    if device == "cuda":
        need_cuda("specdecsim diagnose trace --device cuda")
    from calibration.diagnostics.trace import output_files, trace_loop
    there = [f for f in output_files(out, model, num_steps, batch) if f.exists() or f.is_symlink()]
    if there and not force:
        fail(f"--out {out}: {there[0].name} exists; --force replaces the traces")
    if any(not f.is_file() for f in there):
        fail(f"--out {out}: {[f for f in there if not f.is_file()][0].name} is not a regular file")
    index = trace_loop(out, model, num_steps, cycles, batch, context_len, device, warmup)
    print(f"wrote {len(index.points)} traces and {out / 'index.json'}")
