"""Carry an engine-native profile (simulator.engines.profile) to another GPU of the hardware catalog.

A profile prices the GPU it was measured on. To price another, each GPU part of the engine's step
is split by what bounds it, from the profile's own points:

    part_us(point) = fixed_us + sum over ops of max(bandwidth_factor * bytes / bandwidth,
                                                    flops_factor * flops / tensor rate)

over the part's ops (simulator.costs.forward_ops' ops of that forward at the point's batch, padded
tokens and context): the weights and KV read against the datasheet's HBM bandwidth, the GEMM and
attention FLOPs against its dense tensor rate. fixed_us holds what neither explains (kernel
launches and the gaps between kernels inside the CUDA graph); the two factors are the inverse of
the share of the datasheet the engine's kernels reached. The three are fitted per part on
relative errors over every GPU-bound point that measured the part, each factor at least 1 (no
kernel beats the datasheet), fixed_us at least 0 (`fit_split`: scipy's bounded least squares).
The points at several batch sizes and contexts separate them: the KV read grows with batch x
context, the FLOPs with the tokens of the forward, the fixed share with neither. Where no
point's FLOP-bound ops (on the datasheet) make 5% of the part (`FLOPS_IDENTIFIED_FRAC`), one
factor prices both.

On the other GPU the same ops are priced on its own datasheet (an op may change bound), and a
part priced on the measured GPU (simulator.costs.engine_native.NativeCosts: a measured point or
the fitted form) is multiplied by part_us(dst) / part_us(src) at the scenario's batch, num_steps
and context: the fixed share is kept, a bandwidth-bound op scales by the bandwidth ratio, a
FLOP-bound one by the tensor-rate ratio (a GPU of less bandwidth and the same rate never comes
out faster). The parts are
`CARRIED_PARTS`: the target's forward (decode or verify, without its lm_head), the sampler (the
target's lm_head over every verified position, then sampling), the draft's extend and each later
draft step. The draft phase's own small kernels, the step's bookkeeping on the GPU and the host's
work are kept as measured (launch-bound kernels and the host, assumed of the same class); so are
collectives of a TP group measured inside the parts.

Assumptions: the engine runs the same kernels at the same efficiency on the other GPU (an
architecture change may change kernel choices: `kernel_choice_note`); the datasheet figures
are the catalog's (data/hardware/gpus).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from simulator.costs import forward_ops as FO
from simulator.costs.ops import Op
from simulator.engines.forms import verify_tokens
from simulator.engines.profile import EnginePoint, EngineProfile
from simulator.model_shape import ModelShape
from simulator.profile import GpuRates
from simulator.units import BYTES_PER_US_PER_GB_PER_S, FLOPS_PER_US_PER_TFLOPS

CARRIED_PARTS = ("target_forward", "sample", "draft_extend", "draft_step")
PART_LABELS = {"target_forward": "target forward", "sample": "sampler", "draft_extend": "draft extend",
               "draft_step": "draft step"}
FLOPS_IDENTIFIED_FRAC = 0.05  # the FLOP-bound share must reach this at some point to get a factor of its own


@dataclass(frozen=True)
class OpTimes:
    """A forward's ops on one GPU's datasheet: each op's bytes / bandwidth and flops / rate, us, and how
    many times it runs (collectives left out)."""

    memory_us: np.ndarray
    compute_us: np.ndarray
    counts: np.ndarray

    @property
    def memory_bound_us(self) -> float:
        """The bandwidth-bound ops' bytes / bandwidth (an op whose bytes take longer than its flops)."""
        return float(self.counts @ np.where(self.memory_us >= self.compute_us, self.memory_us, 0.0))

    @property
    def compute_bound_us(self) -> float:
        """The FLOP-bound ops' flops / rate."""
        return float(self.counts @ np.where(self.memory_us >= self.compute_us, 0.0, self.compute_us))

    def roofline_us(self, bandwidth_factor: float, flops_factor: float) -> float:
        """Sum over ops of max(bandwidth_factor x bytes time, flops_factor x flops time)."""
        return float(self.counts @ np.maximum(bandwidth_factor * self.memory_us, flops_factor * self.compute_us))


def op_times(ops: list[Op], rates: GpuRates, tokens: int | None = None, requests: dict | None = None,
             counts: list[int] | None = None) -> OpTimes:
    """`ops` (collectives left out; `counts`: each op's repeats, default 1) on the datasheet `rates`.
    `tokens`: the padded token count the engine runs the forward's token-wise ops (GEMMs,
    elementwise) at; `requests`: the attention's batch_size and context_len where other than its own."""
    bw = rates.memory_bandwidth_gb_per_s * BYTES_PER_US_PER_GB_PER_S
    mem, comp, n = [], [], []
    for op, c in zip(ops, counts or [1] * len(ops)):
        if op.is_collective:
            continue
        if "batch_size" in op.axes:
            axes = {**op.axes, **(requests or {})}
        else:
            axes = op.axes if tokens is None else {**op.axes, "num_tokens": tokens}
        mem.append(op.bytes_at(axes) / bw)
        comp.append(op.flops_at(axes) / (rates.rate_tflops(op.compute_dtype) * FLOPS_PER_US_PER_TFLOPS))
        n.append(c)
    return OpTimes(np.array(mem, float), np.array(comp, float), np.array(n, float))


@dataclass(frozen=True)
class PartSplit:
    """One part's split (module docstring): fixed_us + each op's max of its factored bound times."""

    part: str
    fixed_us: float
    bandwidth_factor: float
    flops_factor: float
    flops_identified: bool
    num_points: int
    median_abs_error_frac: float
    max_abs_error_frac: float

    def us(self, times: OpTimes) -> float:
        return self.fixed_us + times.roofline_us(self.bandwidth_factor, self.flops_factor)

    def text(self) -> str:
        flops = (f"FLOPs at {1 / self.flops_factor:.0%} of the datasheet" if self.flops_identified
                 else "FLOPs at the bandwidth's share (no point FLOP-bound enough to say)")
        return (f"{PART_LABELS[self.part]} {self.fixed_us:,.0f} us fixed + bandwidth at {1 / self.bandwidth_factor:.0%} "
                f"of the datasheet + {flops} ({self.num_points} points, median |error| "
                f"{self.median_abs_error_frac:.1%})")


def fit_split(part: str, measured_us: np.ndarray, times: list[OpTimes]) -> PartSplit:
    """fixed_us, bandwidth_factor, flops_factor of a part from its measured times and each point's op
    times on the measured GPU's datasheet (module docstring): a bounded linear least squares on the
    datasheet's bandwidth- and FLOP-bound sums (scipy.optimize.lsq_linear) starts a bounded least
    squares on the per-op max (scipy.optimize.least_squares), both on relative errors.

    Raises:
        ValueError: no point, or a time that is not positive.
    """
    from scipy.optimize import least_squares, lsq_linear

    t = np.asarray(measured_us, float)
    if len(t) == 0 or not np.all(t > 0):
        raise ValueError(f"{part}: a split needs measured times above 0 ({len(t)} given)")
    mem = np.array([s.memory_bound_us for s in times])
    comp = np.array([s.compute_bound_us for s in times])
    identified = bool(np.max(comp / t) >= FLOPS_IDENTIFIED_FRAC)
    cols = [np.ones_like(t), mem, comp] if identified else [np.ones_like(t), mem + comp]
    lower = [0.0] + [1.0] * (len(cols) - 1)
    x = lsq_linear(np.column_stack(cols) / t[:, None], np.ones_like(t), bounds=(lower, [np.inf] * len(cols)),
                   method="bvls").x
    if identified:  # the datasheet's bounds are the split at factors 1: refit on each op's max at the factors
        def residual(v):
            return np.array([v[0] + s.roofline_us(v[1], v[2]) for s in times]) / t - 1.0
        x0 = np.maximum(x, [0.0, 1.0, 1.0]) + [0.0, 1e-9, 1e-9]
        x = least_squares(residual, x0, bounds=([0.0, 1.0, 1.0], [np.inf] * 3), method="trf", x_scale="jac").x
    fixed, bw = float(x[0]), float(x[1])
    flops = float(x[2]) if identified else bw
    split = PartSplit(part, fixed, bw, flops, identified, len(t), 0.0, 0.0)
    err = np.abs(np.array([split.us(s) for s in times]) / t - 1.0)
    return PartSplit(part, fixed, bw, flops, identified, len(t), float(np.median(err)), float(np.max(err)))


class EngineCarry:
    """A profile's parts carried from its GPU's datasheet `src` to `dst` (module docstring), and from the
    target and draft it measured to `target` / `draft` of the same family of layers where given (another
    shape: `shape_carried`): the other shape's ops priced at the same factors, the target forward's
    fixed share (launches and gaps, per layer) scaled by its layer count."""

    def __init__(self, profile: EngineProfile, src: GpuRates, dst: GpuRates, target: ModelShape | None = None,
                 draft: ModelShape | None = None, tp_size: int | None = None, draft_tp_size: int | None = None):
        self.profile, self.src, self.dst = profile, src, dst
        self.target, self.draft = measured_shapes(profile)
        self.dst_target = target if target is not None else self.target
        self.dst_draft = draft if draft is not None and self.draft is not None else self.draft
        self.tp = profile.tp_size
        self.draft_tp = profile.draft_tp_size or profile.tp_size
        self.dst_tp = tp_size or self.tp
        self.dst_draft_tp = draft_tp_size or (self.draft_tp if tp_size is None else self.dst_tp)
        self.tp_carried = (self.dst_tp, self.dst_draft_tp) != (self.tp, self.draft_tp)
        self.other_shape = (effective_shape(self.dst_target) != effective_shape(self.target)
                            or (self.draft is not None and effective_shape(self.dst_draft) != effective_shape(self.draft)))
        self.shape_carried = self.other_shape or self.tp_carried  # the ops priced are another forward's
        self._ops = lru_cache(maxsize=4096)(self._part_ops)
        self.splits: dict[str, PartSplit] = {}
        for part in CARRIED_PARTS:
            rows = part_rows(profile, part)
            if part.startswith("draft") and self.draft is None or not rows:
                continue
            self.splits[part] = fit_split(part, np.array([v for v, *_ in rows]),
                                          [self.bounds(part, b, k, c, n, src) for _, b, k, c, n in rows])

    def verify_tokens(self, num_steps: int) -> int:
        """Tokens per request of the target's forward (1: the baseline's decode)."""
        return verify_tokens(self.profile, num_steps)

    def _part_ops(self, part: str, batch_size: int, num_steps: int, context: int,
                  other: bool = False) -> tuple[tuple[Op, int], ...]:
        """The part's ops (of the measured shapes, or with `other` of the carried-to ones), each once with
        its count (a dense model's layers are one op list repeated)."""
        p, b, k, c = self.profile, batch_size, num_steps, context
        target, draft = (self.dst_target, self.dst_draft) if other else (self.target, self.draft)
        tp, dtp = (self.dst_tp, self.dst_draft_tp) if other else (self.tp, self.draft_tp)
        if part in ("target_forward", "sample"):
            q = self.verify_tokens(k)
            aux = draft.num_fc_input_hidden_states if k and draft is not None and p.method == "eagle3" else 0
            ops = FO.engine_ops(FO.target_forward_ops(target, tp, b, q, c, num_aux_hidden_states=aux))
            head = next(i for i, op in enumerate(ops) if op.name == "lm_head")
            return tuple(Counter(ops[:head] if part == "target_forward" else ops[head:]).items())
        n = k + 1 if part == "draft_extend" else p.topk
        ops = FO.engine_ops(FO.draft_forward_ops(draft, dtp, b, n, c, part == "draft_extend", p.method))
        return tuple(Counter(ops).items())

    def bounds(self, part: str, batch_size: int, num_steps: int, context: float, tokens: int,
               rates: GpuRates, other: bool = False) -> OpTimes:
        """The part's op times on `rates` at this batch, num_steps, context and padded tokens (with `other`:
        of the carried-to shapes). A dense model's ops are built once per part and num_steps and evaluated
        at the point's axes (their bytes and flops are affine in them, simulator.costs.ops.Op); a MoE
        model's, whose experts touched depend on the tokens, at each point."""
        c = int(round(context))
        shapes = (self.dst_target, self.dst_draft) if other else (self.target, self.draft)
        if any(m is not None and m.n_routed_experts for m in shapes):
            pairs = self._ops(part, batch_size, num_steps, c, other)
        else:
            pairs = self._ops(part, 1, num_steps, 1, other)
        ops, counts = [op for op, _ in pairs], [n for _, n in pairs]
        return op_times(ops, rates, tokens, {"batch_size": batch_size, "context_len": c}, counts)

    def fixed_scale(self, part: str) -> float:
        """The fixed share's scale on the carried-to shapes: the target forward's launches and gaps are per
        layer (its layer count's ratio); the sampler's and a one-layer draft's are kept."""
        if part == "target_forward":
            return self.dst_target.num_hidden_layers / self.target.num_hidden_layers
        if part.startswith("draft") and self.draft is not None:
            return self.dst_draft.num_hidden_layers / self.draft.num_hidden_layers
        return 1.0

    def ratio(self, part: str, batch_size: int, num_steps: int, context: float, tokens: int) -> float:
        """The part's time on `dst` (and the carried-to shapes) over its time on `src` at this point (1 where
        the part is not split)."""
        s = self.splits.get(part)
        if s is None:
            return 1.0
        src = s.us(self.bounds(part, batch_size, num_steps, context, tokens, self.src))
        times = self.bounds(part, batch_size, num_steps, context, tokens, self.dst, other=self.shape_carried)
        dst = s.fixed_us * self.fixed_scale(part) + times.roofline_us(s.bandwidth_factor, s.flops_factor) \
            if self.shape_carried else s.us(times)
        return dst / src if src > 0 else 1.0


def part_rows(profile: EngineProfile, part: str) -> list[tuple[float, int, int, float, int]]:
    """(measured us, batch, num_steps, context, padded tokens) of every GPU-bound point that measured
    the part (the points NativeCosts prices GPU parts from)."""
    out = []
    for p in profile.points:
        if p.gpu_bound is False:
            continue
        v, tokens = _part_value(profile, p, part)
        if v is not None and v > 0:
            out.append((float(v), p.batch_size, p.num_steps, p.context_len, tokens))
    return out


def _part_value(profile: EngineProfile, p: EnginePoint, part: str) -> tuple[float | None, int]:
    b, k = p.batch_size, p.num_steps
    q = verify_tokens(profile, k)
    if part == "target_forward":
        return p.target_forward_us, p.target_tokens_padded or profile.padded_tokens(b * q, b)
    if part == "sample":
        return p.sample_us, b * q
    if not k:
        return None, 0
    if part == "draft_extend":
        return p.draft_extend_us, p.draft_extend_tokens_padded or profile.padded_tokens(b * (k + 1), b)
    step = p.draft_steps_us / (k - 1) if k >= 2 and p.draft_steps_us else None
    return step, profile.padded_tokens(b * profile.topk, b)


# ---- a scenario's carry and its notes ------------------------------------------------------------
_CARRIES: dict[tuple[str, str, str], EngineCarry] = {}
MAX_CARRIES = 64


def carry_prefill(fits: list, src: GpuRates, dst: GpuRates) -> list:
    """A profile's PrefillFits (simulator.engines.profile) carried from the GPU `src` to `dst`: a prefill
    step of hundreds to thousands of tokens is FLOP-bound (Llama-3.1-8B's GEMMs at 2 x 8e9 flops a token
    take 16 us of the H100's 989 TFLOP/s; its fit says 23 us a token), so the per-token and per-token-pair
    (attention) coefficients scale by the dense bf16 tensor rates' ratio; per_step_us and per_run_us (the
    launches, the sampler and the host's work of a step and a run) are kept, as the carried parts' fixed
    shares are (module docstring). Unchecked: no run of one GPU's prefill has priced another's yet."""
    f = src.bf16_dense_tflops / dst.bf16_dense_tflops
    return [fit.model_copy(update={"per_token_us": fit.per_token_us * f, "per_token_pair_us": fit.per_token_pair_us * f})
            for fit in fits]


def _prefill_flops(m: ModelShape, tp: int, draft: bool, method: str) -> tuple[float, float]:
    """(FLOPs a prompt token, FLOPs a causal token pair) of one forward over a prompt on a rank of `tp`
    (the target's without its lm_head, a prefill's logits being its last token's; a draft's extend with
    its head), from the ops' flops at two contexts: the ops are affine in the context (simulator.costs.ops)."""
    n, c0, c1 = 1024, 1024, 2048

    def flops(c: int) -> float:
        if draft:
            ops = FO.draft_forward_ops(m, tp, 1, n, c, True, method)
        else:
            ops = FO.target_forward_ops(m, tp, 1, n, c)
            ops = ops[:next(i for i, op in enumerate(ops) if op.name == "lm_head")]
        return sum(op.flops_at(op.axes) for op in ops if not op.is_collective)
    f0, f1 = flops(c0), flops(c1)
    per_pair = (f1 - f0) / (n * (c1 - c0))
    return (f0 - per_pair * n * c0) / n, per_pair


def measured_shapes(profile: EngineProfile) -> tuple[ModelShape, ModelShape | None]:
    """The target and draft (None: a baseline-only profile) the profile measured, as shapes."""
    target = ModelShape.model_validate({"name": "target", **profile.target})
    return target, ModelShape.model_validate({"name": "draft", **profile.draft}) if profile.draft else None


def carry_prefill_shape(profile: EngineProfile, dst_target: ModelShape,
                        dst_draft: ModelShape | None) -> tuple[list, str]:
    """The profile's PrefillFits carried to another target (and draft) of the same family of layers, and a note
    of how: a prefill step is FLOP-bound (carry_prefill), so per_token_us scales by the FLOPs a prompt token
    takes (the target's forward, plus the draft's extend over the prompt for the fit with the draft) and
    per_token_pair_us by the attention's FLOPs a token pair; per_step_us and per_run_us are kept (the launches,
    the sampler and the host's work of a step and a run)."""
    target, draft = measured_shapes(profile)
    tp, method = profile.tp_size, profile.method
    base = (_prefill_flops(target, tp, False, method), _prefill_flops(dst_target, tp, False, method))
    spec = base
    if draft is not None and dst_draft is not None:
        spec = tuple((t + d, p + q) for (t, p), (d, q) in
                     zip(base, (_prefill_flops(draft, tp, True, method), _prefill_flops(dst_draft, tp, True, method))))
    out, said = [], []
    for fit in profile.prefill:
        (t0, p0), (t1, p1) = spec if fit.speculative else base
        tok, pair = t1 / t0, (p1 / p0 if p0 > 0 else 1.0)  # no token pair priced on the measured shape: kept
        out.append(fit.model_copy(update={"per_token_us": fit.per_token_us * tok,
                                          "per_token_pair_us": fit.per_token_pair_us * pair}))
        said.append(f"{'with' if fit.speculative else 'without'} the draft: per token x{tok:.2f}, per token pair "
                    f"x{pair:.2f}")
    return out, "; ".join(said)


def engine_carry_for(profile: EngineProfile, gpu: str, target: ModelShape | None = None,
                     draft: ModelShape | None = None, tp_size: int | None = None,
                     draft_tp_size: int | None = None) -> EngineCarry:
    """The profile (measured on its `catalog_gpu`) carried to the catalog GPU `gpu` (its own for a shape
    carry alone) and, where given, to another target / draft shape; fitted once per profile content, GPU
    pair and shapes."""
    import hashlib

    from simulator.hardware import default_catalog, gpu_rates
    catalog = default_catalog()
    shapes = tuple(repr(sorted(m.shape_values().items())) if m is not None else None for m in (target, draft))
    key = (hashlib.sha256(profile.model_dump_json().encode()).hexdigest(), profile.catalog_gpu, gpu, shapes,
           tp_size, draft_tp_size)
    if key not in _CARRIES:
        if len(_CARRIES) >= MAX_CARRIES:
            _CARRIES.pop(next(iter(_CARRIES)))
        _CARRIES[key] = EngineCarry(profile, gpu_rates(catalog.gpu(profile.catalog_gpu)), gpu_rates(catalog.gpu(gpu)),
                                    target, draft, tp_size, draft_tp_size)
    return _CARRIES[key]


def effective_shape(m: ModelShape) -> dict:
    """A shape's values as its forward uses them (head_dim and KV heads as they default): two shapes whose
    values are equal here build the same ops (simulator.costs.engine_native's shape match uses it too)."""
    return {**m.shape_values(), "head_dim": m.attn_head_dim, "num_key_value_heads": m.kv_heads}


def _shape_text(m: ModelShape | None) -> str:
    if m is None:
        return "none"
    moe = f", {m.n_routed_experts} experts top-{m.num_experts_per_tok}" if m.is_moe else ""
    return (f"{m.num_hidden_layers} layers, hidden {m.hidden_size}, {m.num_attention_heads}/{m.kv_heads} heads, MLP "
            f"{m.intermediate_size}{moe}, vocab {m.lm_head_vocab_size}")


ATTENTION_KERNELS = {  # vLLM's FLASH_ATTN backend (get_flash_attn_version): FA3 where the capability's major is 9
    "hopper": "FlashAttention 3", "ampere": "FlashAttention 2", "ada": "FlashAttention 2", "blackwell": "FlashAttention 2"}


def kernel_choice_note(profile: EngineProfile, src_arch: str, dst_arch: str) -> str:
    """What may run otherwise on the other GPU: kernels the engine picks by architecture."""
    backend = profile.attention_backend or "?"
    if src_arch == dst_arch:
        fa = f" ({ATTENTION_KERNELS[src_arch]} on both)" if backend == "FLASH_ATTN" and src_arch in ATTENTION_KERNELS \
            else ""
        return (f"same architecture ({src_arch}): the engine should pick the same kernels, {backend} attention{fa}; "
                "cuBLAS may still pick other GEMM tiles for another SM count")
    src_k = ATTENTION_KERNELS.get(src_arch, "?") if backend == "FLASH_ATTN" else backend
    dst_k = ATTENTION_KERNELS.get(dst_arch, "?") if backend == "FLASH_ATTN" else "the engine's choice"
    return (f"{src_arch} -> {dst_arch}: the engine may pick other kernels (attention: {src_k} measured, {dst_k} "
            "there; other GEMM kernels and CUDA-graph capture), whose efficiency the carry does not know: it assumes "
            "the measured GPU's")


def carry_notes(carry: EngineCarry, engine: str) -> list[str]:
    """The notes a carried profile's prices get: from which GPU, how each part was split, what may differ."""
    src, dst = carry.src, carry.dst
    parts = "; ".join(s.text() for s in carry.splits.values())
    tp = (f" at TP {carry.tp} (draft {carry.draft_tp}), carried to a rank of TP {carry.dst_tp} (draft "
          f"{carry.dst_draft_tp}: the rank's sharded ops; the group's collectives priced from the box's links)"
          if carry.tp_carried else "")
    if carry.tp_carried and not carry.other_shape:
        shapes = [f"{engine}: engine profile {carry.profile.name} measured{tp}: each part's ops of the rank priced at "
                  "the measured shares of the datasheet, the fixed share (launches and gaps) as measured; the draft's "
                  "small kernels, the step's bookkeeping and the host's work as measured"]
        return shapes if src.gpu == dst.gpu else shapes + _gpu_notes(carry, engine, parts)
    shapes = [] if not carry.shape_carried else [
        f"{engine}: engine profile {carry.profile.name} measured on another shape ({_shape_text(carry.target)}; "
        f"draft {_shape_text(carry.draft)}){tp}, carried to {carry.dst_target.name} ({_shape_text(carry.dst_target)}; "
        f"draft {_shape_text(carry.dst_draft)}): each part's ops of the other shape priced at the measured "
        "shares of the datasheet, the target forward's fixed share (launches and gaps) by its layer count "
        f"(x{carry.fixed_scale('target_forward'):.3g}); the draft's small kernels, the step's bookkeeping and the "
        "host's work as measured"]
    if src.gpu == dst.gpu:
        return shapes
    return shapes + _gpu_notes(carry, engine, parts)


def _gpu_notes(carry: EngineCarry, engine: str, parts: str) -> list[str]:
    """The notes of a carry to another GPU: the parts' splits, the datasheets, the kernels that may differ."""
    from simulator.hardware import default_catalog
    catalog = default_catalog()
    src, dst = carry.src, carry.dst
    return [f"{engine}: engine profile {carry.profile.name} measured on {src.gpu}, carried to {dst.gpu} "
            f"(simulator/costs/engine_carry.py): each GPU part split from its points into a fixed share, a "
            f"bandwidth-bound and a FLOP-bound one ({parts}); bandwidth {src.memory_bandwidth_gb_per_s:g} -> "
            f"{dst.memory_bandwidth_gb_per_s:g} GB/s, bf16 {src.bf16_dense_tflops:g} -> {dst.bf16_dense_tflops:g} "
            "TFLOP/s (datasheets); launches, the draft's small kernels, the step's bookkeeping and the host's work "
            "as measured (the same host class assumed)",
            f"{engine}: carried engine profile: " + kernel_choice_note(
                carry.profile, catalog.gpu(src.gpu).architecture, catalog.gpu(dst.gpu).architecture)]
