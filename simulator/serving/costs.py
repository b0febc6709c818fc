"""Engine-step durations of a serving run, from the steady-batch cost model at each batch size.

- Decode / verify step at decode batch b: `simulator.analytic.cycle_time_us` (speculative cycle:
  draft extend + draft steps + verify + accept, host schedule and device->host sync) or
  `baseline_step_us` (one decode forward) of a `CostModel` built for a copy of the scenario with
  `workload.batch_size = b`, `workload.context_len = c` and the step's `spec`. Cost models are
  cached per (b, spec, c) with c on a geometric grid (CONTEXT_GRID_PER_OCTAVE points per
  doubling); a step's time is interpolated linearly in context between the two grid points
  around the batch's mean context. The mean stands for every request's context: the per-op
  attention op takes batch_size x context_len, so a batch of mixed contexts is priced as if each
  had the mean (exact for attention whose cost is linear in the context, which memory-bound
  decode attention is).
- Prefill chunk of n tokens over c already-cached tokens: the GPU time of one target forward
  (`simulator.costs.forward_ops.target_forward_ops` with b = 1, the engine's fused kernels and
  prefill attention path where it has them), each op priced as every forward prices it
  (`CostModel.op_gpu_us`: the profile's table or roofline, the engine's kernel efficiency, an engine
  kernel's small-kernel floor, the engine's moe_layer_latency_us), attention on the roofline
  (`prefill_attention_us`), summed, times
  `serving.prefill_latency_scale`. Cached per (n, c) on geometric grids (PREFILL_GRID_PER_OCTAVE),
  interpolated linearly in n. Several requests' chunks in one step are priced as one forward over
  their tokens at their token-weighted mean context. The chunk's forward is added to the decode
  step's time (run back to back): the weights a mixed forward would read once are read twice, an
  overestimate that matters only for small chunks. The draft's prefill (EAGLE's draft extend over
  the prompt) is left out.
- A step with prefill only pays the baseline host scheduling and device->host sync at batch 1.
- Where the scenario's engine profile measured the engine's own prefill (`EngineProfile.prefill`,
  simulator.evidence.prefill_fit: runs of the prefill alone in the calibration's processes), the
  prefill is priced from it instead, with or without the draft as the run speculates: a chunk of n
  tokens whose attention computes A token pairs costs per_token_us n + per_token_pair_us A (the
  draft's prefill over the prompt included where the fit measured it), at least eager_step_us where the
  step's tokens (the decode tokens it carries included) pass the fit's graph_max_tokens (vLLM runs such a
  step without a CUDA graph; the host launching it kernel by kernel hides the decode step it rides on, so
  a mixed step is at least eager_step_us in all), a step with prefill only per_step_us more, and the first
  step after the engine was idle per_run_us more (`engine_prefill`). A chunk riding a decode step runs in the
  same forward (`serving_engine.mixed_forward: one`, the default): it adds the forward over its tokens and the
  decode tokens less the decode step's own target forward (`decode_forward_us`), at least 0; `apart` adds its
  own tokens' time as above.
"""

from __future__ import annotations

import math

from simulator.analytic import baseline_step_us, cycle_time_us
from simulator.config import Scenario
from simulator.costs import forward_ops as FO
from simulator.costs import ops as O
from simulator.costs.forward import CostModel
from simulator.costs.lookup import LatencyLookup
from simulator.engines.profile import chunk_token_pairs
from simulator.profile import CalibrationProfile
from simulator.units import BYTES_PER_US_PER_GB_PER_S, FLOPS_PER_US_PER_TFLOPS
from simulator.workload_config import SpecConfig

CONTEXT_GRID_PER_OCTAVE = 4
PREFILL_GRID_PER_OCTAVE = 8


def _grid(x: float, per_octave: int) -> tuple[int, int, float]:
    """(lower grid point, upper grid point, weight of the upper) of x >= 1 on round(2^(k/per_octave))."""
    x = max(1.0, float(x))
    k = math.floor(math.log2(x) * per_octave + 1e-9)
    lo, hi = round(2 ** (k / per_octave)), round(2 ** ((k + 1) / per_octave))
    while hi <= lo:  # small values: the rounded grid repeats itself
        k += 1
        hi = round(2 ** ((k + 1) / per_octave))
    lo = min(lo, int(x))
    w = (x - lo) / (hi - lo) if hi > lo else 0.0
    return lo, hi, min(max(w, 0.0), 1.0)


def prefill_attention_us(op: O.Op, rf) -> float:
    """Causal prefill attention (a FlashAttention-style kernel) on the profile's roofline, us.

    The profile times decode-shaped SDPA; scaled to thousands of query tokens it would price a
    prefill tens of times too high, so prefill attention is priced by the roofline alone:
    flops = flops_per_token_kv * n * (c + (n + 1) / 2) (each new token attends the c cached tokens
    and the new ones before it), bytes as the op counts them.
    Source: Dao et al., FlashAttention-2 (arXiv 2307.08691), causal FLOPs = half the square.
    """
    b, n, c = op.axes["batch_size"], op.axes["num_tokens"], op.axes["context_len"]
    bw = rf.hbm_bandwidth_gb_per_s * BYTES_PER_US_PER_GB_PER_S * rf.bandwidth_efficiency
    rate = rf.bf16_tflops * FLOPS_PER_US_PER_TFLOPS * rf.compute_efficiency
    flops = op.flops_per_token_kv * b * n * (c + (n + 1) / 2) + op.flops_per_token * b * n
    return max(rf.kernel_floor_us, op.bytes / bw, flops / rate)


class StepCosts:
    """Step durations (us) of one scenario's serving run on one profile; see the module docstring."""

    def __init__(self, scenario: Scenario, profile: CalibrationProfile):
        self.sc, self.profile = scenario, profile
        self.prefill_scale = scenario.serving.prefill_latency_scale if scenario.serving else 1.0
        self._lookups: dict[str, LatencyLookup] = {}
        self._models: dict[tuple, CostModel] = {}
        self._step: dict[tuple, float] = {}
        self._forward: dict[tuple, float] = {}
        self._prefill: dict[tuple[int, int], float] = {}
        self._idle: float | None = None
        self._engine_prefill: dict[bool, object] = {}

    def cost_model(self, batch_size: int, spec: SpecConfig | None, context_len: int) -> CostModel:
        """The CostModel of a scenario copy at this batch size, context and spec (cached)."""
        key = (batch_size, None if spec is None else (spec.num_steps, spec.topk, spec.num_draft_tokens), context_len)
        cost = self._models.get(key)
        if cost is None:
            sc = self.sc
            w = sc.workload.model_copy(update={"batch_size": batch_size, "context_len": context_len})
            copy = sc.model_copy(update={"workload": w, "spec": spec or sc.spec})
            mode = sc.serving_engine.collective_mode(batch_size)
            lookup = self._lookups.setdefault(mode, LatencyLookup(self.profile, collective_mode=mode))
            cost = self._models[key] = CostModel(copy, self.profile, lookup=lookup)
        return cost

    def _grid_step_us(self, b: int, spec: SpecConfig | None, c: int, extend_len: int) -> float:
        key = (b, None if spec is None else (spec.num_steps, spec.topk, spec.num_draft_tokens), c, extend_len)
        t = self._step.get(key)
        if t is None:
            cost = self.cost_model(b, spec, c)
            t = self._step[key] = baseline_step_us(cost) if spec is None else cycle_time_us(cost, extend_len)
        return t

    def decode_step_us(self, batch_size: int, spec: SpecConfig | None, context_len: float,
                       extend_len: int = 1) -> float:
        """One decode step (spec None) or speculative cycle at this batch and mean context, in us.

        extend_len: draft-extend tokens per request (the previous cycle's longest accept_length).
        """
        lo, hi, w = _grid(context_len, CONTEXT_GRID_PER_OCTAVE)
        t_lo = self._grid_step_us(batch_size, spec, lo, extend_len)
        if w == 0.0:
            return t_lo
        return t_lo + w * (self._grid_step_us(batch_size, spec, hi, extend_len) - t_lo)

    def decode_forward_us(self, batch_size: int, spec: SpecConfig | None, context_len: float) -> float:
        """The GPU time of a decode step's target forward (the verify, or the baseline's decode) at this batch
        and mean context, us, where the step's cost model prices it as one kernel (an engine profile's
        `target_forward`); 0 elsewhere (the op tables' forward is many ops)."""
        lo, hi, w = _grid(context_len, CONTEXT_GRID_PER_OCTAVE)
        t_lo = self._grid_forward_us(batch_size, spec, lo)
        return t_lo if w == 0.0 else t_lo + w * (self._grid_forward_us(batch_size, spec, hi) - t_lo)

    def _grid_forward_us(self, b: int, spec: SpecConfig | None, c: int) -> float:
        key = (b, None if spec is None else (spec.num_steps, spec.topk, spec.num_draft_tokens), c)
        t = self._forward.get(key)
        if t is None:
            cost = self.cost_model(b, spec, c)
            fwds = cost.baseline_forwards() if spec is None else cost.cycle_forwards(1)
            t = self._forward[key] = sum(k.gpu_us for f in fwds if f.phase in ("verify", "decode")
                                         for k in f.kernels if k.name == "target_forward")
        return t

    def _grid_prefill_us(self, n: int, c: int) -> float:
        t = self._prefill.get((n, c))
        if t is None:
            t = self._prefill[(n, c)] = self._forward_gpu_us(n, c)
        return t

    def _forward_gpu_us(self, n: int, c: int) -> float:
        """GPU time of one target forward over n new tokens after c cached ones (b = 1), us."""
        sc = self.sc
        cost = self.cost_model(1, None, max(1, c))
        ops = FO.target_forward_ops(sc.target, sc.tp_size, 1, n, c)
        eng = sc.serving_engine
        if eng.kernels == "fused" or eng.verify_attention == "prefill":
            ops = FO.engine_ops(ops, prefill_attention=True, model=sc.target, tp=sc.tp_size,
                               fuse=eng.kernels == "fused")
        rf, moe_table = cost.lookup.rf, eng.moe_layer_latency_us
        return sum(cost.op_gpu_us(op, moe_table, prefill_attention_us(op, rf) if op.name == "attention" else None)
                   for op in ops)

    def engine_prefill(self, speculative: bool):
        """The engine profile's PrefillFit of this kind of run (with the draft or without; the other
        kind where only it was measured), or None where no engine profile prices the scenario's prefill."""
        if speculative not in self._engine_prefill:
            from simulator.costs.engine_native import with_prefill
            cost = self.cost_model(1, None, 1)
            native = cost.native
            fits = with_prefill(native.profile, self.sc, cost.lookup.notes).prefill if native is not None else []
            same = [f for f in fits if f.speculative == speculative]
            self._engine_prefill[speculative] = (same or fits or [None])[0]
        return self._engine_prefill[speculative]

    def prefill_us(self, num_tokens: int, context_len: float, token_pairs: float | None = None,
                   speculative: bool = False, step_tokens: int | None = None, alongside_us: float = 0.0,
                   decode_forward_us: float = 0.0) -> float:
        """A prefill chunk of num_tokens after context_len cached tokens, in us (0 for no tokens);
        token_pairs: its causal attention's token pairs (simulator.engines.profile.chunk_token_pairs; None:
        one request's chunk at that context), for an engine profile's prefill; step_tokens: the step's tokens
        with the decode tokens it carries, alongside_us: that decode step's time (an engine fit's graph edge,
        PrefillFit.step_prefill_us); decode_forward_us: that decode step's target forward where the two run as
        one forward (serving_engine.mixed_forward 'one')."""
        if num_tokens <= 0 or self.prefill_scale == 0.0:
            return 0.0
        if (fit := self.engine_prefill(speculative)) is not None:
            pairs = token_pairs if token_pairs is not None else chunk_token_pairs(num_tokens, context_len)
            scale = self.prefill_scale
            return fit.step_prefill_us(num_tokens, pairs, step_tokens, alongside_us / scale,
                                       decode_forward_us / scale) * scale
        c = 0 if context_len < 1 else _grid(context_len, CONTEXT_GRID_PER_OCTAVE)[0]
        lo, hi, w = _grid(num_tokens, PREFILL_GRID_PER_OCTAVE)
        t = self._grid_prefill_us(lo, c)
        if w:
            t += w * (self._grid_prefill_us(hi, c) - t)
        return t * self.prefill_scale

    def prefill_only_overhead_us(self, speculative: bool = False) -> float:
        """Host scheduling plus device->host sync of a step that runs prefill alone, in us (an engine
        profile's prefill: its per_step_us)."""
        if (fit := self.engine_prefill(speculative)) is not None:
            return fit.per_step_us
        if self._idle is None:
            cost = self.cost_model(1, None, 1)
            self._idle = cost.baseline_host_schedule_us + cost.baseline_d2h_sync_us
        return self._idle

    def from_idle_us(self, speculative: bool = False) -> float:
        """What the first step after the engine was idle costs more, in us (an engine profile's prefill:
        its per_run_us; else 0)."""
        fit = self.engine_prefill(speculative)
        return fit.per_run_us if fit is not None else 0.0
