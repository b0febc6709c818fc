"""calibration.bench.ops on CPU: point enumeration, timing statistics (calibration.timing), resumable
sweeps, whole-forward points (calibration.bench.forwards)."""

import json

import pytest

torch = pytest.importorskip("torch")

from calibration import shapes, timing  # noqa: E402
from calibration.bench import forwards  # noqa: E402
from calibration.bench import ops as bench_ops  # noqa: E402
from calibration.build.store import PointStore  # noqa: E402
from simulator.config import ModelShape  # noqa: E402
from simulator.costs.ops import Op, gemm  # noqa: E402

TINY = ModelShape(name="tiny", hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=64, vocab_size=100)
MODELS = [TINY, shapes.eagle3_draft(TINY)]
GRID = bench_ops.OpGrid(num_tokens=(1, 2), attn_batch_size=(1,), attn_num_tokens=(1, 2), attn_context_len=(4,),
                        forward_num_tokens=(1, 2), forward_context_len=(4,), dense_tp_sizes=())
FAST = timing.TimingSettings(num_replays=3, num_warmup=1)
CPU = torch.device("cpu")


def test_default_models_are_the_llama_shapes_and_their_eagle3_drafts():
    big, draft = shapes.LLAMA_8B, shapes.eagle3_draft(shapes.LLAMA_8B)
    assert (big.hidden_size, big.num_hidden_layers, big.kv_heads, big.intermediate_size) == (4096, 32, 8, 14336)
    assert (draft.num_hidden_layers, draft.num_fc_input_hidden_states, draft.lm_head_vocab_size) == (1, 3, 32000)
    assert shapes.LLAMA_1B.attn_head_dim == 64
    assert shapes.DEFAULT_MODELS == (big, draft, shapes.LLAMA_1B, shapes.eagle3_draft(shapes.LLAMA_1B))


def test_one_draft_naming_rule_the_live_records_and_the_profile_share():
    from simulator.profile import load_profile, resolve_profile_path
    draft = shapes.eagle3_draft(shapes.LLAMA_8B)
    assert draft.name == "eagle3-llama-3.1-8b" and shapes.SIZES["8b"] == (shapes.LLAMA_8B, draft)
    tables = {(f.model, f.tp_size, f.phase) for f in load_profile(resolve_profile_path("h200")).forwards}
    for size in ("8b", "1b"):
        name = shapes.SIZES[size][1].name
        assert {(name, tp, ph) for tp in (1, 2) for ph in ("draft", "draft_extend")} <= tables


def test_points_are_deduplicated_and_cover_each_key_grid():
    points = bench_ops.enumerate_points(MODELS, [1, 2], GRID)
    keys = [k for k, _ in points]
    assert len(keys) == len(set(keys))
    assert not any(op.is_collective for _, op in points)
    by_op: dict[str, list] = {}
    for _, op in points:
        by_op.setdefault(op.key, []).append(op.axes)
    for key, axes in by_op.items():
        assert sorted(map(sorted, map(dict.items, axes))) == sorted(
            map(sorted, map(dict.items, GRID.axes_points(Op(name="x", key=key, axes=axes[0]))))), key
    assert {f"accept:h={d}" for d in bench_ops.NUM_DRAFT_TOKENS} <= set(by_op)
    assert "gemm:k=96,n=32,w=2" in by_op  # the draft's fc over 3 hidden states
    assert "attention:h=2,kv=1,d=8,kvb=2" in by_op  # tp 2 shard


def test_sharded_shapes_follow_tp_and_indivisible_tp_is_skipped():
    keys8 = {o.key for o in bench_ops.model_ops(shapes.LLAMA_8B, 8)}
    assert "attention:h=4,kv=1,d=128,kvb=2" in keys8
    assert "gemm:k=4096,n=3584,w=2" in keys8  # gate_up: 2 * 14336 / 8
    assert bench_ops.model_ops(TINY, 8) == []  # 4 heads do not split 8 ways


def test_cpu_timing_gives_ordered_percentiles():
    runner = lambda: torch.ones(64).sum()  # noqa: E731
    t = timing.time_cpu_us([runner], timing.TimingSettings(num_replays=20))
    assert 0 < t["p10_latency_us"] <= t["latency_us"] <= t["p90_latency_us"]


def test_small_ops_rotate_input_sets_large_ones_do_not():
    assert bench_ops.num_input_sets(gemm("gemm", 1, 8192, 28672, 2.0)) == 1  # 470 MB of weights
    # 2 MB of weights, cold in a real forward: enough sets to cover twice the 60 MB L2
    op = gemm("gemm", 1, 1024, 1024, 2.0)
    assert bench_ops.num_input_sets(op) * op.bytes >= 2 * bench_ops.L2_BYTES
    # activations of an elementwise op are warm in a forward: the small rotation
    from simulator.costs.ops import elementwise
    assert 1 < bench_ops.num_input_sets(elementwise("add", 4, 1024)) <= bench_ops.MAX_INPUT_SETS


def _lines(path) -> list[str]:
    return [json.loads(x)["key"] for x in path.read_text().splitlines()]


def test_interrupted_sweep_resumes_without_losing_or_duplicating_points(tmp_path, monkeypatch):
    full = PointStore(tmp_path / "full.jsonl")
    bench_ops.bench_ops(full, MODELS, [1, 2], GRID, CPU, torch.float32, FAST, "test")
    want = {k for k in full.records() if k.startswith("op:")}

    real, calls = bench_ops.measure_point, []

    def flaky(op, *args, **kwargs):
        if len(calls) == 5:
            raise KeyboardInterrupt
        calls.append(op.key)
        return real(op, *args, **kwargs)

    path = tmp_path / "resumed.jsonl"
    monkeypatch.setattr(bench_ops, "measure_point", flaky)
    with pytest.raises(KeyboardInterrupt):
        bench_ops.bench_ops(PointStore(path), MODELS, [1, 2], GRID, CPU, torch.float32, FAST, "test")
    assert len([k for k in _lines(path) if k.startswith("op:")]) == 5

    measured_again = []
    monkeypatch.setattr(bench_ops, "measure_point",
                        lambda op, *a, **kw: measured_again.append(op.key) or real(op, *a, **kw))
    resumed = PointStore(path)
    assert bench_ops.bench_ops(resumed, MODELS, [1, 2], GRID, CPU, torch.float32, FAST, "test") == len(want) - 5
    op_lines = [k for k in _lines(path) if k.startswith("op:")]
    assert len(op_lines) == len(set(op_lines)) == len(want)
    assert set(op_lines) == want and len(measured_again) == len(want) - 5


def test_records_carry_axes_and_stats(tmp_path):
    store = PointStore(tmp_path / "p.jsonl")
    bench_ops.bench_ops(store, [TINY], [1], GRID, CPU, torch.float32, FAST, "cmd")
    rec = store.records()["op:attention:h=4,kv=2,d=8,kvb=2:batch_size=1,context_len=4,num_tokens=2"]
    assert rec["axes"] == {"batch_size": 1, "num_tokens": 2, "context_len": 4}
    assert rec["latency_us"] > 0 and rec["command"] == "cmd" and rec["mode"] == "cpu_wall"
    assert store.records()["meta:model:tiny"]["hidden_size"] == 32


def test_host_roofline_and_forward_points_are_written(tmp_path):
    store = PointStore(tmp_path / "p.jsonl")
    bench_ops.bench_host(store, [TINY], CPU, torch.float32, "cmd", num_calls=5)
    bench_ops.bench_roofline(store, CPU, "cmd")
    make = forwards.models_forward(TINY, CPU, torch.float32, max_len=8)
    forwards.bench_forwards(store, "tiny", 1, make, GRID, CPU, FAST, "cmd", impl="llama.TargetModel")
    recs = store.records()
    assert {"host:launch:gemm", "host:launch:attention", "host:d2h_sync", "host:graph_replay",
            "roofline:hbm_copy", "roofline:bf16_matmul"} <= set(recs)
    assert recs["roofline:hbm_copy"]["bandwidth_gb_per_s"] > 0
    fwd = [k for k in recs if k.startswith("fwd:tiny:1:")]
    assert len(fwd) == 2 * 2 * 1  # modes x num_tokens x context_len


def test_dense_grid_applies_to_dense_tp_sizes_only():
    grid = bench_ops.OpGrid(num_tokens=(1, 2, 3), attn_batch_size=(1,), attn_num_tokens=(1, 3), attn_context_len=(4,),
                            forward_num_tokens=(1,), forward_context_len=(4,), dense_tp_sizes=(1,))
    points = bench_ops.enumerate_points(MODELS, [1, 2], grid)
    tokens = {}
    for _, op in points:
        tokens.setdefault(op.key, set()).add(op.axes["num_tokens"])
    tp1_keys = {op.key for m in MODELS for op in bench_ops.model_ops(m, 1) if not op.is_collective}
    for key, seen in tokens.items():
        if key in tp1_keys:
            assert 3 in seen, key  # the dense grid's odd count
        else:
            assert 3 not in seen, key  # coarse grid: powers of two
