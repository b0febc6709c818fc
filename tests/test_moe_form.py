"""The MoE target's fitted forward form (simulator.engines.forms), a profile whose speculative steps never
measured their host, and the `_uniform` label of a campaign's uniformly routed processes."""

import numpy as np
import pytest

from calibration.engines.build import label_variant
from simulator.engines.forms import experts_touched_frac, roofline
from simulator.engines.profile import EnginePoint, missing_fits
from simulator.evidence.engine_profile_fit import _fit_family

MOE = {"n_routed_experts": 128, "num_experts_per_tok": 8}


def test_experts_touched_is_the_occupancy_of_independent_tokens():
    assert experts_touched_frac({"hidden_size": 4096}, 16) is None  # a dense target
    assert experts_touched_frac(MOE, 1) == pytest.approx(8 / 128)
    assert experts_touched_frac(MOE, 4) == pytest.approx(1 - (120 / 128) ** 4)
    assert experts_touched_frac(MOE, 10_000) == pytest.approx(1.0)
    frac = experts_touched_frac(MOE, np.arange(1, 200))
    assert np.all(np.diff(frac) > 0)  # more tokens touch more experts, never past all of them


def test_an_moe_form_is_not_priced_without_the_experts_touched():
    p = {"weights_us": 100.0, "experts_us": 1000.0, "per_token_us": 1.0, "decode_us": 5.0}
    with pytest.raises(ValueError, match="experts"):
        roofline(p, 8, 8, 1024, "decode_us")
    dense = {k: v for k, v in p.items() if k != "experts_us"}
    assert roofline(dense, 8, 8, 1024, "decode_us") == pytest.approx(5.0 + (100.0 ** 4 + 8.0 ** 4) ** 0.25)


def test_the_moe_fit_recovers_known_costs_and_the_dense_one_cannot():
    """Points made by the MoE form itself (a baseline at batch 1-32, a verify of 4 tokens a request at batch
    1-32) give back their parameters, so a verify of 6 tokens a request, not among them, is priced exactly;
    the dense form, fitted on the same points, is off there."""
    truth = {"weights_us": 2500.0, "experts_us": 18000.0, "per_token_us": 0.05, "kv_us_per_token": 0.05,
             "multi_query_us_per_token": 0.0, "decode_us": 100.0, "verify_us": 450.0}

    def row(b, q):
        t = b * q
        us = float(roofline(truth, t, b, 1100.0, "decode_us" if q == 1 else "verify_us",
                            touched=experts_touched_frac(MOE, t)))
        return (t, b, 1100.0, us, "decode_us" if q == 1 else "verify_us", t)
    rows = [row(b, q) for q in (1, 4) for b in (1, 2, 4, 8, 16, 32)]
    moe = _fit_family(rows, ["decode_us", "verify_us"], True, True, moe_target=MOE)
    dense = _fit_family(rows, ["decode_us", "verify_us"], True, True)
    assert "experts_us" in moe.params and "experts_us" not in dense.params
    assert moe.max_abs_error_frac < 1e-3
    held = [row(b, 6) for b in (2, 4, 8)]
    for fit, bound in ((moe, 0.01), (dense, None)):
        errs = [abs(float(roofline(fit.params, t, b, c, off, touched=experts_touched_frac(MOE, n)
                                   if "experts_us" in fit.params else None)) / us - 1) for t, b, c, us, off, n in held]
        if bound is not None:
            assert max(errs) < bound
        else:
            assert max(errs) > 0.05


def _point(k, host):
    return EnginePoint(num_steps=k, batch_size=4, prompt_len=1024, acceptance_rate=0.7, context_len=1100.0,
                       step_us=10_000.0, mean_accept_length=2.0 if k else 1.0, accept_length_counts=[1] * (k + 1),
                       host_busy_us=host)


def test_a_profile_whose_speculative_steps_never_measured_their_host_asks_no_speculative_host_fit():
    fits = {n: None for n in ("target_forward_us", "sample_us", "host_busy_us_baseline", "draft_us",
                              "propose_overhead_us", "other_gpu_us")}
    gpu_bound = [_point(0, 900.0), _point(3, None)]
    assert missing_fits(gpu_bound, fits) == []
    host_paced = [_point(0, 900.0), _point(3, 1200.0)]
    assert missing_fits(host_paced, fits) == ["host_busy_us"]


def test_a_uniformly_routed_process_label_is_of_the_chain_variant():
    assert label_variant("calibrate_s3_moe_uniform") == label_variant("calibrate_s3_moe") == (1, None, True)
    assert label_variant("calibrate_s5_uniform") == (1, None, True)
    assert label_variant("calibrate_s3_uniform_x") is None


def test_the_uniform_routing_profile_prices_its_speculative_host_from_its_baseline():
    """The shipped vLLM H100 MoE profile of uniform routing: every speculative step GPU-bound, so no speculative
    host fit; its host work at num_steps 3 and 5 is the baseline's at the same batch, said in its sources."""
    from simulator.costs.engine_native import NativeCosts
    from simulator.engines.profile import load_engine_profile
    prof = load_engine_profile("vllm-0.26.0-h100-qwen3-30b-a3b-eagle3-uniform-routing")
    assert "host_busy_us" not in prof.fits and "experts_us" in prof.fits["target_forward_us"].params
    costs = NativeCosts(prof)
    base = costs.host_us(8, 0, 1100.0)
    assert costs.host_us(8, 3, 1100.0) == costs.host_us(8, 5, 1100.0) == base > 0
    assert any("no speculative step measured its host" in s for s in costs.sources)
    gpu, host = costs.step_us(8, 5, 1100.0)
    assert gpu > host  # GPU-bound, as measured


def test_a_profile_whose_dense_target_carries_an_moe_parameter_is_refused():
    import json

    from simulator.engines.profile import EngineProfile
    from simulator.profile import data_dir
    raw = json.loads((data_dir() / "engine_profiles" / "vllm-0.26.0-h100-llama-3.1-8b-eagle3.json").read_text())
    raw["fits"]["target_forward_us"]["params"]["experts_us"] = 1000.0
    with pytest.raises(ValueError, match="experts_us is an MoE target forward's parameter"):
        EngineProfile.model_validate(raw)


def test_the_moe_form_prices_more_verify_tokens_no_cheaper():
    """Off the measured points (batch 64, num_steps 1-8) the uniform-routing profile's target forward grows with
    the verify's tokens at every batch."""
    from simulator.costs.engine_native import NativeCosts
    from simulator.engines.profile import load_engine_profile
    costs = NativeCosts(load_engine_profile("vllm-0.26.0-h100-qwen3-30b-a3b-eagle3-uniform-routing"))
    for b in (1, 3, 8, 24, 64):
        us = [costs.target_forward_us(b, k, 1100.0) for k in range(1, 9)]
        assert all(y >= x * 0.999 for x, y in zip(us, us[1:])), (b, us)


RUNS = "data/engine_runs/"
DUMMY = RUNS + "h100_vllm_0.26.0_moe/moe_calibrate_2026-12-07.jsonl.gz"
UNIFORM = RUNS + "h100_vllm_0.26.0_moe_uniform/moe_uniform_calibrate_2026-12-07.jsonl.gz"


def _shapes():
    from calibration.engines.plans import model_configs
    from simulator.model_config import shape_fields_from_hf_config
    t, d = model_configs("qwen3-30b-a3b", "eagle3-qwen3-30b-a3b")
    return shape_fields_from_hf_config(t)[0], shape_fields_from_hf_config(d)[0]


def test_processes_of_one_num_steps_routed_otherwise_are_not_merged():
    from pathlib import Path

    from calibration.engines.build import build_profile
    files = [Path(DUMMY), Path(UNIFORM)]
    with pytest.raises(ValueError, match="calibrate_s3_moe_uniform .experts drawn uniformly. and calibrate_s3_moe "):
        build_profile(files, "mixed", *_shapes())
    assert {p.num_steps for p in build_profile(files, "one", *_shapes(), exclude_labels=("calibrate_s3_moe",)).points} \
        == {0, 3, 5}


def test_a_calibration_process_of_a_label_no_pattern_reads_is_said_to_be_left_out(tmp_path):
    import gzip
    from pathlib import Path

    from calibration.engines.build import build_profile
    odd = tmp_path / "odd.jsonl.gz"
    text = gzip.open(UNIFORM, "rt").read().replace('"calibrate_s5_moe_uniform"', '"calibrate_s5_uniform_uniform"')
    odd.write_bytes(gzip.compress(text.encode()))
    notes: list[str] = []
    prof = build_profile([Path(DUMMY), odd], "odd", *_shapes(), exclude_labels=("calibrate_s3_moe",), notes=notes)
    assert {p.num_steps for p in prof.points} == {0, 3}
    assert any("calibrate_s5_uniform_uniform left out: no calibration label" in n for n in notes)


@pytest.mark.parametrize("param", ["weights_us", "per_token_us", "decode_us", "verify_us"])
def test_a_roofline_fit_lacking_a_parameter_is_refused(param):
    import json

    from simulator.engines.profile import EngineProfile
    from simulator.profile import data_dir
    raw = json.loads((data_dir() / "engine_profiles" / "vllm-0.26.0-h100-qwen3-30b-a3b-eagle3-uniform-routing.json")
                     .read_text())
    del raw["fits"]["target_forward_us"]["params"][param]
    with pytest.raises(ValueError, match=f"fits.target_forward_us: lacks {param}"):
        EngineProfile.model_validate(raw)


def test_a_campaign_that_makes_a_plan_invalid_is_refused_before_any_file_is_written(tmp_path, monkeypatch):
    import calibration.engines.queue as q
    from simulator.inputs import UserInputError
    (tmp_path / "bad.yaml").write_text(
        "description: x\nparts:\n  - engine: vllm\n    requests: {num_steps: [3], batch_sizes: [4], prompt_lens: [1024], "
        "acceptances: [0.6], more_max_tokens: [], concurrencies: [], request_rates: [4]}\n"
        "    points_set: {warmup_run_tokens: 32}\n")
    monkeypatch.setattr(q, "CAMPAIGNS_DIR", tmp_path)
    with pytest.raises(UserInputError, match="warmup_run_tokens: not taken by workload poisson"):
        q.write_queue(q.queue_plans("bad"), tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("experts_us", [1e7, 0.0])
def test_a_fit_far_from_its_own_points_is_refused(experts_us):
    """A hand-set experts_us within its bounds (the largest, or none) prices the profile's own points far off its
    measured times: refused in one line, not priced into a speedup of 0.003x."""
    import json

    from simulator.engines.profile import EngineProfile
    from simulator.profile import data_dir
    raw = json.loads((data_dir() / "engine_profiles" / "vllm-0.26.0-h100-qwen3-30b-a3b-eagle3-uniform-routing.json")
                     .read_text())
    raw["fits"]["target_forward_us"]["params"]["experts_us"] = experts_us
    with pytest.raises(ValueError, match="prices the profile's own points"):
        EngineProfile.model_validate(raw)
