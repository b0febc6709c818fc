"""Plain torch implementations of the op vocabulary in `simulator.costs.ops`, one op per call.

Each function is what one `Op` name means on the GPU, unfused: `gemm` (also used for the ops
named lm_head, fc and router), `attn_mask`, `rmsnorm`, `rotary`, `kv_write`, `attention`, `silu_mul`, `add`,
`embedding`, `argmax`, `topk` (also topk_route) and `accept`. `calibration/bench/ops.py` times
them one key at a time (`make_op_runner`); `calibration/models/llama.py` chains them into forwards, so
the per-op sum and the whole forward describe the same program.

Left out: MLA attention and MoE experts (roofline-only for now) and collectives (not compute
ops; `calibration/bench/collectives.py` measures those). fp8 weights (`w=1`) run through
`torch._scaled_mm` with per-tensor scales on a GPU that supports it, else as bf16 (noted on the
runner).
"""

from __future__ import annotations

import re
from typing import Callable

import torch
import torch.nn.functional as F

from simulator.costs.ops import Op

UNSUPPORTED_OPS = {
    "mla_attention": "MLA attention is roofline-only for now (no torch kernel here)",
    "moe_experts": "MoE experts are roofline-only for now (no torch kernel here)",
}
DEFAULT_EMBEDDING_ROWS = 32_000  # vocabulary rows of the embedding table a runner gathers from
DEFAULT_TOPK = 8  # k of the draft's top-k (EAGLE-3 trees use up to 8-10; chains use 1)
DEFAULT_ROUTE_TOPK = 8  # experts per token for topk_route (DeepSeek-V3 / Kimi-K2 use 8)
KV_WRITE_MAX_LEN = 32  # cached positions per request in a kv_write runner's cache


def gemm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """A linear layer without bias.

    Args:
        x: (num_tokens, in_features).
        weight: (out_features, in_features), as nn.Linear stores it.

    Returns:
        (num_tokens, out_features).
    """
    return F.linear(x, weight)


def gemm_fp8(x_fp8: torch.Tensor, weight_fp8: torch.Tensor, scale_x: torch.Tensor,
             scale_w: torch.Tensor, out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """fp8 (e4m3) linear with per-tensor scales, as serving engines run fp8 checkpoints.

    Args:
        x_fp8: (num_tokens, in_features) float8_e4m3fn.
        weight_fp8: (out_features, in_features) float8_e4m3fn.
        scale_x, scale_w: float32 scalars (dequantisation scales).

    Returns:
        (num_tokens, out_features) in `out_dtype`.
    """
    return torch._scaled_mm(x_fp8, weight_fp8.t(), scale_a=scale_x, scale_b=scale_w, out_dtype=out_dtype)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm (Zhang & Sennrich 2019, arXiv 1910.07467): x / sqrt(mean(x^2) + eps) * weight.

    Args:
        x: (num_tokens, width). weight: (width,).
    """
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rotary(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
           sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary position embedding, half-rotation layout (HF Llama `apply_rotary_pos_emb`).

    Source: Su et al. 2021, arXiv 2104.09864.

    Args:
        q: (num_tokens, num_heads, head_dim). k: (num_tokens, kv_heads, head_dim).
        cos, sin: (num_tokens, head_dim), already gathered at each token's position.

    Returns:
        (q, k) rotated, same shapes.
    """
    c, s = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * c + _rotate_half(q) * s, k * c + _rotate_half(k) * s


def kv_write(cache_k: torch.Tensor, cache_v: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             batch_positions: tuple[torch.Tensor, torch.Tensor]) -> None:
    """Scatter new tokens' keys and values into a static KV cache, in place.

    Args:
        cache_k, cache_v: (batch_size, max_len, kv_heads, head_dim).
        k, v: (num_tokens, kv_heads, head_dim).
        batch_positions: (batch_idx, pos_idx), each (num_tokens,) int64: where token t goes.
    """
    cache_k.index_put_(batch_positions, k)
    cache_v.index_put_(batch_positions, v)


def attn_mask(context_lens: torch.Tensor, num_new: int, total_len: int,
              dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Additive attention mask built once per forward from each request's KV position.

    New token i of request r sits at position context_lens[r] + i and sees keys
    0..context_lens[r] + i; later cache slots (another request's longer context, unused space)
    get -inf.

    Args:
        context_lens: (batch_size,) int64, cached tokens per request before the new ones.
        num_new: new tokens per request.
        total_len: key positions the mask spans (>= max(context_lens) + num_new); a Python int
            so the call can be captured in a CUDA graph.
        dtype: the attention's dtype (SDPA wants a float mask in the query's dtype).

    Returns:
        (batch_size, num_new, total_len) with 0 where attended and -inf elsewhere.
    """
    pos = context_lens.unsqueeze(1) + torch.arange(num_new, device=context_lens.device)  # (b, n)
    keys = torch.arange(total_len, device=context_lens.device)
    visible = keys.view(1, 1, -1) <= pos.unsqueeze(2)
    zero = torch.zeros((), dtype=dtype, device=context_lens.device)
    return torch.where(visible, zero, torch.full((), float("-inf"), dtype=dtype, device=context_lens.device))


_FUSED_GQA_MASK_OK: dict[tuple, bool] = {}


def fused_gqa_mask_ok(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether SDPA runs enable_gqa with a float mask in a fused (flash / mem-efficient) kernel here.

    Probed once per (device, dtype) with a tiny call; False on CPU. Without it SDPA would fall
    back to the math kernel (repeat K/V, materialise scores), far slower than any engine.
    """
    if device.type != "cuda":
        return False
    key = (str(device), dtype)
    if key not in _FUSED_GQA_MASK_OK:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        q = torch.randn(1, 8, 2, 64, device=device, dtype=dtype)
        k = torch.randn(1, 2, 16, 64, device=device, dtype=dtype)
        mask = torch.zeros(1, 1, 2, 16, device=device, dtype=dtype)
        try:
            with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.FLASH_ATTENTION]):
                F.scaled_dot_product_attention(q, k, k, attn_mask=mask, enable_gqa=True)
            _FUSED_GQA_MASK_OK[key] = True
        except RuntimeError:
            _FUSED_GQA_MASK_OK[key] = False
    return _FUSED_GQA_MASK_OK[key]


def attention_gqa_masked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """SDPA with enable_gqa and the per-request mask broadcast over heads.

    q: (b, n, h, d); k, v: (b, kv, L, d); mask: (b, n, L) additive. Returns (b, n, h, d).
    """
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k, v, attn_mask=mask.unsqueeze(1),
                                         enable_gqa=q.shape[2] != k.shape[1])  # (b, h, n, d)
    return out.transpose(1, 2)


def attention_folded(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """GQA by folding the query heads of one KV head into query rows (FlashInfer's decode layout).

    Row r = token * group + g. The mask is expanded to rows (one copy of (b, n * group, L)).
    q: (b, n, h, d); k, v: (b, kv, L, d); mask: (b, n, L) additive or None (all visible).
    Returns (b, n, h, d).
    """
    b, n, h, d = q.shape
    kv = k.shape[1]
    group = h // kv
    q_rows = q.view(b, n, kv, group, d).permute(0, 2, 1, 3, 4).reshape(b, kv, n * group, d)
    rows_mask = None
    if mask is not None:
        rows_mask = mask.unsqueeze(2).expand(b, n, group, mask.shape[-1]).reshape(b, 1, n * group, -1)
    out = F.scaled_dot_product_attention(q_rows, k, v, attn_mask=rows_mask)  # (b, kv, n * group, d)
    return out.view(b, kv, n, group, d).permute(0, 2, 1, 3, 4).reshape(b, n, h, d)


def attention(q: torch.Tensor, cache_k: torch.Tensor, cache_v: torch.Tensor, context_len: int,
              num_new: int, mask: torch.Tensor | None = None) -> torch.Tensor:
    """GQA attention of new tokens over the cache (their own keys already written at context_len..).

    New token i of a request sits at position context_len + i and attends to positions
    0..context_len + i (`mask` says so per request). Kernel choice: no mask and one new token
    per request -> heads folded into query rows, no mask (flash); otherwise SDPA with
    enable_gqa when a fused kernel takes it (`fused_gqa_mask_ok`), else the folded layout with
    the mask expanded to its rows.

    Args:
        q: (batch_size, num_new, num_heads, head_dim); num_heads a multiple of kv_heads, head
            h uses KV head h // (num_heads // kv_heads).
        cache_k, cache_v: (batch_size, max_len, kv_heads, head_dim), max_len >= context_len + num_new.
        context_len: cached tokens before the new ones (attention reads context_len + num_new keys).
        num_new: new tokens per request.
        mask: (batch_size, num_new, context_len + num_new) additive mask from `attn_mask`;
            built here if None and num_new > 1.

    Returns:
        (batch_size, num_new, num_heads, head_dim).
    """
    total_len = context_len + num_new
    k = cache_k[:, :total_len].transpose(1, 2)  # (b, kv, total_len, d)
    v = cache_v[:, :total_len].transpose(1, 2)
    if mask is None and num_new == 1:
        return attention_folded(q, k, v, None)
    if mask is None:
        lens = torch.full((q.shape[0],), context_len, dtype=torch.int64, device=q.device)
        mask = attn_mask(lens, num_new, total_len, q.dtype)
    if fused_gqa_mask_ok(q.device, q.dtype):
        return attention_gqa_masked(q, k, v, mask)
    return attention_folded(q, k, v, mask)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """SwiGLU activation (Shazeer 2020, arXiv 2002.05202): silu(gate) * up.

    Args:
        gate_up: (num_tokens, 2 * intermediate), gate first.

    Returns:
        (num_tokens, intermediate).
    """
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Residual add: (num_tokens, hidden) + (num_tokens, hidden)."""
    return x + y


def embedding(ids: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """Token embedding lookup: ids (num_tokens,) int64, table (vocab, hidden) -> (num_tokens, hidden)."""
    return F.embedding(ids, table)


def argmax(logits: torch.Tensor) -> torch.Tensor:
    """Greedy sampling: (num_tokens, vocab) -> (num_tokens,) int64."""
    return torch.argmax(logits, dim=-1)


def topk(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k candidates per row: (num_tokens, vocab) -> values, indices, each (num_tokens, k)."""
    return torch.topk(logits, k, dim=-1)


def accept(draft_tokens: torch.Tensor, target_tokens: torch.Tensor) -> torch.Tensor:
    """Accepted prefix length per request (greedy chain verification).

    Args:
        draft_tokens: (batch_size, num_draft) int64, the proposed tokens.
        target_tokens: (batch_size, num_draft) int64, the target's argmax at the same positions.

    Returns:
        (batch_size,) int64: number of leading positions where they agree (accepted drafts).
    """
    return torch.cumprod((draft_tokens == target_tokens).to(torch.int64), dim=1).sum(dim=1)


def rope_cos_sin(token_pos: torch.Tensor, cos_sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Glue (not in simulator.costs.ops): gather rope cos/sin at each new token's position.

    Args:
        token_pos: (num_tokens,) int64 positions.
        cos_sin: (max_len, 2 * head_dim), cos then sin per position (calibration.models.llama.rope_table).

    Returns:
        cos, sin: each (num_tokens, head_dim) (views of one gathered tensor).
    """
    return cos_sin[token_pos].chunk(2, dim=-1)


def concat(tensors: list[torch.Tensor], out: torch.Tensor | None = None) -> torch.Tensor:
    """Glue (not in simulator.costs.ops): concatenate along the last dim, e.g. the EAGLE-3
    qkv input concat(embedding, hidden) (num_tokens, 2 * hidden), optionally into `out`."""
    return torch.cat(tensors, dim=-1, out=out) if out is not None else torch.cat(tensors, dim=-1)


def parse_key(key: str) -> tuple[str, dict[str, float]]:
    """Split an op key into its kind and numeric fields: 'gemm:k=4096,n=6144,w=2' -> ('gemm', {...})."""
    kind, _, rest = key.partition(":")
    fields: dict[str, float] = {}
    for part in filter(None, rest.split(",")):
        name, _, value = part.partition("=")
        if not re.fullmatch(r"[0-9.eE+-]+", value):
            raise ValueError(f"op key {key!r}: field {part!r} is not name=number")
        fields[name] = float(value)
    return kind, fields


def _head_split(width: int) -> tuple[int, int]:
    """(num_heads, head_dim) for a per-token width when only the width is in the key (128 or 64)."""
    for d in (128, 64, 32, 16, 8):
        if width % d == 0:
            return width // d, d
    return 1, width


def _runner_gemm(fields: dict, t: int, dev, dtype, gen) -> tuple[Callable[[], object], str]:
    k_in, n_out = int(fields["k"]), int(fields["n"])
    x = torch.randn(t, k_in, device=dev, dtype=dtype, generator=gen)
    w = torch.randn(n_out, k_in, device=dev, dtype=dtype, generator=gen) * k_in ** -0.5
    if fields.get("w", 2) == 1 and dev.type == "cuda" and hasattr(torch, "float8_e4m3fn"):
        try:
            x8, w8 = x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
            one = torch.ones((), device=dev, dtype=torch.float32)
            gemm_fp8(x8, w8, one, one, dtype)
            return (lambda: gemm_fp8(x8, w8, one, one, dtype)), "fp8 e4m3 via torch._scaled_mm"
        except (RuntimeError, TypeError) as e:
            return (lambda: gemm(x, w)), f"fp8 weights timed as {dtype} ({type(e).__name__}: {e})"
    note = f"fp8 weights timed as {dtype}" if fields.get("w", 2) == 1 else ""
    return (lambda: gemm(x, w)), note


def _runner_attention(fields: dict, axes: dict, dev, dtype, gen) -> Callable[[], object]:
    h, kv, d = int(fields["h"]), int(fields["kv"]), int(fields["d"])
    b, n, c = int(axes["batch_size"]), int(axes["num_tokens"]), int(axes["context_len"])
    q = torch.randn(b, n, h, d, device=dev, dtype=dtype, generator=gen)
    ck = torch.randn(b, c + n, kv, d, device=dev, dtype=dtype, generator=gen)
    cv = torch.randn(b, c + n, kv, d, device=dev, dtype=dtype, generator=gen)
    mask = attn_mask(torch.full((b,), c, dtype=torch.int64, device=dev), n, c + n, dtype)
    return lambda: attention(q, ck, cv, c, n, mask)


def _runner_elementwise(name: str, width: int, t: int, dev, dtype, gen) -> Callable[[], object]:
    def rand(*shape):
        return torch.randn(*shape, device=dev, dtype=dtype, generator=gen)

    def ids(high: int, *shape):
        return torch.randint(0, high, shape, device=dev, generator=gen)

    if name == "rmsnorm":
        x, w = rand(t, width), 1.0 + 0.1 * rand(width)
        return lambda: rmsnorm(x, w)
    if name == "add":
        x, y = rand(t, width), rand(t, width)
        return lambda: add(x, y)
    if name == "silu_mul":
        gu = rand(t, 2 * width)
        return lambda: silu_mul(gu)
    if name == "rotary":  # width = (heads + kv_heads) * head_dim; a 4:1 GQA split of the heads
        heads, d = _head_split(width)
        kv = max(1, heads // 5)
        q, k = rand(t, heads - kv, d) if heads > kv else rand(t, 1, d), rand(t, kv, d)
        cos, sin = rand(t, d), rand(t, d)
        return lambda: rotary(q, k, cos, sin)
    if name == "kv_write":  # width = 2 * kv_heads * head_dim; one new token per request
        kv, d = _head_split(width // 2)
        ck, cv = rand(t, KV_WRITE_MAX_LEN, kv, d), rand(t, KV_WRITE_MAX_LEN, kv, d)
        k, v = rand(t, kv, d), rand(t, kv, d)
        where = (torch.arange(t, device=dev), ids(KV_WRITE_MAX_LEN, t))
        return lambda: kv_write(ck, cv, k, v, where)
    if name == "embedding":
        table, tok = rand(DEFAULT_EMBEDDING_ROWS, width), ids(DEFAULT_EMBEDDING_ROWS, t)
        return lambda: embedding(tok, table)
    if name == "argmax":
        logits = rand(t, width)
        return lambda: argmax(logits)
    if name in ("topk", "topk_route"):
        logits = rand(t, width)
        k = min(width, DEFAULT_TOPK if name == "topk" else DEFAULT_ROUTE_TOPK)
        return lambda: topk(logits, k)
    if name == "accept":  # t = batch_size, width = num_draft_tokens; agreement ~ 3/4 per token
        draft = ids(4, t, width)
        target = torch.where(ids(4, t, width) > 0, draft, draft + 1)
        return lambda: accept(draft, target)
    if name == "rope_cos_sin":  # width = head_dim; gather cos/sin rows at t positions
        table, pos = rand(KV_WRITE_MAX_LEN, 2 * width), ids(KV_WRITE_MAX_LEN, t)
        return lambda: rope_cos_sin(pos, table)
    if name == "concat":  # width = total output width; two equal halves (the EAGLE-3 qkv input)
        a, b2, out = rand(t, width // 2), rand(t, width - width // 2), rand(t, width)
        return lambda: concat([a, b2], out=out)
    if name == "cat_ids":  # t = batch_size, width = num_draft_tokens: [last token] + drafts, int64
        cols, out = [ids(1000, t, 1) for _ in range(width)], ids(1000, t, width)
        return lambda: torch.cat(cols, dim=1, out=out)
    if name == "copy_ids":
        src, dst = ids(1000, t, width), ids(1000, t, width)
        return lambda: dst.copy_(src)
    if name == "gather_ids":  # one id per request out of (t, 8)
        src, idx, out = ids(1000, t, 8), ids(8, t, 1), ids(1000, t, 1)
        return lambda: torch.gather(src, 1, idx, out=out)
    if name == "gather_hidden":  # one hidden row per request out of (t, 8, width)
        src, out = rand(t, 8, width), rand(t, 1, width)
        idx = ids(8, t, 1, 1).expand(t, 1, width)
        return lambda: torch.gather(src, 1, idx, out=out)
    raise ValueError(f"no torch runner for elementwise op {name!r}")


def make_op_runner(op: Op, device=None, dtype: torch.dtype = torch.bfloat16,
                   seed: int = 0) -> Callable[[], object]:
    """Random inputs for exactly `op` (its key and axes) and a zero-argument closure running it once.

    Inputs are standard normal (never all zero), weights scaled by 1/sqrt(in_features). The
    closure allocates its output each call, so it can be captured in a CUDA graph. Its attribute
    `note` says when the op was timed in another precision than the key asks (fp8 as bf16, say).

    Args:
        op: an op from `simulator.costs.ops` (as `simulator.costs.forward_ops` lists them, or accept_ops).
        device: torch device or name; default CUDA when available, else CPU.
        dtype: activation / weight dtype (bf16 on GPU; float32 for CPU tests).
        seed: seed of the torch.Generator drawing the inputs.

    Returns:
        Callable[[], object] with a `note: str` attribute.

    Raises:
        ValueError: for collectives, roofline-only ops (mla_attention, moe_experts), unknown names.
    """
    if op.is_collective:
        raise ValueError(f"op {op.key!r} is a collective ({op.collective}), not a compute op; "
                         "calibration/bench/collectives.py measures collectives")
    kind, fields = parse_key(op.key)
    if kind in UNSUPPORTED_OPS:
        raise ValueError(f"op {op.key!r}: {UNSUPPORTED_OPS[kind]}")
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    gen = torch.Generator(device=dev).manual_seed(seed)
    note = ""
    with torch.no_grad():
        if kind == "gemm":
            fn, note = _runner_gemm(fields, int(op.axes["num_tokens"]), dev, dtype, gen)
        elif kind == "attention":
            fn = _runner_attention(fields, op.axes, dev, dtype, gen)
            if fields.get("kvb", 2) == 1:
                note = f"fp8 KV cache timed as {dtype}"
        elif kind == "attn_mask":
            b, n, c = (int(op.axes[a]) for a in ("batch_size", "num_tokens", "context_len"))
            lens = torch.randint(max(1, c // 2), c + 1, (b,), device=dev, generator=gen)
            fn = lambda: attn_mask(lens, n, c + n, dtype)  # noqa: E731
        elif "h" in fields and set(fields) == {"h"}:
            fn = _runner_elementwise(kind, int(fields["h"]), int(op.axes["num_tokens"]), dev, dtype, gen)
        else:
            raise ValueError(f"no torch runner for op key {op.key!r}")

    def run() -> object:
        with torch.no_grad():
            return fn()

    run.note = note
    return run


def runnable(op: Op) -> bool:
    """Whether `make_op_runner` can run `op` (compute op with a torch implementation here)."""
    if op.is_collective:
        return False
    return parse_key(op.key)[0] not in UNSUPPORTED_OPS

