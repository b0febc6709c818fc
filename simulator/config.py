"""Scenario schema: what a user writes in `scenarios/*.yaml`.

Strict pydantic models (unknown keys are errors, instances are frozen). Validators only
validate; reading files (a model `config.json`, the profile) happens in `simulator.scenario`.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal, Self

from enum import Enum

from pydantic import BeforeValidator, Field, ValidationInfo, field_serializer, field_validator, model_validator

from simulator.engines import LiveLoopEngine, ServingEngine  # noqa: F401  (re-exported)
from simulator.schema_base import StrictModel  # noqa: F401  (re-exported: every schema model's base)
from simulator.serving.config import ServingConfig


# Weight formats: (bytes per weight including block scales, tensor-core dtype its GEMMs run at).
# Scale overheads: fp8 block 128x128 with one fp32 scale per block (DeepSeek-V3 `weight_block_size`);
# int4 groups of 128 / 32 with one bf16 scale per group (GPTQ/AWQ default 128; compressed-tensors
# W4A16 group 32 as in Kimi-K2-Thinking / K2.5); mxfp4: 32-element blocks with an E8M0 scale (OCP
# Microscaling Formats spec v1.0); nvfp4: 16-element blocks with an E4M3 scale (NVIDIA Blackwell
# NVFP4). Weight-only int4 kernels (Marlin) dequantise to bf16, so they run at the bf16 rate.
WEIGHT_FORMATS: dict[str, tuple[float, str]] = {
    "bf16": (2.0, "bf16"),
    "fp16": (2.0, "bf16"),
    "fp8": (1.0, "fp8"),
    "fp8_block128": (1.0 + 4.0 / (128 * 128), "fp8"),
    "int8": (1.0, "int8"),
    "int4_g128": (0.5 + 2.0 / 128, "bf16"),
    "int4_g32": (0.5 + 2.0 / 32, "bf16"),
    "mxfp4": (0.5 + 1.0 / 32, "fp4"),
    "nvfp4": (0.5 + 1.0 / 16, "fp4"),
}
WeightFormat = Literal["bf16", "fp16", "fp8", "fp8_block128", "int8", "int4_g128", "int4_g32", "mxfp4", "nvfp4"]
COMPONENTS = ("attention", "dense_mlp", "routed_experts", "shared_experts", "lm_head")


def default_compute_dtype(weight_dtype_bytes: float) -> str:
    """The tensor-core dtype of a GEMM whose weights have this width and no named format."""
    return "fp8" if weight_dtype_bytes <= 1 else "bf16"


class ComponentPrecision(StrictModel):
    """Weight format per component; a component left out uses the model's `weight_dtype_bytes`.

    `attention` covers the attention projections and the MoE router, `dense_mlp` the dense MLP
    layers (and an EAGLE-3 draft's fc), `routed_experts` / `shared_experts` the MoE experts,
    `lm_head` the output projection. Example: Kimi-K2.5 as released, `routed_experts: int4_g32`
    with everything else bf16; DeepSeek-R1-FP4, `routed_experts: nvfp4`, `dense_mlp: nvfp4`.
    """

    attention: WeightFormat | None = None
    dense_mlp: WeightFormat | None = None
    routed_experts: WeightFormat | None = None
    shared_experts: WeightFormat | None = None
    lm_head: WeightFormat | None = None


class ModelShape(StrictModel):
    """Shape of a decoder-only transformer, in Hugging Face `config.json` field names.

    Dense Llama-style models need the first block of fields. MoE models (DeepSeek-V3 / Kimi-K2
    style) add `n_routed_experts` and friends; MLA attention adds `kv_lora_rank` and friends.
    EAGLE-3 drafts add `draft_vocab_size` and `num_fc_input_hidden_states`.
    """

    name: str = Field("model", max_length=200, description="Label used in outputs and to find whole-forward tables.")
    config_path: str | None = Field(
        None, max_length=4096, description="HF config.json to read the shape from (relative to the scenario "
                                           "file); fields written here override it.")
    config_notes: list[str] = Field(default_factory=list, description="What the config.json holds that the "
                                                                      "simulator does not model (filled on load).")
    # Bounds: about 8x the largest released model's value (DeepSeek-V3, Llama-3.1-405B, Kimi-K2,
    # Gemma vocabularies), so any real model fits and the cost models stay finite.
    hidden_size: int = Field(ge=1, le=131_072, description="Model width; 1..131072.")
    num_hidden_layers: int = Field(ge=1, le=1024, description="Decoder layers; 1..1024.")
    num_attention_heads: int = Field(ge=1, le=4096, description="Query heads; 1..4096.")
    num_key_value_heads: int | None = Field(None, ge=1, le=4096,
                                            description="GQA KV heads, 1..4096; default num_attention_heads.")
    head_dim: int | None = Field(None, ge=1, le=4096, description="1..4096; default hidden_size // "
                                                                   "num_attention_heads.")
    intermediate_size: int = Field(ge=1, le=1_048_576, description="Dense MLP width, 1..1048576 (for MoE: the "
                                                                    "dense layers').")
    vocab_size: int = Field(ge=1, le=4_194_304, description="1..4194304 tokens.")
    # MoE (DeepSeek-V3 field names; other families' config.json names map here, simulator.model_config).
    n_routed_experts: int | None = Field(None, ge=1, le=65_536, description="Routed experts, 1..65536.")
    num_experts_per_tok: int | None = Field(None, ge=1, le=1024, description="Experts per token, 1..1024.")
    moe_intermediate_size: int | None = Field(None, ge=1, le=1_048_576, description="Expert MLP width, 1..1048576.")
    n_shared_experts: int = Field(0, ge=0, le=1024, description="Shared experts, 0..1024.")
    shared_expert_intermediate_size: int | None = Field(
        None, ge=1, le=1_048_576, description="Width of the shared expert(s) in all (Qwen2-MoE), 1..1048576; default "
                                              "n_shared_experts * moe_intermediate_size.")
    first_k_dense_replace: int = Field(0, ge=0, le=1024, description="Leading dense layers before MoE layers "
                                                                      "(at most num_hidden_layers).")
    moe_layers: list[Annotated[int, Field(ge=0, le=1023)]] | None = Field(
        None, max_length=1024, description="Indices of the MoE layers when they are not simply every layer from "
                                           "first_k_dense_replace on (Llama-4 interleaving, Qwen mlp_only_layers).")
    num_nextn_predict_layers: int = Field(0, ge=0, le=16, description="MTP heads shipped with the model "
                                                                      "(DeepSeek-V3 / Kimi), 0..16; not run by the target.")
    sliding_window: int | None = Field(None, ge=1, le=2_097_152, description="Attention window of the "
                                                                             "sliding-window layers, 1..2097152.")
    sliding_window_layers: list[Annotated[int, Field(ge=0, le=1023)]] | None = Field(
        None, max_length=1024, description="Indices of the layers that attend only the last sliding_window tokens.")
    # Linear attention layers (Gated DeltaNet: Qwen3-Next / Qwen3.5 / Qwen3.6 `config.json` names).
    linear_attention_layers: list[Annotated[int, Field(ge=0, le=1023)]] | None = Field(
        None, max_length=1024, description="Indices of the layers that run Gated DeltaNet linear attention (a "
                                           "fixed-size recurrent state instead of a KV cache).")
    linear_num_key_heads: int | None = Field(None, ge=1, le=4096, description="Linear attention q/k heads, 1..4096.")
    linear_num_value_heads: int | None = Field(None, ge=1, le=4096, description="Linear attention v heads, 1..4096.")
    linear_key_head_dim: int | None = Field(None, ge=1, le=4096, description="1..4096.")
    linear_value_head_dim: int | None = Field(None, ge=1, le=4096, description="1..4096.")
    linear_conv_kernel_dim: int = Field(4, ge=1, le=64, description="Short causal convolution width, 1..64.")
    attn_output_gate: bool = Field(False, description="Full-attention layers gate their output with a sigmoid of a "
                                                      "second query-sized projection (Qwen3-Next gated attention).")
    # MLA attention (DeepSeek-V2/V3 field names).
    q_lora_rank: int | None = Field(None, ge=1, le=131_072, description="1..131072.")
    kv_lora_rank: int | None = Field(None, ge=1, le=131_072, description="1..131072.")
    qk_nope_head_dim: int | None = Field(None, ge=1, le=4096, description="1..4096.")
    qk_rope_head_dim: int | None = Field(None, ge=1, le=4096, description="1..4096.")
    v_head_dim: int | None = Field(None, ge=1, le=4096, description="1..4096.")
    # EAGLE-3 draft extras.
    draft_vocab_size: int | None = Field(
        None, ge=1, le=4_194_304, description="EAGLE-3 reduced draft vocabulary for the draft lm_head, "
                                              "1..4194304; default vocab_size.")
    num_fc_input_hidden_states: int = Field(
        0, ge=0, le=8, description="EAGLE-3 fuses this many target hidden states with an fc layer (3); 0 = none.")
    # Precision: 0.125 (1 bit) .. 8 (fp64) bytes.
    weight_dtype_bytes: float = Field(2.0, ge=0.125, le=8, description="Bytes per weight: bf16 2, fp8 1; 0.125..8.")
    precision: ComponentPrecision | None = Field(
        None, description="Weight format per component (WEIGHT_FORMATS), overriding weight_dtype_bytes there.")
    activation_dtype_bytes: float = Field(2.0, ge=0.125, le=8, description="Bytes per activation; 0.125..8.")
    kv_cache_dtype_bytes: float = Field(2.0, ge=0.125, le=8, description="Bytes per KV-cache entry; 0.125..8.")

    @model_validator(mode="after")
    def _check_shape(self) -> Self:
        moe = (self.n_routed_experts, self.num_experts_per_tok, self.moe_intermediate_size)
        if any(v is not None for v in moe) and any(v is None for v in moe):
            raise ValueError("MoE needs all of n_routed_experts, num_experts_per_tok, "
                             f"moe_intermediate_size; got {moe}")
        if self.n_routed_experts is not None and self.num_experts_per_tok > self.n_routed_experts:
            raise ValueError(f"num_experts_per_tok={self.num_experts_per_tok} exceeds "
                             f"n_routed_experts={self.n_routed_experts}")
        lin = (self.linear_num_key_heads, self.linear_num_value_heads, self.linear_key_head_dim,
               self.linear_value_head_dim)
        if self.linear_attention_layers is not None and any(v is None for v in lin):
            raise ValueError("linear_attention_layers needs linear_num_key_heads, linear_num_value_heads, "
                             f"linear_key_head_dim and linear_value_head_dim; got {lin}")
        for name in ("moe_layers", "sliding_window_layers", "linear_attention_layers"):
            bad = [i for i in (getattr(self, name) or []) if i >= self.num_hidden_layers]
            if bad:
                raise ValueError(f"{name} {bad} are not layers of a {self.num_hidden_layers}-layer model")
        if self.moe_layers is not None and self.n_routed_experts is None:
            raise ValueError("moe_layers needs n_routed_experts")
        if (self.sliding_window is None) != (self.sliding_window_layers is None):
            raise ValueError("sliding_window and sliding_window_layers go together")
        if self.first_k_dense_replace > self.num_hidden_layers:
            raise ValueError(f"first_k_dense_replace={self.first_k_dense_replace} exceeds "
                             f"num_hidden_layers={self.num_hidden_layers}")
        mla = (self.kv_lora_rank, self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim)
        if any(v is not None for v in mla) and any(v is None for v in mla):
            raise ValueError("MLA needs all of kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, "
                             f"v_head_dim; got {mla}")
        if self.attn_head_dim < 1:
            raise ValueError(f"head_dim {self.attn_head_dim}: hidden_size={self.hidden_size} // num_attention_heads="
                             f"{self.num_attention_heads} is 0; give head_dim or fewer heads")
        if self.num_attention_heads % self.kv_heads != 0:
            raise ValueError(f"num_attention_heads={self.num_attention_heads} is not a multiple of "
                             f"num_key_value_heads={self.kv_heads}")
        return self

    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def attn_head_dim(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def is_moe(self) -> bool:
        return self.n_routed_experts is not None

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    def is_moe_layer(self, layer_idx: int) -> bool:
        """Whether decoder layer `layer_idx` has routed experts (else a dense MLP)."""
        if not self.is_moe:
            return False
        if self.moe_layers is not None:
            return layer_idx in self.moe_layers
        return layer_idx >= self.first_k_dense_replace

    @property
    def num_moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.num_hidden_layers))

    def is_linear_attention_layer(self, layer_idx: int) -> bool:
        """Whether decoder layer `layer_idx` runs Gated DeltaNet linear attention."""
        return self.linear_attention_layers is not None and layer_idx in self.linear_attention_layers

    def attended_context(self, layer_idx: int, context_len: int) -> int:
        """Cached tokens layer `layer_idx` attends: the window on sliding-window layers."""
        if self.sliding_window_layers is not None and layer_idx in self.sliding_window_layers:
            return min(context_len, self.sliding_window)
        return context_len

    def weight_format(self, component: str) -> tuple[float, str]:
        """(bytes per weight, GEMM compute dtype) of a component (COMPONENTS)."""
        fmt = getattr(self.precision, component) if self.precision is not None else None
        if fmt is None:
            return self.weight_dtype_bytes, default_compute_dtype(self.weight_dtype_bytes)
        return WEIGHT_FORMATS[fmt]

    @property
    def lm_head_vocab_size(self) -> int:
        return self.draft_vocab_size or self.vocab_size


class SpecConfig(StrictModel):
    """Speculative decoding settings (SGLang's `speculative_*` flags; vLLM's `speculative_config`)."""

    method: Literal["eagle3", "eagle", "mtp", "draft_model", "ngram"] = Field(
        "eagle3", description="What proposes the draft tokens (vLLM's `method` names): eagle3 | eagle (EAGLE-1/2) | "
                              "mtp (the model's own MTP / NextN layer, applied autoregressively) | draft_model (a "
                              "standalone small model with its own KV cache) | ngram (prompt lookup, no GPU draft).")
    num_steps: int = Field(3, ge=1, le=64, description="Draft steps per cycle (depth).")
    topk: int = Field(1, ge=1, le=64, description="Draft branching factor per step; 1 = chain.")
    num_draft_tokens: int = Field(
        4, ge=2, le=4096, description="Tokens per request verified per cycle, including the last verified token.")

    @model_validator(mode="after")
    def _check_tree(self) -> Self:
        if self.topk == 1 and self.num_draft_tokens != self.num_steps + 1:
            raise ValueError(f"topk=1 needs num_draft_tokens == num_steps + 1 == "
                             f"{self.num_steps + 1}, got {self.num_draft_tokens}")
        max_nodes = 1 + self.topk + (self.num_steps - 1) * self.topk * self.topk
        if self.num_draft_tokens > max_nodes:
            raise ValueError(f"num_draft_tokens={self.num_draft_tokens} exceeds the {max_nodes} tree "
                             f"nodes that topk={self.topk}, num_steps={self.num_steps} can propose")
        return self


MIN_BETA_PARAM = 1e-9  # smallest Beta(a c, (1 - a) c) parameter: numpy and scipy need them > 0


class IidAcceptance(StrictModel):
    """Each draft token accepted with the same probability, given the earlier ones were."""

    kind: Literal["iid"] = "iid"
    acceptance_rate: float = Field(ge=0.0, le=1.0, description="alpha, per draft position.")
    rate_concentration: float | None = Field(
        None, ge=0.01, le=1e6, description="Per-request heterogeneity, 0.01..1e6: each request draws its rate "
                                           "from Beta(alpha*c, (1-alpha)*c); left out = every request has alpha. "
                                           "Below 0.01 the Beta's quantiles underflow; above 1e6 requests are alike.")

    @model_validator(mode="after")
    def _check_beta(self) -> Self:
        a, c = self.acceptance_rate, self.rate_concentration
        if c is not None and 0.0 < a < 1.0 and min(a, 1.0 - a) * c < MIN_BETA_PARAM:
            raise ValueError(f"rate_concentration={c:g} with acceptance_rate={a:g} gives Beta({a * c:.3g}, "
                             f"{(1 - a) * c:.3g}); both must be >= {MIN_BETA_PARAM:g} (write acceptance_rate 0 or 1, "
                             "or leave rate_concentration out, for requests that are alike)")
        return self


class PositionalAcceptance(StrictModel):
    """Conditional acceptance per draft depth (drafts degrade with depth)."""

    kind: Literal["positional"] = "positional"
    acceptance_rates: list[Annotated[float, Field(ge=0.0, le=1.0)]] = Field(
        min_length=1, max_length=64, description="a_d for depth d = 1..num_steps.")


class EmpiricalAcceptance(StrictModel):
    """An accept_length distribution taken from a live run or a server log."""

    kind: Literal["empirical"] = "empirical"
    accept_length_probs: list[Annotated[float, Field(ge=0.0, le=1.0)]] = Field(
        min_length=2, max_length=65, description="P(accept_length = 1), P(= 2), ..., P(= num_steps + 1).")

    @model_validator(mode="after")
    def _check_sum(self) -> Self:
        total = sum(self.accept_length_probs)
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"accept_length_probs must sum to 1, got {total:.6g}")
        return self


class TreeAcceptance(StrictModel):
    """topk > 1: several candidates per depth, each accepted with `acceptance_rate` independently."""

    kind: Literal["tree"] = "tree"
    acceptance_rate: float = Field(ge=0.0, le=1.0, description="Per candidate token.")


AcceptanceConfig = Annotated[
    IidAcceptance | PositionalAcceptance | EmpiricalAcceptance | TreeAcceptance,
    Field(discriminator="kind")]


class UniformRouting(StrictModel):
    """Every token picks its k experts uniformly at random (the default)."""

    kind: Literal["uniform"] = "uniform"


class ZipfRouting(StrictModel):
    """Expert e (0-based id) takes a load share proportional to 1 / (e + 1)^s: expert 0 the hottest."""

    kind: Literal["zipf"] = "zipf"
    s: float = Field(ge=0.0, le=4.0, description="Zipf exponent, 0..4: 0 is uniform; 1 gives expert 0 about "
                                                  "ln(E) times the mean load.")


class HistogramRouting(StrictModel):
    """Measured expert load: one non-negative weight per routed expert, in expert-id order."""

    kind: Literal["histogram"] = "histogram"
    expert_load: list[Annotated[float, Field(ge=0.0, le=1e18)]] = Field(
        min_length=1, max_length=65_536,
        description="Tokens (or any proportional weight) routed to each expert, in expert-id order; as many "
                    "entries as the target's n_routed_experts; normalised to load shares, so the sum must be > 0.")

    @model_validator(mode="after")
    def _check_total(self) -> Self:
        if not sum(self.expert_load) > 0:
            raise ValueError("expert_load must have a positive sum (at least one expert with load)")
        return self


ExpertRouting = Annotated[UniformRouting | ZipfRouting | HistogramRouting, Field(discriminator="kind")]


class WorkloadConfig(StrictModel):
    """A steady decode batch: finished requests are replaced at once, so batch_size holds."""

    batch_size: int = Field(1, ge=1, le=4096, description="Requests decoded together.")
    context_len: int = Field(1024, ge=1, le=2_097_152, description="KV-cache tokens attention reads.")
    max_new_tokens: int = Field(256, ge=1, le=1_000_000, description="Tokens each request generates.")
    expert_routing: ExpertRouting = Field(
        UniformRouting(), description="How MoE tokens spread over the routed experts (simulator.costs.routing): "
                                      "{kind: uniform} | {kind: zipf, s: 0..4} | {kind: histogram, expert_load: "
                                      "[one weight per expert]}. Sets how many distinct experts' weights a forward "
                                      "reads.")


class FidelityConfig(StrictModel):
    """How finely and how long the simulation runs; changes the precision, not the modelled system."""

    granularity: Literal["cycle", "forward", "kernel"] = Field(
        "forward", description="DES events per block of cycles (fastest; exact for deterministic costs), "
                               "per cycle's forwards, or per kernel (traces, per-rank jitter).")
    per_rank: bool = Field(False, description="One SimPy stream per GPU; collectives are barriers.")
    jitter_cv: float = Field(
        0.0, ge=0.0, le=2.0, description="Coefficient of variation of per-kernel lognormal noise on each GPU, 0..2.")
    num_cycles: int = Field(2000, ge=1, le=10_000_000, description="Speculative cycles simulated after warm-up.")
    warmup_cycles: int = Field(0, ge=0, le=1_000_000, description="Cycles simulated and discarded first.")

    @model_validator(mode="after")
    def _check_jitter(self) -> Self:
        if self.per_rank and self.granularity != "kernel":
            raise ValueError("per_rank: true needs granularity: kernel (ranks meet at each collective)")
        if self.jitter_cv > 0 and not self.per_rank:
            raise ValueError("jitter_cv > 0 needs per_rank: true (noise is drawn per kernel per rank)")
        return self


class CostsConfig(StrictModel):
    """Where phase latencies come from, and what-if knobs on them."""

    source: Literal["per_op", "whole_forward"] = Field(
        "per_op", description="Sum calibrated per-op latencies, or read whole-forward tables.")
    collective_latency_scale: float = Field(
        1.0, ge=0.01, le=100, description="Multiply every collective latency (what-if: NCCL tuning); 0.01..100.")
    compute_latency_scale: float = Field(1.0, ge=0.01, le=100,
                                         description="Multiply every GPU compute latency; 0.01..100.")


class HardwareConfig(StrictModel):
    """The GPU box the prediction is for (ids from the hardware catalog, `specdecsim hardware`).

    Left empty, the prediction is for the machine the profile was measured on. A GPU other than
    the profile's carries the profile to it (simulator.costs.transfer): compute is re-priced
    from datasheet figures; host overheads stay the profile's own. Collectives stay the profile's
    own too, unless `box` has another interconnect than the box they were measured on (the
    profile's `hardware.catalog_box`): then simulator.costs.collectives_model prices them from the
    box's links, with `allreduce` choosing the implementation.
    """

    gpu: str | None = Field(None, description="Catalog GPU id, e.g. h100-sxm; default the box's, else the profile's.")
    box: str | None = Field(None, description="Catalog box id, e.g. hgx-h100-8gpu: its GPU and GPU count.")
    allreduce: Literal["nccl", "custom", "auto"] = Field(
        "nccl", description="Allreduce implementation priced when `box` has another interconnect than the box the "
                            "profile's collectives were measured on (simulator.costs.collectives_model): nccl (NCCL's "
                            "fastest ring/tree and protocol), custom (one-shot/two-shot peer-to-peer kernel), auto "
                            "(what vLLM/SGLang pick: custom where they enable it, else NCCL). Unused otherwise.")


# Keys of the schema before the serving engine and the simulation's fidelity had sections of their
# own: (old dotted path, new dotted path).
LEGACY_RENAMES = (
    ("engine.cuda_graph", "serving_engine.cuda_graph"),
    ("engine.host_overhead_overlapped", "serving_engine.host_overhead_overlapped"),
    ("engine.first_draft_from_extend", "serving_engine.first_draft_from_extend"),
    ("engine.granularity", "fidelity.granularity"),
    ("engine.per_rank", "fidelity.per_rank"),
    ("engine.jitter_cv", "fidelity.jitter_cv"),
    ("workload.num_cycles", "fidelity.num_cycles"),
    ("workload.warmup_cycles", "fidelity.warmup_cycles"),
)


def legacy_keys(data: dict) -> list[tuple[str, str]]:
    """(old, new) dotted paths of the pre-split keys present in a scenario dict; [] for a current one."""
    found = []
    for old, new in LEGACY_RENAMES:
        section, key = old.split(".")
        if isinstance(data.get(section), dict) and key in data[section]:
            found.append((old, new))
    if isinstance(data.get("engine"), dict) and not data["engine"]:
        found.append(("engine", "serving_engine"))
    return found


def migrate_legacy_scenario(data: dict) -> dict:
    """A copy of a scenario dict with the pre-split keys moved to their sections (LEGACY_RENAMES).

    Used for records written by earlier versions; a scenario file a user writes is refused with
    the renames instead (simulator.scenario), so what a user wrote is used as written.
    """
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    for old, new in legacy_keys(data):
        if "." not in old:
            continue
        (s_old, k_old), (s_new, k_new) = old.split("."), new.split(".")
        value = out[s_old].pop(k_old)
        out.setdefault(s_new, {})[k_new] = value
    if isinstance(out.get("engine"), dict) and not out["engine"]:
        out.pop("engine")
    return out


class PlacementKind(str, Enum):
    """Where the draft model runs relative to the target's TP group."""

    SHARED_TP = "shared_tp"  # sharded over the whole TP group (SGLang's draft worker inherits TP)
    COLOCATED = "colocated"  # on the first draft_tp_size GPUs of the TP group; the others wait
    DEDICATED = "dedicated"  # on a GPU of its own outside the TP group


class Placement(StrictModel):
    """Draft placement: where the draft runs and over how many GPUs it is sharded.

    Written in YAML as a label, `shared_tp`, `tp1_colocated`, `tp1_dedicated` or `tp<k>` (the
    draft sharded over the first k GPUs of the group), or as a mapping `{kind, draft_tp_size}`.
    GPUs are numbered 0..tp_size-1 in the TP group; a dedicated draft GPU is number tp_size.
    """

    kind: Annotated[PlacementKind, BeforeValidator(lambda v: _placement_kind(v))]
    draft_tp_size: int = Field(ge=1, le=64, description="GPUs the draft is sharded over.")

    @property
    def label(self) -> str:
        """The YAML label: shared_tp, tp<k>_colocated for k=1 (tp1_colocated), tp1_dedicated or tp<k>."""
        if self.kind is PlacementKind.SHARED_TP:
            return "shared_tp"
        if self.kind is PlacementKind.DEDICATED:
            return f"tp{self.draft_tp_size}_dedicated"
        return "tp1_colocated" if self.draft_tp_size == 1 else f"tp{self.draft_tp_size}"

    def draft_gpus(self, tp_size: int) -> tuple[int, ...]:
        """GPU numbers the draft runs on (0..tp_size-1 inside the group, tp_size.. outside)."""
        if self.kind is PlacementKind.DEDICATED:
            return tuple(range(tp_size, tp_size + self.draft_tp_size))
        return tuple(range(self.draft_tp_size))

    @property
    def dedicated(self) -> bool:
        return self.kind is PlacementKind.DEDICATED

    @staticmethod
    def parse(value, tp_size: int):
        """A placement label -> {kind, draft_tp_size}; a mapping is returned unchanged.

        Raises:
            ValueError: neither a mapping nor a placement label.
        """
        if isinstance(value, (dict, Placement)):
            return value
        if not isinstance(value, str):
            raise ValueError(f"placement must be a label (shared_tp, tp1_colocated, tp1_dedicated or tp<k>) or a "
                             f"mapping {{kind, draft_tp_size}}, got {value!r}")
        if value == "shared_tp":
            return {"kind": "shared_tp", "draft_tp_size": tp_size}
        m = _PLACEMENT_LABEL.fullmatch(value)
        if m is None:
            raise ValueError("placement must be one of shared_tp, tp1_colocated, tp1_dedicated or tp<k> "
                             "(k dividing tp_size)")
        k = int(m.group(1))
        if m.group(2) == "_dedicated":
            return {"kind": "dedicated", "draft_tp_size": k}
        if m.group(2) is None and k == tp_size:
            return {"kind": "shared_tp", "draft_tp_size": k}
        return {"kind": "colocated", "draft_tp_size": k}


_PLACEMENT_LABEL = re.compile(r"tp([1-9][0-9]{0,2})(_colocated|_dedicated)?")  # used with fullmatch


def _placement_kind(value):
    """A placement kind as written ('shared_tp', 'colocated', 'dedicated'), exactly, or refused."""
    if isinstance(value, str):
        try:
            return PlacementKind(value)
        except ValueError:
            raise ValueError(f"placement kind must be one of {', '.join(k.value for k in PlacementKind)}, "
                             f"got {value!r}") from None
    return value


class Scenario(StrictModel):
    """One speculative-decoding set-up to simulate.

    Four rooms: the models and hardware (`target`, `draft`, `tp_size`, `placement`, `hardware`, `profile`),
    the serving engine (`serving_engine`: what a cycle runs and how the host drives it), the
    workload (`spec`, `acceptance`, `workload`) and the simulation's fidelity (`fidelity`).
    """

    name: str = Field("scenario", max_length=200)
    description: str = Field("", max_length=10_000)
    profile: str = Field("h200", min_length=1, max_length=4096,
                         description="Shipped profile name or path to a profile JSON.")
    target: ModelShape
    draft: ModelShape
    tp_size: int = Field(1, ge=1, le=64, description="Target tensor-parallel degree.")
    expert_parallel_size: int = Field(
        1, ge=1, le=64, description="Expert-parallel degree of the target's MoE layers (SGLang --ep-size), 1..64, "
                                    "dividing tp_size and n_routed_experts: the routed experts are split whole over "
                                    "this many ranks (each expert's width over tp_size / expert_parallel_size) with "
                                    "an all-to-all dispatch and combine around them; attention stays TP.")
    placement: Placement = Field("shared_tp", validate_default=True, description="shared_tp | tp1_colocated | tp1_dedicated | tp<k>.")
    spec: SpecConfig = SpecConfig()
    acceptance: AcceptanceConfig
    workload: WorkloadConfig = WorkloadConfig()
    serving_engine: ServingEngine = LiveLoopEngine()
    fidelity: FidelityConfig = FidelityConfig()
    costs: CostsConfig = CostsConfig()
    hardware: HardwareConfig = HardwareConfig()
    serving: ServingConfig | None = Field(None, description="Serving mode (simulator.serving): arrivals, "
                                                           "queueing, chunked prefill; left out: the steady batch.")
    seed: int = Field(0, ge=0, le=2**63 - 1)

    @field_validator("placement", mode="before")
    @classmethod
    def _parse_placement(cls, value, info: ValidationInfo):
        return Placement.parse(value, info.data.get("tp_size", 1))

    @field_serializer("placement")
    def _placement_label(self, placement: Placement) -> str:
        return placement.label

    @model_validator(mode="after")
    def _check(self) -> Self:
        k = self.placement.draft_tp_size
        if self.placement.kind is PlacementKind.DEDICATED and k != 1:
            raise ValueError(f"placement {self.placement.label}: a dedicated draft sharded over {k} GPUs is "
                             "not modelled; use tp1_dedicated")
        if self.placement.kind is PlacementKind.SHARED_TP and k != self.tp_size:
            raise ValueError(f"placement shared_tp has draft_tp_size {k}; it must equal tp_size={self.tp_size}")
        if self.placement.kind is PlacementKind.COLOCATED and (k > self.tp_size or self.tp_size % k != 0):
            raise ValueError(f"placement {self.placement.label} needs a draft TP size dividing "
                             f"tp_size={self.tp_size}, got {k}")
        for role, model in (("target", self.target), ("draft", self.draft)):
            size = self.tp_size if role == "target" else k
            if model.num_attention_heads % size != 0:
                raise ValueError(f"{role}.num_attention_heads={model.num_attention_heads} is not "
                                 f"divisible by its TP size {size}")
        if self.serving_engine.kind == "live_loop" and self.spec.method != "eagle3":
            raise ValueError(f"spec.method {self.spec.method}: the live loop runs EAGLE-3 drafts only; pick an "
                             "engine kind (serving_engine.kind: sglang, vllm or trtllm) for other methods")
        self._check_moe_parallel()
        acc = self.acceptance
        s = self.spec.num_steps
        if self.spec.topk > 1 and acc.kind != "tree":
            raise ValueError(f"topk={self.spec.topk} needs acceptance kind 'tree', got {acc.kind!r}")
        if acc.kind == "tree" and self.spec.topk == 1:
            raise ValueError("acceptance kind 'tree' needs spec.topk > 1")
        if acc.kind == "positional" and len(acc.acceptance_rates) != s:
            raise ValueError(f"acceptance.acceptance_rates has {len(acc.acceptance_rates)} entries; "
                             f"spec.num_steps={s} needs {s}")
        if acc.kind == "empirical" and len(acc.accept_length_probs) != s + 1:
            raise ValueError(f"acceptance.accept_length_probs has {len(acc.accept_length_probs)} "
                             f"entries; spec.num_steps={s} needs {s + 1} (accept_length 1..{s + 1})")
        if self.serving is not None:
            for entry in self.serving.num_steps_by_batch:
                self._check_policy_entry(entry)
        return self

    def _check_moe_parallel(self) -> None:
        """expert_parallel_size against tp_size and the target's experts; a histogram's length."""
        ep, t = self.expert_parallel_size, self.target
        if ep > 1:
            if not t.is_moe:
                raise ValueError(f"expert_parallel_size={ep} needs an MoE target (n_routed_experts)")
            if self.tp_size % ep != 0:
                raise ValueError(f"expert_parallel_size={ep} must divide tp_size={self.tp_size}")
            if t.n_routed_experts % ep != 0:
                raise ValueError(f"expert_parallel_size={ep} must divide target.n_routed_experts="
                                 f"{t.n_routed_experts}")
        routing = self.workload.expert_routing
        if routing.kind == "histogram":
            for role, m in (("target", t), ("draft", self.draft)):
                if m.is_moe and len(routing.expert_load) != m.n_routed_experts:
                    raise ValueError(f"workload.expert_routing.expert_load has {len(routing.expert_load)} entries; "
                                     f"{role}.n_routed_experts={m.n_routed_experts} needs one per expert")
                loaded = sum(w > 0 for w in routing.expert_load)
                if m.is_moe and loaded < m.num_experts_per_tok:
                    raise ValueError(f"workload.expert_routing.expert_load has {loaded} experts with load; each token "
                                     f"picks {role}.num_experts_per_tok={m.num_experts_per_tok} distinct experts, so "
                                     "at least that many need load > 0")
            if not t.is_moe:
                raise ValueError("workload.expert_routing.expert_load is given but the target has no routed experts")

    def _check_policy_entry(self, entry) -> None:
        """A `serving.num_steps_by_batch` entry is a valid spec that the acceptance model fits."""
        where = f"serving.num_steps_by_batch (batch_size {entry.batch_size})"
        try:
            spec = policy_spec(self.spec, entry)
        except ValueError as e:
            msg = e.errors()[0]["msg"] if hasattr(e, "errors") else str(e)
            raise ValueError(f"{where}: {msg}") from None
        kind = self.acceptance.kind
        if (spec.topk > 1) != (kind == "tree"):
            raise ValueError(f"{where}: topk={spec.topk} with acceptance kind {kind!r} (tree needs topk > 1)")
        if kind == "empirical" and spec.num_steps != self.spec.num_steps:
            raise ValueError(f"{where}: empirical acceptance is given for num_steps={self.spec.num_steps} only, "
                             f"got num_steps={spec.num_steps}")
        if kind == "positional" and spec.num_steps > len(self.acceptance.acceptance_rates):
            raise ValueError(f"{where}: num_steps={spec.num_steps} exceeds the "
                             f"{len(self.acceptance.acceptance_rates)} positional acceptance rates")

    @property
    def draft_tp_size(self) -> int:
        """GPUs the draft is sharded over: tp_size for shared_tp, 1 for tp1_*, k for tp<k>."""
        return self.placement.draft_tp_size


def policy_spec(base: SpecConfig, entry) -> SpecConfig:
    """The SpecConfig of a `serving.num_steps_by_batch` entry (the method from `base`).

    Raises:
        pydantic.ValidationError (a ValueError): the entry's settings are not a valid spec.
    """
    ndt = entry.num_draft_tokens if entry.num_draft_tokens is not None else entry.num_steps + 1
    return SpecConfig(method=base.method, num_steps=entry.num_steps, topk=entry.topk, num_draft_tokens=ndt)
