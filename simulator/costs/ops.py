"""The op vocabulary: the Op type and the kernels of a dense decoder layer, with TP-sharded shapes,
bytes and flops.

Each forward (target decode or verify, draft step or draft extend) is a list of `Op`s in
execution order; `simulator.costs.forward_ops` assembles those lists from the ops here and in
`moe_ops` (MoE MLP) and `linear_attention_ops` (Gated DeltaNet). Calibration measures ops by these
exact keys; `calibration/models/llama.py` runs the same ops in the same order, so the per-op sum and
the live loop describe one program.

Here:
- the primitives: `gemm` (and `linear`, a model component's GEMM in its weight format),
  `elementwise`, `collective`;
- Llama-style attention (GQA), pre-norm, Megatron TP sharding: qkv column-parallel, o_proj
  row-parallel (Shoeybi et al. 2019, arXiv 1909.08053, section 3): `gqa_attention`,
  `attention_block`;
- DeepSeek-V3 / Kimi-K2 MLA attention with weight absorption at decode (DeepSeek-V2, arXiv
  2405.04434, section 2.1); the latent KV cache is replicated on every TP rank (sglang
  `python/sglang/srt/models/deepseek_v2.py`): `mla_attention`, and the non-absorbed prefill path
  a serving engine may take in a verify, `mla_attention_prefill`;
- the per-forward attention mask and the token-id glue of a cycle (`accept_ops`, `verify_io_ops`,
  `extend_io_ops`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simulator.config import ModelShape, default_compute_dtype

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


def linear(m: ModelShape, component: str, name: str, t: int, in_features: int, out_features: int) -> Op:
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


def attention_block(m: ModelShape, tp: int, b: int, n: int, c: int, qkv_in: int) -> list[Op]:
    """One softmax-attention layer's token mixer on one rank, in execution order.

    MLA (absorbed at decode): q (optionally through q_lora), the latent kv projection, W_UK
    absorbed into the query, rotary, the latent KV write, `mla_attention`, W_UV and o_proj.
    GQA: qkv (with a sigmoid output gate when `attn_output_gate`), rotary, the KV write,
    `gqa_attention` and o_proj; heads split over `tp`. b: batch_size; n: new tokens per request;
    c: context_len this layer attends to; qkv_in: qkv input width (EAGLE-3 draft: 2 * hidden).
    """
    t = b * n
    lin = lambda i, o: linear(m, "attention", "gemm", t, i, o)  # noqa: E731
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


def attn_mask(b: int, n: int, c: int) -> Op:
    """Additive attention mask built once per forward from each request's KV position.

    Shape (batch_size, num_tokens, context_len + num_tokens); every layer's attention reuses it.
    """
    return Op(name="attn_mask", key="attn_mask",
              axes={"batch_size": b, "num_tokens": n, "context_len": c},
              bytes_per_kv_token=2.0 * n, flops_per_token_kv=1.0)


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
