"""Carrying a profile to another GPU (simulator.costs.transfer): the roofline's laws, exactly."""

from __future__ import annotations

import pytest

from simulator.costs.forward import CostModel
from simulator.costs.lookup import LatencyLookup
from simulator.costs.ops import elementwise, gemm
from simulator.costs.transfer import carry_profile, transfer_ratio
from simulator.profile import GpuRates, ProfileTransfer, load_profile, resolve_profile_path
from simulator.scenario import load_scenario
from simulator.simulate import simulate

# H200 SXM datasheet figures (NVIDIA H200 Tensor Core GPU datasheet: 4.8 TB/s; 989 / 1,979 TFLOP/s
# dense bf16 / fp8, half the sparse figures it prints).
H200 = GpuRates(gpu="h200-sxm", memory_bandwidth_gb_per_s=4800, bf16_dense_tflops=989, fp8_dense_tflops=1979,
                source="NVIDIA H200 datasheet (dense = sparse / 2)")


def virtual(rates: GpuRates, bandwidth: float, compute: float) -> GpuRates:
    return rates.model_copy(update=dict(gpu=f"{rates.gpu} x{bandwidth:g}/x{compute:g}",
                                        memory_bandwidth_gb_per_s=rates.memory_bandwidth_gb_per_s * bandwidth,
                                        bf16_dense_tflops=rates.bf16_dense_tflops * compute,
                                        fp8_dense_tflops=rates.fp8_dense_tflops * compute))


def test_ratio_follows_the_bound_of_each_op():
    t = ProfileTransfer(measured_on=H200, carried_to=virtual(H200, 0.5, 1.0))
    weights = gemm("gemm", 1, 8192, 28672, 2.0)        # 470 MB of weights at 1 token: memory-bound
    tiny = elementwise("add", 1, 64)                    # a few hundred bytes: floor-bound
    assert transfer_ratio([weights], t, kernel_floor_us=2.0) == pytest.approx(2.0, rel=1e-12)
    assert transfer_ratio([tiny], t, kernel_floor_us=2.0) == 1.0
    t = ProfileTransfer(measured_on=H200, carried_to=virtual(H200, 1.0, 0.5))
    big = gemm("gemm", 8192, 8192, 8192, 2.0)           # 8192 tokens: compute-bound
    assert transfer_ratio([big], t, kernel_floor_us=2.0) == pytest.approx(2.0, rel=1e-12)
    assert transfer_ratio([weights], t, kernel_floor_us=2.0) == pytest.approx(1.0, rel=1e-12)


def _shipped(name="h200"):
    return load_profile(resolve_profile_path(name))


def test_carrying_to_the_same_gpu_changes_nothing():
    prof = _shipped()
    assert carry_profile(prof, H200, H200) is prof
    sc = load_scenario("scenarios/llama8b_h200.yaml", ["fidelity.num_cycles=200"])
    same = prof.model_copy(update={"transfer": ProfileTransfer(measured_on=H200, carried_to=H200)})
    a, _ = simulate(sc, prof)
    b, _ = simulate(sc, same)
    assert b.tok_per_s == pytest.approx(a.tok_per_s, rel=1e-12)
    assert b.baseline_tok_per_s == pytest.approx(a.baseline_tok_per_s, rel=1e-12)


@pytest.mark.parametrize("scale", [0.5, 2.0])
def test_halving_or_doubling_an_h200_moves_each_op_as_its_roofline_says(scale):
    prof = _shipped()
    sc = load_scenario("scenarios/llama8b_h200.yaml", ["costs.source=per_op"])
    carried = carry_profile(prof, H200, virtual(H200, scale, scale))
    base, moved = CostModel(sc, prof), CostModel(sc, carried)
    ops_checked = 0
    for fb, fm in zip(base.cycle_forwards(1), moved.cycle_forwards(1)):
        for kb, km in zip(fb.kernels, fm.kernels):
            if kb.category == "comm":
                assert km.gpu_us == kb.gpu_us  # collectives are not carried
                continue
            # floor-bound: unchanged; bound by bandwidth or rate: x 1/scale; in between never outside
            lo, hi = sorted((kb.gpu_us, kb.gpu_us / scale))
            assert lo * (1 - 1e-9) <= km.gpu_us <= hi * (1 + 1e-9)
            ops_checked += 1
    assert ops_checked > 20
    lookup = LatencyLookup(carried, "graph")
    assert any("carried from h200-sxm" in n for n in lookup.notes)


def test_a_carried_profile_is_carried_once():
    prof = carry_profile(_shipped(), H200, virtual(H200, 0.5, 0.5))
    with pytest.raises(ValueError, match="already carried"):
        carry_profile(prof, H200, H200)


@pytest.mark.parametrize("scale", [0.5, 2.0])
def test_whole_forward_tables_move_by_their_ops_roofline_ratio(scale):
    prof = _shipped()
    sc = load_scenario("scenarios/llama8b_h200.yaml")  # whole_forward costs
    carried = carry_profile(prof, H200, virtual(H200, scale, scale))
    base, moved = CostModel(sc, prof).verify_forward(), CostModel(sc, carried).verify_forward()
    lo, hi = sorted((base.gpu_us, base.gpu_us / scale))
    assert lo < moved.gpu_us < hi  # mostly memory-bound at batch 1: close to, but not quite, x 1/scale
    assert abs(moved.gpu_us / base.gpu_us - 1 / scale) < 0.25 * abs(1 / scale - 1)


# ---- the scenario's hardware section ------------------------------------------------------------
def _run(*sets: str):
    from typer.testing import CliRunner

    from simulator.cli import app
    args = ["simulate", "scenarios/llama8b_h200.yaml", "--set", "fidelity.num_cycles=50"]
    for s in sets:
        args += ["--set", s]
    return CliRunner().invoke(app, args)


def test_naming_the_profiles_own_gpu_changes_nothing_and_another_gpu_is_carried():
    sc = load_scenario("scenarios/llama8b_h200.yaml", ["fidelity.num_cycles=50"])
    own = load_scenario("scenarios/llama8b_h200.yaml", ["fidelity.num_cycles=50", "hardware.gpu=h200-sxm"])
    h100 = load_scenario("scenarios/llama8b_h200.yaml", ["fidelity.num_cycles=50", "hardware.box=hgx-h100-8gpu"])
    from simulator.scenario import load_profile_for
    base, _ = load_profile_for(sc)
    assert load_profile_for(own)[0] is not None and load_profile_for(own)[0].transfer is None
    carried, _ = load_profile_for(h100)
    assert carried.transfer.carried_to.gpu == "h100-sxm" and carried.transfer.measured_on.gpu == "h200-sxm"
    a, _ = simulate(sc, base)
    b, _ = simulate(h100, carried)
    # batch-1 decode is memory-bound: the baseline moves by about the bandwidth ratio 3350 / 4800
    assert 3350 / 4800 * 0.95 < b.baseline_tok_per_s / a.baseline_tok_per_s < 1.0
    res = _run("hardware.gpu=h100-sxm")
    assert res.exit_code == 0 and "carried from h200-sxm to h100-sxm" in res.output


@pytest.mark.parametrize("sets, words", [
    (["hardware.gpu=h900"], "unknown GPU 'h900'"),
    (["hardware.box=hgx-h900"], "unknown box 'hgx-h900'"),
    (["hardware.box=hgx-h100-8gpu", "hardware.gpu=b200"], "carries h100-sxm, not hardware.gpu b200"),
    (["hardware.box=single-h200", "tp_size=2", "placement=shared_tp"], "needs 2 GPUs; box single-h200 has 1"),
    (["hardware.box=single-h200", "placement=tp1_dedicated"], "a dedicated draft GPU needs 2 GPUs"),
    (["hardware.gpu=a100-sxm-80gb", "target.precision.routed_experts=nvfp4"], "nvfp4 needs fp4 tensor cores"),
    (["hardware.gpu=a100-sxm-80gb", "target.precision.attention=mxfp4"], "mxfp4 needs a GPU with fp8 or fp4"),
])
def test_bad_hardware_is_one_line_exit_2(sets, words):
    res = _run(*sets)
    assert res.exit_code == 2, res.output
    assert words in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) <= 2  # one message (rich may wrap it once)


def test_mxfp4_runs_on_hopper_and_a_profile_without_its_gpu_cannot_be_carried(tmp_path):
    assert _run("hardware.gpu=h100-sxm", "target.precision.attention=mxfp4").exit_code == 0
    import json
    data = json.loads(open(resolve_profile_path("h200")).read())
    data["hardware"].pop("catalog_gpu")
    (tmp_path / "p.json").write_text(json.dumps(data))
    from typer.testing import CliRunner

    from simulator.cli import app
    res = CliRunner().invoke(app, ["simulate", "scenarios/llama8b_h200.yaml", "--profile", str(tmp_path / "p.json"),
                                   "--set", "hardware.gpu=h100-sxm"])
    assert res.exit_code == 2 and "hardware.catalog_gpu" in res.output
