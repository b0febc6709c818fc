"""Live speculative decoding over a tensor-parallel group: one process per rank, one LiveRun per point.

    python -m calibration.live_tp --tp 2 --out data/live/h200_tp2 [--quick | --noise] [--device cpu|cuda]

`run_live_tp` runs on every rank of an initialised process group (NCCL with one GPU per rank,
cuda:{local_rank}; gloo on CPU) the loop of `calibration/live.py` (`SpecLoop`, `DecodeLoop`)
with the TP models of `calibration/tp_models.py`; scenario.tp_size must equal the group size.
Draft placements (as `simulator/costs/forward.py` prices them):
  shared_tp      the draft sharded over the same group (TPDraftModel), run on every rank;
  tp1_colocated  the whole draft (DraftModel) on group rank 0 only; after the draft steps rank 0
                 writes [last verified token, drafts] (int64, batch x num_draft_tokens) and
                 broadcasts it to every rank, which waits on the broadcast, then all verify.
                 The broadcast (and the cat before it) is timed in the "draft" phase, where the
                 simulator puts the transfer.
Accept lengths come from `live.oracle_accept_lengths` (same seed on every rank: identical).
After the timed repeats the ranks all_gather a digest (accept lengths, the GPU's accepted
drafts per cycle, the last tokens) and raise RuntimeError if any rank differs from rank 0.

Timing as `live.run_live` (every repeat replays the same oracle accept lengths; totals pooled):
before each repeat every rank synchronises its device and meets at a one-element allreduce
(the barrier); rank 0 takes the wall clock from there to its final device sync and the phases
(loop.PHASES) with CUDA events (GPU) or perf_counter (CPU). Rank 0 returns the LiveRun
(hardware.gpu_count = group size), other ranks None. CUDA graphs (serving_engine.cuda_graph) capture
the NCCL collectives with the forwards (run on 2 H200s: data/live/h200_tp2); eager on
CPU / gloo. The tp1_colocated loop captures the cat + broadcast as its own graph.

The CLI spawns the ranks itself (torch.multiprocessing; NVLink SHARP / multicast off:
NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1) and runs, per
size (Llama-3.1-8B, Llama-3.2-1B shapes of `live_grid`, EAGLE-3 one-layer drafts; "tiny" for
CPU smoke runs): both placements x num_steps 1..8 x acceptance_rate {0.5, 0.7, 0.9}, plus the
no-speculation baseline; --quick: num_steps {1, 4} at 0.7 plus the baseline; --noise: the full
grid, every point 3 times in interleaved passes with paired baselines (as live_grid --noise). Rank 0 writes
each point atomically; points already written are skipped (resume).

Left out: placements tp1_dedicated and tp<k> (k < tp_size), trees (topk > 1), pipeline parallelism.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from calibration.build_profile import collect_hardware_info
from calibration.live import (DRAFT_WEIGHT_SEED, TARGET_WEIGHT_SEED, DecodeLoop, SpecLoop, _capture, _Clock,
                              _time_repeats, live_record, oracle_accept_lengths)
from calibration.live_grid import (ACCEPTANCE_RATES, CONTEXT_LEN, EST_HOST_S, NOISE_REPEATS, NUM_CYCLES,
                                   NUM_STEPS, QUICK_NUM_CYCLES, QUICK_WARMUP_CYCLES, WARMUP_CYCLES, GridPoint,
                                   _forward_s, _load, check_grid_args, console, merge_passes, plan_runs,
                                   print_table)
from calibration.models import DraftModel, KVCache
from calibration.shapes import TP_SIZES
from calibration.tp_models import TPDraftModel, TPOps, TPTargetModel, check_shardable, group_rank_world
from simulator.acceptance import build_acceptance
from simulator.config import IidAcceptance, ModelShape, Scenario, SpecConfig
from simulator.costs import ops as sim_ops
from simulator.profile import HardwareInfo, write_json_atomic
from simulator.live_records import LiveRun
from simulator.units import US_PER_S

TP_PLACEMENTS = ("shared_tp", "tp1_colocated")
EST_COLLECTIVE_S = {True: 8e-6, False: 20e-6}  # graph / eager small NVLink collective, rough H200 (estimate only)
PG_TIMEOUT_S = 600.0  # a hung rank fails the run instead of hanging it


# ---- loops ------------------------------------------------------------------------------------
class _AcceptLog:
    """Keeps every cycle's GPU accept result (accepted drafts per request) in `accepted_log`."""

    def read_accept(self, out: torch.Tensor) -> list[int]:
        accepted = super().read_accept(out)
        self.accepted_log.append(accepted)
        return accepted


class SharedSpecLoop(_AcceptLog, SpecLoop):
    """shared_tp: `SpecLoop` unchanged, driving TPTargetModel and TPDraftModel on every rank."""

    def __init__(self, *args, **kwargs):
        self.accepted_log: list[list[int]] = []
        super().__init__(*args, **kwargs)


class _DraftShape:
    """The draft on the tp1_colocated ranks that do not run it: its shape and an empty cache."""

    def __init__(self, shape: ModelShape, device: torch.device):
        self.shape, self.device = shape, device

    def new_cache(self, batch_size: int, max_len: int) -> KVCache:
        return KVCache([], [], torch.empty(0, device=self.device), batch_size, max_len)


class ColocatedSpecLoop(_AcceptLog, SpecLoop):
    """tp1_colocated: the whole draft on group rank 0, its tokens broadcast before the verify.

    Args:
        target: TPTargetModel. draft: DraftModel on rank 0, a `_DraftShape` elsewhere.
        comm: TPOps of the group (its `broadcast` sends rank 0's verify_ids, (b, s + 1) int64).
        runs_draft: True on group rank 0. Others as SpecLoop.
    """

    def __init__(self, target, draft, batch_size: int, context_len: int, num_steps: int, cuda_graph: bool,
                 comm: TPOps, runs_draft: bool):
        self.comm, self.runs_draft, self.accepted_log = comm, runs_draft, []
        super().__init__(target, draft, batch_size, context_len, num_steps, cuda_graph)

    def _send_drafts(self, drafts: list[torch.Tensor] | None) -> None:
        if self.runs_draft:
            b = self.b
            torch.cat([self.bonus.view(b, 1)] + [t.view(b, 1) for t in drafts], dim=1, out=self.verify_ids)
        self.comm.broadcast(self.verify_ids, 0)

    def _verify(self, drafts=None) -> None:
        tokens = self.target.forward(self.verify_ids.view(-1), self.tcache, self.row("step_lens")[:self.b],
                                     self.row("ver_pos"), self.s + 1, self.c, aux_out=self.aux)
        self.target_tokens.copy_(tokens.view(self.b, -1))

    def _capture_all(self) -> None:
        state = [self.verify_ids, self.target_tokens, self.aux] + self.tcache.k + self.tcache.v \
            + self.dcache.k + self.dcache.v
        saved = [t.clone() for t in state]
        self.graph, self.g_extend, self.g_steps, self.step_ids = True, {}, [], []
        if self.runs_draft:
            self.g_extend = {n: _capture(self._extend, n)[0] for n in range(1, self.s + 2)}
            outs = (self.bonus, self.hidden0)
            for d in range(self.s):
                g, outs = _capture(self._step, d, *outs)
                self.g_steps.append(g)
                self.step_ids.append(outs[0])
        self.g_send, _ = _capture(self._send_drafts, self.step_ids)
        self.g_verify, _ = _capture(self._verify)
        self.g_accept, self.accept_out = _capture(self._accept)
        for t, v in zip(state, saved):
            t.copy_(v)

    def run_draft_extend(self) -> None:
        if self.runs_draft:
            super().run_draft_extend()

    def run_draft(self) -> None:
        if self.runs_draft:
            super().run_draft()
        self.g_send.replay() if self.graph else self._send_drafts(self.step_ids if self.runs_draft else None)

    def run_verify(self) -> None:
        self.g_verify.replay() if self.graph else self._verify()


class TPLiveSession:
    """Per-rank models and loops kept across run points (as `live.LiveSession`): the TP target
    per (target, draft) shape pair, a draft per placement, loops per (speculative, placement,
    batch, num_steps, context, graph). Weights: fixed seeds (live.TARGET_WEIGHT_SEED, DRAFT_WEIGHT_SEED).

    Args:
        device: 'cpu', 'cuda' (the current CUDA device) or 'cuda:N' (this rank's GPU).
        group: process group (None = WORLD).
    """

    def __init__(self, device="cuda", group=None):
        dev = torch.device(device)
        if dev.type == "cuda" and dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        self.device, self.group = dev, group
        self.dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
        self.rank, self.world = group_rank_world(group)
        self.comm = TPOps(group)
        self._key, self.target, self.drafts, self._loops, self._hardware = None, None, {}, {}, None

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def barrier(self) -> None:
        """Device sync, a one-element allreduce every rank joins, device sync."""
        self.sync()
        self.comm.allreduce(torch.zeros(1, device=self.device))
        self.sync()

    def hardware(self) -> HardwareInfo:
        if self._hardware is None:
            info = collect_hardware_info()
            info["gpu_count"] = self.world
            if self.device.type == "cuda":
                info["gpu_name"] = torch.cuda.get_device_name(self.device)
            else:
                info["interconnect"] = f"gloo, {self.world} CPU processes on one host"
            self._hardware = HardwareInfo(**info)
        return self._hardware

    def _draft(self, scenario: Scenario):
        t, d = scenario.target, scenario.draft
        share = d.hidden_size == t.hidden_size and d.vocab_size == t.vocab_size
        if scenario.placement.label == "shared_tp":
            return TPDraftModel(d, self.group, self.device, self.dtype, DRAFT_WEIGHT_SEED,
                                self.target.embed if share else None)
        if self.rank == 0:
            return DraftModel(d, self.device, self.dtype, DRAFT_WEIGHT_SEED, self.target.full_embed if share else None)
        return _DraftShape(d, self.device)

    def loop(self, scenario: Scenario, speculative: bool):
        graph = scenario.serving_engine.cuda_graph
        if graph and self.device.type != "cuda":
            raise RuntimeError("serving_engine.cuda_graph: true needs CUDA devices; on CPU run eager "
                               "(serving_engine.cuda_graph: false)")
        key = (scenario.target.model_dump_json(), scenario.draft.model_dump_json())
        if key != self._key:
            self._key, self.target, self.drafts, self._loops = None, None, {}, {}
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            d = scenario.draft
            share = d.hidden_size == scenario.target.hidden_size and d.vocab_size == scenario.target.vocab_size
            self.target = TPTargetModel(scenario.target, self.group, self.device, self.dtype, TARGET_WEIGHT_SEED,
                                        max(1, d.num_fc_input_hidden_states), keep_full_embed=self.rank == 0 and share)
            self._key = key
        w, placement = scenario.workload, scenario.placement.label if speculative else None
        lkey = (speculative, placement, w.batch_size, scenario.spec.num_steps, w.context_len, graph)
        if lkey not in self._loops:
            with torch.no_grad():
                if not speculative:
                    loop = DecodeLoop(self.target, w.batch_size, w.context_len, graph)
                else:
                    if placement not in self.drafts:
                        self.drafts[placement] = self._draft(scenario)
                    args = (self.target, self.drafts[placement], w.batch_size, w.context_len,
                            scenario.spec.num_steps, graph)
                    loop = (SharedSpecLoop(*args) if placement == "shared_tp"
                            else ColocatedSpecLoop(*args, self.comm, self.rank == 0))
            self._loops[lkey] = loop
        return self._loops[lkey]


# ---- one run point ----------------------------------------------------------------------------
def check_tp_scenario(scenario: Scenario, world_size: int) -> None:
    """Raise ValueError (naming the field) for what a live TP run cannot do: tp_size != group
    size, a placement other than shared_tp / tp1_colocated, topk > 1, shapes not divisible."""
    if scenario.tp_size != world_size:
        raise ValueError(f"scenario.tp_size={scenario.tp_size} must equal the process group's world "
                         f"size {world_size}")
    if scenario.placement.label not in TP_PLACEMENTS:
        raise ValueError(f"scenario.placement={scenario.placement.label!r}: live TP runs support "
                         f"{', '.join(TP_PLACEMENTS)}")
    if scenario.spec.topk != 1:
        raise ValueError(f"scenario.spec.topk={scenario.spec.topk}: live runs draft chains only (topk=1)")
    check_shardable(scenario.target, world_size, "target")
    if scenario.placement.label == "shared_tp":
        check_shardable(scenario.draft, world_size, "draft")


def _check_ranks_agree(session: TPLiveSession, digest: np.ndarray) -> None:
    """all_gather every rank's int64 digest; RuntimeError on every rank if one differs from rank 0's."""
    mine = torch.as_tensor(digest, dtype=torch.int64).reshape(-1).to(session.device)
    if session.world == 1:
        return
    everyone = [torch.empty_like(mine) for _ in range(session.world)]
    dist.all_gather(everyone, mine, group=session.group)
    bad = [r for r, t in enumerate(everyone) if not torch.equal(t, everyone[0])]
    if bad:
        raise RuntimeError(f"TP ranks {bad} disagree with rank 0 on accept lengths or tokens "
                           "(oracle seeds or a collective differ)")


def run_live_tp(scenario: Scenario, speculative: bool, num_cycles: int, warmup_cycles: int,
                device: str = "cuda", repeats: int = 1, group=None, session: TPLiveSession | None = None,
                paired_baseline: bool = False) -> LiveRun | None:
    """Run `scenario` on every rank of `group` and measure it on rank 0 (see module docstring).

    Call on every rank with the same arguments (device: this rank's, e.g. f'cuda:{local_rank}').
    Record fields as `live.run_live` fills them: warm-up cycles, then `repeats` timed runs of
    the same `num_cycles` oracle accept lengths; num_tokens / elapsed_us / tok_per_s pool the
    repeats, `repeat_*` per repeat; accept-length counts over the timed cycles; phase means (us
    per cycle, rank 0's clock) of loop.PHASES (draft_extend, draft incl. the tp1_colocated
    broadcast, verify, accept, sync; baseline: decode, sync) plus host = the rest.

    Args:
        group: process group (None = WORLD); its size must equal scenario.tp_size.
        session: models and loops to reuse across points (the CLI passes one per rank).
        paired_baseline: (speculative only) also time the baseline of the same target right
            after, into `paired_baseline_tok_per_s`.

    Returns:
        the LiveRun on group rank 0, None on the other ranks.

    Raises:
        ValueError: see `check_tp_scenario`; context_len < 2 * (num_steps + 1).
        RuntimeError: cuda_graph on CPU; ranks disagree on accept lengths or tokens; a corrupt
            GPU accept result.
    """
    rank, world = group_rank_world(group)
    check_tp_scenario(scenario, world)
    session = session or TPLiveSession(device, group)
    loop = session.loop(scenario, speculative)
    b, s = scenario.workload.batch_size, scenario.spec.num_steps
    lengths = (oracle_accept_lengths(scenario, warmup_cycles + num_cycles) if speculative
               else np.ones((warmup_cycles + num_cycles, b), dtype=np.int64))
    clock = _Clock(session.device) if rank == 0 else None
    log_start = len(loop.accepted_log) if speculative else 0
    paired = None
    with torch.no_grad():
        for row in lengths[:warmup_cycles]:
            loop.cycle(row)
        timed = lengths[warmup_cycles:]
        runs, phase_sum_us = _time_repeats(loop, timed, repeats, clock, session.barrier, session.sync)
        last = [loop.verify_ids, loop.target_tokens] if speculative else [loop.ids]
        accepted = loop.accepted_log[log_start:] if speculative else []
        digest = [lengths.ravel(), np.asarray(accepted, dtype=np.int64).ravel()]
        digest += [t.cpu().numpy().ravel() for t in last]
        _check_ranks_agree(session, np.concatenate(digest))
        if speculative and paired_baseline:
            base = session.loop(scenario, False)
            ones = np.ones((warmup_cycles + num_cycles, b), dtype=np.int64)
            for row in ones[:warmup_cycles]:
                base.cycle(row)
            base_runs, _ = _time_repeats(base, ones[warmup_cycles:], repeats, clock, session.barrier, session.sync)
            paired = sum(r[0] for r in base_runs) / sum(r[1] for r in base_runs) * US_PER_S
    if rank != 0:
        return None
    return live_record(scenario, speculative, lengths[warmup_cycles:], runs, phase_sum_us, paired,
                       session.hardware())


# ---- the grid and the CLI ---------------------------------------------------------------------
@dataclass(frozen=True)
class TPGridPoint(GridPoint):
    """A live_grid.GridPoint run over `tp_size` ranks with draft `placement` (baseline: unused)."""

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
            name=self.name, description="live TP grid point (calibration/live_tp.py), random weights",
            profile="h200", target=target, draft=draft, tp_size=self.tp_size,
            placement=self.placement if self.speculative else "shared_tp",
            spec=dict(num_steps=s, topk=1, num_draft_tokens=s + 1),
            acceptance=dict(kind="iid", acceptance_rate=a),
            workload=dict(batch_size=self.batch_size, context_len=CONTEXT_LEN), fidelity=dict(num_cycles=num_cycles, warmup_cycles=warmup_cycles),
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
    live_grid.noise_grid does on one GPU."""
    return [dataclasses.replace(p, repeats=NOISE_REPEATS, paired_baseline=p.speculative, interleaved=True)
            for p in grid(False, sizes, graph, tp_size)]


def _forward_tp_s(ops: list, graph: bool) -> float:
    coll = sum(op.is_collective for op in ops)
    return _forward_s([op for op in ops if not op.is_collective], graph) + coll * EST_COLLECTIVE_S[graph]


def estimate_s(p: TPGridPoint, num_cycles: int, warmup_cycles: int) -> float:
    """Rough wall seconds of one point on H200s (roofline bytes, launches, collectives, mean accept)."""
    target, draft = TP_SIZES[p.size]
    tp, b, c, g = p.tp_size, p.batch_size, CONTEXT_LEN, p.graph
    if not p.speculative:
        cycle = _forward_tp_s(sim_ops.target_forward_ops(target, tp, b, 1, c), g) + EST_HOST_S
        return (3 * cycle if g else 0.0) + (warmup_cycles + p.repeats * num_cycles) * cycle
    s = p.num_steps
    acc = build_acceptance(IidAcceptance(acceptance_rate=p.acceptance_rate),
                           SpecConfig(num_steps=s, topk=1, num_draft_tokens=s + 1))
    ext = max(1, round(acc.mean_accept_length()))
    dtp = tp if p.placement == "shared_tp" else 1
    verify = _forward_tp_s(sim_ops.target_forward_ops(target, tp, b, s + 1, c), g)
    step = _forward_tp_s(sim_ops.draft_forward_ops(draft, dtp, b, 1, c, False), g)
    extend = _forward_tp_s(sim_ops.draft_forward_ops(draft, dtp, b, ext, c, True), g)
    cycle = verify + s * step + extend + 2 * EST_HOST_S + (EST_COLLECTIVE_S[g] if dtp < tp else 0.0)
    setup = 3 * (verify + (2 * s + 2) * step) if g else 0.0
    decode = _forward_tp_s(sim_ops.target_forward_ops(target, tp, b, 1, c), g) + EST_HOST_S
    paired = (warmup_cycles + p.repeats * num_cycles) * decode if p.paired_baseline else 0.0
    return setup + (warmup_cycles + p.repeats * num_cycles) * cycle + paired


def _worker(rank: int, tp_size: int, device_kind: str, runs: list[tuple[TPGridPoint, int, Path]],
            num_cycles: int, warmup_cycles: int) -> None:
    """One rank of the CLI: join the group, run every (point, repeats, file) of `runs`
    (live_grid.plan_runs), rank 0 writes each LiveRun to its file."""
    from calibration.collectives import join_group
    dev, _ = join_group(rank, tp_size, "nccl" if device_kind == "cuda" else "gloo", PG_TIMEOUT_S)
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
                console.print(f"[{i + 1}/{len(runs)}] {path.stem}: {rec.tok_per_s:.1f} tok/s, accept "
                              f"{rec.mean_accept_length:.2f} ({time.perf_counter() - t0:.1f} s)")
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tp", type=int, default=2, help="TP size = ranks spawned (one GPU each on CUDA)")
    ap.add_argument("--out", type=Path, required=True, help="folder for one LiveRun JSON per point")
    ap.add_argument("--quick", action="store_true", help="num_steps {1, 4} at rate 0.7 + baseline, fewer cycles")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--sizes", default="8b,1b", help=f"comma-separated, of {', '.join(TP_SIZES)}")
    ap.add_argument("--eager", action="store_true", help="on CUDA, eager instead of CUDA graphs")
    ap.add_argument("--cycles", type=int, default=None, help="timed cycles per point (override)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up cycles per point (override)")
    ap.add_argument("--noise", action="store_true",
                    help=f"every point {NOISE_REPEATS} times in interleaved passes, each speculative run "
                         "followed by a paired baseline (run-to-run noise; records *_rep3.json)")
    args = ap.parse_args(argv)
    sizes = tuple(x for x in args.sizes.split(",") if x)
    if args.tp < 1:
        ap.error(f"--tp must be >= 1, got {args.tp}")
    if not sizes or any(x not in TP_SIZES for x in sizes):
        ap.error(f"--sizes must be a comma-separated list of {', '.join(TP_SIZES)}, got {args.sizes!r}")
    check_grid_args(ap, args)
    if args.out.exists() and not args.out.is_dir():
        ap.error(f"--out {args.out} exists and is not a folder")
    if args.device == "cuda" and torch.cuda.device_count() < args.tp:
        ap.error(f"--tp {args.tp} needs {args.tp} GPUs; {torch.cuda.device_count()} visible (--device cpu runs gloo)")
    num_cycles = args.cycles or (QUICK_NUM_CYCLES if args.quick else NUM_CYCLES)
    warmup = args.warmup if args.warmup is not None else (QUICK_WARMUP_CYCLES if args.quick else WARMUP_CYCLES)
    graph = args.device == "cuda" and not args.eager
    points = noise_grid(sizes, graph, args.tp) if args.noise else grid(args.quick, sizes, graph, args.tp)
    for p in points:  # shapes that do not shard over --tp: one line before any process starts
        try:
            check_tp_scenario(p.scenario(num_cycles, warmup), args.tp)
        except ValueError as e:  # pydantic's ValidationError is one too: keep its messages only
            msg = "; ".join(err["msg"] for err in e.errors()) if hasattr(e, "errors") else str(e)
            ap.error(f"--tp {args.tp} --sizes {p.size}: {' '.join(msg.split())}")
    todo = [p for p in points if _load(args.out / f"{p.name}.json") is None]
    est = sum(estimate_s(p, num_cycles, warmup) for p in todo) + 10.0 * len({p.size for p in todo})
    console.print(f"{len(points)} points, {len(points) - len(todo)} already in {args.out}; {len(todo)} to run "
                  f"over {args.tp} ranks, {warmup} + {num_cycles} cycles each"
                  + (f": estimated {est:.0f} s on H200s" if args.device == "cuda" else ""))
    start = time.perf_counter()
    runs = plan_runs(todo, args.out, num_cycles, warmup)
    if runs:
        from calibration.collectives import _free_port, _spawn_env
        import torch.multiprocessing as torch_mp
        with _spawn_env(_free_port(), "nccl" if args.device == "cuda" else "gloo"):
            torch_mp.spawn(_worker, args=(args.tp, args.device, runs, num_cycles, warmup),
                           nprocs=args.tp, join=True)
    merge_passes(todo, args.out)
    console.print(f"ran {len(todo)} points in {time.perf_counter() - start:.0f} s")
    rows = [(p, r) for p in points if (r := _load(args.out / f"{p.name}.json")) is not None]
    print_table(rows)
    missing = [p.name for p in todo if not (args.out / f"{p.name}.json").exists()]
    for name in missing:
        console.print(f"[red]not written: {name}")
    if missing:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
