"""A forward as a list of ops: the decoder layer, the target and draft forwards, and the fused
form a serving engine runs.

Each forward (target decode or verify, draft step or draft extend) is a list of `Op`s
(`simulator.costs.ops`) in execution order; `calibration/models/llama.py` runs the same ops in the
same order, so the per-op sum and the live loop describe one program.

- Pre-norm decoder layer, Megatron TP sharding with one allreduce after the attention and one after
  the MLP (Shoeybi et al. 2019, arXiv 1909.08053, section 3); its token mixer is softmax attention
  (`simulator.costs.ops.attention_block`) or Gated DeltaNet
  (`simulator.costs.linear_attention_ops`), its MLP dense or MoE (`simulator.costs.moe_ops`).
- EAGLE-3 draft: one decoder layer whose qkv reads concat(token embedding, hidden) (2*hidden),
  an fc that fuses `num_fc_input_hidden_states` target hidden states in the draft extend, and
  its own lm_head over `draft_vocab_size` (Li et al. 2025, arXiv 2503.01840); EAGLE, MTP, a draft
  model and ngram in `draft_forward_ops`.
- Vocab-parallel embedding needs an allreduce; the lm_head's logits are all-gathered
  (sglang `layers/vocab_parallel_embedding.py`, `layers/logits_processor.py`).

Serving engines run fused kernels instead of the live loop's unfused ops (`engine_ops`): one
add+RMSNorm kernel, one rotary+KV-write kernel, a paged attention kernel, and no per-forward
mask or cos/sin build; and a verify may take the prefill attention path (`mla_attention_prefill`).

Left out: prefill, pipeline parallelism, a draft's expert parallelism.
"""

from __future__ import annotations

from simulator.config import ModelShape
from simulator.costs.linear_attention_ops import linear_attention_block
from simulator.costs.moe_ops import mlp_block
from simulator.costs.ops import Op, attention_block, attn_mask, collective, elementwise, linear, mla_attention_prefill
from simulator.workload_config import ExpertRouting


def decoder_layer_ops(m: ModelShape, tp: int, b: int, n: int, c: int, layer_idx: int,
                      qkv_in: int | None = None, routing: ExpertRouting | None = None, ep: int = 1,
                      dispatch: str = "allreduce") -> list[Op]:
    """Ops of one pre-norm decoder layer on one rank, in execution order.

    Args:
        m: model shape. tp: ranks the layer is sharded over. b: batch_size.
        n: new tokens per request in this forward. c: context_len (cached tokens before them).
        layer_idx: index (selects dense vs MoE MLP). qkv_in: qkv input width (draft: 2*hidden).
        routing: expert routing of MoE layers (default uniform). ep: expert-parallel size (divides tp).
        dispatch: how EP moves tokens to experts, 'allreduce' or 'all_to_all' (`mlp_block`).
    """
    t = b * n
    act = t * m.hidden_size * m.activation_dtype_bytes
    ops = [elementwise("concat", t, qkv_in, passes=2.0)] if qkv_in and qkv_in != m.hidden_size else []
    ops.append(elementwise("rmsnorm", t, qkv_in or m.hidden_size, passes=2.0))
    if m.is_linear_attention_layer(layer_idx):
        ops += linear_attention_block(m, tp, b, n, qkv_in or m.hidden_size)
    else:
        ops += attention_block(m, tp, b, n, m.attended_context(layer_idx, c), qkv_in or m.hidden_size)
    if tp > 1:
        ops.append(collective("allreduce", act, tp))
    ops += [elementwise("add", t, m.hidden_size, passes=3.0),
            elementwise("rmsnorm", t, m.hidden_size, passes=2.0)]
    ops += mlp_block(m, tp, t, layer_idx, routing, ep, dispatch)
    if tp > 1:
        ops.append(collective("allreduce", act, tp))
    ops.append(elementwise("add", t, m.hidden_size, passes=3.0))
    return ops


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
           linear(m, "lm_head", "lm_head", t, m.hidden_size, vocab // tp)]
    if tp > 1:
        ops.append(collective("all_gather", t * (vocab // tp) * m.activation_dtype_bytes, tp))
    ops.append(elementwise(sampling, t, vocab, passes=1.0))
    return ops


def target_forward_ops(m: ModelShape, tp: int, b: int, n: int, c: int, num_aux_hidden_states: int = 0,
                       routing: ExpertRouting | None = None, ep: int = 1, dispatch: str = "allreduce") -> list[Op]:
    """Target forward over `n` tokens per request (decode: n=1; verify: n=num_draft_tokens).

    `routing`, `ep` (expert-parallel size) and `dispatch` shape the MoE layers (`mlp_block`, `moe_experts`).

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
            ops.append(linear(m, "dense_mlp", "fc", t, k, m.hidden_size))
        qkv_in = 2 * m.hidden_size
    elif method in ("eagle", "mtp"):
        ops += [elementwise("rmsnorm", t, 2 * m.hidden_size, passes=2.0),
                linear(m, "dense_mlp", "fc", t, 2 * m.hidden_size, m.hidden_size)]
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
