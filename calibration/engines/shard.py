"""What one rank of a tensor-parallel group runs, as an engine of its own on one GPU.

A target too large for the GPU at hand (Kimi-K2 at TP8) is measured through its per-rank shard:
the HF config with the widths SGLang's TP splits divided by the TP size, and a few layers. The
engine runs that shard as a TP-1 model with its own kernels, graphs and scheduler; what the shard
does not do is the TP group's communication, which the simulator adds from the box's links
(`simulator.engines.profile`, `EngineProfile.per_rank_of_tp`). Two shards that differ only in their
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
    for k in ("bos_token_id", "eos_token_id", "pad_token_id"):  # ids past the rank's vocabulary slice
        if isinstance(out.get(k), int) and "vocab_size" in out and out[k] >= out["vocab_size"]:
            out.pop(k)
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
                repeats: int = 2, engine: str = "sglang", max_model_len: int = 4096,
                cuda_graphs: bool = True) -> list[ProcessPlan]:
    """The engine processes that measure a TP shard: per layer count, the baseline and each
    num_steps (chain), at `batch_sizes` x one context, instrumented as a calibration (labels
    `shard{tp}_l{layers}_s{k}`, `_eager` without CUDA graphs). Experts are routed uniformly at
    random (dummy weights would send a verify's tokens to the same experts); SGLang's DeepGEMM JIT
    is off (its per-shape compile at start-up outlasts a lease), so fp8 linears run its Triton
    block-fp8 kernels."""
    from calibration.engines.plans import _points
    plans = []
    for layers in layer_counts:
        t_cfg = tp_shard_config(target, tp, layers)
        d_cfg = tp_shard_config(draft, tp)
        for k in [0, *num_steps]:
            pts = _points(batch_sizes, [prompt_len], [None if k == 0 else acceptance_rate], timed_steps=timed_steps,
                          repeats=repeats, instrument_first=True)
            plans.append(ProcessPlan(engine=engine, session="calibrate",
                                     label=f"shard{tp}_l{layers}_s{k}" + ("" if cuda_graphs else "_eager"),
                                     cuda_graphs=cuda_graphs,
                                     num_steps=k, target_config=t_cfg, draft_config=d_cfg,
                                     max_model_len=max_model_len, max_num_seqs=max(batch_sizes),
                                     gpu_memory_utilization=0.80, capture_sizes=sorted(set(batch_sizes)),
                                     max_total_tokens=max(32768, max(batch_sizes) * max_model_len * 2),
                                     engine_env={"SGLANG_ENABLE_JIT_DEEPGEMM": "0"},
                                     uniform_expert_routing=True, points=pts))
    return plans


DEPTH_PARTS = ("target_forward_us",)
SHARED_PARTS = ("sample_us", "propose_us", "draft_extend_us", "draft_steps_us", "host_busy_us", "gpu_parts_scale")


def _other_gpu_us(p) -> float | None:
    """The GPU's work in a step outside its timed parts (gaps between graph replays, small
    kernels), known only where the step was GPU-bound: a host-bound step's period is the host's pace."""
    if not p.gpu_bound:
        return None
    if p.other_gpu_us is not None:  # calibration.engines.build: 0 where the GPU waited for the host
        return p.other_gpu_us
    if p.gpu_period_us is None or p.target_forward_us is None or p.sample_us is None:
        return None
    return max(0.0, p.gpu_period_us - p.target_forward_us - p.sample_us - (p.propose_us or 0.0))


def carry_points(short: list, long: list, moe_short: int, moe_long: int, moe_target: int) -> list:
    """EnginePoints of the whole depth from two shards' points (simulator.engines.profile.EnginePoint,
    paired by num_steps, batch and prompt).

    The target's forward (one CUDA-graph replay: GPU time whatever paced its launch) is carried
    linearly in the MoE layers to `moe_target` (`scale_to_layers`); the draft's, the sampler's and
    the host's own work, which do not run through the target's layers, are the two shards' mean;
    the GPU's other work is the mean over the GPU-bound shards (0 where neither was). The step's
    GPU period is then the sum of those, and its wall time the longer of that period and the host's
    work (an overlapped engine). A shard's own period and wall time are not carried: where the
    shard was host-bound they are the host's pace, and a line through two noisy host paces
    carried to 60 layers is noise multiplied, not GPU work.

    Raises:
        ValueError: a point of one shard without its pair in the other.
    """
    from simulator.engines.profile import EnginePoint

    def key(p):
        return (p.num_steps, p.batch_size, p.prompt_len)
    by_key = {key(p): p for p in long}
    missing = [key(p) for p in short if key(p) not in by_key] + [k for k in by_key if k not in {key(p) for p in short}]
    if missing:
        raise ValueError(f"points of one shard only (num_steps, batch, prompt): {sorted(set(missing))}")
    out = []
    for a in short:
        b = by_key[key(a)]
        f = a.model_dump()
        for name in DEPTH_PARTS:
            va, vb = getattr(a, name), getattr(b, name)
            f[name] = None if va is None or vb is None else max(0.0, scale_to_layers(va, moe_short, vb, moe_long,
                                                                                     moe_target))
        for name in SHARED_PARTS:
            va, vb = getattr(a, name), getattr(b, name)
            f[name] = None if va is None or vb is None else (va + vb) / 2.0
        others = [o for o in (_other_gpu_us(a), _other_gpu_us(b)) if o is not None]
        f["other_gpu_us"] = sum(others) / len(others) if others else 0.0
        parts = [f["target_forward_us"], f["sample_us"]]
        if None in parts:
            raise ValueError(f"shard point {key(a)}: no target forward or sample time to carry")
        period = sum(parts) + (f["propose_us"] or 0.0) + f["other_gpu_us"]
        host = f["host_busy_us"] or 0.0
        f["gpu_period_us"] = period
        f["step_us"] = max(period, host)
        lengthen = (a.instrumented_step_us / a.step_us) if a.instrumented_step_us and a.step_us else None
        f["instrumented_step_us"] = f["step_us"] * lengthen if lengthen else None
        f["host_blocked_us"] = max(0.0, period - host)
        f["gpu_bound"] = period >= host
        counts = [x + y for x, y in zip(a.accept_length_counts, b.accept_length_counts)]
        f["accept_length_counts"] = counts
        f["mean_accept_length"] = (sum((i + 1) * c for i, c in enumerate(counts)) / sum(counts)
                                   if sum(counts) else a.mean_accept_length)
        f["context_len"] = (a.context_len + b.context_len) / 2.0
        if f["gpu_parts_scale"] is not None:
            f["gpu_parts_scale"] = min(2.0, max(0.5, f["gpu_parts_scale"]))
        out.append(EnginePoint(**f))
    return out
