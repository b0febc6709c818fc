"""Plain torch implementations of the op vocabulary in `simulator.costs.ops`, one op per call.

Each function is what one `Op` name means on the GPU, unfused: `gemm` (also used for the ops
named lm_head, fc and router; `gemm_fp8` for fp8 weights), `attn_mask`, `rmsnorm`, `rotary`, `kv_write`,
`attention`, `silu_mul`, `add`, `embedding`, `argmax`, `topk` (also topk_route) and `accept`.
`calibration/bench/ops.py` times them one key at a time (`calibration.models.op_runners.make_op_runner`);
`calibration/models/llama.py` chains them into forwards (this module is the models' `ops`), so the
per-op sum and the whole forward describe the same program.

Left out: MLA attention and MoE experts (roofline-only for now) and collectives (not compute
ops; `calibration/bench/collectives.py` measures those).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


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
