"""An engine-native profile carried to another GPU (simulator/costs/engine_carry.py), on synthetic
profiles whose parts are built from known shares, so the carried price is known exactly."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from simulator.costs.engine_carry import EngineCarry, fit_split, op_times
from simulator.costs.engine_native import NativeCosts, native_costs
from simulator.costs.forward import CostModel
from simulator.costs.ops import gemm
from simulator.engines.profile import EngineProfile
from simulator.hardware import default_catalog, gpu_rates
from simulator.profile import load_profile, resolve_profile_path
from simulator.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "data" / "engine_profiles" / "vllm-0.26.0-h200-llama-3.1-8b-eagle3.json"
H200, H100 = (gpu_rates(default_catalog().gpu(g)) for g in ("h200-sxm", "h100-sxm"))
BW_RATIO = H200.memory_bandwidth_gb_per_s / H100.memory_bandwidth_gb_per_s
PARTS = {"target_forward": "target_forward_us", "sample": "sample_us", "draft_extend": "draft_extend_us"}


def test_op_times_are_the_datasheet_roofline_of_each_op():
    """A GEMM of 4096 x 14336 bf16 weights: bytes / bandwidth and flops / rate, by hand."""
    op = gemm("gemm", 8, 4096, 14336, 2.0)
    t = op_times([op], H100)
    assert t.memory_us[0] == pytest.approx(op.bytes / (3350e9 / 1e6))
    assert t.compute_us[0] == pytest.approx(2 * 8 * 4096 * 14336 / (989.5e12 / 1e6))
    assert t.memory_bound_us == pytest.approx(t.memory_us[0]) and t.compute_bound_us == 0.0
    big = op_times([op], H100, tokens=4096)  # the same op run at 4096 padded tokens: FLOP-bound
    assert big.compute_bound_us == pytest.approx(2 * 4096 * 4096 * 14336 / (989.5e12 / 1e6)) and big.memory_bound_us == 0


def _synthetic(make_us, max_batch: int) -> EngineProfile:
    """The shipped H200 profile's points up to `max_batch`, every carried part replaced by
    make_us(part, op times on the H200's datasheet at that point)."""
    data = json.loads(SHIPPED.read_text())
    data["points"] = [p for p in data["points"] if p["batch_size"] <= max_batch]
    prof = EngineProfile.model_validate(data)
    carry = EngineCarry(prof, H200, H200)  # only for its op lists
    pts = []
    for p in prof.points:
        upd = {}
        for part, field in PARTS.items():
            if getattr(p, field) is None or (part == "draft_extend" and not p.num_steps):
                continue
            q = 1 if not p.num_steps else p.num_steps + 1
            tokens = p.batch_size * q if part == "sample" else prof.padded_tokens(p.batch_size * q, p.batch_size)
            if part == "target_forward" and p.target_tokens_padded:
                tokens = p.target_tokens_padded
            if part == "draft_extend" and p.draft_extend_tokens_padded:
                tokens = p.draft_extend_tokens_padded
            upd[field] = make_us(part, carry.bounds(part, p.batch_size, p.num_steps, p.context_len, tokens, H200))
        if p.num_steps >= 2 and p.draft_steps_us:
            t = carry.bounds("draft_step", p.batch_size, p.num_steps, p.context_len,
                             prof.padded_tokens(p.batch_size, p.batch_size), H200)
            upd["draft_steps_us"] = (p.num_steps - 1) * make_us("draft_step", t)
        pts.append(p.model_copy(update=upd))
    return prof.model_copy(update={"points": pts})


def test_a_pure_bandwidth_profile_carries_by_the_bandwidth_ratio_exactly():
    """Parts that are 1.3x their ops' bytes / bandwidth (no fixed share), at batches where every op is
    bandwidth-bound on both GPUs: the fit finds 0 fixed and the factor 1.3, and every carried part is
    its H200 price x 4800 / 3350."""
    prof = _synthetic(lambda part, t: 1.3 * t.memory_bound_us, max_batch=16)
    carry = EngineCarry(prof, H200, H100)
    for s in carry.splits.values():
        assert s.fixed_us == pytest.approx(0.0, abs=1e-6) and s.bandwidth_factor == pytest.approx(1.3, rel=1e-9)
    src, dst = NativeCosts(prof), NativeCosts(prof, carry=carry)
    checked = 0
    for p in prof.points:
        b, k, c = p.batch_size, p.num_steps, p.context_len
        pairs = [(src.target_forward_us, dst.target_forward_us), (src.sample_us, dst.sample_us)]
        if k:
            pairs.append((src.draft_extend_us, dst.draft_extend_us))
        if k >= 2:
            pairs.append((src.draft_step_us, dst.draft_step_us))
        for f_src, f_dst in pairs:
            assert carry.bounds("target_forward", b, k, c, b * (k + 1), H100).compute_bound_us == 0.0
            assert f_dst(b, k, c) == pytest.approx(f_src(b, k, c) * BW_RATIO, rel=1e-9)
            checked += 1
        assert dst.host_us(b, k, c) == src.host_us(b, k, c)  # the host's work is not carried
        assert dst.other_gpu_us(b, k, c) == src.other_gpu_us(b, k, c)
    assert checked > 100


def test_a_split_profile_keeps_its_fixed_share_and_scales_each_bound_by_its_law():
    """Parts of 400 us fixed + 1.2x bytes time + 1.6x flops time per op (the max of the two), over every
    batch 1-64 (verifies FLOP-bound at the largest): the fit recovers the three and the carried part is
    400 + the same factors on the H100's datasheet."""
    prof = _synthetic(lambda part, t: 400.0 + t.roofline_us(1.2, 1.6), max_batch=64)
    carry = EngineCarry(prof, H200, H100)
    target = carry.splits["target_forward"]
    assert target.flops_identified
    assert (target.fixed_us, target.bandwidth_factor, target.flops_factor) == pytest.approx((400.0, 1.2, 1.6), rel=1e-4)
    assert target.max_abs_error_frac < 1e-6
    nat = NativeCosts(prof, carry=carry)
    checked = 0
    for p in prof.points:  # a measured point is priced as measured on the H200, so carried exactly
        b, k, c = p.batch_size, p.num_steps, p.context_len
        if p.prompt_len != 1024 or b not in (1, 8, 64) or k not in (0, 3, 6):
            continue
        tokens = p.target_tokens_padded or prof.padded_tokens(b * (k + 1), b)
        expect = 400.0 + carry.bounds("target_forward", b, k, c, tokens, H100).roofline_us(1.2, 1.6)
        assert nat.target_forward_us(b, k, c) == pytest.approx(expect, rel=1e-4)
        checked += 1
    assert checked == 9
    # the same rate and less bandwidth: no part comes out faster on the H100, none more than the bandwidth ratio slower
    for part in carry.splits:
        for b in (1, 8, 64):
            r = carry.ratio(part, b, 3, 2000.0, prof.padded_tokens(b * 4, b))
            assert 1.0 <= r <= BW_RATIO + 1e-12


def test_fit_split_refuses_no_points_and_needs_positive_times():
    with pytest.raises(ValueError, match="above 0"):
        fit_split("sample", np.array([]), [])
    t = op_times([gemm("gemm", 1, 4096, 4096, 2.0)], H200)
    with pytest.raises(ValueError, match="above 0"):
        fit_split("sample", np.array([0.0]), [t])


def _scenario(*sets: str):
    return load_scenario(ROOT / "scenarios" / "vllm_llama8b_h200.yaml", list(sets))


def test_a_scenario_on_another_gpu_uses_the_carried_profile_and_says_so():
    sc = _scenario("hardware.gpu=h100-sxm")
    prof = load_profile(resolve_profile_path("h200"))
    cost = CostModel(sc, prof)
    assert cost.native is not None and cost.native.carry is not None
    notes = " ".join(cost.notes)
    assert "measured on h200-sxm, carried to h100-sxm" in notes and "not used" not in notes
    assert "same architecture (hopper)" in notes and "FlashAttention 3 on both" in notes
    own = CostModel(_scenario(), prof)
    assert own.native.carry is None
    b, k, c = sc.workload.batch_size, sc.spec.num_steps, sc.workload.context_len
    assert cost.native.target_forward_us(b, k, c) > own.native.target_forward_us(b, k, c) * 1.1
    assert cost.native.host_us(b, k, c) == own.native.host_us(b, k, c)
    same = CostModel(_scenario("hardware.gpu=h200-sxm"), prof)  # its own GPU named: nothing carried
    assert same.native.carry is None and same.native.target_forward_us(b, k, c) == own.native.target_forward_us(b, k, c)


def test_a_carry_across_architectures_names_the_kernels_that_may_differ():
    notes: set[str] = set()
    sc = _scenario("hardware.gpu=a100-sxm-80gb")
    nat = native_costs(sc, EngineProfile.model_validate(json.loads(SHIPPED.read_text())), notes)
    assert nat is not None and nat.carry is not None
    text = " ".join(notes)
    assert "hopper -> ampere" in text and "FlashAttention 3 measured, FlashAttention 2 there" in text
    assert "carried to a100-sxm-80gb" in text


def test_a_prefill_fit_carries_by_the_tensor_rates_and_keeps_its_fixed_shares():
    """carry_prefill: per-token and per-token-pair coefficients scale by src / dst dense bf16 rates exactly;
    per_step_us and per_run_us are kept."""
    from simulator.costs.engine_carry import carry_prefill
    h100 = EngineProfile.model_validate_json(
        (ROOT / "data" / "engine_profiles" / "vllm-0.26.0-h100-llama-3.1-8b-eagle3.json").read_text())
    src = gpu_rates(default_catalog().gpu("h100-sxm"))
    dst = src.model_copy(update={"gpu": "half", "bf16_dense_tflops": src.bf16_dense_tflops / 2})
    for a, b in zip(h100.prefill, carry_prefill(h100.prefill, src, dst)):
        assert b.per_token_us == pytest.approx(2 * a.per_token_us, rel=1e-12)
        assert b.per_token_pair_us == pytest.approx(2 * a.per_token_pair_us, rel=1e-12)
        assert (b.per_step_us, b.per_run_us, b.max_num_batched_tokens) == (a.per_step_us, a.per_run_us,
                                                                         a.max_num_batched_tokens)


def test_a_serving_scenario_whose_profile_measured_no_prefill_takes_a_shipped_ones_and_says_so():
    """The H200 profile measured no prefill: a serving scenario on it prices the prefill from the shipped
    H100 profile of the same engine, target and draft, carried to the H200 (a note names both); a steady
    scenario is left alone (it prices no prefill)."""
    from simulator.serving.costs import StepCosts
    from simulator.scenario import load_profile_for
    base = ROOT / "scenarios" / "vllm_llama8b_h200.yaml"
    sc = load_scenario(base, ["serving.arrivals.kind=closed_batch", "serving.num_requests=4"])
    costs = StepCosts(sc, load_profile_for(sc, base_dir=base.parent)[0])
    fit = costs.engine_prefill(True)
    assert fit is not None and fit.speculative and fit.max_num_batched_tokens == 16384
    notes = costs.cost_model(1, None, 1).lookup.notes
    assert any("vllm-0.26.0-h100-llama-3.1-8b-eagle3's runs of the prefill alone" in n and "carried to h200-sxm" in n
               for n in notes)
    steady = load_scenario(base)
    assert not CostModel(steady, load_profile_for(steady, base_dir=base.parent)[0]).native.profile.prefill


# ---- another model of the same family of layers (issue 46) --------------------------------------------
def _qwen3_8b_shapes():
    from simulator.model_shape import ModelShape
    sc = load_scenario(ROOT / "scenarios" / "sglang_qwen3_8b_h100.yaml")
    assert isinstance(sc.target, ModelShape) and sc.target.num_hidden_layers == 36
    return sc.target, sc.draft


def test_a_profile_carried_to_another_shape_prices_its_ops_at_the_same_factors_and_its_launches_by_layers():
    """Parts of 400 us fixed + 1.2x bytes time + 1.6x flops time per op, carried on the same GPU to Qwen3-8B's
    shape (36 layers against 32, another MLP and vocabulary): the target forward is 400 x 36/32 + the same
    factors over Qwen3-8B's ops; a one-layer draft's fixed share is kept; carried to its own shape, nothing moves."""
    prof = _synthetic(lambda part, t: 400.0 + t.roofline_us(1.2, 1.6), max_batch=64)
    target, draft = _qwen3_8b_shapes()
    carry = EngineCarry(prof, H200, H200, target, draft)
    assert carry.shape_carried and carry.fixed_scale("target_forward") == pytest.approx(36 / 32)
    assert carry.fixed_scale("draft_extend") == 1.0 and carry.fixed_scale("sample") == 1.0
    nat = NativeCosts(prof, carry=carry)
    checked = 0
    for p in prof.points:
        b, k, c = p.batch_size, p.num_steps, p.context_len
        if p.prompt_len != 1024 or b not in (1, 8, 64) or k not in (0, 3):
            continue
        tokens = p.target_tokens_padded or prof.padded_tokens(b * (k + 1), b)
        expect = 400.0 * 36 / 32 + carry.bounds("target_forward", b, k, c, tokens, H200, other=True).roofline_us(1.2, 1.6)
        assert nat.target_forward_us(b, k, c) == pytest.approx(expect, rel=1e-4)
        checked += 1
    assert checked == 6
    same = EngineCarry(prof, H200, H200, carry.target.model_copy(update={"name": "x"}), carry.draft)
    assert not same.shape_carried and same.ratio("target_forward", 8, 3, 1100.0, 32) == pytest.approx(1.0)


def test_a_scenario_of_another_dense_shape_is_priced_from_the_profile_carried_to_it_and_says_so():
    """Qwen3-8B named with the H100 SGLang profile of Llama-3.1-8B: the profile prices it, carried (not the op
    tables), a note names both shapes; its prefill runs are not taken for another shape."""
    sc = load_scenario(ROOT / "scenarios" / "sglang_qwen3_8b_h100.yaml")
    cost = CostModel(sc, load_profile(resolve_profile_path(sc.profile)))
    assert cost.native is not None and cost.native.carry is not None and cost.native.carry.shape_carried
    notes = " ".join(cost.notes)
    assert "measured on another shape (32 layers" in notes and "carried to qwen3-8b (36 layers" in notes
    assert "not used" not in notes and "carried to h100" not in notes  # the profile's own GPU: no GPU carry


def test_a_profile_is_not_carried_to_another_family_of_layers():
    """A dense profile named for the MoE Qwen3-30B-A3B: not used (another family of layers), the note says why."""
    notes: set[str] = set()
    sc = load_scenario(ROOT / "scenarios" / "sglang_qwen3_8b_h100.yaml",
                       ["target.config_path=qwen3-30b-a3b", "draft.config_path=eagle3-qwen3-30b-a3b",
                        "target.name=qwen3-30b-a3b", "draft.name=eagle3-qwen3-30b-a3b"])
    prof = EngineProfile.model_validate(json.loads(
        (ROOT / "data" / "engine_profiles" / "sglang-0.5.15-h100-llama-3.1-8b-eagle3.json").read_text()))
    nat = native_costs(sc, prof, notes)
    text = " ".join(notes)
    assert (nat is None or nat.profile.name != prof.name) and "another family of layers" in text and "MoE GQA" in text


def test_a_profile_carried_to_a_tp_group_prices_a_ranks_sharded_ops_and_adds_the_groups_collectives():
    """The vLLM H200 profile (TP 1) asked for TP 2 on the 2x H200 NVLink box: priced from the profile carried to a
    rank of TP 2 (its GEMMs' weights halved: the target forward's bandwidth-bound part shrinks, the fixed share is
    kept), and the group's allreduces come from the box's links (the profile measured none); TP 1 on the same box is
    the profile as measured."""
    prof = load_profile(resolve_profile_path("h200"))
    one = CostModel(_scenario("hardware.box=2x-h200-nvlink"), prof)
    two = CostModel(_scenario("hardware.box=2x-h200-nvlink", "tp_size=2"), prof)
    assert one.native.carry is None and one.native.collectives_measured
    carry = two.native.carry
    assert carry is not None and carry.tp_carried and (carry.dst_tp, carry.dst_draft_tp) == (2, 2)
    assert not two.native.collectives_measured
    b, k, c = 8, 3, 1024
    t1, t2 = one.native.target_forward_us(b, k, c), two.native.target_forward_us(b, k, c)
    fixed = carry.splits["target_forward"].fixed_us
    assert fixed < t2 < t1 and (t2 - fixed) < 0.6 * (t1 - fixed)  # the rank reads half the weights, plus its share of KV
    verify = two.verify_forward()
    comm = [kn for kn in verify.kernels if kn.category == "comm"]
    assert comm and not [kn for kn in one.verify_forward().kernels if kn.category == "comm"]
    assert "carried to a rank of TP 2" in " ".join(two.notes)


def test_a_carried_sglang_cycle_is_not_floored_at_the_measured_step_by_a_host_that_waited_for_the_gpu():
    """SGLang's overlapped EAGLE worker keeps its host busy through the GPU-bound step (host busy / step 1.00 at
    the H100 profile's speculative points): carried to a faster GPU, a smaller shape or a TP group, that measure
    is not the host's floor (a helper found every such carry priced at the measured step, 8,954 us). The baseline's
    host work at the batch is taken instead, and a smaller, faster or sharded target now gives a shorter cycle."""
    from simulator.engines.profile import load_engine_profile
    prof = load_engine_profile("sglang-0.5.15-h100-llama-3.1-8b-eagle3")
    assert NativeCosts(prof).spec_host_holds_gpu_wait
    assert not NativeCosts(load_engine_profile("vllm-0.26.0-h200-llama-3.1-8b-eagle3")).spec_host_holds_gpu_wait
    base = ROOT / "scenarios" / "sglang_llama8b_h200.yaml"
    own = ["serving_engine.engine_profile=sglang-0.5.15-h100-llama-3.1-8b-eagle3", "hardware.gpu=h100-sxm"]

    def cycle(*sets):
        sc = load_scenario(base, own + list(sets))
        cost = CostModel(sc, load_profile(resolve_profile_path(sc.profile)))
        from simulator.acceptance import build_acceptance
        from simulator.analytic import analyze
        return analyze(sc, cost, build_acceptance(sc.acceptance, sc.spec), truncate=False).cycle_time_us
    measured = cycle()
    assert cycle("target.num_hidden_layers=16") < 0.8 * measured
    assert cycle("hardware.gpu=h200-sxm") < 0.95 * measured
    assert cycle("tp_size=2", "hardware.box=hgx-h100-8gpu", "hardware.gpu=h100-sxm") < 0.9 * measured


def test_an_sglang_profile_of_one_num_steps_prices_another_without_stretching_its_host():
    """The H100 SGLang profile measured num_steps 3 (and the baseline). Its speculative host measure is the GPU
    step (the overlapped worker waits in it), so its fitted form along num_steps is no host cost: at num_steps 5
    and 6 the cycle is the GPU's parts (the engine's own whole-batch steps at batch 32: 11.95 and 12.75 ms,
    data/engine_runs/h100_sglang_0.5.15_requests/, against 10.3 ms at num_steps 3), not a host stretched past
    them (14.7 and 16.0 ms before)."""
    from simulator.engines.profile import load_engine_profile
    prof = load_engine_profile("sglang-0.5.15-h100-llama-3.1-8b-eagle3")
    native = NativeCosts(prof)
    assert {p.num_steps for p in prof.points} == {0, 3} and native.spec_host_holds_gpu_wait
    b, c = 32, 1100
    for k in (5, 6):
        gpu, host = native.step_us(b, k, c)
        assert host == pytest.approx(native.host_us(b, 0, c))  # the baseline's host work (the profile's own host)
        assert native.draft_loop_host_us(b, k, c) > 0  # priced into the host only on another host (test_host_speed)
        assert host < 0.8 * gpu
    gpu3, host3 = native.step_us(b, 3, c)
    assert host3 > 0.95 * gpu3  # measured num_steps: its own measure, the step it waited through
    gpu5, _ = native.step_us(b, 5, c)
    assert 1.05 * gpu3 < gpu5 < 1.35 * gpu3


def test_a_prefill_fit_carried_to_another_shape_scales_by_its_flops():
    """A prefill step is FLOP-bound: carried to a target of twice the layers, the fit without the draft takes
    twice the FLOPs a token and a token pair (the draft's extend, one layer, is kept in the fit with the draft,
    so that one grows by less); the per-step and per-run shares are kept; the same shape carries nothing."""
    from simulator.costs.engine_carry import carry_prefill_shape
    from simulator.costs.engine_native import with_prefill
    from simulator.engines.profile import load_engine_profile
    from simulator.model_shape import ModelShape
    prof = load_engine_profile("sglang-0.5.15-h100-llama-3.1-8b-eagle3")
    assert {f.speculative for f in prof.prefill} == {False, True}
    target = ModelShape.model_validate({**prof.target, "name": "t"})
    draft = ModelShape.model_validate({**prof.draft, "name": "d"})
    same, _ = carry_prefill_shape(prof, target, draft)
    assert [f.per_token_us for f in same] == pytest.approx([f.per_token_us for f in prof.prefill], rel=1e-12)
    deep = target.model_copy(update={"num_hidden_layers": 2 * target.num_hidden_layers})
    fits, how = carry_prefill_shape(prof, deep, draft)
    for old, new in zip(prof.prefill, fits):
        tok, pair = new.per_token_us / old.per_token_us, new.per_token_pair_us / old.per_token_pair_us
        if old.speculative:
            assert 1.8 < tok < 2.0 and 1.8 < pair < 2.0
        else:
            assert tok == pytest.approx(2.0, rel=0.01) and pair == pytest.approx(2.0, rel=1e-6)
        assert (new.per_step_us, new.per_run_us) == (old.per_step_us, old.per_run_us)
    assert "per token x2.00" in how
    notes: set[str] = set()
    sc = load_scenario(ROOT / "scenarios" / "sglang_qwen3_8b_h100.yaml", [])
    carried = with_prefill(prof, sc, notes)
    assert carried.prefill and carried.prefill[0].per_token_us != prof.prefill[0].per_token_us
    assert any("carried to qwen3-8b's shape" in n for n in notes)
    tp2 = load_scenario(ROOT / "scenarios" / "sglang_qwen3_8b_h100.yaml", ["tp_size=2", "hardware.box=hgx-h100-8gpu"])
    assert with_prefill(prof, tp2, set()).prefill == []  # another TP size: the op tables price the prefill


def test_the_carry_bench_refuses_a_box_that_cannot_hold_the_profiles_own_gpu_in_one_line():
    """bench_engine_carry prices each point four ways, one on the profile's own GPU: a scenario whose box carries
    another GPU (the Kimi-K2 rank's H200 NVL box, a profile of the H200 SXM) is refused in one line naming the way
    and both GPUs, before any table line, not with a traceback (as it was when an MLA -> MLA carry was tried)."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_engine_carry.py"), "--steady-of",
                          "sglang-0.5.15-kimi-k2-tp8-rank-h200", "--profile", "sglang-0.5.15-h200-deepseek-v2-lite-eagle3",
                          "--gpu", "h200-nvl", "--scenario", str(ROOT / "scenarios" / "kimi_k2_tp8_draft.yaml")],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode != 0 and "Traceback" not in out.stderr and not out.stdout.strip()
    assert "the 'not carried' prediction prices on the profile's own GPU h200-sxm" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args, says", [
    (["--profile", "sglang-0.5.15-h200-llama-3.1-8b-eagle3"], "it was measured on sglang, the scenario's engine is vllm"),
    (["--profile", "vllm-0.26.0-h200-qwen3-30b-a3b-eagle3"], "is of another family of layers"),
    (["--gpu", "h200-sxm"], "runs measured on h100-sxm, not --gpu h200-sxm"),
    (["data/engine_runs/h100_sglang_0.5.15_requests/e2e_2026-12-07.jsonl.gz"], "runs of sglang, the scenario's engine is vllm"),
    (["--scenario", "scenarios/llama8b_h200.yaml"], "serving_engine.kind live_loop has no engine profile to carry"),
    (["data/engine_runs/h100_vllm_0.26.0_calibrate/calibrate_2026-12-06.jsonl.gz"], "no closed batch of more than one"),
], ids=["other-engine-profile", "other-family-profile", "other-gpu", "other-engine-runs", "live-loop", "no-runs"])
def test_the_carry_bench_refuses_a_question_its_runs_do_not_ask_in_one_line(args, says):
    """A helper found bench_engine_carry priced these anyway: a --profile the scenario cannot use was swapped for a
    shipped one silently (its 'carried' column then the H100 profile on its own runs), runs of another GPU or engine
    were priced as the --gpu's, a live-loop scenario and a file of no closed batch ended in tracebacks."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_engine_carry.py"), *args],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode != 0 and "Traceback" not in out.stderr and not out.stdout.strip()
    assert says in out.stderr and len(out.stderr.strip().splitlines()) == 1
