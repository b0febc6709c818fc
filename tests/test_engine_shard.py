"""The per-rank TP shard an engine measures (calibration/engines/shard.py: its config, its plans, how its points
are carried to the full depth) and SGLang's uniform expert routing patch, without SGLang or a GPU.
The session queues that run the shard: tests/test_engine_queue.py."""

import sys
import types

import pytest

from calibration.engines.plans import ProcessPlan, model_configs
from calibration.engines.queue import AcceptLength, iid_acceptance_for
from calibration.engines.shard import moe_layers, scale_to_layers, shard_plans, tp_shard_config
from simulator.acceptance import iid_mean_accept_length


def test_kimi_k2_tp8_rank_has_sglangs_split():
    t, d = model_configs("kimi-k2-instruct", "eagle3-kimi-k2")
    s = tp_shard_config(t, 8, 3)
    assert (s["num_attention_heads"], s["num_key_value_heads"]) == (8, 8)
    assert (s["moe_intermediate_size"], s["intermediate_size"], s["vocab_size"]) == (256, 2304, 20480)
    assert (s["kv_lora_rank"], s["q_lora_rank"], s["n_routed_experts"], s["hidden_size"]) == (512, 1536, 384, 7168)
    assert s["num_hidden_layers"] == 3 and moe_layers(s) == 2
    assert "head_dim" not in s  # MLA's head widths are its own fields
    ds = tp_shard_config(d, 8)
    assert (ds["num_attention_heads"], ds["num_key_value_heads"], ds["head_dim"]) == (8, 8, 128)
    assert (ds["draft_vocab_size"], ds["intermediate_size"]) == (4000, 2304)
    assert t["num_attention_heads"] == 64  # the full config is untouched


def test_gqa_draft_keeps_one_kv_head_below_tp_and_head_width():
    cfg = {"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 4, "intermediate_size": 14336,
           "vocab_size": 128256, "num_hidden_layers": 1}
    s = tp_shard_config(cfg, 8)
    assert (s["num_attention_heads"], s["num_key_value_heads"], s["head_dim"]) == (4, 1, 128)


@pytest.mark.parametrize("cfg,tp,layers,msg", [
    ({"num_attention_heads": 12, "hidden_size": 768}, 8, None, "num_attention_heads 12"),
    ({"num_attention_heads": 8, "hidden_size": 768, "first_k_dense_replace": 3}, 1, 2, "num_layers 2"),
    ({"num_attention_heads": 8, "hidden_size": 768}, 0, None, "tp 0"),
])
def test_shard_refuses_what_tp_does_not_split(cfg, tp, layers, msg):
    with pytest.raises(ValueError, match=msg):
        tp_shard_config(cfg, tp, layers)


def test_scale_to_layers_is_linear_in_the_moe_layers():
    # 1000 us of rest, 50 us a layer: shards of 2 and 8 MoE layers carry to 60 exactly
    assert scale_to_layers(1100.0, 2, 1400.0, 8, 60) == pytest.approx(1000.0 + 50.0 * 60)
    with pytest.raises(ValueError):
        scale_to_layers(1.0, 2, 2.0, 2, 60)


def seed_acceptance() -> float:
    return iid_acceptance_for(AcceptLength(mean=2.1, num_steps=5))


def test_seed_acceptance_gives_the_published_accept_length():
    assert iid_mean_accept_length(seed_acceptance(), 5) == pytest.approx(2.1)


def test_shard_plans_route_uniformly_without_deepgemm():
    t, d = model_configs("kimi-k2-instruct", "eagle3-kimi-k2")
    plans = shard_plans(t, d, 8, [3, 9], [5], [1], 2048, 0.5)
    assert [p.label for p in plans] == ["shard8_l3_s0", "shard8_l3_s5", "shard8_l9_s0", "shard8_l9_s5"]
    assert all(p.uniform_expert_routing and p.engine_env == {"SGLANG_ENABLE_JIT_DEEPGEMM": "0"} for p in plans)
    assert plans[2].target_config["num_hidden_layers"] == 9 and plans[0].capture_sizes == [1]


def test_engine_env_names_are_engine_settings():
    base = dict(engine="fake", session="calibrate", label="x", num_steps=0, target_config={},
                points=[{"batch_size": 1, "prompt_len": 64, "acceptance_rate": None}])
    ProcessPlan(**base, engine_env={"SGLANG_X": "1"})
    with pytest.raises(ValueError):
        ProcessPlan(**base, engine_env={"LD_PRELOAD": "/tmp/x.so"})


def test_uniform_routing_patch_adds_noise_once(monkeypatch):
    torch = pytest.importorskip("torch")
    seen = []

    class TopK:
        def forward_cuda(self, hidden_states, router_logits, **kw):
            seen.append(router_logits)
            return router_logits
    mod = types.ModuleType("sglang.srt.layers.moe.topk")
    mod.TopK = TopK
    for name in ("sglang", "sglang.srt", "sglang.srt.layers", "sglang.srt.layers.moe"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "sglang.srt.layers.moe.topk", mod)
    from calibration.engines.backends.sglang_model import ROUTING_SPREAD, uniform_routing
    assert "uniform" in uniform_routing()
    first = TopK.forward_cuda
    uniform_routing()
    assert TopK.forward_cuda is first  # patched once
    logits = torch.zeros(6, 384)
    TopK().forward_cuda(None, logits)
    noisy = seen[-1]
    assert noisy.abs().max() <= ROUTING_SPREAD and noisy.std() > 1.0
    assert len({tuple(r.topk(8).indices.tolist()) for r in noisy}) == 6  # each token its own experts


def test_carry_points_scales_the_target_and_keeps_the_draft():
    from calibration.engines.shard import carry_points
    from simulator.engines.profile import EnginePoint

    def pt(layers, k):
        fwd = 1000.0 + 100.0 * layers + 20.0 * k
        draft = 300.0 if k else None
        period = fwd + 50.0 + (draft or 0.0) + 30.0
        return EnginePoint(num_steps=k, batch_size=1, prompt_len=2048, context_len=2100.0,
                           acceptance_rate=0.5 if k else None, step_us=period + 5.0, instrumented_step_us=period + 8.0,
                           mean_accept_length=1.0, accept_length_counts=[10] + [0] * k, gpu_bound=True,
                           target_forward_us=fwd, sample_us=50.0, propose_us=draft, draft_extend_us=draft,
                           gpu_period_us=period, host_busy_us=400.0 + layers, host_blocked_us=period - 400.0)
    short, long = [pt(2, 0), pt(2, 5)], [pt(8, 5), pt(8, 0)]
    out = carry_points(short, long, 2, 8, 60)
    base, spec = out
    assert base.target_forward_us == pytest.approx(1000.0 + 100.0 * 60)
    assert spec.target_forward_us == pytest.approx(1000.0 + 100.0 * 60 + 100.0)
    assert spec.draft_extend_us == pytest.approx(300.0) and spec.host_busy_us == pytest.approx(405.0)
    assert spec.other_gpu_us == pytest.approx(30.0)
    assert spec.accept_length_counts == [20, 0, 0, 0, 0, 0]
    assert spec.gpu_period_us == pytest.approx(spec.target_forward_us + 50.0 + 300.0 + 30.0)
    assert spec.step_us == pytest.approx(spec.gpu_period_us) and spec.gpu_bound
    with pytest.raises(ValueError, match="one shard only"):
        carry_points(short, long[:1], 2, 8, 60)


def test_a_host_bound_shards_pace_is_not_carried_as_gpu_work():
    """Two host-bound shards whose host paces differ by noise (6.1 ms at 2 MoE layers, 5.6 ms at
    8, as SGLang's num_steps-3 shards measured): the carried step is the GPU's parts at 60 layers
    or the host's mean work, never the line through the two paces (which would go negative)."""
    from calibration.engines.shard import carry_points
    from simulator.engines.profile import EnginePoint

    def pt(layers, host):
        fwd = 400.0 + 130.0 * layers
        return EnginePoint(num_steps=3, batch_size=1, prompt_len=2048, context_len=2100.0, acceptance_rate=0.5,
                           step_us=host + 8.0, instrumented_step_us=host + 10.0, mean_accept_length=1.5,
                           accept_length_counts=[5, 5, 0, 0], gpu_bound=False, target_forward_us=fwd, sample_us=30.0,
                           propose_us=2500.0, draft_extend_us=1900.0, draft_steps_us=600.0,
                           gpu_period_us=host + 8.0, host_busy_us=host, host_blocked_us=5.0)
    (out,) = carry_points([pt(2, 6076.0)], [pt(8, 5552.0)], 2, 8, 60)
    assert out.target_forward_us == pytest.approx(400.0 + 130.0 * 60)
    assert out.other_gpu_us == 0.0  # neither shard was GPU-bound: their periods are the host's
    assert out.step_us == pytest.approx(400.0 + 130.0 * 60 + 30.0 + 2500.0) and out.gpu_bound
    assert out.host_busy_us == pytest.approx((6076.0 + 5552.0) / 2)


def test_shard_drops_token_ids_past_its_vocabulary():
    t, _ = model_configs("kimi-k2-instruct", "eagle3-kimi-k2")
    s = tp_shard_config(t, 8, 3)
    assert "bos_token_id" not in s and "eos_token_id" not in s


def test_shard_prompts_stay_inside_the_ranks_vocabulary_and_its_kv_pool_is_bounded():
    from calibration.engines.run_loop import prompt_pool
    k_t, k_d = model_configs("kimi-k2-instruct", "eagle3-kimi-k2")
    plan = shard_plans(k_t, k_d, 8, [3], [5], [1], 2048, 0.5)[1]
    vocab = plan.target_config["vocab_size"]
    pool = prompt_pool(1, 2048, vocab_size=vocab)
    assert max(pool[0]) < vocab == 20480 and min(pool[0]) >= 0
    assert plan.max_total_tokens and plan.max_total_tokens <= 65536
    # a full vocabulary keeps the prompts the earlier campaigns drew
    assert prompt_pool(2, 64, vocab_size=128256) == prompt_pool(2, 64)


def test_the_committed_qwen3_235b_tp8_rank_configs_are_the_shard_of_the_whole_models():
    """data/models/engine's TP-8 rank of Qwen3-235B-A22B (and its draft) is tp_shard_config of the whole
    config: nothing in the rank's file set by hand."""
    import json
    from pathlib import Path

    from calibration.engines.shard import tp_shard_config
    d = Path(__file__).resolve().parents[1] / "data" / "models" / "engine"
    for name in ("qwen3-235b-a22b", "eagle3-qwen3-235b-a22b"):
        whole = json.loads((d / f"{name}.config.json").read_text())
        rank = json.loads((d / f"{name}-tp8-rank.config.json").read_text())
        assert rank == tp_shard_config(whole, 8)
    assert rank["num_attention_heads"] == 8 and rank["num_key_value_heads"] == 1 and rank["draft_vocab_size"] == 4000
