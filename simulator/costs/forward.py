"""Per-phase work of a speculative cycle: kernels with GPU and host costs, in us.

`CostModel` turns a Scenario and a CalibrationProfile into `Forward`s (ordered kernels with
their GPU time, host issue time, phase, category and the GPUs that run them). It holds no
SimPy environment and no RNG: the engine and `simulator.analytic` both consume it.

Cycle order (EAGLE as SGLang runs it; the live loop in calibration/live/loop.py runs the same):
draft_extend over the previous cycle's accepted tokens -> `num_steps` draft forwards ->
(placement transfers) -> verify over num_draft_tokens per request -> accept -> device->host sync.
The baseline (no speculation) is one target decode forward per token, then the sync.

Host model: in eager mode the host pays `op_launch_us[op]` per op and the GPU runs a kernel
once it is issued and the stream is free; with CUDA graphs a forward costs one
`graph_replay_us` and its kernels run back to back (plus `graph_kernel_gap_us` each); with
piecewise graphs (attention outside the graph, vLLM's PIECEWISE mode) each attention kernel is
launched eagerly and the graph piece after it replays, so a forward pays one launch and one
replay per layer. The serving engine (simulator.engines) picks the mode per phase, the kernels
(the live loop's ops or an engine's fused ones), the verify's attention path and the host time
per cycle, per draft step and per baseline step; the live loop uses the profile's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

from simulator.config import ModelShape, Scenario
from simulator.costs import forward_ops as FO
from simulator.costs import ops as O
from simulator.costs.lookup import LatencyLookup
from simulator.costs.engine_native import native_costs
from simulator.engines.profile import EngineProfile, scenario_engine_profile
from simulator.profile import CalibrationProfile

PHASES = ("draft", "draft_extend", "verify", "accept", "decode")


def engine_moe_layer_us(table: dict[int, float], num_tokens: float, model_us: float) -> float:
    """One MoE layer's routed experts at `num_tokens` tokens, us, given an engine's own kernel times.

    Inside the table's token range the engine's time is the price (linear in log2(tokens) between
    its token counts, numpy.interp): it is what the engine's kernels take, whether the model's
    price (`model_us`: the profile's table or the roofline) is below it (the usual case at decode
    sizes: docs/engines.md) or above it. Outside the range the larger of `model_us` and the nearest
    end value: a table measured up to 64 tokens says nothing of a 4,096-token prefill but bounds it
    from below.

    Args:
        table: {tokens: us}, at least one entry (simulator.engines EngineModel.moe_layer_latency_us).
        num_tokens: tokens in the forward (batch x tokens per request), >= 1.
        model_us: the model's own price of the layer, us.
    """
    xs = sorted(table)
    t = max(float(num_tokens), 1.0)
    us = float(np.interp(np.log2(t), np.log2(xs), [table[x] for x in xs]))
    return us if xs[0] <= t <= xs[-1] else max(model_us, us)


def draft_forwards_per_cycle(num_steps: int, first_draft_from_extend: bool = False) -> int:
    """Draft decode forwards per cycle (the draft extend is counted apart).

    first_draft_from_extend=False: one forward per draft step, as calibration/live/loop.py runs it.
    True: the draft extend's output already proposes draft token 1, so num_steps - 1 decode
    forwards follow, as SGLang runs EAGLE ("we get 1 token from draft prefill and
    (#spec steps - 1) tokens here": sglang `python/sglang/srt/speculative/eagle_worker.py`,
    `draft_forward`).
    """
    return num_steps - 1 if first_draft_from_extend else num_steps


@dataclass(frozen=True)
class Kernel:
    """One op as the engine sees it.

    Attributes:
        name: op name (gemm, attention, allreduce, ...). phase: a PHASES entry.
        category: 'compute' or 'comm'. gpu_us: GPU time. host_us: host time to issue it.
        gpus: GPU numbers that run it (0..tp_size-1: the TP group; tp_size: a dedicated draft GPU,
            see `Placement.draft_gpus`).
        barrier: True for collectives and transfers: all its GPUs start it together.
    """

    name: str
    phase: str
    category: str
    gpu_us: float
    host_us: float
    gpus: tuple[int, ...]
    barrier: bool = False


@dataclass(frozen=True)
class Forward:
    """Kernels issued back to back by the host, in order."""

    phase: str
    kernels: tuple[Kernel, ...]

    @cached_property
    def host_us(self) -> float:
        return float(sum(k.host_us for k in self.kernels))

    @cached_property
    def gpu_us(self) -> float:
        return float(sum(k.gpu_us for k in self.kernels))

    @cached_property
    def span_us(self) -> float:
        """GPU finish time after the host starts issuing onto an idle GPU.

        Kernel j is issued at H_j (cumulative host time through j) and runs once issued and
        the stream is free, so finish = max_j (H_j + sum of gpu_us from j on).
        """
        h = np.cumsum([k.host_us for k in self.kernels])
        g = np.array([k.gpu_us for k in self.kernels])
        suffix = np.cumsum(g[::-1])[::-1]
        return float(np.max(h + suffix)) if len(g) else 0.0

    @cached_property
    def busy_by_bucket(self) -> tuple[tuple[str, float], ...]:
        """GPU time by bucket '<phase>_<category>', as ((bucket, us), ...)."""
        out: dict[str, float] = {}
        for k in self.kernels:
            key = f"{k.phase}_{k.category}"
            out[key] = out.get(key, 0.0) + k.gpu_us
        return tuple(out.items())


def chain_span_us(forwards: Sequence[Forward]) -> float:
    """GPU finish time of forwards issued back to back onto an idle GPU (same rule as span_us)."""
    t_host, t_gpu = 0.0, 0.0
    for f in forwards:
        t_gpu = max(t_gpu + f.gpu_us, t_host + f.span_us)
        t_host += f.host_us
    return t_gpu


class CostModel:
    """Kernels and host costs of each phase of one scenario on one profile.

    Args:
        scenario: validated Scenario.
        profile: validated CalibrationProfile.
        lookup: a LatencyLookup of this profile in this scenario's launch mode to share (its
            interpolators and per-op cache depend on nothing else); default a new one.
        engine_profile: the engine profile the scenario's `serving_engine.engine_profile` names, where
            the caller read it; default read here (none where the scenario names none).

    Raises:
        KeyError: costs.source is whole_forward and the profile lacks a needed table.
        ValueError: `lookup` belongs to another profile or launch mode.
    """

    def __init__(self, scenario: Scenario, profile: CalibrationProfile, lookup: LatencyLookup | None = None,
                 engine_profile: EngineProfile | None = None):
        self.sc = scenario
        self.profile = profile
        self.engine = scenario.serving_engine
        self.mode = self.engine.collective_mode(scenario.workload.batch_size)
        self.graph = self.mode == "graph"
        if lookup is not None and (lookup.profile is not profile or lookup.collective_mode != self.mode):
            raise ValueError(f"shared lookup is for profile {lookup.profile.name!r} mode {lookup.collective_mode}; "
                             f"this cost model needs {profile.name!r} mode {self.mode}")
        self.lookup = lookup or LatencyLookup(profile, collective_mode=self.mode)
        self.host = profile.host
        self.b = scenario.workload.batch_size
        self.c = scenario.workload.context_len
        self.tp = scenario.tp_size
        self.draft_tp = scenario.draft_tp_size
        self.draft_gpus = scenario.placement.draft_gpus(self.tp)
        self.dedicated_draft_gpu = self.draft_gpus[0] if scenario.placement.dedicated else None
        self.all_gpus = tuple(range(self.tp))
        self._forward = lru_cache(maxsize=None)(self._build_forward)
        self.cycle_forwards = lru_cache(maxsize=None)(self._cycle_forwards)
        self._spec_schedule_us: float | None = None
        self._base_schedule_us: float | None = None
        if engine_profile is None:
            engine_profile = scenario_engine_profile(scenario)
        self.native = native_costs(scenario, engine_profile, self.lookup.notes, profile)

    # ---- sizes -------------------------------------------------------------------------------
    @property
    def d2h_sync_us(self) -> float:
        """Device-to-host sync time per speculative cycle: the engine's syncs per cycle times the
        profile's sync (each waits for the GPU to drain); none when an engine-native profile prices
        the cycle (its host work per step already holds the wait-free part, and the GPU never
        waits on a sync in an engine that schedules a step ahead)."""
        if self.native is not None:
            return 0.0
        return self.host.d2h_sync_us * self.engine.d2h_syncs_per_cycle

    @property
    def baseline_d2h_sync_us(self) -> float:
        """Device-to-host sync per baseline decode step (one: the sampled token; none natively)."""
        return 0.0 if self.native is not None else self.host.d2h_sync_us

    @property
    def host_schedule_us(self) -> float:
        """Host scheduling and bookkeeping per speculative cycle: the engine's `host_cycle_us`, or
        for the live loop the profile's loop-overhead curve at this cycle's GPU time (CUDA graphs,
        extend length 1) where it has one, else the profile's constant."""
        if self.native is not None:
            return self.native.host_us(self.b, self.sc.spec.num_steps, self.c)
        if self.engine.host_cycle_us is not None:
            return float(self.engine.host_cycle_us)
        curve = self.host.loop_overhead_curve
        if curve is None or not self.graph:
            return self.host.host_schedule_us
        if self._spec_schedule_us is None:
            self._spec_schedule_us = float(np.interp(chain_span_us(self.cycle_forwards(1)), curve.gpu_us,
                                                     curve.host_schedule_us))
        return self._spec_schedule_us

    @property
    def baseline_host_schedule_us(self) -> float:
        """Host scheduling and bookkeeping per decode step of the no-speculation baseline: the
        engine's `host_decode_step_us`, or for the live loop the curve at the decode step's GPU time
        where the profile has one, else its constant."""
        if self.native is not None:
            return self.native.host_us(self.b, 0, self.c)
        if self.engine.host_decode_step_us is not None:
            return float(self.engine.host_decode_step_us)
        curve = self.host.loop_overhead_curve
        if curve is not None and self.graph:
            if self._base_schedule_us is None:
                self._base_schedule_us = float(np.interp(chain_span_us(self.baseline_forwards()),
                                                         curve.baseline_gpu_us, curve.baseline_host_schedule_us))
            return self._base_schedule_us
        b = self.host.baseline_host_schedule_us
        return self.host.host_schedule_us if b is None else b

    @property
    def notes(self) -> list[str]:
        return sorted(self.lookup.notes)

    def draft_step_tokens(self, step_idx: int) -> int:
        """Tokens per request in draft step `step_idx` (0-based): 1, then topk (tree expansion)."""
        return 1 if step_idx == 0 else self.sc.spec.topk

    # ---- kernel lists ------------------------------------------------------------------------
    def _kernels(self, ops: list[O.Op], phase: str, gpus: tuple[int, ...],
                 moe_table: dict[int, float] | None = None) -> list[Kernel]:
        """Kernels of `ops` in `phase`'s graph mode (engine.graph_mode): host issue cost per op
        (eager: its launch; piecewise: attention's launch plus the next piece's replay; full: 0)
        and GPU time (`op_gpu_us`; `moe_table`: the engine's `moe_layer_latency_us`, given for the
        target's forwards)."""
        mode = self.engine.graph_mode(phase, self.b)
        out = []
        for op in ops:
            gpu = self.op_gpu_us(op, moe_table)
            cat = "comm" if op.is_collective else "compute"
            launch = self.host.op_launch_us.get(op.name, self.host.default_launch_us)
            if mode == "none":
                host = launch
            elif mode == "piecewise" and op.name == "attention":
                host = launch + self.host.graph_replay_us
            else:
                host = 0.0
            if mode != "none":
                gpu += self.host.graph_kernel_gap_us
            out.append(Kernel(op.name, phase, cat, gpu, host, gpus, op.is_collective))
        return out

    def op_gpu_us(self, op: O.Op, moe_table: dict[int, float] | None = None,
                  price_us: float | None = None) -> float:
        """GPU time of one op, us: the one pricing rule of every forward (each phase's kernels here,
        a serving prefill chunk's forward in simulator.serving.costs).

        A collective: the profile's latency (LatencyLookup.collective_us) x collective_latency_scale.
        Any other op: its price (`price_us` where the caller prices the op otherwise, else the
        profile's table or roofline, LatencyLookup.op_us) x compute_latency_scale / the engine's
        kernel efficiency; an engine's fused kernel is at least one small kernel
        (LatencyLookup.small_kernel_us); with `moe_table` (the engine's `moe_layer_latency_us`, for
        the target's forwards) a `moe_experts` op costs `engine_moe_layer_us(moe_table, tokens,
        model price)` x compute_latency_scale (a measured engine time, so not divided by the
        kernel efficiency).
        """
        cs = self.sc.costs
        if op.is_collective:
            return self.lookup.collective_us(op.collective, op.size_bytes, op.world_size) * cs.collective_latency_scale
        price = self.lookup.op_us(op) if price_us is None else price_us
        gpu = price * cs.compute_latency_scale / self.engine.kernel_efficiency
        if self.engine.kernels == "fused":  # an engine kernel is at least one small kernel
            gpu = max(gpu, self.lookup.small_kernel_us)
        if moe_table and op.name == "moe_experts":
            scale = cs.compute_latency_scale
            gpu = engine_moe_layer_us(moe_table, op.axes["num_tokens"], gpu / scale) * scale
        return gpu

    def _model_kernels(self, model: ModelShape, tp: int, n: int, phase: str, gpus: tuple[int, ...],
                       ops: list[O.Op]) -> list[Kernel]:
        """A model's forward: its whole-forward table when costs.source is whole_forward and the
        profile has one (the target's 'forward' table for verify and decode, the draft's 'draft' /
        'draft_extend' tables) whose measured grid holds (batch_size, tokens, context): a table with
        a batch axis at any batch inside it, a batch-1 table at batch 1 (LatencyLookup.find_forward);
        else the per-op sum, with a note saying why.
        A whole forward at tp > 1 includes its collectives (timed over the TP group)."""
        b, c = self.b, self.c
        table = phase if phase in ("draft", "draft_extend") else "forward"
        prefill = phase == "verify" and self.engine.verify_attention == "prefill"
        if self.engine.kernels == "fused" or prefill:
            ops = FO.engine_ops(ops, prefill_attention=prefill, model=model, tp=tp,
                               fuse=self.engine.kernels == "fused")
            self.lookup.notes.add(f"{self.engine.kind}: {'fused engine kernels (add+RMSNorm, rotary+KV write, paged attention) priced by the roofline; ' if self.engine.kernels == 'fused' else ''}"
                                  f"{'verify attention on the prefill path; ' if prefill else ''}GEMMs, experts and collectives from the profile")
        elif self.sc.costs.source == "whole_forward" and model.is_moe and self._moe_changed(model):
            self.lookup.notes.add(f"{model.name}: expert routing or expert parallelism other than the uniform, "
                                  "TP-only one whole-forward tables are measured under: per-op sum")
        elif self.sc.costs.source == "whole_forward":
            found = self.lookup.find_forward(model, tp, self.mode, table, b)
            if found is not None and self.lookup.table_covers(found, n, c, b):
                if found.model != model.name:
                    self.lookup.notes.add(f"{model.name}: whole-forward {table} table of {found.model} (same shape) used")
                gpu = self.lookup.table_us(found, n, c, b) * self.sc.costs.compute_latency_scale
                gpu *= self.lookup.transfer_ratio(ops)  # 1 unless the profile is carried to another GPU
                if self.engine.moe_layer_latency_us and model is self.sc.target and model.is_moe:
                    self.lookup.notes.add(f"{model.name}: the whole-forward {table} table's measured MoE layers "
                                          "used; the engine's moe_layer_latency_us not applied (costs.source "
                                          "per_op applies it)")
                return [Kernel("forward", phase, "compute", gpu, 0.0, gpus)]
            if found is not None:  # outside the measured grid: the per-op sum scales, a clamped table would not
                where = []
                bs = found.batch_sizes
                if not bs[0] <= b <= bs[-1]:
                    where.append(f"batch {b}")
                if not found.num_tokens[0] <= n <= found.num_tokens[-1]:
                    where.append(f"{n} tokens")
                if not found.context_len[0] <= c <= found.context_len[-1]:
                    where.append(f"context {c}")
                self.lookup.notes.add(f"{model.name} {table} at {' and '.join(where)}: outside the whole-forward "
                                      f"table (batch {bs[0]}-{bs[-1]}, tokens {found.num_tokens[0]}-"
                                      f"{found.num_tokens[-1]}, context {found.context_len[0]}-"
                                      f"{found.context_len[-1]}): per-op sum")
            else:
                self.lookup.notes.add(f"no whole-forward {table} table for {model.name} tp{tp} {self.mode}: "
                                      "per-op sum")
        table = self.engine.moe_layer_latency_us if model is self.sc.target else None
        if table and any(op.name == "moe_experts" for op in ops):
            self.lookup.notes.add(f"{model.name}: routed experts priced by the engine's moe_layer_latency_us "
                                  f"from {min(table)} to {max(table)} tokens (outside: at least its end values)")
        elif table and not model.is_moe:
            self.lookup.notes.add(f"{model.name}: no MoE layers; the engine's moe_layer_latency_us has no effect")
        return self._kernels(ops, phase, gpus, moe_table=table)

    def moe_layer_us(self, num_tokens: int, engine_table: bool = True) -> float:
        """GPU time of one MoE layer's routed experts on the busiest rank at `num_tokens` tokens, us,
        priced as the target's forwards price it (the op's table or roofline, the kernel efficiency,
        an engine kernel's small-kernel floor, and with `engine_table` the engine's
        moe_layer_latency_us, engine_moe_layer_us).

        Raises:
            ValueError: the target has no MoE layers, or num_tokens < 1.
        """
        from simulator.costs import moe_ops as MO
        if not self.sc.target.is_moe:
            raise ValueError(f"{self.sc.target.name} has no MoE layers")
        if num_tokens < 1:
            raise ValueError(f"num_tokens must be >= 1, got {num_tokens}")
        op = MO.moe_experts(self.sc.target, self.tp, num_tokens, self.sc.workload.expert_routing,
                            self.sc.expert_parallel_size)
        table = self.engine.moe_layer_latency_us if engine_table else None
        return self._kernels([op], "decode", self.all_gpus, moe_table=table)[0].gpu_us

    def _moe_changed(self, model: ModelShape) -> bool:
        """Whether this scenario routes `model`'s experts otherwise than whole-forward tables were
        measured (uniform routing, no expert parallelism)."""
        ep = self.sc.expert_parallel_size if model is self.sc.target else 1
        return self.sc.workload.expert_routing.kind != "uniform" or ep > 1

    def _native_forward(self, phase: str) -> Forward:
        """A phase priced from the engine-native profile (simulator.costs.engine_native): the engine's own
        measured or fitted parts, GPU time only (the host's work is host_schedule_us)."""
        nat, b, c, k = self.native, self.b, self.c, self.sc.spec.num_steps
        gpus = self.all_gpus
        parts = {"verify": [("target_forward", nat.target_forward_us(b, k, c))],
                 "decode": [("target_forward", nat.target_forward_us(b, 0, c)), ("sample", nat.sample_us(b, 0, c)),
                            ("step_bookkeeping", nat.other_gpu_us(b, 0, c))],
                 "accept": [("sample", nat.sample_us(b, k, c)), ("step_bookkeeping", nat.other_gpu_us(b, k, c))],
                 "draft_extend": [("draft_prefill", nat.draft_extend_us(b, k, c)),
                                  ("draft_inputs", nat.propose_overhead_us(b, k, c))],
                 "draft": [("draft_step", nat.draft_step_us(b, k, c) if k >= 2 else 0.0)]}[phase]
        scale = self.sc.costs.compute_latency_scale
        return Forward(phase, tuple(Kernel(name, phase, "compute", us * scale, 0.0, gpus) for name, us in parts))

    def _build_forward(self, phase: str, n: int) -> Forward:
        """Forward of `phase` with `n` new tokens per request (see the public methods)."""
        if self.native is None:
            return self._model_forward(phase, n)
        fwd = self._native_forward(phase)
        if self.native.collectives_measured:
            return fwd
        # a per-rank shard's profile: its TP group's collectives priced from the box's links
        comms = tuple(k for k in self._model_forward(phase, n).kernels if k.category == "comm")
        return Forward(phase, fwd.kernels + comms)

    def _model_forward(self, phase: str, n: int) -> Forward:
        """The engine model's forward of `phase` (op tables, collectives from the box's links)."""
        sc, b, c = self.sc, self.b, self.c
        if phase in ("verify", "decode"):
            aux = sc.draft.num_fc_input_hidden_states if phase == "verify" else 0
            ks = self._model_kernels(sc.target, self.tp, n, phase, self.all_gpus,
                                     FO.target_forward_ops(sc.target, self.tp, b, n, c,
                                                          routing=sc.workload.expert_routing,
                                                          ep=sc.expert_parallel_size,
                                                          dispatch=sc.expert_dispatch))
            if aux:  # the EAGLE-3 hidden-state capture (whole-forward tables are measured without it)
                ks += self._kernels([O.elementwise("concat", b * n, aux * sc.target.hidden_size)], phase,
                                    self.all_gpus)
            cat_ids, copy_ids = O.verify_io_ops(b, n)
            if phase == "verify":
                ks = self._kernels([cat_ids], phase, self.all_gpus) + ks
            ks += self._kernels([copy_ids], phase, self.all_gpus)
        elif phase in ("draft", "draft_extend"):
            extend = phase == "draft_extend"
            ks = self._model_kernels(sc.draft, self.draft_tp, n, phase, self.draft_gpus,
                                     FO.draft_forward_ops(sc.draft, self.draft_tp, b, n, c, extend, sc.spec.method,
                                                         routing=sc.workload.expert_routing))
            if extend and ks:
                ks += self._kernels(O.extend_io_ops(b, sc.draft.hidden_size), phase, self.draft_gpus)
        elif phase == "accept":
            ks = self._kernels(O.accept_ops(b, sc.spec.num_steps), phase, self.all_gpus)
        else:
            raise ValueError(f"unknown phase {phase!r}")
        extra_host = self.host.graph_replay_us if self.engine.graph_mode(phase, b) != "none" else 0.0
        if phase == "draft":
            extra_host += self.engine.host_draft_step_us
        if extra_host and ks:
            first = ks[0]
            ks[0] = Kernel(first.name, first.phase, first.category, first.gpu_us,
                           first.host_us + extra_host, first.gpus, first.barrier)
        return Forward(phase, tuple(ks))

    def _transfer(self, phase: str, size_bytes: float, kind: str, world: int, gpus: tuple[int, ...]) -> Forward:
        gpu = self.lookup.collective_us(kind, size_bytes, world) * self.sc.costs.collective_latency_scale
        host = self.host.graph_replay_us if self.graph else self.host.op_launch_us.get(kind, self.host.default_launch_us)
        return Forward(phase, (Kernel(kind, phase, "comm", gpu, host, gpus, True),))

    def decode_forward(self) -> Forward:
        """Baseline: one target forward over batch_size tokens (greedy argmax)."""
        return self._forward("decode", 1)

    def verify_forward(self) -> Forward:
        """Target forward over num_draft_tokens per request (tree mask for topk > 1)."""
        return self._forward("verify", self.sc.spec.num_draft_tokens)

    def draft_step_forward(self, step_idx: int) -> Forward:
        return self._forward("draft", self.draft_step_tokens(step_idx))

    def draft_extend_forward(self, tokens_per_request: int) -> Forward:
        """Draft forward over the accepted tokens, padded to the longest accept_length in the batch."""
        return self._forward("draft_extend", int(tokens_per_request))

    def accept_forward(self) -> Forward:
        return self._forward("accept", 1)

    def _cycle_forwards(self, extend_tokens_per_request: int) -> tuple[Forward, ...]:
        """All forwards of one cycle in issue order, after a previous accept of that length
        (`cycle_forwards`, memoised: a pure function of its argument).

        Placement transfers: tp1_colocated / tp<k> broadcast the draft tokens (int64, b x
        num_draft_tokens) to every TP rank; tp1_dedicated sends the target's fused hidden states
        to the draft GPU before the extend and the draft tokens back before verify.
        """
        sc, b = self.sc, self.b
        out: list[Forward] = []
        tokens_bytes = b * sc.spec.num_draft_tokens * O.TOKEN_ID_BYTES
        dedicated = self.dedicated_draft_gpu
        if dedicated is not None:
            k = max(1, sc.draft.num_fc_input_hidden_states)
            hidden_bytes = b * extend_tokens_per_request * k * sc.target.hidden_size * sc.target.activation_dtype_bytes
            out.append(self._transfer("draft_extend", hidden_bytes, "send_recv", 2, (0, dedicated)))
        if sc.spec.method != "ngram":  # n-gram proposals are host work (engine host_cycle_us)
            out.append(self.draft_extend_forward(extend_tokens_per_request))
        out += [self.draft_step_forward(i) for i in range(self.num_draft_forwards)]
        if self.native is not None and self.native.collectives_measured:
            pass  # the engine's own draft-token broadcast is inside its measured propose
        elif dedicated is not None:
            out.append(self._transfer("draft", tokens_bytes, "send_recv", 2, (0, dedicated)))
            if self.tp > 1:
                out.append(self._transfer("draft", tokens_bytes, "broadcast", self.tp, self.all_gpus))
        elif self.draft_tp < self.tp:
            out.append(self._transfer("draft", tokens_bytes, "broadcast", self.tp, self.all_gpus))
        out += [self.verify_forward(), self.accept_forward()]
        return tuple(out)

    @property
    def num_draft_forwards(self) -> int:
        """Draft decode forwards per cycle under this serving engine (`draft_forwards_per_cycle`;
        0 for n-gram proposals)."""
        if self.sc.spec.method == "ngram":
            return 0
        return draft_forwards_per_cycle(self.sc.spec.num_steps, self.engine.first_draft_from_extend)

    def baseline_forwards(self) -> tuple[Forward, ...]:
        """Baseline step: one decode forward."""
        return (self.decode_forward(),)
