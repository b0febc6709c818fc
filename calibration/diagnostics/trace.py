"""Diagnostic: torch.profiler traces of the live loop, one Chrome trace per point, and an index.

    specdecsim diagnose trace --out DIR [--model 8b|1b|tiny] [--steps 1,2,...,8] [--cycles 24]
                              [--batch 1] [--context-len 1024] [--device cuda|cpu] [--force]

Runs the live loop of calibration/live/loop.py (the SpecLoop of each num_steps, and the baseline
DecodeLoop), on the live grid's shapes (calibration/live/grid.py: random weights, iid oracle
acceptance 0.7, seed 0; CUDA graphs on CUDA, eager on CPU, where 'tiny' is the test shape), for
`warmup` untimed cycles, then `cycles` cycles under torch.profiler (CPU and CUDA activities).
Each phase of each cycle runs inside a `torch.profiler.record_function` range on the host:
'draft_extend', 'draft' (every draft step), 'verify', 'accept', 'sync' (the device->host copy
of the accept result) for a speculative cycle; 'decode', 'sync' for the baseline; and one 'cycle'
range around each whole cycle (the host bookkeeping included). In graph mode the ranges are
around the replays on the host, so the graphs are the ones the live runs time.

Writes DIR/<model>_b<batch>_base.trace.json, DIR/<model>_b<batch>_s<num_steps>.trace.json
(export_chrome_trace) and DIR/index.json (simulator.evidence.trace_profile.TraceIndex: shapes, batch,
context, mode, the oracle and each traced cycle's extend and accept lengths).
`specdecsim calibrate from-traces DIR` builds a profile from them (simulator/evidence/trace_profile.py).
"""

from __future__ import annotations

import datetime
from pathlib import Path

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from calibration.live.grid import BASELINE_SPEC, CONTEXT_LEN
from calibration.live.loop import DecodeLoop, SpecLoop
from calibration.live.run import LiveSession, oracle_accept_lengths
from calibration.provenance import command_line, git_commit
from calibration.shapes import TP_SIZES
from simulator.config import Scenario
from simulator.files import write_json_atomic
from simulator.evidence.trace_profile import INDEX_NAME, TraceIndex, TracePoint

TRACE_SIZES = TP_SIZES  # 8b, 1b (the live grid's pairs) and tiny (CPU tests)
DEFAULT_STEPS = tuple(range(1, 9))
NUM_CYCLES, WARMUP_CYCLES = 24, 8
PROFILER_WARMUP_CYCLES = 2  # traced, then dropped: the profiler's own start-up
ACCEPTANCE_RATE = 0.7  # one of the live grid's ACCEPTANCE_RATES
ORACLE = (f"iid acceptance_rate {ACCEPTANCE_RATE}, seed 0: calibration.live.run.oracle_accept_lengths "
          "(the live grid's oracle)")


def trace_name(model: str, batch_size: int, num_steps: int | None) -> str:
    """File name of one point's trace."""
    return f"{model}_b{batch_size}_{'base' if num_steps is None else f's{num_steps}'}.trace.json"


def point_scenario(model: str, graph: bool, batch_size: int, num_steps: int | None, context_len: int,
                   num_cycles: int, warmup_cycles: int) -> Scenario:
    """The live grid's scenario of a point (calibration.live.grid.GridPoint.scenario) at `context_len`."""
    target, draft = TRACE_SIZES[model]
    s, a = (num_steps, ACCEPTANCE_RATE) if num_steps is not None else BASELINE_SPEC
    return Scenario(
        name=trace_name(model, batch_size, num_steps).removesuffix(".trace.json"),
        description="traced live loop point (calibration/diagnostics/trace.py), random weights",
        profile="h200", target=target, draft=draft, tp_size=1, placement="shared_tp",
        spec=dict(num_steps=s, topk=1, num_draft_tokens=s + 1), acceptance=dict(kind="iid", acceptance_rate=a),
        workload=dict(batch_size=batch_size, context_len=context_len),
        fidelity=dict(num_cycles=num_cycles, warmup_cycles=warmup_cycles),
        serving_engine=dict(cuda_graph=graph), seed=0)


def annotated_spec_cycle(loop: SpecLoop, accept_lengths: np.ndarray) -> None:
    """SpecLoop.cycle with a profiler range around each phase and one around the cycle."""
    with record_function("cycle"):
        with record_function("draft_extend"):
            loop.run_draft_extend()
        with record_function("draft"):
            loop.run_draft()
        with record_function("verify"):
            loop.run_verify()
        with record_function("accept"):
            out = loop.launch_accept()
        with record_function("sync"):
            loop.read_accept(out)
        loop.commit(np.asarray(accept_lengths, dtype=np.int64))


def annotated_decode_cycle(loop: DecodeLoop) -> None:
    """DecodeLoop.cycle with a profiler range around each phase and one around the cycle."""
    with record_function("cycle"):
        with record_function("decode"):
            out = loop.launch_decode()
        with record_function("sync"):
            loop.read_decode(out)
        loop.commit()


def trace_point(session: LiveSession, sc: Scenario, speculative: bool, path: Path, num_cycles: int,
                warmup_cycles: int) -> TracePoint:
    """Warm the point's loop up, trace `num_cycles` cycles into `path`; the index entry."""
    loop = session.loop(sc, speculative)
    b = sc.workload.batch_size
    total = warmup_cycles + PROFILER_WARMUP_CYCLES + num_cycles
    lengths = (oracle_accept_lengths(sc, total) if speculative else np.ones((total, b), dtype=np.int64))
    cuda = session.device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    extend_lens = []
    # the profiler's first steps are slow (its own start-up): PROFILER_WARMUP_CYCLES are traced
    # but left out of the file (torch.profiler.schedule), the next num_cycles are kept
    keep = schedule(wait=0, warmup=PROFILER_WARMUP_CYCLES, active=num_cycles, repeat=1)
    with torch.no_grad():
        for row in lengths[:warmup_cycles]:
            loop.cycle(row)
        if cuda:
            torch.cuda.synchronize(session.device)
        with profile(activities=activities, schedule=keep) as prof:
            for i, row in enumerate(lengths[warmup_cycles:]):
                if speculative:
                    if i >= PROFILER_WARMUP_CYCLES:
                        extend_lens.append(loop.extend_len)
                    annotated_spec_cycle(loop, row)
                else:
                    annotated_decode_cycle(loop)
                if cuda and i == len(lengths) - warmup_cycles - 1:
                    torch.cuda.synchronize(session.device)
                prof.step()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    prof.export_chrome_trace(str(tmp))
    tmp.replace(path)
    return TracePoint(file=path.name, speculative=speculative, num_steps=sc.spec.num_steps if speculative else None,
                      scenario=sc, extend_lens=extend_lens,
                      accept_lengths=lengths[total - num_cycles:].tolist() if speculative else [])


def output_files(out: Path, model: str, steps: tuple[int, ...], batch_size: int) -> list[Path]:
    """The files `trace_loop` writes into `out`."""
    return ([out / INDEX_NAME, out / trace_name(model, batch_size, None)]
            + [out / trace_name(model, batch_size, s) for s in steps])


def trace_loop(out: Path, model: str = "8b", steps: tuple[int, ...] = DEFAULT_STEPS, num_cycles: int = NUM_CYCLES,
               batch_size: int = 1, context_len: int = CONTEXT_LEN, device: str = "cuda",
               warmup_cycles: int = WARMUP_CYCLES) -> TraceIndex:
    """Trace the baseline and each num_steps of `model`'s live loop into `out`; write index.json last.

    Raises:
        ValueError: context_len too short for a num_steps (the loop's own check).
    """
    dev = torch.device(device)
    graph = dev.type == "cuda"
    if graph:  # Kineto before any capture: CUPTI and graphs captured earlier (pytorch issue 75504)
        from torch.profiler import _utils as profiler_utils
        profiler_utils._init_for_cuda_graphs()
    session = LiveSession(device)
    points = []
    for s in (None, *steps):
        sc = point_scenario(model, graph, batch_size, s, context_len, num_cycles, warmup_cycles)
        points.append(trace_point(session, sc, s is not None, out / trace_name(model, batch_size, s),
                                  num_cycles, warmup_cycles))
        print(f"traced {points[-1].file}", flush=True)
    target, draft = TRACE_SIZES[model]
    index = TraceIndex(
        model=model, target=target, draft=draft, batch_size=batch_size, context_len=context_len, cuda_graph=graph,
        device=device, gpu_name=torch.cuda.get_device_name(dev) if graph else "cpu",
        torch_version=torch.__version__, warmup_cycles=warmup_cycles, num_cycles=num_cycles,
        acceptance_oracle=ORACLE, points=points, git_commit=git_commit(), command_line=command_line(),
        created_utc=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    write_json_atomic(out / INDEX_NAME, index.model_dump(mode="json"))
    return index
