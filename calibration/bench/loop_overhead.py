"""The live loop's host time per cycle beyond its GPU work: tiny models, and a probe target.

Tiny models (`measure_loop_overhead_us`; keys host:loop_overhead:*, host:loop_wait:*,
host:schedule): the loop of calibration/live/loop.py with LOOP_TINY shapes, CUDA graphs, timed
as `run_live` times it; wall per cycle minus its graphs replayed back to back. A GPU sleep in
verify / decode (busy_us) stands in for a real model, so the host waits at the sync as it does
with one; `measure_loop_overheads` (5 interleaved repeats, idle and with a 5 ms sleep) and
`measure_loop_overhead_curve` (GPU sleeps of 0-20 ms) give the profile's host_schedule_us and
its loop_overhead_curve (calibration/build/profile.py).

Probe target (`measure`; keys host:loop_overhead_real:*): the serving loop's cost beyond GPU work
(the device->host copy of the accept result, the host's wake-up, bookkeeping, the next launch)
is not a constant. On the lent H200 it grew from about 110 us per step (a 2 ms decode) to about
320 us per cycle (an 11 ms speculative cycle) (docs/validation.md); the GPU sleep showed the
growth for the speculative loop but not for the baseline loop. So `run_live` (CUDA graphs,
batch 1, context 1024) runs a probe target of Llama-3.2-3B width (`shapes.probe_shape`) at
PROBE_LAYERS depths, so the GPU time per cycle spans about 0.7-11 ms, with its EAGLE-3 one-layer
draft (num_steps 4, iid acceptance 0.7), and the no-speculation decode loop. The probe's widths
differ from the validation targets (8B, 1B), so the validation grid is not used to calibrate
itself. Per point: gpu_us = the GPU phases per cycle (draft_extend + draft + verify + accept, or
decode), overhead_us = sync + host per cycle. The depths run in `passes` interleaved passes;
each pass is one PointStore record (resumable); `table_from_records` gives the medians.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch
from rich.console import Console

from calibration.build.profile import LOOP_BUSY_US
from calibration.build.store import PointStore
from calibration.live.loop import DecodeLoop, SpecLoop
from calibration.live.run import LiveSession, run_live
from calibration.models.llama import DraftModel, TargetModel
from calibration.shapes import LOOP_TINY, eagle3_draft, probe_shape
from calibration.timing import Clock, elapsed_us, gpu_sleep_cycles, sync
from simulator.config import Scenario
from simulator.units import US_PER_S

PROBE_LAYERS = (2, 14, 28, 56, 84, 112, 140)
PROBE_NUM_STEPS, PROBE_RATE, PROBE_CONTEXT_LEN = 4, 0.7, 1024
PROBE_CYCLES, PROBE_WARMUP = 64, 8
GPU_PHASES = {"spec": ("draft_extend", "draft", "verify", "accept"), "baseline": ("decode",)}
GPU_REPLAYS = 50  # back-to-back replays of a tiny loop's graphs that time its GPU work
console = Console()


def probe_scenario(num_layers: int) -> Scenario:
    """The probe point: target probe_shape(num_layers), one-layer EAGLE-3 draft, CUDA graphs."""
    target = probe_shape(num_layers)
    draft = eagle3_draft(target)
    s = PROBE_NUM_STEPS
    return Scenario(name=f"loop-probe-L{num_layers}", target=target, draft=draft,
                    spec=dict(num_steps=s, topk=1, num_draft_tokens=s + 1),
                    acceptance=dict(kind="iid", acceptance_rate=PROBE_RATE),
                    workload=dict(batch_size=1, context_len=PROBE_CONTEXT_LEN),
                    fidelity=dict(num_cycles=PROBE_CYCLES, warmup_cycles=PROBE_WARMUP),
                    serving_engine=dict(cuda_graph=True), seed=0)


def point_key(loop: str, num_layers: int, pass_idx: int) -> str:
    return f"host:loop_overhead_real:{loop}:L{num_layers}:pass{pass_idx}"


def measure(store: PointStore, device: str = "cuda", passes: int = 3, layers: tuple[int, ...] = PROBE_LAYERS,
            command: str = "") -> int:
    """Run every missing (pass, depth, loop) point into `store`; returns how many ran.

    Raises:
        RuntimeError: no CUDA device (the table is of CUDA-graph loops).
    """
    todo = [(k, n, loop) for k in range(passes) for n in layers for loop in ("spec", "baseline")
            if not store.done(point_key(loop, n, k))]
    if not todo:
        return 0
    if not torch.cuda.is_available() and device.startswith("cuda"):
        raise RuntimeError("loop_overhead needs a CUDA GPU (it times CUDA-graph loops)")
    session, ran = LiveSession(device), 0
    for k, n, loop in todo:
        rec = run_live(probe_scenario(n), loop == "spec", PROBE_CYCLES, PROBE_WARMUP, device, 1, session)
        ph = rec.phase_us
        gpu_us = sum(ph[p] for p in GPU_PHASES[loop])
        store.add(point_key(loop, n, k), {
            "loop": loop, "num_layers": n, "pass": k, "gpu_us": gpu_us, "overhead_us": ph["sync"] + ph["host"],
            "sync_us": ph["sync"], "host_us": ph["host"], "tok_per_s": rec.tok_per_s, "command": command,
            "note": "calibration.bench.loop_overhead: run_live on the probe target, CUDA graphs"})
        ran += 1
        console.print(f"pass {k} L{n} {loop}: gpu {gpu_us:.0f} us, overhead {ph['sync'] + ph['host']:.0f} us")
    return ran


def table_from_records(records: dict[str, dict], loop: str) -> tuple[list[float], list[float]] | None:
    """(gpu_us, overhead_us) per depth, medians over passes, sorted by gpu_us; None if absent."""
    by_depth: dict[int, list[dict]] = {}
    for key, r in records.items():
        if key.startswith(f"host:loop_overhead_real:{loop}:"):
            by_depth.setdefault(r["num_layers"], []).append(r)
    if len(by_depth) < 2:
        return None
    rows = sorted((statistics.median(r["gpu_us"] for r in rs), statistics.median(r["overhead_us"] for r in rs))
                  for rs in by_depth.values())
    return [g for g, _ in rows], [o for _, o in rows]


def _tiny_models(dev: torch.device) -> tuple[TargetModel, DraftModel]:
    """The LOOP_TINY target and its draft (draft vocabulary 128) on `dev` (bf16 on CUDA)."""
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    draft = eagle3_draft(LOOP_TINY, draft_vocab_size=128)
    return TargetModel(LOOP_TINY, device=dev, dtype=dtype), DraftModel(draft, device=dev, dtype=dtype)


class _BusyGraph:
    """A graph followed by a GPU sleep of a fixed number of cycles (stands in for a big model)."""

    def __init__(self, graph, sleep_cycles: int):
        self.graph, self.sleep_cycles = graph, sleep_cycles

    def replay(self) -> None:
        self.graph.replay()
        torch.cuda._sleep(self.sleep_cycles)


def measure_loop_overhead_us(device, speculative: bool, num_steps: int = 4, batch_size: int = 1,
                             num_cycles: int = 200, busy_us: float = 0.0) -> dict[str, float]:
    """What a live-loop cycle costs beyond its GPU work: tiny models, CUDA graphs where possible.

    wall_us: mean wall time per cycle of the loop exactly as `run_live` times it (phase marks
    included); gpu_us: the same cycle's graphs replayed back to back (GPU time only);
    overhead_us = wall_us - gpu_us: device->host sync, graph launches, the loop's bookkeeping.
    On CPU (no graphs) gpu_us is 0 and the overhead is the whole eager cycle.
    busy_us > 0 (CUDA only) adds a GPU sleep of that length to the verify (or decode) graph, so the
    host waits milliseconds at the sync as it does with real models; the sleep counts as GPU time.
    """
    dev = torch.device(device)
    graph = dev.type == "cuda"
    target, draft = _tiny_models(dev)
    c = 256
    if speculative:
        loop = SpecLoop(target, draft, batch_size, c, num_steps, graph)
        graphs = None  # chosen after the timed cycles, when the extend length matches the buffers
    else:
        loop = DecodeLoop(target, batch_size, c, graph)
        graphs = [loop.g_decode] if graph else []
    # (a speculative cycle's graphs are picked after the timed cycles: the draft-extend graph
    # must match the extend length the buffers were last set up for)
    sleep_us = 0.0
    if graph and busy_us > 0:
        cycles, sleep_us = gpu_sleep_cycles(busy_us, dev)
        if speculative:
            loop.g_verify = _BusyGraph(loop.g_verify, cycles)
        else:
            loop.g_decode = _BusyGraph(loop.g_decode, cycles)
            graphs = [loop.g_decode.graph]
    rng = np.random.default_rng(0)
    lengths = (rng.integers(1, num_steps + 2, size=(num_cycles + 20, batch_size)) if speculative
               else np.ones((num_cycles + 20, batch_size), dtype=np.int64))
    clock = Clock(dev)
    with torch.no_grad():
        for row in lengths[:20]:
            loop.cycle(row)
        clock.sync()
        clock.reset()
        t0 = time.perf_counter()
        for row in lengths[20:]:
            loop.cycle(row, clock)
        clock.sync()
        wall_us = (time.perf_counter() - t0) * US_PER_S / num_cycles
        if speculative:
            graphs = []
            if graph:
                verify = loop.g_verify.graph if isinstance(loop.g_verify, _BusyGraph) else loop.g_verify
                graphs = [loop.g_extend[loop.extend_len]] + loop.g_steps + [verify, loop.g_accept]
        gpu_us = 0.0
        if graphs:
            gpu_us = elapsed_us(lambda: [g.replay() for g in graphs], GPU_REPLAYS, dev) + sleep_us
    return {"wall_us": wall_us, "gpu_us": gpu_us, "overhead_us": wall_us - gpu_us, "busy_us": sleep_us}


def measure_host_schedule_us(device, num_steps: int = 4, batch_size: int = 1, reps: int = 200) -> float:
    """Host time of the live loop's per-cycle bookkeeping alone (`SpecLoop.commit`), median, in us."""
    dev = torch.device(device)
    target, draft = _tiny_models(dev)
    loop = SpecLoop(target, draft, batch_size, 256, num_steps, False)
    rng = np.random.default_rng(0)
    samples = []
    for row in rng.integers(1, num_steps + 2, size=(reps, batch_size)):
        sync(dev)
        t0 = time.perf_counter()
        loop.commit(row)
        samples.append((time.perf_counter() - t0) * US_PER_S)
    return float(np.median(samples))


LOOP_OVERHEAD_REPEATS = 5  # the loop overhead varies from run to run on a VM host: median of 5


def measure_loop_overheads(store: PointStore, dev: torch.device, command: str,
                           repeats: int = LOOP_OVERHEAD_REPEATS) -> None:
    """`measure_loop_overhead_us` for the speculative and baseline loops, with a short GPU
    job and (CUDA) a 5 ms GPU sleep, `repeats` times each, interleaved (keys
    host:loop_overhead:<spec|baseline>[:busy]:rep<i>); build_profile takes the median."""
    for r in range(repeats):
        for spec in (True, False):
            for busy_us, suffix in ((0.0, ""), (LOOP_BUSY_US, ":busy")):
                key = f"host:loop_overhead:{'spec' if spec else 'baseline'}{suffix}:rep{r}"
                if not store.done(key) and (not suffix or dev.type == "cuda"):
                    store.add(key, {**measure_loop_overhead_us(dev, spec, busy_us=busy_us), "command": command,
                                    "note": "live loop (calibration/live/loop.py) with tiny models (plus a GPU "
                                            "sleep of busy_us in verify/decode): wall per cycle minus its GPU time"})


LOOP_WAIT_US = (0.0, 1000.0, 2500.0, 5000.0, 10000.0, 20000.0)  # GPU sleeps of the loop-overhead curve


def measure_loop_overhead_curve(store: PointStore, dev: torch.device, command: str,
                                repeats: int = LOOP_OVERHEAD_REPEATS, waits_us: tuple = LOOP_WAIT_US) -> None:
    """The loop overhead of the speculative and baseline loops at several GPU waits (a GPU sleep
    in verify / decode), `repeats` interleaved passes (keys host:loop_wait:<kind>:<wait>:rep<i>);
    build_profile turns the medians into HostOverheads.loop_overhead_curve. CUDA only."""
    if dev.type != "cuda":
        return
    for r in range(repeats):
        for wait in waits_us:
            for spec in (True, False):
                key = f"host:loop_wait:{'spec' if spec else 'baseline'}:{wait:.0f}:rep{r}"
                if not store.done(key):
                    store.add(key, {**measure_loop_overhead_us(dev, spec, busy_us=wait), "busy_target_us": wait,
                                    "command": command,
                                    "note": "live loop (calibration/live/loop.py) with tiny models and a GPU "
                                            "sleep of busy_target_us in verify/decode: wall per cycle minus its "
                                            "GPU time"})
