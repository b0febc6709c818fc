"""Live speculative decoding over a tensor-parallel group: the loops on every rank, one LiveRun per point.

`run_live_tp` runs on every rank of an initialised process group (NCCL with one GPU per rank,
cuda:{local_rank}; gloo on CPU) the loop of calibration/live/loop.py (`SpecLoop`, `DecodeLoop`)
with the TP models of calibration/models/tp_llama.py; scenario.tp_size must equal the group size.
Draft placements (as `simulator/costs/forward.py` prices them):
  shared_tp      the draft sharded over the same group (TPDraftModel), run on every rank;
  tp1_colocated  the whole draft (DraftModel) on group rank 0 only; after the draft steps rank 0
                 writes [last verified token, drafts] (int64, batch x num_draft_tokens) and
                 broadcasts it to every rank, which waits on the broadcast, then all verify.
                 The broadcast (and the cat before it) is timed in the "draft" phase, where the
                 simulator puts the transfer.
Accept lengths come from `run.oracle_accept_lengths` (same seed on every rank: identical).
After the timed repeats the ranks all_gather a digest (accept lengths, the GPU's accepted
drafts per cycle, the last tokens) and raise RuntimeError if any rank differs from rank 0.

Timing as `run.run_live` (every repeat replays the same oracle accept lengths; totals pooled):
before each repeat every rank synchronises its device and meets at a one-element allreduce
(the barrier); rank 0 takes the wall clock from there to its final device sync and the phases
(loop.PHASES) with CUDA events (GPU) or perf_counter (CPU). Rank 0 returns the LiveRun
(hardware.gpu_count = group size), other ranks None. CUDA graphs (serving_engine.cuda_graph) capture
the NCCL collectives with the forwards (run on 2 H200s: data/live/h200_tp2); eager on
CPU / gloo. The tp1_colocated loop captures the cat + broadcast as its own graph.
The grid over spawned ranks (`specdecsim live --tp N`) is calibration/live/tp_grid.py.

Left out: placements tp1_dedicated and tp<k> (k < tp_size), trees (topk > 1), pipeline parallelism.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

from calibration.group import group_rank_world
from calibration.live.loop import DecodeLoop, SpecLoop
from calibration.live.run import check_graph_device, live_record, oracle_accept_lengths, time_repeats
from calibration.models.llama import DRAFT_WEIGHT_SEED, TARGET_WEIGHT_SEED, DraftModel, KVCache
from calibration.models.tp_llama import TPDraftModel, TPOps, TPTargetModel, check_shardable
from calibration.provenance import collect_hardware_info
from calibration.timing import Clock, capture_graph, sync
from simulator.config import ModelShape, Placement, PlacementKind, Scenario
from simulator.evidence.live_records import LiveRun
from simulator.profile import HardwareInfo
from simulator.units import US_PER_S

TP_PLACEMENTS = ("shared_tp", "tp1_colocated")  # as written in a scenario; `_runs_live` is the typed check


def _runs_live(placement: Placement) -> bool:
    """Whether a live TP run has a loop for `placement`: the draft sharded over the whole group,
    or whole on GPU 0 of it (TP_PLACEMENTS)."""
    return placement.kind is PlacementKind.SHARED_TP or (placement.kind is PlacementKind.COLOCATED
                                                         and placement.draft_tp_size == 1)


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


class DraftPlaceholder:
    """The draft on the tp1_colocated ranks that do not run it: its shape and an empty cache."""

    def __init__(self, shape: ModelShape, device: torch.device):
        self.shape, self.device = shape, device

    def new_cache(self, batch_size: int, max_len: int) -> KVCache:
        return KVCache([], [], torch.empty(0, device=self.device), batch_size, max_len)


class ColocatedSpecLoop(_AcceptLog, SpecLoop):
    """tp1_colocated: the whole draft on group rank 0, its tokens broadcast before the verify.

    Args:
        target: TPTargetModel. draft: DraftModel on rank 0, a `DraftPlaceholder` elsewhere.
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
            self.g_extend = {n: capture_graph(self._extend, n)[0] for n in range(1, self.s + 2)}
            outs = (self.bonus, self.hidden0)
            for d in range(self.s):
                g, outs = capture_graph(self._step, d, *outs)
                self.g_steps.append(g)
                self.step_ids.append(outs[0])
        self.g_send, _ = capture_graph(self._send_drafts, self.step_ids)
        self.g_verify, _ = capture_graph(self._verify)
        self.g_accept, self.accept_out = capture_graph(self._accept)
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
    """Per-rank models and loops kept across run points (as `run.LiveSession`): the TP target
    per (target, draft) shape pair, a draft per placement, loops per (speculative, placement,
    batch, num_steps, context, graph). Weights: fixed seeds (TARGET_WEIGHT_SEED, DRAFT_WEIGHT_SEED).

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
        """Wait for this rank's device."""
        sync(self.device)

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
        if scenario.placement.kind is PlacementKind.SHARED_TP:
            return TPDraftModel(d, self.group, self.device, self.dtype, DRAFT_WEIGHT_SEED,
                                self.target.embed if share else None)
        if self.rank == 0:
            return DraftModel(d, self.device, self.dtype, DRAFT_WEIGHT_SEED, self.target.full_embed if share else None)
        return DraftPlaceholder(d, self.device)

    def loop(self, scenario: Scenario, speculative: bool):
        """This rank's loop of `scenario`, built as `run.LiveSession.loop` builds one (RuntimeError
        for CUDA graphs on a device that is not CUDA), with a draft per placement."""
        check_graph_device(scenario, self.device)
        graph = scenario.serving_engine.cuda_graph
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
        w, placement = scenario.workload, scenario.placement if speculative else None
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
                    loop = (SharedSpecLoop(*args) if placement.kind is PlacementKind.SHARED_TP
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
    if not _runs_live(scenario.placement):
        raise ValueError(f"scenario.placement={scenario.placement.label!r}: live TP runs support "
                         f"{', '.join(TP_PLACEMENTS)}")
    if scenario.spec.topk != 1:
        raise ValueError(f"scenario.spec.topk={scenario.spec.topk}: live runs draft chains only (topk=1)")
    check_shardable(scenario.target, world_size, "target")
    if scenario.placement.kind is PlacementKind.SHARED_TP:
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
    Record fields as `run.run_live` fills them: warm-up cycles, then `repeats` timed runs of
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
    clock = Clock(session.device) if rank == 0 else None
    log_start = len(loop.accepted_log) if speculative else 0
    paired = None
    with torch.no_grad():
        for row in lengths[:warmup_cycles]:
            loop.cycle(row)
        timed = lengths[warmup_cycles:]
        runs, phase_sum_us = time_repeats(loop, timed, repeats, clock, session.barrier, session.sync)
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
            base_runs, _ = time_repeats(base, ones[warmup_cycles:], repeats, clock, session.barrier, session.sync)
            paired = sum(r[0] for r in base_runs) / sum(r[1] for r in base_runs) * US_PER_S
    if rank != 0:
        return None
    return live_record(scenario, speculative, lengths[warmup_cycles:], runs, phase_sum_us, paired,
                       session.hardware())
