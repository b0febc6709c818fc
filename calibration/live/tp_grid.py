"""The live grid over a tensor-parallel group: spawned ranks, one LiveRun JSON per point.

    specdecsim live --tp 2 --out data/live/h200_tp2 [--quick | --noise] [--device cpu|cuda]

`run_tp_grid` spawns the ranks itself (calibration/group.py: NVLink SHARP / multicast off) and
runs on them, per size (Llama-3.1-8B, Llama-3.2-1B shapes of calibration/shapes.py, EAGLE-3
one-layer drafts; "tiny" for CPU smoke runs): both placements x num_steps 1..8 x
acceptance_rate {0.5, 0.7, 0.9}, plus the no-speculation baseline (`grid`); quick: num_steps
{1, 4} at 0.7 plus the baseline; noise: the full grid, every point 3 times in interleaved passes
with paired baselines (`noise_grid`, as the single-GPU noise grid). Each rank runs
`tp.run_live_tp`; rank 0 writes each point atomically; points already written are skipped
(resume).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

import torch.distributed as dist

from calibration.group import join_group, spawn_ranks
from calibration.live.grid import (ACCEPTANCE_RATES, CONTEXT_LEN, EST_HOST_S, NOISE_REPEATS, NUM_STEPS, GridPoint,
                                   console, forward_estimate_s, load_record, merge_passes, plan_runs, print_table)
from calibration.live.tp import TP_PLACEMENTS, TPLiveSession, check_tp_scenario, run_live_tp
from calibration.shapes import TP_SIZES
from simulator.acceptance import build_acceptance
from simulator.config import Placement, Scenario
from simulator.costs import forward_ops
from simulator.files import write_json_atomic
from simulator.workload_config import IidAcceptance, SpecConfig

EST_COLLECTIVE_S = {True: 8e-6, False: 20e-6}  # graph / eager small NVLink collective, rough H200 (estimate only)


@dataclass(frozen=True)
class TPGridPoint(GridPoint):
    """A grid.GridPoint run over `tp_size` ranks with draft `placement` (baseline: unused)."""

    placement: str = "shared_tp"
    tp_size: int = 2

    @property
    def name(self) -> str:
        mode = "graph" if self.graph else "eager"
        what = (f"{self.placement}_s{self.num_steps}_a{round(self.acceptance_rate * 100):02d}"
                if self.speculative else "baseline")
        rep = f"_rep{self.repeats}" if self.repeats > 1 else ""
        return f"tp{self.tp_size}_{self.size}_{mode}_b{self.batch_size}_{what}{rep}"

    def scenario(self, num_cycles: int, warmup_cycles: int) -> Scenario:
        target, draft = TP_SIZES[self.size]
        s, a = (self.num_steps, self.acceptance_rate) if self.speculative else (3, 0.7)
        return Scenario(
            name=self.name, description="live TP grid point (calibration/live/tp_grid.py), random weights",
            profile="h200", target=target, draft=draft, tp_size=self.tp_size,
            placement=self.placement if self.speculative else "shared_tp",
            spec=dict(num_steps=s, topk=1, num_draft_tokens=s + 1),
            acceptance=dict(kind="iid", acceptance_rate=a),
            workload=dict(batch_size=self.batch_size, context_len=CONTEXT_LEN),
            fidelity=dict(num_cycles=num_cycles, warmup_cycles=warmup_cycles),
            serving_engine=dict(cuda_graph=self.graph), seed=0)


def grid(quick: bool, sizes: tuple[str, ...], graph: bool, tp_size: int) -> list[TPGridPoint]:
    """Per size (in order): both placements x num_steps x rates, then the baseline; batch 1."""
    steps, rates = ((1, 4), (0.7,)) if quick else (NUM_STEPS, ACCEPTANCE_RATES)
    pts = []
    for size in sizes:
        pts += [TPGridPoint(size, graph, 1, s, a, placement=pl, tp_size=tp_size)
                for pl in TP_PLACEMENTS for s in steps for a in rates]
        pts.append(TPGridPoint(size, graph, 1, None, None, tp_size=tp_size))
    return pts


def noise_grid(sizes: tuple[str, ...], graph: bool, tp_size: int) -> list[TPGridPoint]:
    """The full grid with NOISE_REPEATS repeats per point, run one repeat per pass over the grid
    (interleaved: a drift of the machine that lasts a minute hits one repeat of many points, not
    every repeat of one), each speculative repeat followed by a paired baseline, as
    grid.noise_grid does on one GPU."""
    return [dataclasses.replace(p, repeats=NOISE_REPEATS, paired_baseline=p.speculative, interleaved=True)
            for p in grid(False, sizes, graph, tp_size)]


def _forward_tp_s(ops: list, graph: bool) -> float:
    coll = sum(op.is_collective for op in ops)
    return forward_estimate_s([op for op in ops if not op.is_collective], graph) + coll * EST_COLLECTIVE_S[graph]


def estimate_s(p: TPGridPoint, num_cycles: int, warmup_cycles: int) -> float:
    """Rough wall seconds of one point on H200s (roofline bytes, launches, collectives, mean accept)."""
    target, draft = TP_SIZES[p.size]
    tp, b, c, g = p.tp_size, p.batch_size, CONTEXT_LEN, p.graph
    if not p.speculative:
        cycle = _forward_tp_s(forward_ops.target_forward_ops(target, tp, b, 1, c), g) + EST_HOST_S
        return (3 * cycle if g else 0.0) + (warmup_cycles + p.repeats * num_cycles) * cycle
    s = p.num_steps
    acc = build_acceptance(IidAcceptance(acceptance_rate=p.acceptance_rate),
                           SpecConfig(num_steps=s, topk=1, num_draft_tokens=s + 1))
    ext = max(1, round(acc.mean_accept_length()))
    dtp = Placement.model_validate(Placement.parse(p.placement, tp)).draft_tp_size  # GPUs the draft is sharded over
    verify = _forward_tp_s(forward_ops.target_forward_ops(target, tp, b, s + 1, c), g)
    step = _forward_tp_s(forward_ops.draft_forward_ops(draft, dtp, b, 1, c, False), g)
    extend = _forward_tp_s(forward_ops.draft_forward_ops(draft, dtp, b, ext, c, True), g)
    cycle = verify + s * step + extend + 2 * EST_HOST_S + (EST_COLLECTIVE_S[g] if dtp < tp else 0.0)
    setup = 3 * (verify + (2 * s + 2) * step) if g else 0.0
    decode = _forward_tp_s(forward_ops.target_forward_ops(target, tp, b, 1, c), g) + EST_HOST_S
    paired = (warmup_cycles + p.repeats * num_cycles) * decode if p.paired_baseline else 0.0
    return setup + (warmup_cycles + p.repeats * num_cycles) * cycle + paired


def check_tp_points(points: list[TPGridPoint], tp_size: int, num_cycles: int, warmup_cycles: int) -> None:
    """Raise ValueError naming the size of the first point a group of `tp_size` ranks cannot run
    (shapes that do not shard over it), before any process starts."""
    for p in points:
        try:
            check_tp_scenario(p.scenario(num_cycles, warmup_cycles), tp_size)
        except ValueError as e:  # pydantic's ValidationError is one too: keep its messages only
            msg = "; ".join(err["msg"] for err in e.errors()) if hasattr(e, "errors") else str(e)
            raise ValueError(f"size {p.size}: {' '.join(msg.split())}") from None


def _worker(rank: int, tp_size: int, device_kind: str, runs: list[tuple[TPGridPoint, int, Path]],
            num_cycles: int, warmup_cycles: int, queue) -> None:
    """One rank: join the group, run every (point, repeats, file) of `runs` (grid.plan_runs);
    rank 0 writes each LiveRun to its file and puts the file's path on the queue."""
    dev, _ = join_group(rank, tp_size, "nccl" if device_kind == "cuda" else "gloo")
    try:
        session = TPLiveSession(dev)
        for i, (p, reps, path) in enumerate(runs):
            t0 = time.perf_counter()
            try:
                rec = run_live_tp(p.scenario(num_cycles, warmup_cycles), p.speculative, num_cycles,
                                  warmup_cycles, str(dev), reps, None, session, p.paired_baseline)
            except ValueError as e:  # raised alike on every rank, before any collective of the point
                if rank == 0:
                    console.print(f"[red]{p.name}: ValueError: {e}")
                continue
            if rank == 0:
                write_json_atomic(path, rec.model_dump(mode="json"))
                queue.put(str(path))
                console.print(f"[{i + 1}/{len(runs)}] {path.stem}: {rec.tok_per_s:.1f} tok/s, accept "
                              f"{rec.mean_accept_length:.2f} ({time.perf_counter() - t0:.1f} s)")
    finally:
        dist.destroy_process_group()


def run_tp_grid(points: list[TPGridPoint], out: Path, tp_size: int, device_kind: str, num_cycles: int,
                warmup_cycles: int) -> list[str]:
    """Run every point of `points` whose record is not in `out` yet (resume) over `tp_size` spawned
    ranks (device_kind 'cuda': NCCL, one GPU each; 'cpu': gloo), pool interleaved passes, print
    the table.

    Returns:
        names of the points that were to run and have no record now.
    """
    todo = [p for p in points if load_record(out / f"{p.name}.json") is None]
    est = sum(estimate_s(p, num_cycles, warmup_cycles) for p in todo) + 10.0 * len({p.size for p in todo})
    console.print(f"{len(points)} points, {len(points) - len(todo)} already in {out}; {len(todo)} to run "
                  f"over {tp_size} ranks, {warmup_cycles} + {num_cycles} cycles each"
                  + (f": estimated {est:.0f} s on H200s" if device_kind == "cuda" else ""))
    start = time.perf_counter()
    runs = plan_runs(todo, out, num_cycles, warmup_cycles)
    if runs:
        spawn_ranks(_worker, (tp_size, device_kind, runs, num_cycles, warmup_cycles), tp_size,
                    "nccl" if device_kind == "cuda" else "gloo")
    merge_passes(todo, out)
    console.print(f"ran {len(todo)} points in {time.perf_counter() - start:.0f} s")
    print_table([(p, r) for p in points if (r := load_record(out / f"{p.name}.json")) is not None])
    return [p.name for p in todo if not (out / f"{p.name}.json").exists()]
