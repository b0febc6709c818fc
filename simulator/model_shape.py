"""Model shapes: a decoder-only transformer in Hugging Face `config.json` field names, with the
weight format of each component (what a scenario writes under `target:` and `draft:`).

Re-exported by simulator.config, where the rest of the scenario schema lives.
"""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from simulator.schema_base import StrictModel


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

    def shape_values(self) -> dict:
        """The fields that make the shape, by value: not its label (`name`), the file it was read from
        (`config_path`) or the notes on that file. Two models are the same shape when these are equal,
        whether written field by field or read from a config.json."""
        return self.model_dump(exclude={"name", "config_path", "config_notes"})

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
