"""The MLP of a decoder layer as ops: dense SwiGLU, or MoE (router, routed experts, shared experts),
with expert parallelism.

- DeepSeek-V3 / Kimi-K2 MoE with shared experts (DeepSeek-V3, arXiv 2412.19437; sglang
  `python/sglang/srt/models/deepseek_v2.py`): the routed experts are priced by the weights of the
  distinct experts the forward's tokens touch (`expected_distinct_experts`, `moe_experts`);
  expert-load skew from `simulator.costs.routing`.
- Expert parallelism (`moe_experts`, `mlp_block`): routed experts split whole over ep ranks, with
  either the layer's allreduce combining them or an all-to-all dispatch and combine
  (`all_to_all_bytes`).
- Dense SwiGLU MLP, gate_up column-parallel and down row-parallel (Shoeybi et al. 2019,
  arXiv 1909.08053, section 3).

Left out: a draft's expert parallelism.
"""

from __future__ import annotations

from simulator.config import ModelShape, default_compute_dtype
from simulator.costs.ops import Op, collective, elementwise, linear
from simulator.costs.routing import busiest_rank, routing_key
from simulator.workload_config import ExpertRouting, UniformRouting


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
    (contiguous ids), each sharded over moe_tp, and is priced at the expected busiest rank, the
    expected maximum over ranks of the distinct experts each gets (`simulator.costs.routing.busiest_rank`). Distinct experts follow `routing`
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
              key=f"moe_experts:e={e},k={k},h={m.hidden_size},i={inter},w={w:g}{suffix}",
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


def mlp_block(m: ModelShape, tp: int, t: int, layer_idx: int, routing: ExpertRouting | None = None,
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
        ops = [linear(m, "attention", "router", t, m.hidden_size, m.n_routed_experts),
               elementwise("topk_route", t, m.n_routed_experts, passes=1.0),
               *experts]
        shared = m.shared_expert_intermediate_size or m.n_shared_experts * m.moe_intermediate_size
        if shared:
            inter = shared // tp
            ops += [linear(m, "shared_experts", "gemm", t, m.hidden_size, 2 * inter),
                    elementwise("silu_mul", t, inter, passes=3.0),
                    linear(m, "shared_experts", "gemm", t, inter, m.hidden_size)]
        return ops
    inter = m.intermediate_size // tp
    return [linear(m, "dense_mlp", "gemm", t, m.hidden_size, 2 * inter),
            elementwise("silu_mul", t, inter, passes=3.0),
            linear(m, "dense_mlp", "gemm", t, inter, m.hidden_size)]
