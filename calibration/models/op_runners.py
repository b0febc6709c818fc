"""A runnable closure for one `Op` of `simulator.costs.ops`: random inputs shaped by its key and
axes, and the `calibration.models.ops_torch` function that op names, run once per call.

`calibration/bench/ops.py` times ops one key at a time through `make_op_runner`; `parse_key` reads
an op key's kind and numeric fields (also for `calibration.models.llama.describe_op`). fp8 weights
(`w=1`) run through `torch._scaled_mm` with per-tensor scales on a GPU that supports it, else as
bf16 (noted on the runner).

Left out: MLA attention and MoE experts (roofline-only for now: `UNSUPPORTED_OPS`) and
collectives (not compute ops; `calibration/bench/collectives.py` measures those).
"""

from __future__ import annotations

import re
from typing import Callable

import torch

from calibration.models.ops_torch import (accept, add, argmax, attention, attn_mask, concat, embedding, gemm, gemm_fp8,
                                          kv_write, rmsnorm, rope_cos_sin, rotary, silu_mul, topk)
from simulator.costs.ops import Op

UNSUPPORTED_OPS = {
    "mla_attention": "MLA attention is roofline-only for now (no torch kernel here)",
    "moe_experts": "MoE experts are roofline-only for now (no torch kernel here)",
}
DEFAULT_EMBEDDING_ROWS = 32_000  # vocabulary rows of the embedding table a runner gathers from
DEFAULT_TOPK = 8  # k of the draft's top-k (EAGLE-3 trees use up to 8-10; chains use 1)
DEFAULT_ROUTE_TOPK = 8  # experts per token for topk_route (DeepSeek-V3 / Kimi-K2 use 8)
KV_WRITE_MAX_LEN = 32  # cached positions per request in a kv_write runner's cache


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
