"""Hugging Face `config.json` -> ModelShape fields, for the model families engines serve.

ModelShape uses Llama / DeepSeek-V3 field names. Other families name the same things
differently; each mapping below cites the transformers configuration class that defines the
names. What a mapping cannot express is listed in the returned notes.

| family (model_type) | experts | expert width | dense MLP width | MoE layers |
|---|---|---|---|---|
| deepseek_v3, kimi_k2 | n_routed_experts | moe_intermediate_size | intermediate_size | from first_k_dense_replace, every moe_layer_freq-th |
| qwen2_moe, qwen3_moe | num_experts | moe_intermediate_size | intermediate_size | (i+1) % decoder_sparse_step == 0, not in mlp_only_layers |
| mixtral, gpt_oss | num_local_experts | intermediate_size | (none) | every layer |
| llama4_text | num_local_experts | intermediate_size | intermediate_size_mlp | every interleave_moe_layer_step-th (or moe_layers) |

Qwen3-Next / Qwen3.5 / Qwen3.6 (qwen3_next, qwen3_5): `layer_types` entries "linear_attention" are
the Gated DeltaNet layers (`linear_attention_layers`, with linear_num_key_heads,
linear_num_value_heads, linear_key_head_dim, linear_value_head_dim, linear_conv_kernel_dim);
`attn_output_gate` gates the full-attention output (transformers
`models/qwen3_next/configuration_qwen3_next.py`).

Sources: transformers `models/deepseek_v3/configuration_deepseek_v3.py`,
`models/qwen2_moe/configuration_qwen2_moe.py` (shared_expert_intermediate_size),
`models/qwen3_moe/configuration_qwen3_moe.py`, `models/mixtral/configuration_mixtral.py`,
`models/gpt_oss/configuration_gpt_oss.py` (layer_types: sliding_attention / full_attention),
`models/llama4/configuration_llama4.py` (Llama4TextConfig; one shared expert of the expert width).
"""

from __future__ import annotations

from typing import Any

SHAPE_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
              "intermediate_size", "vocab_size", "n_routed_experts", "num_experts_per_tok",
              "moe_intermediate_size", "n_shared_experts", "first_k_dense_replace", "q_lora_rank", "kv_lora_rank",
              "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "draft_vocab_size", "num_nextn_predict_layers",
              "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
              "linear_conv_kernel_dim")


MAX_LAYERS = 1024  # ModelShape.num_hidden_layers' bound: no layer list is built past it
KNOWN_TYPES = ("llama", "mistral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "mixtral", "gpt_oss", "llama4",
               "llama4_text", "deepseek_v2", "deepseek_v3", "kimi_k2", "gemma", "gemma2", "phi3", "qwen3_next",
               "qwen3_5", "qwen3_5_text")


def _int(cfg: dict, key: str) -> int | None:
    v = cfg.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _step(cfg: dict, key: str) -> int:
    """A layer step (every step-th layer is MoE): 1 when absent; ValueError unless 1..MAX_LAYERS."""
    if cfg.get(key) is None:
        return 1
    step = _int(cfg, key)
    if step is None or not 1 <= step <= MAX_LAYERS:
        raise ValueError(f"{key}: expected an integer 1..{MAX_LAYERS}, got {str(cfg[key])[:40]}")
    return step


def _layer_list(cfg: dict, key: str, n_layers: int) -> list[int]:
    """A config's list of layer indices, checked: every entry an index of the model.

    Raises:
        ValueError: naming the key, when it is not a list of integers in 0..n_layers-1.
    """
    value = cfg.get(key)
    if value is None:
        return []
    if (not isinstance(value, list) or len(value) > MAX_LAYERS
            or any(not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < n_layers for i in value)):
        raise ValueError(f"{key}: expected a list of layer indices 0..{n_layers - 1}, got {str(value)[:60]}")
    return value


def shape_fields_from_hf_config(cfg: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """ModelShape fields read from a (text) config.json, and notes on what was left out.

    Args:
        cfg: the parsed config.json object (its `text_config` already taken for multimodal models).

    Returns:
        (fields, notes): fields named as ModelShape names them (absent keys left out, so the
        scenario's own fields and the schema's checks decide); notes, one line per setting the
        simulator does not model.

    Raises:
        ValueError: a list of layer indices (mlp_only_layers, moe_layers) that is not one.
    """
    out = {k: cfg[k] for k in SHAPE_KEYS if cfg.get(k) is not None}
    notes: list[str] = []
    mtype = str(cfg.get("model_type", ""))
    if mtype and mtype not in KNOWN_TYPES:
        notes.append(f"model_type {mtype!r} is not a family this mapping knows: read as a Llama-style "
                     "decoder-only transformer")
    n_layers = _int(cfg, "num_hidden_layers") or 0
    if not 0 < n_layers <= MAX_LAYERS:
        return out, notes  # the schema refuses num_hidden_layers; build no per-layer list for it
    if "num_experts" in cfg and "n_routed_experts" not in cfg and _int(cfg, "num_experts"):  # Qwen2/3-MoE
        out["n_routed_experts"] = cfg["num_experts"]
        if _int(cfg, "shared_expert_intermediate_size"):
            out["shared_expert_intermediate_size"] = cfg["shared_expert_intermediate_size"]
        step = _step(cfg, "decoder_sparse_step")
        dense = set(_layer_list(cfg, "mlp_only_layers", n_layers))
        layers = [i for i in range(n_layers) if (i + 1) % step == 0 and i not in dense]
        if len(layers) != n_layers:
            out["moe_layers"] = layers
    elif _int(cfg, "num_local_experts"):  # Mixtral, GPT-OSS, Llama-4
        out["n_routed_experts"] = cfg["num_local_experts"]
        out.setdefault("num_experts_per_tok", _int(cfg, "experts_per_token"))
        out["moe_intermediate_size"] = cfg.get("intermediate_size")
        if mtype.startswith("llama4"):
            out["intermediate_size"] = cfg.get("intermediate_size_mlp") or cfg.get("intermediate_size")
            out["shared_expert_intermediate_size"] = cfg.get("intermediate_size")
            step = _step(cfg, "interleave_moe_layer_step")
            layers = _layer_list(cfg, "moe_layers", n_layers) or list(range(step - 1, n_layers, step))
            if len(layers) != n_layers:
                out["moe_layers"] = list(layers)
            if cfg.get("attention_chunk_size"):
                notes.append("llama4 chunked attention (attention_chunk_size) not modelled: every layer attends "
                             "the whole context")
    if mtype in ("deepseek_v3", "kimi_k2") and (_int(cfg, "moe_layer_freq") or 1) > 1:
        freq, first = cfg["moe_layer_freq"], _int(cfg, "first_k_dense_replace") or 0
        out["moe_layers"] = [i for i in range(first, n_layers) if i % freq == 0]
    layer_types = cfg.get("layer_types")
    known_layers = {"full_attention", "sliding_attention", "linear_attention"}
    if layer_types is not None and (not isinstance(layer_types, list) or len(layer_types) != n_layers
                                    or not all(isinstance(kind, str) for kind in layer_types)):
        raise ValueError(f"layer_types: expected a list of {n_layers} layer kinds (strings such as "
                         f"{', '.join(sorted(known_layers))}); got {str(layer_types)[:60]}")
    other = sorted({kind for kind in (layer_types or []) if kind not in known_layers})
    if other:
        notes.append(f"layer_types {', '.join(other)} not modelled: those layers read as full attention")
    if isinstance(layer_types, list) and "linear_attention" in layer_types:  # Qwen3-Next / Qwen3.5 / Qwen3.6
        out["linear_attention_layers"] = [i for i, kind in enumerate(layer_types[:n_layers])
                                          if kind == "linear_attention"]
        if isinstance(cfg.get("attn_output_gate"), bool):
            out["attn_output_gate"] = cfg["attn_output_gate"]
    if isinstance(layer_types, list) and _int(cfg, "sliding_window"):
        sliding = [i for i, kind in enumerate(layer_types) if kind == "sliding_attention"]
        if sliding:
            out["sliding_window"] = cfg["sliding_window"]
            out["sliding_window_layers"] = sliding
    elif _int(cfg, "sliding_window") and cfg.get("use_sliding_window", False):
        notes.append("sliding_window on every layer above max_window_layers not modelled: full attention assumed")
    if is_eagle3_config(cfg):
        out["num_fc_input_hidden_states"] = eagle3_num_fc_inputs(cfg)
    q = cfg.get("quantization_config")
    if isinstance(q, dict) and q.get("quant_method"):
        notes.append(f"quantization_config ({q['quant_method']}) not read: give the weight formats in the "
                     "model's `precision` section")
    return {k: v for k, v in out.items() if v is not None}, notes


EAGLE3_NUM_FC_INPUT_HIDDEN_STATES = 3  # low, mid and high target layers (Li et al. 2025, arXiv 2503.01840)


def is_eagle3_config(cfg: dict[str, Any]) -> bool:
    """An EAGLE-3 draft's config.json: an `architectures` entry naming Eagle3 (`LlamaForCausalLMEagle3`, the
    name SGLang's and SpecForge's drafts carry; `Eagle3LlamaForCausalLM`, vLLM's). Source: SGLang
    `python/sglang/srt/models/llama_eagle3.py` (EntryClass LlamaForCausalLMEagle3), vLLM
    `vllm/model_executor/models/llama_eagle3.py` and its registry's `Eagle3LlamaForCausalLM`."""
    archs = cfg.get("architectures")
    return isinstance(archs, list) and any(isinstance(a, str) and "eagle3" in a.lower() for a in archs)


def eagle3_num_fc_inputs(cfg: dict[str, Any]) -> int:
    """Target hidden states an EAGLE-3 draft's fc layer fuses: the length of
    `eagle_config.eagle_aux_hidden_state_layer_ids` where the config lists them, else 3.

    Source: vLLM `vllm/model_executor/models/llama_eagle3.py` (fc input `target_hidden_size * 3`; the aux layer
    ids from `eagle_aux_hidden_state_layer_ids`), SGLang `llama_eagle3.py` (fc over `hidden_size * 3`); Li et al.
    2025, EAGLE-3, arXiv 2503.01840 (low, middle and high features).
    """
    ids = (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids") if isinstance(
        cfg.get("eagle_config"), dict) else None
    if isinstance(ids, list) and 1 <= len(ids) <= 8 and all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        return len(ids)
    return EAGLE3_NUM_FC_INPUT_HIDDEN_STATES
