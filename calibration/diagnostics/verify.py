"""Diagnostic: the live loop's verify graph against the calibration's whole forward, same shapes.

    specdecsim diagnose verify   (on a GPU; prints a table)

For each target size it times, with CUDA events: the live SpecLoop's verify graph replayed
cold (GPU idle before, as in a cycle) and back to back, and the calibration whole forward
(`bench.forwards.models_forward`, captured as a graph) at the same num_tokens and context_len,
cold and back to back. A gap between "cold" and "back to back" is GPU-side launch latency
that op tables timed back to back do not see.
"""

from __future__ import annotations

import statistics

import torch
from rich.console import Console
from rich.table import Table

from calibration.bench.forwards import models_forward
from calibration.live.grid import CONTEXT_LEN
from calibration.live.run import LiveSession
from calibration.shapes import LLAMA_1B, LLAMA_8B, eagle3_draft
from calibration.timing import capture_graph, elapsed_us
from simulator.config import Scenario

NUM_STEPS = 4  # draft depth of the verify compared
NUM_REPS = 30  # samples of a cold call; calls of a back-to-back run


def _cold_us(fn, reps: int = NUM_REPS) -> float:
    """Median device time of one call with the GPU idle before it (a device sync first)."""
    return statistics.median(elapsed_us(fn, 1, "cuda") for _ in range(reps))


def _warm_us(fn, reps: int = NUM_REPS) -> float:
    """Device time per call of `reps` calls back to back, after one call."""
    fn()
    return elapsed_us(fn, reps, "cuda")


def measure_verify() -> list[tuple[str, int, float, float, float, float]]:
    """Rows (target, num_tokens, live cold, live back to back, whole forward cold, whole forward
    back to back), us, for both targets at the live grid's context_len, num_steps NUM_STEPS, on CUDA."""
    session, rows = LiveSession("cuda"), []
    c, s = CONTEXT_LEN, NUM_STEPS
    for target in (LLAMA_1B, LLAMA_8B):
        sc = Scenario.model_validate(dict(
            name="diag", target=target.model_dump(), draft=eagle3_draft(target).model_dump(), tp_size=1,
            spec=dict(num_steps=s, topk=1, num_draft_tokens=s + 1), acceptance=dict(kind="iid", acceptance_rate=0.7),
            workload=dict(batch_size=1, context_len=c, max_new_tokens=256), serving_engine=dict(cuda_graph=True)))
        loop = session.loop(sc, True)
        live_cold, live_warm = _cold_us(loop.g_verify.replay), _warm_us(loop.g_verify.replay)
        make = models_forward(target, torch.device("cuda"), torch.bfloat16, c + s + 1)
        graph, _ = capture_graph(make(s + 1, c))
        rows.append((target.name, s + 1, live_cold, live_warm, _cold_us(graph.replay), _warm_us(graph.replay)))
    return rows


def print_verify(rows: list[tuple[str, int, float, float, float, float]]) -> None:
    """The rows of measure_verify as a table."""
    t = Table(title="verify: live graph vs calibration whole forward (us)")
    for col in ("target", "num_tokens", "live cold", "live back-to-back", "whole fwd cold", "whole fwd back-to-back"):
        t.add_column(col, justify="right")
    for name, n, *us in rows:
        t.add_row(name, str(n), *(f"{x:.1f}" for x in us))
    Console(width=160).print(t)
