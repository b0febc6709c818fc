"""calibration.bench.moe: the grouped-GEMM MoE layer equals a per-expert loop; rows are sane."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from calibration.bench.moe import SHAPES, MoeLayer, bench, expert_bytes  # noqa: E402
from simulator.costs.moe_ops import expected_distinct_experts  # noqa: E402


@pytest.mark.parametrize("num_tokens", [1, 3, 8])
def test_grouped_gemm_layer_equals_the_per_expert_loop(num_tokens):
    shape = SHAPES["tiny"]
    layer = MoeLayer(shape, torch.device("cpu"), torch.float32, seed=1)
    r = layer.routing(num_tokens, np.random.default_rng(2))
    x = torch.randn(num_tokens, shape.hidden_size)
    out = layer.forward(x, r, torch.empty_like(x))
    assert torch.allclose(out, layer.reference(x, r), rtol=1e-4, atol=1e-5)
    assert int(r["offs"][-1]) == num_tokens * shape.experts_per_token


def test_bench_rows_count_distinct_experts_and_bytes():
    shape = SHAPES["tiny"]
    rows = bench(shape, "cpu", num_tokens=(1, 4), hbm_gb_per_s=100.0)
    assert [r["num_tokens"] for r in rows] == [1, 4]
    assert rows[0]["distinct_experts"] == shape.experts_per_token  # one token: exactly k experts
    for r in rows:
        assert r["latency_us"] > 0 and r["weight_bytes"] == pytest.approx(r["distinct_experts"] * expert_bytes(shape, 4))
        assert abs(r["distinct_experts"] - expected_distinct_experts(16, 4, r["num_tokens"])) < 3
        assert r["efficiency_vs_copy"] == pytest.approx(r["achieved_gb_per_s"] / 100.0)


# ---- model shapes (tiny variants on CPU), fp8 -------------------------------------------------------
from calibration.bench.moe import MODEL_SHAPES, Fp8MoeLayer, fp8_kernel, tiny_variant  # noqa: E402


def test_model_shapes_match_their_configs():
    assert SHAPES["qwen3-30b-a3b-tp1"] == SHAPES["qwen3-30b-a3b-tp1"].__class__("qwen3-30b-a3b-tp1", 128, 8, 2048, 768)
    assert (SHAPES["deepseek-v3-tp8"].num_experts, SHAPES["deepseek-v3-tp8"].intermediate_per_rank) == (256, 256)
    assert set(MODEL_SHAPES) == {"qwen3-30b-a3b-tp1", "deepseek-v3-tp8", "kimi-k2-tp8"}


@pytest.mark.parametrize("name", MODEL_SHAPES)
def test_bf16_path_of_each_model_shape_on_cpu(name):
    shape = tiny_variant(SHAPES[name])
    layer = MoeLayer(shape, torch.device("cpu"), torch.float32, seed=3)
    r = layer.routing(5, np.random.default_rng(4))
    x = torch.randn(5, shape.hidden_size)
    assert torch.allclose(layer.forward(x, r, torch.empty_like(x)), layer.reference(x, r), rtol=1e-4, atol=1e-5)
    rows = bench(shape, "cpu", num_tokens=(1, 3), hbm_gb_per_s=100.0)
    assert rows[0]["distinct_experts"] == shape.experts_per_token and rows[0]["kernel"] == "grouped_mm"


def test_fp8_scaled_mm_loop_matches_the_dequantised_reference():
    if fp8_kernel(torch.device("cpu")) is None:
        pytest.skip("torch._scaled_mm (fp8) does not run on this CPU build")
    shape = tiny_variant(SHAPES["deepseek-v3-tp8"])
    layer = Fp8MoeLayer(shape, torch.device("cpu"), "scaled_mm_loop", seed=5)
    assert layer.w13.dtype == torch.float8_e4m3fn and layer.w13.element_size() == 1
    r = layer.routing(4, np.random.default_rng(6))
    x = torch.randn(4, shape.hidden_size, dtype=torch.bfloat16)
    got = layer.forward(x, r, torch.empty_like(x)).float()
    want = layer.reference(x, r).float()
    assert torch.allclose(got, want, rtol=2e-2, atol=2e-2 * want.abs().max().item())


def test_fp8_grouped_kernel_matches_the_loop():
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if fp8_kernel(dev) != "scaled_grouped_mm":
        pytest.skip(f"torch._scaled_grouped_mm does not run on {dev} (CPU builds have no kernel; CUDA needs sm90+)")
    shape = tiny_variant(SHAPES["kimi-k2-tp8"])
    grouped = Fp8MoeLayer(shape, dev, "scaled_grouped_mm", seed=7)
    loop = Fp8MoeLayer(shape, dev, "scaled_mm_loop", seed=7)
    r = grouped.routing(6, np.random.default_rng(8))
    r_loop = {**r}
    x = torch.randn(6, shape.hidden_size, device=dev, dtype=torch.bfloat16)
    a = grouped.forward(x, r, torch.empty_like(x)).float()
    b = loop.forward(x, r_loop, torch.empty_like(x)).float()
    assert torch.allclose(a, b, rtol=2e-2, atol=2e-2 * b.abs().max().item())


def test_fp8_bench_rows_read_one_byte_per_weight():
    if fp8_kernel(torch.device("cpu")) is None:
        pytest.skip("torch._scaled_mm (fp8) does not run on this CPU build")
    shape = tiny_variant(SHAPES["qwen3-30b-a3b-tp1"])
    rows = bench(shape, "cpu", num_tokens=(2,), hbm_gb_per_s=100.0, dtype="fp8")
    assert rows[0]["dtype"] == "fp8" and rows[0]["kernel"] == "scaled_mm_loop"
    assert rows[0]["weight_bytes"] == pytest.approx(rows[0]["distinct_experts"] * expert_bytes(shape, 1))


def test_calibrate_moe_cli_all_shapes_tiny(tmp_path):
    import json

    from typer.testing import CliRunner

    from simulator.cli import app
    out = tmp_path / "moe.json"
    r = CliRunner().invoke(app, ["calibrate", "moe", "--out", str(out), "--device", "cpu",
                                 "--shape", "qwen3-30b-a3b-tp1-tiny", "--shape", "deepseek-v3-tp8-tiny"])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert {row["shape"] for row in data["rows"]} == {"qwen3-30b-a3b-tp1-tiny", "deepseek-v3-tp8-tiny"}
    bad = CliRunner().invoke(app, ["calibrate", "moe", "--out", str(tmp_path / "x.json"), "--device", "cpu",
                                   "--shape", "nope"])
    assert bad.exit_code == 2 and "--shape" in bad.output
