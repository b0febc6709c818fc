"""calibration.bench.moe: the grouped-GEMM MoE layer equals a per-expert loop; rows are sane."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from calibration.bench.moe import SHAPES, MoeLayer, bench, expert_bytes
from simulator.costs.ops import expected_distinct_experts


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
