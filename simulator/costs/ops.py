"""The op vocabulary: which kernels a forward runs, with TP-sharded shapes, bytes and flops.

Each forward (target decode or verify, draft step or draft extend) is a list of `Op`s in
execution order. Calibration measures ops by these exact keys; `calibration/models/llama.py` runs
the same ops in the same order, so the per-op sum and the live loop describe one program.

Models:
- Llama-style decoder layer (GQA attention, SwiGLU MLP), pre-norm, Megatron TP sharding:
  qkv/gate_up column-parallel, o_proj/down row-parallel, one allreduce after each
  (Shoeybi et al. 2019, arXiv 1909.08053, section 3).
- DeepSeek-V3 / Kimi-K2 layers: MLA attention with weight absorption at decode
  (DeepSeek-V2, arXiv 2405.04434, section 2.1) and MoE with shared experts; the latent KV cache
  is replicated on every TP rank (sglang `python/sglang/srt/models/deepseek_v2.py`).
- EAGLE-3 draft: one decoder layer whose qkv reads concat(token embedding, hidden) (2*hidden),
  an fc that fuses `num_fc_input_hidden_states` target hidden states in the draft extend, and
  its own lm_head over `draft_vocab_size` (Li et al. 2025, arXiv 2503.01840).
- Vocab-parallel embedding needs an allreduce; the lm_head's logits are all-gathered
  (sglang `layers/vocab_parallel_embedding.py`, `layers/logits_processor.py`).

Serving engines run fused kernels instead of the live loop's unfused ops (`engine_ops`): one
add+RMSNorm kernel, one rotary+KV-write kernel, a paged attention kernel, and no per-forward
mask or cos/sin build; and a verify may take the prefill attention path (`mla_attention_prefill`).

Expert parallelism (`moe_experts`, `_mlp_block`): routed experts split whole over ep ranks with an
all-to-all dispatch and combine; expert-load skew from `simulator.costs.routing`.

Left out: prefill, pipeline parallelism, a draft's expert parallelism.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simulator.config import ExpertRouting, ModelShape, UniformRouting, default_compute_dtype
from simulator.costs.routing import busiest_rank, routing_key

TOKEN_ID_BYTES = 8  # int64 token ids, as torch keeps them.


@dataclass(frozen=True)
class Op:
    """One op of a forward on one rank.

    Bytes and flops are affine in the op's lookup coordinates, so the roofline can be evaluated
    at any point (the edge of a measured table, say):
        total_tokens = num_tokens * batch_size;  kv_tokens = batch_size * (context_len + num_tokens)
        bytes = bytes_fixed + bytes_per_token * total_tokens + bytes_per_kv_token * kv_tokens
        flops = flops_per_token * total_tokens + flops_per_token_kv * total_tokens * (context_len + num_tokens)
                + flops_per_kv_token * kv_tokens

    Attributes:
        name: op name, also the host launch-cost key (gemm, attention, rmsnorm, allreduce, ...).
        key: table key for calibration lookup (shape-specific), e.g. 'gemm:k=4096,n=6144,w=2'.
        axes: lookup coordinates; gemm/elementwise: {'num_tokens': tokens in the forward};
            attention: {'batch_size', 'num_tokens' (new tokens per request), 'context_len'}.
        collective: None for compute; else allreduce | all_gather | broadcast | send_recv | all_to_all.
        size_bytes: collective message size per rank (input bytes).
        world_size: ranks taking part in the collective.
        weight_dtype_bytes: bytes per weight (with block scales) of a GEMM's weights.
        compute_dtype: tensor-core dtype its math runs at (bf16, fp8, fp4, int8): the roofline's rate.
    """

    name: str
    key: str
    axes: dict = field(default_factory=dict, hash=False, compare=False)
    axes_items: tuple = ()
    bytes_fixed: float = 0.0
    bytes_per_token: float = 0.0
    bytes_per_kv_token: float = 0.0
    flops_per_token: float = 0.0
    flops_per_token_kv: float = 0.0
    flops_per_kv_token: float = 0.0
    collective: str | None = None
    size_bytes: int = 0
    world_size: int = 1
    weight_dtype_bytes: float = 2.0
    compute_dtype: str = "bf16"

    def __post_init__(self):
        object.__setattr__(self, "axes_items", tuple(sorted(self.axes.items())))

    @property
    def is_collective(self) -> bool:
        return self.collective is not None

    def bytes_at(self, axes: dict) -> float:
        """HBM bytes moved per rank at lookup coordinates `axes` (defaults: the op's own)."""
        t, kv, _ = _tokens(axes)
        return self.bytes_fixed + self.bytes_per_token * t + self.bytes_per_kv_token * kv

    def flops_at(self, axes: dict) -> float:
        """Floating-point operations per rank at lookup coordinates `axes`."""
        t, kv, kv_len = _tokens(axes)
        return self.flops_per_token * t + self.flops_per_token_kv * t * kv_len + self.flops_per_kv_token * kv

    @property
    def bytes(self) -> float:
        return self.bytes_at(self.axes)

    @property
    def flops(self) -> float:
        return self.flops_at(self.axes)


def _tokens(axes: dict) -> tuple[float, float, float]:
    """(total_tokens, kv_tokens, kv_len_per_request) of lookup coordinates."""
    n = float(axes.get("num_tokens", 0))
    b = float(axes.get("batch_size", 1))
    kv_len = float(axes.get("context_len", 0)) + n
    return n * b, b * kv_len, kv_len


def _w(x: float) -> str:
    return f"{x:g}"


def gemm(name: str, num_tokens: int, in_features: int, out_features: int, w_bytes: float,
         a_bytes: float = 2.0, compute_dtype: str | None = None) -> Op:
    """A linear layer: (num_tokens, in_features) @ (in_features, out_features).

    compute_dtype: the tensor-core dtype (default: fp8 for weights of 1 byte or less, else bf16);
    a dtype other than that default is part of the table key.
    """
    dtype = compute_dtype or default_compute_dtype(w_bytes)
    suffix = "" if dtype == default_compute_dtype(w_bytes) else f",c={dtype}"
    return Op(name=name, key=f"gemm:k={in_features},n={out_features},w={_w(w_bytes)}{suffix}",
              axes={"num_tokens": num_tokens}, bytes_fixed=in_features * out_features * w_bytes,
              bytes_per_token=(in_features + out_features) * a_bytes,
              flops_per_token=2.0 * in_features * out_features, weight_dtype_bytes=w_bytes, compute_dtype=dtype)


def _linear(m: ModelShape, component: str, name: str, t: int, in_features: int, out_features: int) -> Op:
    """A linear layer of one model component, in that component's weight format."""
    w, dtype = m.weight_format(component)
    return gemm(name, t, in_features, out_features, w, m.activation_dtype_bytes, dtype)


def elementwise(name: str, num_tokens: int, width: int, passes: float = 2.0, a_bytes: float = 2.0) -> Op:
    """A memory-bound elementwise op over (num_tokens, width): `passes` reads+writes of it."""
    return Op(name=name, key=f"{name}:h={width}", axes={"num_tokens": num_tokens},
              bytes_per_token=passes * width * a_bytes, flops_per_token=passes * width)


def collective(kind: str, size_bytes: int, world_size: int) -> Op:
    """A collective among `world_size` ranks, `size_bytes` per rank."""
    return Op(name=kind, key=f"{kind}:world={world_size}", axes={}, collective=kind,
              size_bytes=int(size_bytes), world_size=world_size)


def gqa_attention(m: ModelShape, tp: int, batch_size: int, tokens_per_request: int, context_len: int) -> Op:
    """Attention of `tokens_per_request` new queries per request over `context_len` cached tokens."""
    d = m.attn_head_dim
    h = m.num_attention_heads // tp
    kv = max(1, m.kv_heads // tp)
    return Op(name="attention", key=f"attention:h={h},kv={kv},d={d},kvb={_w(m.kv_cache_dtype_bytes)}",
              axes={"batch_size": batch_size, "num_tokens": tokens_per_request, "context_len": context_len},
              bytes_per_kv_token=2 * kv * d * m.kv_cache_dtype_bytes,
              bytes_per_token=2 * h * d * m.activation_dtype_bytes, flops_per_token_kv=4.0 * h * d)


def mla_attention(m: ModelShape, tp: int, batch_size: int, tokens_per_request: int, context_len: int) -> Op:
    """Absorbed MLA decode attention: queries in latent space over the replicated latent KV cache."""
    h = m.num_attention_heads // tp
    latent = m.kv_lora_rank + m.qk_rope_head_dim
    return Op(name="attention", key=f"mla_attention:h={h},latent={latent},kvb={_w(m.kv_cache_dtype_bytes)}",
              axes={"batch_size": batch_size, "num_tokens": tokens_per_request, "context_len": context_len},
              bytes_per_kv_token=latent * m.kv_cache_dtype_bytes,
              bytes_per_token=2 * h * latent * m.activation_dtype_bytes,
              flops_per_token_kv=2.0 * h * (latent + m.kv_lora_rank))


def mla_attention_prefill(m: ModelShape, tp: int, batch_size: int, tokens_per_request: int,
                          context_len: int) -> Op:
    """Non-absorbed MLA attention (the prefill/extend path): the latent KV of the whole context is
    up-projected to per-head K and V (W_UK, W_UV), written, and read back by a standard
    multi-head attention with qk head dim qk_nope + qk_rope and v head dim v_head_dim.

    Per KV token and rank: reads the latent (kv_lora_rank + qk_rope_head_dim) * kv_cache bytes,
    writes and reads K and V (h * (qk_nope + qk_rope + v_head_dim) * activation bytes, twice) and
    does 2 * kv_lora_rank * h * (qk_nope + v_head_dim) flops; so its cost grows with the context,
    unlike the absorbed decode form (`mla_attention`). Source: DeepSeek-V2 (arXiv 2405.04434,
    section 2.1.2: absorption is an inference-time rewrite; without it K and V are recovered from
    the latent); sglang `python/sglang/srt/models/deepseek_v2.py` (forward_normal vs forward_absorb).
    """
    h = m.num_attention_heads // tp
    qk = m.qk_nope_head_dim + m.qk_rope_head_dim
    latent = m.kv_lora_rank + m.qk_rope_head_dim
    return Op(name="attention", key=f"mla_attention_prefill:h={h},latent={latent},kvb={_w(m.kv_cache_dtype_bytes)}",
              axes={"batch_size": batch_size, "num_tokens": tokens_per_request, "context_len": context_len},
              bytes_fixed=m.kv_lora_rank * h * (m.qk_nope_head_dim + m.v_head_dim) * m.activation_dtype_bytes,
              bytes_per_kv_token=latent * m.kv_cache_dtype_bytes
              + 2 * h * (qk + m.v_head_dim) * m.activation_dtype_bytes,
              bytes_per_token=2 * h * qk * m.activation_dtype_bytes,
              flops_per_kv_token=2.0 * m.kv_lora_rank * h * (m.qk_nope_head_dim + m.v_head_dim),
              flops_per_token_kv=2.0 * h * (qk + m.v_head_dim))


def expected_distinct_experts(num_experts: int, experts_per_token: int, num_tokens: int) -> float:
    """Expected distinct experts touched by `num_tokens` tokens with uniform top-k routing.

    E * (1 - (1 - k/E)^T). Assumes tokens route independently and uniformly.
    Source: ../shared/CASES.md (MoE verify cost); standard occupancy argument.
    """
    e, k = float(num_experts), float(experts_per_token)
    return e * (1.0 - (1.0 - k / e) ** num_tokens)


def moe_experts(m: ModelShape, tp: int, num_tokens: int, routing: ExpertRouting | None = None,
                ep: int = 1) -> Op:
    """Routed experts of one MoE layer on one rank: weights of the distinct experts touched are read once.

    Without expert parallelism (ep = 1) every rank holds all E experts, each sharded over tp in
    width. With ep > 1 (SGLang's --ep-size; moe_tp = tp / ep) a rank holds E / ep whole experts
    (contiguous ids), each sharded over moe_tp, and is priced at the busiest rank
    (`simulator.costs.routing.busiest_rank`). Distinct experts follow `routing`
    (simulator.costs.routing; uniform: E (1 - (1 - k/E)^T)). Uniform routing at ep 1 keeps the
    key of measured tables; skewed routing appends ',r=...' and ep > 1 ',ep=<ep>' (both then
    roofline-priced unless a table has that key).
    """
    inter = m.moe_intermediate_size // (tp // ep)
    e, k = m.n_routed_experts, m.num_experts_per_tok
    uniform = routing is None or routing.kind == "uniform"
    if uniform and ep == 1:
        distinct, pairs = expected_distinct_experts(e, k, num_tokens), float(k)
    else:
        distinct, pairs = busiest_rank(routing or UniformRouting(), e, k, num_tokens, ep)
    w, dtype = m.weight_format("routed_experts")
    suffix = "" if dtype == default_compute_dtype(w) else f",c={dtype}"
    suffix += "" if routing is None else routing_key(routing)
    suffix += f",ep={ep}" if ep > 1 else ""
    # Distinct experts are not affine in tokens: bytes_fixed holds them at this op's num_tokens.
    return Op(name="moe_experts",
              key=f"moe_experts:e={e},k={k},h={m.hidden_size},i={inter},w={_w(w)}{suffix}",
              axes={"num_tokens": num_tokens}, bytes_fixed=distinct * 3 * m.hidden_size * inter * w,
              bytes_per_token=4 * m.hidden_size * m.activation_dtype_bytes,
              flops_per_token=2.0 * pairs * 3 * m.hidden_size * inter, weight_dtype_bytes=w,
              compute_dtype=dtype)


def all_to_all_bytes(m: ModelShape, num_tokens: int, ep: int) -> float:
    """Send buffer of one rank in one MoE all-to-all (dispatch or combine), in bytes.

    num_tokens * k * hidden * activation bytes / ep: the forward's tokens are replicated over the
    TP group after the attention allreduce, each rank dispatches its 1/ep share of them, and each of
    a token's k copies goes to the rank holding that expert (on average size / ep per peer, (ep-1)/ep
    of it over the links). The combine returns the same bytes. Activations move in the model's
    activation dtype (an fp8 dispatch, DeepEP's option, would be activation_dtype_bytes 1).
    """
    return num_tokens * m.num_experts_per_tok * m.hidden_size * m.activation_dtype_bytes / ep


def _attention_block(m: ModelShape, tp: int, b: int, n: int, c: int, qkv_in: int) -> list[Op]:
    t = b * n
    lin = lambda i, o: _linear(m, "attention", "gemm", t, i, o)  # noqa: E731
    if m.is_mla:
        h = m.num_attention_heads // tp
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        q_in = m.q_lora_rank or qkv_in
        ops = [lin(qkv_in, m.q_lora_rank)] if m.q_lora_rank else []
        ops += [lin(q_in, h * qk),
                lin(qkv_in, m.kv_lora_rank + m.qk_rope_head_dim),
                # absorb W_UK into the query and W_UV after attention (per-head batched GEMMs)
                lin(h * m.qk_nope_head_dim, m.kv_lora_rank),
                elementwise("rotary", t, h * m.qk_rope_head_dim),
                elementwise("kv_write", t, m.kv_lora_rank + m.qk_rope_head_dim, passes=1.0),
                mla_attention(m, tp, b, n, c),
                lin(m.kv_lora_rank, h * m.v_head_dim),
                lin(h * m.v_head_dim, m.hidden_size)]
        return ops
    d = m.attn_head_dim
    h = m.num_attention_heads // tp
    kv = max(1, m.kv_heads // tp)
    if m.attn_output_gate:  # the query projection also yields a sigmoid gate on the attention output
        return [lin(qkv_in, (2 * h + 2 * kv) * d),
                elementwise("rotary", t, (h + kv) * d),
                elementwise("kv_write", t, 2 * kv * d, passes=1.0),
                gqa_attention(m, tp, b, n, c),
                elementwise("gate_mul", t, h * d, passes=3.0),
                lin(h * d, m.hidden_size)]
    return [lin(qkv_in, (h + 2 * kv) * d),
            elementwise("rotary", t, (h + kv) * d),
            elementwise("kv_write", t, 2 * kv * d, passes=1.0),
            gqa_attention(m, tp, b, n, c),
            lin(h * d, m.hidden_size)]


STATE_DTYPE_BYTES = 4  # the recurrent state of linear attention is kept in fp32 (fla / vLLM / SGLang kernels)


def linear_attention_block(m: ModelShape, tp: int, b: int, n: int, qkv_in: int) -> list[Op]:
    """One Gated DeltaNet layer's token mixer on one rank (Qwen3-Next / Qwen3.5 / Qwen3.6).

    in_proj_qkvz (hidden -> 2 key_dim + 2 value_dim) and in_proj_ba (hidden -> 2 v heads), a short
    causal conv over q, k, v, the gated delta rule over each request's recurrent state (v heads x
    key dim x value dim, fp32), a gated RMSNorm and out_proj (value_dim -> hidden); heads split
    over TP. The state is read once and written once per request per forward; a forward over n > 1
    tokens (a verify) also writes the state after every token, which speculative decoding keeps to
    roll back rejected tokens (sglang's hybrid linear-attention backend, intermediate SSM states).
    Sources: transformers `models/qwen3_next/modeling_qwen3_next.py` (Qwen3NextGatedDeltaNet);
    Yang et al., "Gated Delta Networks", arXiv 2412.06464.
    """
    t = b * n
    kh, vh = m.linear_num_key_heads // tp, m.linear_num_value_heads // tp
    key_dim, value_dim = kh * m.linear_key_head_dim, vh * m.linear_value_head_dim
    state = vh * m.linear_key_head_dim * m.linear_value_head_dim * STATE_DTYPE_BYTES
    lin = lambda i, o: _linear(m, "attention", "gemm", t, i, o)  # noqa: E731
    conv_dim = 2 * key_dim + value_dim
    delta = Op(name="gated_delta_rule",
               key=f"gated_delta_rule:vh={vh},dk={m.linear_key_head_dim},dv={m.linear_value_head_dim}",
               axes={"batch_size": b, "num_tokens": n},
               bytes_fixed=b * state * (2 + (n - 1 if n > 1 else 0)),
               bytes_per_token=(conv_dim + value_dim) * m.activation_dtype_bytes,
               flops_per_token=4.0 * vh * m.linear_key_head_dim * m.linear_value_head_dim)
    return [lin(qkv_in, 2 * key_dim + 2 * value_dim),
            lin(qkv_in, 2 * vh),
            elementwise("causal_conv1d", t, conv_dim, passes=2.0),
            delta,
            elementwise("gated_rmsnorm", t, value_dim, passes=3.0),
            lin(value_dim, m.hidden_size)]


def _mlp_block(m: ModelShape, tp: int, t: int, layer_idx: int, routing: ExpertRouting | None = None,
               ep: int = 1, dispatch: str = "allreduce") -> list[Op]:
    """The MLP of one layer: dense, or router + routed experts (+ shared experts).

    With ep > 1 and dispatch 'allreduce' the tokens are already replicated over the TP group by the
    attention allreduce: each rank runs its own experts on them and the layer's allreduce combines
    (SGLang --ep-size without an a2a backend, python/sglang/srt/models/deepseek_v2.py; TensorRT-LLM's
    mixed ETP, docs/source/blogs/tech_blog/blog1_...B200_GPUs.md: "indexed local reduction ... before
    a global allreduce"). With dispatch 'all_to_all' (DeepEP-style, SGLang --moe-a2a-backend deepep)
    the routed experts sit between an all-to-all dispatch and an all-to-all combine
    over the ep ranks (`all_to_all_bytes`); either way the layer's one allreduce after the MLP
    (`decoder_layer_ops`) stays and is not doubled: it sums the shared experts' and the width-sharded
    (moe_tp = tp / ep) experts' partial outputs and re-replicates each rank's combined tokens for
    the next TP attention, as the allreduce of the routed output does without EP.
    """
    if m.is_moe_layer(layer_idx):
        experts = [moe_experts(m, tp, t, routing, ep)]
        if ep > 1 and dispatch == "all_to_all":
            a2a = all_to_all_bytes(m, t, ep)
            experts = [collective("all_to_all", a2a, ep), *experts, collective("all_to_all", a2a, ep)]
        ops = [_linear(m, "attention", "router", t, m.hidden_size, m.n_routed_experts),
               elementwise("topk_route", t, m.n_routed_experts, passes=1.0),
               *experts]
        shared = m.shared_expert_intermediate_size or m.n_shared_experts * m.moe_intermediate_size
        if shared:
            inter = shared // tp
            ops += [_linear(m, "shared_experts", "gemm", t, m.hidden_size, 2 * inter),
                    elementwise("silu_mul", t, inter, passes=3.0),
                    _linear(m, "shared_experts", "gemm", t, inter, m.hidden_size)]
        return ops
    inter = m.intermediate_size // tp
    return [_linear(m, "dense_mlp", "gemm", t, m.hidden_size, 2 * inter),
            elementwise("silu_mul", t, inter, passes=3.0),
            _linear(m, "dense_mlp", "gemm", t, inter, m.hidden_size)]


def decoder_layer_ops(m: ModelShape, tp: int, b: int, n: int, c: int, layer_idx: int,
                      qkv_in: int | None = None, routing: ExpertRouting | None = None, ep: int = 1,
                      dispatch: str = "allreduce") -> list[Op]:
    """Ops of one pre-norm decoder layer on one rank, in execution order.

    Args:
        m: model shape. tp: ranks the layer is sharded over. b: batch_size.
        n: new tokens per request in this forward. c: context_len (cached tokens before them).
        layer_idx: index (selects dense vs MoE MLP). qkv_in: qkv input width (draft: 2*hidden).
        routing: expert routing of MoE layers (default uniform). ep: expert-parallel size (divides tp).
        dispatch: how EP moves tokens to experts, 'allreduce' or 'all_to_all' (`_mlp_block`).
    """
    t = b * n
    act = t * m.hidden_size * m.activation_dtype_bytes
    ops = [elementwise("concat", t, qkv_in, passes=2.0)] if qkv_in and qkv_in != m.hidden_size else []
    ops.append(elementwise("rmsnorm", t, qkv_in or m.hidden_size, passes=2.0))
    if m.is_linear_attention_layer(layer_idx):
        ops += linear_attention_block(m, tp, b, n, qkv_in or m.hidden_size)
    else:
        ops += _attention_block(m, tp, b, n, m.attended_context(layer_idx, c), qkv_in or m.hidden_size)
    if tp > 1:
        ops.append(collective("allreduce", act, tp))
    ops += [elementwise("add", t, m.hidden_size, passes=3.0),
            elementwise("rmsnorm", t, m.hidden_size, passes=2.0)]
    ops += _mlp_block(m, tp, t, layer_idx, routing, ep, dispatch)
    if tp > 1:
        ops.append(collective("allreduce", act, tp))
    ops.append(elementwise("add", t, m.hidden_size, passes=3.0))
    return ops


def attn_mask(b: int, n: int, c: int) -> Op:
    """Additive attention mask built once per forward from each request's KV position.

    Shape (batch_size, num_tokens, context_len + num_tokens); every layer's attention reuses it.
    """
    return Op(name="attn_mask", key="attn_mask",
              axes={"batch_size": b, "num_tokens": n, "context_len": c},
              bytes_per_kv_token=2.0 * n, flops_per_token_kv=1.0)


def _prologue(m: ModelShape, tp: int, b: int, n: int, c: int) -> list[Op]:
    """Embedding (+ its allreduce), the attention mask, the rope cos/sin gather at new positions."""
    d = m.qk_rope_head_dim if m.is_mla else m.attn_head_dim
    return _embedding(m, tp, b * n) + [attn_mask(b, n, c), elementwise("rope_cos_sin", b * n, d, passes=2.0)]


def _embedding(m: ModelShape, tp: int, t: int) -> list[Op]:
    ops = [elementwise("embedding", t, m.hidden_size, passes=2.0)]
    if tp > 1:  # vocab-parallel embedding: each rank holds a slice, an allreduce assembles it
        ops.append(collective("allreduce", t * m.hidden_size * m.activation_dtype_bytes, tp))
    return ops


def _head(m: ModelShape, tp: int, t: int, sampling: str) -> list[Op]:
    vocab = m.lm_head_vocab_size
    ops = [elementwise("rmsnorm", t, m.hidden_size, passes=2.0),
           _linear(m, "lm_head", "lm_head", t, m.hidden_size, vocab // tp)]
    if tp > 1:
        ops.append(collective("all_gather", t * (vocab // tp) * m.activation_dtype_bytes, tp))
    ops.append(elementwise(sampling, t, vocab, passes=1.0))
    return ops


def target_forward_ops(m: ModelShape, tp: int, b: int, n: int, c: int, num_aux_hidden_states: int = 0,
                       routing: ExpertRouting | None = None, ep: int = 1, dispatch: str = "allreduce") -> list[Op]:
    """Target forward over `n` tokens per request (decode: n=1; verify: n=num_draft_tokens).

    `routing`, `ep` (expert-parallel size) and `dispatch` shape the MoE layers (`_mlp_block`, `moe_experts`).

    Sampling is a greedy argmax over the full vocabulary for each of the b*n positions. With
    `num_aux_hidden_states` > 0 (verify for an EAGLE-3 draft) the captured hidden states are
    concatenated into the draft's fc input after the head.
    """
    t = b * n
    ops = _prologue(m, tp, b, n, c)
    for i in range(m.num_hidden_layers):
        ops += decoder_layer_ops(m, tp, b, n, c, i, routing=routing, ep=ep, dispatch=dispatch)
    ops += _head(m, tp, t, "argmax")
    if num_aux_hidden_states:
        ops.append(elementwise("concat", t, num_aux_hidden_states * m.hidden_size, passes=2.0))
    return ops


SPEC_METHODS = ("eagle3", "eagle", "mtp", "draft_model", "ngram")


def draft_forward_ops(m: ModelShape, tp: int, b: int, n: int, c: int, extend: bool,
                      method: str = "eagle3", routing: ExpertRouting | None = None) -> list[Op]:
    """One draft forward over `n` tokens per request, by speculative method.

    - eagle3 (Li et al. 2025, arXiv 2503.01840): draft steps (extend=False) take the draft's own
      previous hidden state; the draft extend first fuses `num_fc_input_hidden_states` target
      hidden states with the fc; every layer's qkv reads concat(embedding, hidden) (2 * hidden).
    - eagle (EAGLE-1/2, arXiv 2401.15077) and mtp (DeepSeek-V3 MTP module, arXiv 2412.19437
      section 2.2; sglang `models/deepseek_nextn.py`): concat(normed embedding, normed hidden) goes
      through one fc (eh_proj, 2 * hidden -> hidden) in every forward, then the decoder layer(s)
      with hidden-wide qkv and the lm_head (for mtp: the target's, full vocabulary).
    - draft_model: a standalone small model with its own KV cache, a plain forward (the extend
      catches its cache up on the accepted tokens).
    - ngram: no GPU forward (prompt-lookup proposals on the host): [].
    A draft with MoE layers (mtp) routes by `routing`; its experts are not expert-parallel.

    Raises:
        ValueError: an unknown method.
    """
    if method not in SPEC_METHODS:
        raise ValueError(f"unknown speculative method {method!r}; one of {', '.join(SPEC_METHODS)}")
    if method == "ngram":
        return []
    t = b * n
    ops = _prologue(m, tp, b, n, c)
    qkv_in = None
    if method == "eagle3":
        if extend and m.num_fc_input_hidden_states:
            k = m.num_fc_input_hidden_states * m.hidden_size
            ops.append(_linear(m, "dense_mlp", "fc", t, k, m.hidden_size))
        qkv_in = 2 * m.hidden_size
    elif method in ("eagle", "mtp"):
        ops += [elementwise("rmsnorm", t, 2 * m.hidden_size, passes=2.0),
                _linear(m, "dense_mlp", "fc", t, 2 * m.hidden_size, m.hidden_size)]
    for i in range(m.num_hidden_layers):
        ops += decoder_layer_ops(m, tp, b, n, c, i, qkv_in=qkv_in, routing=routing)
    return ops + _head(m, tp, t, "topk")


# The live loop's unfused elementwise ops that an engine folds into its neighbour (pairs: the first
# op's work moves into the second's kernel), and those it does not run per forward at all.
_FUSED_PAIRS = {("add", "rmsnorm"): "add_rmsnorm", ("rotary", "kv_write"): "rotary_kv_write"}
_ENGINE_DROPS = ("attn_mask", "rope_cos_sin")


def engine_ops(ops: list[Op], prefill_attention: bool = False, model: ModelShape | None = None,
               tp: int = 1, fuse: bool = True) -> list[Op]:
    """A forward's ops as a serving engine runs them (fused kernels), from the live loop's list.

    - residual add + RMSNorm -> one `add_rmsnorm` kernel (sglang `layers/layernorm.py` RMSNorm with
      a residual calls sgl_kernel `fused_add_rmsnorm`; vLLM `fused_add_rms_norm`);
    - rotary + KV-cache write -> one `rotary_kv_write` kernel (the engines apply rotary in one
      kernel and write K/V in the attention backend's store);
    - the attention mask and cos/sin table are not built per forward (paged attention takes
      sequence lengths; the cos/sin cache is built once);
    - attention runs the engine's paged kernel (key prefix `engine_`), priced by the profile's
      roofline since the profile times PyTorch SDPA; with `prefill_attention` an MLA model's
      attention takes the non-absorbed path (`mla_attention_prefill`; needs `model`, `tp`).
    GEMMs, experts and collectives are the same kernels (cuBLAS, grouped GEMM, NCCL) and keep the
    profile's tables. Keys of fused ops name no measured table, so they are roofline-priced.
    With fuse=False only the prefill attention swap is made (the live loop's kernels otherwise).
    """
    out: list[Op] = []
    i = 0
    while i < len(ops):
        op = ops[i]
        nxt = ops[i + 1] if i + 1 < len(ops) else None
        pair = _FUSED_PAIRS.get((op.name, nxt.name)) if (fuse and nxt is not None) else None
        if pair is not None:
            out.append(Op(name=pair, key=f"{pair}:{nxt.key.split(':', 1)[1]}+{op.key.split(':', 1)[1]}",
                          axes=dict(nxt.axes), bytes_fixed=op.bytes_fixed + nxt.bytes_fixed,
                          bytes_per_token=op.bytes_per_token + nxt.bytes_per_token,
                          flops_per_token=op.flops_per_token + nxt.flops_per_token))
            i += 2
            continue
        if fuse and op.name in _ENGINE_DROPS:
            i += 1
            continue
        if op.name == "attention":
            if prefill_attention and model is not None and model.is_mla:
                op = mla_attention_prefill(model, tp, op.axes["batch_size"], op.axes["num_tokens"],
                                           op.axes["context_len"])
            if fuse:
                op = Op(name=op.name, key=f"engine_{op.key}", axes=dict(op.axes), bytes_fixed=op.bytes_fixed,
                        bytes_per_token=op.bytes_per_token, bytes_per_kv_token=op.bytes_per_kv_token,
                        flops_per_token=op.flops_per_token, flops_per_token_kv=op.flops_per_token_kv,
                        flops_per_kv_token=op.flops_per_kv_token)
        out.append(op)
        i += 1
    return out


def accept_ops(b: int, num_steps: int) -> list[Op]:
    """Compare the num_steps draft tokens with the target's argmax and find each request's accepted prefix."""
    return [elementwise("accept", b, num_steps, passes=3.0, a_bytes=TOKEN_ID_BYTES)]


def verify_io_ops(b: int, num_draft_tokens: int) -> list[Op]:
    """Before verify, gather [last token, drafts] into the verify input; after it, copy the
    target's tokens out (int64 each)."""
    return [elementwise("cat_ids", b, num_draft_tokens, passes=2.0, a_bytes=TOKEN_ID_BYTES),
            elementwise("copy_ids", b, num_draft_tokens, passes=2.0, a_bytes=TOKEN_ID_BYTES)]


def extend_io_ops(b: int, hidden_size: int) -> list[Op]:
    """After the draft extend, gather each request's bonus token and last hidden state."""
    return [elementwise("gather_ids", b, 1, passes=2.0, a_bytes=TOKEN_ID_BYTES),
            elementwise("gather_hidden", b, hidden_size, passes=2.0)]
