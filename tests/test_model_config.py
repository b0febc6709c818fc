"""config.json coverage (simulator.model_config) and per-component weight formats."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from simulator.config import WEIGHT_FORMATS, ModelShape
from simulator.costs import forward_ops as FO
from simulator.scenario import load_scenario

CONFIGS = Path(__file__).parent / "data" / "hf_configs"
DRAFT = dict(name="d", hidden_size=1024, num_hidden_layers=1, num_attention_heads=8, intermediate_size=2048,
             vocab_size=32000)


def _scenario(tmp_path, config: str, **target) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(dict(
        name="cfg", profile="h200", tp_size=1, placement="shared_tp",
        target=dict(name="t", config_path=str(CONFIGS / config), **target), draft=DRAFT,
        spec=dict(num_steps=2, topk=1, num_draft_tokens=3), acceptance=dict(kind="iid", acceptance_rate=0.6),
        fidelity=dict(num_cycles=20))))
    return path


@pytest.mark.parametrize("config, experts, top_k, expert_width, dense_width, moe_layers", [
    ("qwen3_30b_a3b.json", 128, 8, 768, 6144, 48),
    ("qwen2_57b_a14b.json", 64, 8, 2560, 18944, 28),
    ("mixtral_8x7b.json", 8, 2, 14336, 14336, 32),
    ("gpt_oss_120b.json", 128, 4, 2880, 2880, 36),
    ("llama4_scout.json", 16, 1, 8192, 16384, 48),
    ("deepseek_v3.json", 256, 8, 2048, 18432, 58),
])
def test_moe_families_map_to_one_shape(tmp_path, config, experts, top_k, expert_width, dense_width, moe_layers):
    t = load_scenario(_scenario(tmp_path, config)).target
    assert (t.n_routed_experts, t.num_experts_per_tok, t.moe_intermediate_size) == (experts, top_k, expert_width)
    assert t.intermediate_size == dense_width and t.num_moe_layers == moe_layers


def test_shared_experts_gpt_oss_windows_and_mtp_heads(tmp_path):
    qwen2 = load_scenario(_scenario(tmp_path, "qwen2_57b_a14b.json")).target
    assert qwen2.shared_expert_intermediate_size == 20480
    ops = FO.decoder_layer_ops(qwen2, 1, 1, 1, 1024, 0)
    assert any(op.key == "gemm:k=3584,n=40960,w=2" for op in ops)  # gate+up of the 20480-wide shared expert
    oss = load_scenario(_scenario(tmp_path, "gpt_oss_120b.json")).target
    assert oss.sliding_window == 128 and oss.sliding_window_layers == list(range(0, 36, 2))
    att = [op for op in FO.decoder_layer_ops(oss, 1, 1, 1, 4096, 0) if op.name == "attention"][0]
    assert att.axes["context_len"] == 128  # a sliding layer attends the window, not the 4096 cached tokens
    assert [op for op in FO.decoder_layer_ops(oss, 1, 1, 1, 4096, 1) if op.name == "attention"][0].axes[
        "context_len"] == 4096
    v3 = load_scenario(_scenario(tmp_path, "deepseek_v3.json")).target
    assert v3.num_nextn_predict_layers == 1 and v3.is_mla
    assert any("quantization_config (fp8)" in n for n in v3.config_notes)


def test_a_qwen_moe_scenario_simulates_and_says_what_it_left_out(tmp_path):
    from simulator.cli import app
    from typer.testing import CliRunner
    path = str(_scenario(tmp_path, "gpt_oss_120b.json"))
    res = CliRunner().invoke(app, ["simulate", path])  # mxfp4 not read: bf16 weights, 234 GB on one H200
    assert res.exit_code == 2 and "does not fit in GPU memory" in res.output, res.output
    res = CliRunner().invoke(app, ["simulate", path, "--set", "tp_size=2"])  # half of it on each of two
    assert res.exit_code == 0, res.output
    assert "quantization_config (mxfp4) not read" in res.output


def test_component_formats_set_bytes_and_rate_per_component():
    kimi_like = ModelShape(name="k", hidden_size=1024, num_hidden_layers=2, num_attention_heads=8,
                           intermediate_size=4096, vocab_size=1000, n_routed_experts=16, num_experts_per_tok=2,
                           moe_intermediate_size=512, n_shared_experts=1, first_k_dense_replace=1,
                           precision=dict(routed_experts="int4_g32", dense_mlp="fp8_block128"))
    dense_ops = FO.decoder_layer_ops(kimi_like, 1, 1, 1, 128, 0)
    moe_ops = FO.decoder_layer_ops(kimi_like, 1, 1, 1, 128, 1)
    experts = [op for op in moe_ops if op.name == "moe_experts"][0]
    assert experts.weight_dtype_bytes == pytest.approx(0.5 + 2 / 32) and experts.compute_dtype == "bf16"
    mlp = [op for op in dense_ops if op.key.startswith("gemm:k=1024,n=8192")][0]
    assert mlp.weight_dtype_bytes == WEIGHT_FORMATS["fp8_block128"][0] and mlp.compute_dtype == "fp8"
    attn = [op for op in dense_ops if op.name == "gemm"][0]
    assert attn.weight_dtype_bytes == 2.0 and attn.key == "gemm:k=1024,n=3072,w=2"  # unchanged key: tables still match
    int8 = ModelShape(**{**kimi_like.model_dump(exclude={"precision"}), "precision": dict(attention="int8")})
    assert [op for op in FO.decoder_layer_ops(int8, 1, 1, 1, 128, 0) if op.name == "gemm"][0].key.endswith(",c=int8")


def test_a_format_that_does_not_exist_is_refused(tmp_path):
    from simulator.scenario import UserInputError
    with pytest.raises(UserInputError, match="precision.routed_experts"):
        load_scenario(_scenario(tmp_path, "qwen3_30b_a3b.json", precision=dict(routed_experts="int3")))


@pytest.mark.parametrize("change, words", [
    ({"num_hidden_layers": 1_000_000_000, "decoder_sparse_step": 2}, "num_hidden_layers"),  # no huge layer list
    ({"mlp_only_layers": [[1]]}, "mlp_only_layers: expected a list of layer indices"),
    ({"mlp_only_layers": [100]}, "mlp_only_layers: expected a list of layer indices 0..47"),
    ({"decoder_sparse_step": 0}, "decoder_sparse_step: expected an integer"),
])
def test_bad_config_json_layer_settings_are_one_line(tmp_path, change, words):
    import json

    from simulator.scenario import UserInputError
    cfg = {**json.loads((CONFIGS / "qwen3_30b_a3b.json").read_text()), **change}
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    path = tmp_path / "s.yaml"
    path.write_text(_scenario(tmp_path, "qwen3_30b_a3b.json").read_text().replace(
        str(CONFIGS / "qwen3_30b_a3b.json"), str(tmp_path / "c.json")))
    with pytest.raises(UserInputError, match=words.replace("[", r"\[")):
        load_scenario(path)


def test_an_unknown_model_type_is_a_note_and_a_zero_head_dim_is_refused(tmp_path):
    import json

    from simulator.scenario import UserInputError
    cfg = {**json.loads((CONFIGS / "mixtral_8x7b.json").read_text()), "model_type": "mamba"}
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    t = load_scenario(_scenario(tmp_path, str(tmp_path / "c.json"))).target
    assert any("model_type 'mamba'" in n for n in t.config_notes)
    with pytest.raises(UserInputError, match="head_dim 0"):
        load_scenario(_scenario(tmp_path, "mixtral_8x7b.json", hidden_size=1, num_attention_heads=8,
                                num_key_value_heads=8))
