"""What one rank of a tensor-parallel group runs, as an engine of its own on one GPU.

A target too large for the GPU at hand (Kimi-K2 at TP8) is measured through its per-rank shard:
the HF config with the widths SGLang's TP splits divided by the TP size, and a few layers. The
engine runs that shard as a TP-1 model with its own kernels, graphs and scheduler; what the shard
does not do is the TP group's communication, which the simulator adds from the box's links
(`simulator.engines.native`, `EngineProfile.per_rank_of_tp`). Two shards that differ only in their
MoE layer count give the per-layer cost (their difference) and the rest (embedding, LM head,
sampling, the dense first layer): `scale_to_layers` carries a measured part to the whole depth.

SGLang's TP split (`python/sglang/srt/layers/linear.py`, `vocab_parallel_embedding.py`,
`models/deepseek_v2.py`, `models/llama_eagle3.py`), no expert or data parallelism:
- attention heads / tp; MLA's latent ranks (q_lora_rank, kv_lora_rank) and its KV cache are not
  split (each rank holds every token's latent);
- the dense MLP's and every expert's intermediate width / tp (TP MoE: every rank holds all the
  experts, a slice of each);
- the embedding and the LM head by vocabulary / tp (the draft's reduced vocabulary too);
- a GQA draft's KV heads / tp where there are at least tp, else one replicated KV head; the
  EAGLE-3 `fc` (3 hidden -> hidden) is a plain replicated Linear.
"""

from __future__ import annotations

from calibration.engines.plans import ProcessPlan

SPLIT_BY_TP = ("num_attention_heads", "intermediate_size", "moe_intermediate_size", "vocab_size",
               "draft_vocab_size")


def tp_shard_config(config: dict, tp: int, num_layers: int | None = None) -> dict:
    """One rank's HF config of a model split `tp` ways (see the module's doc), with `num_layers`
    decoder layers (default: all).

    Raises:
        ValueError: a width that `tp` does not divide, or fewer layers than the dense ones.
    """
    if tp < 1:
        raise ValueError(f"tp {tp}: at least 1")
    out = dict(config)
    for k in SPLIT_BY_TP:
        if k in out:
            if out[k] % tp:
                raise ValueError(f"{k} {out[k]} is not divisible by tp {tp}")
            out[k] = out[k] // tp
    mla = "kv_lora_rank" in config
    if mla:
        out["num_key_value_heads"] = out["num_attention_heads"]
    elif "num_key_value_heads" in config:
        kv = config["num_key_value_heads"]
        out["num_key_value_heads"] = kv // tp if kv >= tp and kv % tp == 0 else 1
    if not mla and "head_dim" not in config:  # the heads' width stays the whole model's
        out["head_dim"] = config["hidden_size"] // config["num_attention_heads"]
    if num_layers is not None:
        dense = int(config.get("first_k_dense_replace", 0))
        if num_layers < max(1, dense):
            raise ValueError(f"num_layers {num_layers}: at least the {dense} dense layer(s)")
        out["num_hidden_layers"] = num_layers
    return out


def moe_layers(config: dict) -> int:
    """MoE decoder layers of a (shard) config: those past first_k_dense_replace, or none."""
    if "n_routed_experts" not in config:
        return 0
    return max(0, int(config["num_hidden_layers"]) - int(config.get("first_k_dense_replace", 0)))


def scale_to_layers(value_a: float, layers_a: int, value_b: float, layers_b: int, layers: int) -> float:
    """A part measured on two shards of `layers_a` and `layers_b` MoE layers, carried linearly to
    `layers` MoE layers (the per-layer cost is their difference over the layers between them)."""
    if layers_a == layers_b:
        raise ValueError("two shards of different layer counts are needed")
    per_layer = (value_b - value_a) / (layers_b - layers_a)
    return value_a + per_layer * (layers - layers_a)


def shard_plans(target: dict, draft: dict, tp: int, layer_counts: list[int], num_steps: list[int],
                batch_sizes: list[int], prompt_len: int, acceptance_rate: float, timed_steps: int = 48,
                repeats: int = 2, engine: str = "sglang", max_model_len: int = 4096) -> list[ProcessPlan]:
    """The engine processes that measure a TP shard: per layer count, the baseline and each
    num_steps (chain), at `batch_sizes` x one context, instrumented as a calibration (labels
    `shard{tp}_l{layers}_s{k}`). Experts are routed uniformly at random (dummy weights would send a
    verify's tokens to the same experts); SGLang's DeepGEMM JIT is off (its per-shape compile at
    start-up outlasts a lease), so fp8 linears run its Triton block-fp8 kernels."""
    from calibration.engines.plans import _points
    plans = []
    for layers in layer_counts:
        t_cfg = tp_shard_config(target, tp, layers)
        d_cfg = tp_shard_config(draft, tp)
        for k in [0, *num_steps]:
            pts = _points(batch_sizes, [prompt_len], [None if k == 0 else acceptance_rate], timed_steps=timed_steps,
                          repeats=repeats, instrument_first=True)
            plans.append(ProcessPlan(engine=engine, session="calibrate", label=f"shard{tp}_l{layers}_s{k}",
                                     num_steps=k, target_config=t_cfg, draft_config=d_cfg,
                                     max_model_len=max_model_len, max_num_seqs=max(batch_sizes),
                                     gpu_memory_utilization=0.80, capture_sizes=sorted(set(batch_sizes)),
                                     engine_env={"SGLANG_ENABLE_JIT_DEEPGEMM": "0"},
                                     uniform_expert_routing=True, points=pts))
    return plans
