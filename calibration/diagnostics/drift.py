"""Diagnostic: this GPU's whole forwards now against the profile, and the loop's host time per GPU wait.

Is this GPU still as fast as the profile measured it, and what does the live loop's host cost
per cycle when the GPU keeps it waiting longer?

    specdecsim diagnose drift --out drift.json [--profile h200] [--skip-overhead]

1. Forward drift: the graph-mode whole forward of the live grid's targets (Llama-3.1-8B and
   Llama-3.2-1B shapes, `bench.forwards.models_forward` timed by `timing.time_gpu_us`, exactly as
   `specdecsim calibrate` times the profile's forward tables) at context_len 1024 and num_tokens
   1..9, against the profile's table at the same points. Run it before and after a live grid:
   a GPU whose speed drifts between calibration and live runs shows here, not in the model.
2. Loop overhead vs GPU wait: `bench.loop_overhead.measure_loop_overhead_us` (tiny models, CUDA
   graphs) with a GPU sleep of 0..10 ms standing in for the model, speculative and baseline
   loops: the host's cost per cycle beyond GPU time, as a function of how long it waited at the sync.

Writes one JSON (atomically) and prints tables. CUDA only.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from calibration.bench.forwards import models_forward
from calibration.bench.loop_overhead import measure_loop_overhead_us
from calibration.live.grid import CONTEXT_LEN
from calibration.shapes import LLAMA_1B, LLAMA_8B
from calibration.timing import TimingSettings, time_gpu_us
from simulator.costs.lookup import LatencyLookup
from simulator.files import DIAGNOSTIC_OUTPUT, OUTPUT_KEY, write_json_atomic
from simulator.profile import load_profile, resolve_profile_path

NUM_TOKENS = tuple(range(1, 10))
BUSY_US = (0.0, 1000.0, 2000.0, 4000.0, 7000.0, 10000.0)
console = Console()


def forward_drift(profile_ref: str, dev: torch.device) -> list[dict]:
    """Rows {model, num_tokens, measured_us, profile_us, drift_frac} at context_len 1024."""
    tables = LatencyLookup(load_profile(resolve_profile_path(profile_ref)), "graph")
    rows = []
    for m in (LLAMA_8B, LLAMA_1B):
        has = tables.has_forward(m, 1, "graph")
        make = models_forward(m, dev, torch.bfloat16, CONTEXT_LEN + max(NUM_TOKENS))
        for n in NUM_TOKENS:
            t = time_gpu_us([make(n, CONTEXT_LEN)], TimingSettings(max_reps=1, target_replay_us=0.0))["latency_us"]
            ref = tables.forward_us(m.name, 1, "graph", n, CONTEXT_LEN) if has else None
            rows.append({"model": m.name, "num_tokens": n, "context_len": CONTEXT_LEN, "measured_us": t,
                         "profile_us": ref, "drift_frac": t / ref - 1.0 if ref else None})
        del make
        torch.cuda.empty_cache()
    return rows


def overhead_by_busy(dev: torch.device) -> list[dict]:
    """Rows of `measure_loop_overhead_us` for each GPU sleep in BUSY_US, spec and baseline."""
    rows = []
    for spec in (True, False):
        for busy in BUSY_US:
            r = measure_loop_overhead_us(dev, spec, busy_us=busy)
            rows.append({"loop": "spec" if spec else "baseline", "busy_target_us": busy, **r})
    return rows


def measure_drift(out: Path, profile_ref: str, skip_overhead: bool = False) -> dict:
    """Both measurements on the current CUDA device, written (atomically) to `out` after each.

    Returns:
        {created_utc, profile, gpu_name, forward_drift: rows[, loop_overhead: rows]}.
    """
    dev = torch.device("cuda")
    result = {OUTPUT_KEY: DIAGNOSTIC_OUTPUT, "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "profile": profile_ref, "gpu_name": torch.cuda.get_device_name(dev)}
    with torch.no_grad():
        result["forward_drift"] = forward_drift(profile_ref, dev)
        write_json_atomic(out, result)
        if not skip_overhead:
            result["loop_overhead"] = overhead_by_busy(dev)
            write_json_atomic(out, result)
    return result


def print_drift(result: dict) -> None:
    """The forward drift table, and the loop-overhead table when measured."""
    t = Table(title=f"graph whole forward at context {CONTEXT_LEN}: now vs profile {result['profile']}")
    for c in ("model", "num_tokens", "now_us", "profile_us", "drift"):
        t.add_column(c, justify="right")
    for r in result["forward_drift"]:
        t.add_row(r["model"], str(r["num_tokens"]), f"{r['measured_us']:.0f}",
                  f"{r['profile_us']:.0f}" if r["profile_us"] else "-",
                  f"{100 * r['drift_frac']:+.2f}%" if r["drift_frac"] is not None else "-")
    console.print(t)
    if "loop_overhead" in result:
        t = Table(title="live loop overhead per cycle vs GPU wait (tiny models + GPU sleep)")
        for c in ("loop", "busy_us", "wall_us", "gpu_us", "overhead_us"):
            t.add_column(c, justify="right")
        for r in result["loop_overhead"]:
            t.add_row(r["loop"], f"{r['busy_us']:.0f}", f"{r['wall_us']:.0f}", f"{r['gpu_us']:.0f}",
                      f"{r['overhead_us']:.0f}")
        console.print(t)
