"""Diagnostic: the live loop's verify graph against the calibration's whole forward, same shapes.

    python -m calibration.diagnose_verify   (on a GPU; prints a table)

For each target size it times, with CUDA events: the live SpecLoop's verify graph replayed
cold (GPU idle before, as in a cycle) and back to back, and the calibration whole forward
(`bench_ops.models_forward`, captured as a graph) at the same num_tokens and context_len,
cold and back to back. A gap between "cold" and "back to back" is GPU-side launch latency
that op tables timed back to back do not see.
"""

from __future__ import annotations

import statistics

import torch
from rich.console import Console
from rich.table import Table

from calibration.bench_ops import models_forward
from calibration.live import LiveSession
from calibration.shapes import LLAMA_1B, LLAMA_8B, eagle3_draft
from simulator.config import Scenario
from simulator.units import US_PER_MS


def _cold_us(fn, reps: int = 30) -> float:
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        out.append(a.elapsed_time(b) * US_PER_MS)
    return statistics.median(out)


def _warm_us(fn, reps: int = 30) -> float:
    fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) * US_PER_MS / reps


def _graph(fn):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def main() -> None:
    session = LiveSession("cuda")
    t = Table(title="verify: live graph vs calibration whole forward (us)")
    for col in ("target", "num_tokens", "live cold", "live back-to-back", "whole fwd cold", "whole fwd back-to-back"):
        t.add_column(col, justify="right")
    c, s = 1024, 4
    for target in (LLAMA_1B, LLAMA_8B):
        sc = Scenario.model_validate(dict(
            name="diag", target=target.model_dump(), draft=eagle3_draft(target).model_dump(), tp_size=1,
            spec=dict(num_steps=s, topk=1, num_draft_tokens=s + 1), acceptance=dict(kind="iid", acceptance_rate=0.7),
            workload=dict(batch_size=1, context_len=c, max_new_tokens=256), serving_engine=dict(cuda_graph=True)))
        loop = session.loop(sc, True)
        live_cold = _cold_us(loop.g_verify.replay)
        live_warm = _warm_us(loop.g_verify.replay)
        make = models_forward(target, torch.device("cuda"), torch.bfloat16, c + s + 1)
        g = _graph(make(s + 1, c))
        t.add_row(target.name, str(s + 1), f"{live_cold:.1f}", f"{live_warm:.1f}",
                  f"{_cold_us(g.replay):.1f}", f"{_warm_us(g.replay):.1f}")
    Console(width=160).print(t)


if __name__ == "__main__":
    main()
