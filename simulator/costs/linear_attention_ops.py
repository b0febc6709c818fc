"""Linear attention as ops: the Gated DeltaNet token mixer of hybrid models (Qwen3-Next, Qwen3.5,
Qwen3.6), which keeps a per-request recurrent state instead of a KV cache.

Sources: transformers `models/qwen3_next/modeling_qwen3_next.py` (Qwen3NextGatedDeltaNet);
Yang et al., "Gated Delta Networks", arXiv 2412.06464; sglang's hybrid linear-attention backend
(intermediate SSM states kept for speculative rollback).
"""

from __future__ import annotations

from simulator.config import ModelShape
from simulator.costs.ops import Op, elementwise, linear


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
    lin = lambda i, o: linear(m, "attention", "gemm", t, i, o)  # noqa: E731
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
