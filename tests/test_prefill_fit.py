"""The engine's own prefill (issue 45): vLLM's chunk schedule, the fit of runs of the prefill alone, the
profile that carries it and the serving DES that prices a closed batch's prefill from it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.engines.profile import PrefillFit
from simulator.evidence.prefill_fit import PrefillRun, chunk_plan, fit_prefill, predict_us, token_pairs

ROOT = Path(__file__).resolve().parents[1]


def test_the_chunk_plan_is_vllms_first_come_first_served_schedule():
    # 3 prompts of 5 tokens, 4 a step: the first cut after 4, its last token first in the next step
    assert chunk_plan(3, 5, 4) == [[(4, 0)], [(1, 4), (3, 0)], [(2, 3), (2, 0)], [(3, 2)]]
    assert chunk_plan(2, 3, 100) == [[(3, 0), (3, 0)]]
    plan = chunk_plan(7, 1000, 2048)
    assert sum(n for s in plan for n, _ in s) == 7000 and all(sum(n for n, _ in s) <= 2048 for s in plan)
    assert len(plan) == -(-7000 // 2048)
    with pytest.raises(ValueError, match="each at least 1"):
        chunk_plan(0, 5, 4)


def test_token_pairs_count_the_causal_attention():
    # 3 new tokens after 2 cached: they attend 3, 4 and 5 tokens
    assert token_pairs([(3, 2)]) == 3 + 4 + 5
    # one prompt in two chunks computes the pairs of the prompt in one
    assert token_pairs([(4, 0)]) + token_pairs([(6, 4)]) == token_pairs([(10, 0)]) == 55


def _fit(spec=False, **kw) -> PrefillFit:
    base = dict(speculative=spec, per_run_us=3000.0, per_step_us=800.0, per_token_us=20.0, per_token_pair_us=6e-4,
                max_num_batched_tokens=4096, num_runs=9, batch_sizes=[1], prompt_lens=[1],
                median_abs_error_frac=0.0, max_abs_error_frac=0.0)
    return PrefillFit(**{**base, **kw})


def test_the_fit_recovers_the_coefficients_of_runs_that_follow_its_form():
    truth = [_fit(False), _fit(True, per_run_us=0.0, per_step_us=5000.0, per_token_us=24.0)]
    runs = [PrefillRun(f.speculative, b, p, 4096, predict_us(f, b, p))
            for f in truth for b in (1, 2, 8, 24) for p in (512, 2048, 6144)]
    got = fit_prefill(runs)
    assert [g.speculative for g in got] == [False, True]
    for g, t in zip(got, truth):
        for name in ("per_run_us", "per_step_us", "per_token_us", "per_token_pair_us"):
            assert getattr(g, name) == pytest.approx(getattr(t, name), rel=1e-6, abs=1e-6), name
        assert g.max_abs_error_frac < 1e-9 and g.num_runs == 12 and g.batch_sizes == [1, 2, 8, 24]


def test_the_fit_recovers_a_graph_edge_from_runs_on_both_sides_of_it():
    """vLLM runs a step of at most its largest CUDA-graph capture size in a graph and a larger one eagerly:
    runs made by the form with a graph edge at 512 tokens and eager_step_us 60 ms (a short eager step bound
    by the host, a long one by its tokens) give the five coefficients back; runs of one side only, or of
    processes without the edge, are fitted by the four alone."""
    truth = _fit(True, per_run_us=0.0, per_step_us=20_000.0, per_token_us=14.0, per_token_pair_us=1e-4,
                 graph_max_tokens=512, eager_step_us=60_000.0)
    grid = [(b, p) for b in (1, 2, 8) for p in (256, 512, 2048)] + [(16, 1024)]
    runs = [PrefillRun(True, b, p, 4096, predict_us(truth, b, p), 512) for b, p in grid]
    (got,) = fit_prefill(runs)
    assert got.graph_max_tokens == 512 and got.max_abs_error_frac < 1e-6
    for name in ("per_step_us", "per_token_us", "eager_step_us"):
        assert getattr(got, name) == pytest.approx(getattr(truth, name), rel=1e-4), name
    # a step of 2048 tokens is bound by the host (60 ms), one of 16,384 by its tokens
    assert predict_us(truth, 1, 2048) == pytest.approx(20_000 + 60_000)
    assert truth.step_prefill_us(16384, 0.0) == pytest.approx(14.0 * 16384)
    assert truth.step_prefill_us(256, 0.0, step_tokens=600) == 60_000.0  # decode tokens push the step past the edge
    graphed = [PrefillRun(True, b, p, 4096, predict_us(truth, b, p), 512) for b, p in ((1, 128), (2, 128), (4, 128),
                                                                                       (1, 512))]
    assert fit_prefill(graphed)[0].graph_max_tokens == 0
    plain = [PrefillRun(True, r.batch_size, r.prompt_len, 4096, r.elapsed_us, 0) for r in runs]
    assert fit_prefill(plain)[0].eager_step_us == 0.0


def test_the_fit_closed_form_of_one_step():
    f = _fit()
    # one prompt of 1000 tokens in one step: per_run + per_step + 20 x 1000 + pairs x 6e-4
    assert predict_us(f, 1, 1000) == pytest.approx(3000 + 800 + 20_000 + 6e-4 * 1000 * 1001 / 2)


def test_too_few_runs_or_mixed_budgets_are_not_fitted():
    runs = [PrefillRun(False, 1, 512, 4096, 1e4)] * 3
    assert fit_prefill(runs) == []
    runs = [PrefillRun(False, b, 512, m, 1e4 * b) for b, m in ((1, 4096), (2, 4096), (4, 8192), (8, 8192))]
    with pytest.raises(ValueError, match="one engine setting a fit"):
        fit_prefill(runs)


def test_a_profile_holds_one_prefill_fit_of_each_kind():
    import json

    from pydantic import ValidationError

    from simulator.engines.profile import EngineProfile
    d = json.loads((ROOT / "data/engine_profiles/vllm-0.26.0-h100-llama-3.1-8b-eagle3.json").read_text())
    d["prefill"] = [d["prefill"][0], d["prefill"][0]]
    with pytest.raises(ValidationError, match="one fit without the draft and one with it at most"):
        EngineProfile.model_validate(d)


def test_the_catalog_names_the_gpu_cuda_reports():
    from simulator.hardware import default_catalog
    cat = default_catalog()
    assert cat.gpu_for_device("NVIDIA H100 80GB HBM3") == "h100-sxm"
    assert cat.gpu_for_device("NVIDIA H200") == "h200-sxm"
    assert cat.gpu_for_device("fake GPU") is None


def test_a_fake_calibration_with_a_prefill_grid_builds_a_profile_that_prices_the_fakes_prefill(tmp_path):
    """The fake engine's prefill step is 500 us + 0.05 us a token (0.06 with the draft), chunked at
    max_num_batched_tokens: the fits of the profile built from a calibration with a prefill grid recover
    it exactly (its prefill has no jitter), one fit without the draft and one with it."""
    from calibration.engines.backends.fake import FakeCosts
    from calibration.engines.build import build_profile
    from calibration.engines.campaign import run_queue
    from calibration.engines.plans import calibrate_plans
    from calibration.shapes import LLAMA_8B, eagle3_draft
    from calibration.engines.queue import write_queue

    plans = calibrate_plans(dict(engine="fake", target_config={}, draft_config={}), [2], [1, 2, 4, 8], [256, 1024],
                            0.7, timed_steps=8, repeats=1, prefill=([1, 3, 9], [512, 3000]))
    write_queue(plans, tmp_path / "q")
    pts = tmp_path / "points.jsonl"
    assert set(run_queue(tmp_path / "q", pts, deadline_s=600, log=lambda s: None).values()) == {"done"}
    prof = build_profile([pts], "fake-prefill", LLAMA_8B.model_dump(), eagle3_draft(LLAMA_8B).model_dump())
    assert prof.catalog_gpu is None  # "fake GPU" is in no catalog entry
    assert [f.speculative for f in prof.prefill] == [False, True]
    costs = FakeCosts()
    for f in prof.prefill:
        assert f.max_num_batched_tokens == 8192 and f.num_runs == 6
        assert f.per_step_us == pytest.approx(costs.prefill_step_us(0, f.speculative), rel=1e-6)
        assert f.per_token_us == pytest.approx(costs.prefill_step_us(1, f.speculative) - 500.0, rel=1e-6)
        assert f.per_run_us == pytest.approx(0.0, abs=1e-6) and f.per_token_pair_us == pytest.approx(0.0, abs=1e-9)
    assert any(n.startswith("prefill: fitted on 12 runs") for n in prof.notes)


def _h100_closed_batch(batch: int, prompt: int, output: int, *sets: str):
    from simulator.scenario import load_profile_for, load_scenario
    sc = load_scenario(ROOT / "scenarios" / "vllm_llama8b_h200.yaml", [
        "profile=h200", "serving_engine.engine_profile=vllm-0.26.0-h100-llama-3.1-8b-eagle3",
        "serving.arrivals.kind=closed_batch", f"serving.num_requests={batch}", "serving.input_len.kind=fixed",
        f"serving.input_len.tokens={prompt}", "serving.output_len.kind=fixed", f"serving.output_len.tokens={output}",
        *sets])
    return sc, load_profile_for(sc, base_dir=ROOT / "scenarios")[0]


@pytest.mark.parametrize("batch,prompt", [(1, 512), (3, 3000), (9, 3000)])
def test_the_serving_des_prices_a_closed_batchs_prefill_alone_as_the_engine_fit(batch, prompt):
    """A closed batch of B prompts of P tokens, one new token each: the DES's run takes per_run_us +
    the chunk plan's steps priced by the fit, exactly (the engine's chunk, 16384, where none is set)."""
    from simulator.engines.profile import EngineProfile
    from simulator.serving.run import run_serving
    prof = EngineProfile.model_validate_json(
        (ROOT / "data/engine_profiles/vllm-0.26.0-h100-llama-3.1-8b-eagle3.json").read_text())
    sc, op = _h100_closed_batch(batch, prompt, 1)
    for spec in (False, True):
        rec = run_serving(sc, op, speculative=spec)
        fit = next(f for f in prof.prefill if f.speculative == spec)
        assert float(np.max(rec.finish_us)) == pytest.approx(predict_us(fit, batch, prompt), rel=1e-9)
    # a chunk the scenario sets is the DES's, not the engine's: more steps, each per_step_us more
    sc, op = _h100_closed_batch(batch, prompt, 1, "serving.chunked_prefill_tokens=1024")
    rec = run_serving(sc, op, speculative=False)
    fit = next(f for f in prof.prefill if not f.speculative)
    chunked = fit.model_copy(update=dict(max_num_batched_tokens=1024))
    assert float(np.max(rec.finish_us)) == pytest.approx(predict_us(chunked, batch, prompt), rel=1e-9)


@pytest.mark.parametrize("value", ["abc", "16384", 16384.7, -1, 1 << 30, None])
def test_an_engine_lines_chunk_is_a_whole_number_in_range(value):
    from pydantic import ValidationError

    from calibration.engines.points import EngineLine
    line = dict(schema="engine_points/1", label="calibrate_s3", kind="engine", session="calibrate", num_steps=3,
                info={"max_num_batched_tokens": value}, startup_s=1.0, created_unix=1.0)
    if value is None:
        EngineLine.model_validate(line)  # not read: the prefill is not fitted (below)
        return
    with pytest.raises(ValidationError, match="info.max_num_batched_tokens .*a whole number 0..16777216"):
        EngineLine.model_validate(line)


def test_a_fit_out_of_range_is_left_out_with_a_note():
    runs = [PrefillRun(False, b, p, 4096, 1000.0 + 0 * b) for b in (1, 2) for p in (512, 1024)]  # time grows with nothing
    notes: list[str] = []
    assert fit_prefill(runs, notes) == []
    assert notes and notes[0].startswith("prefill without the draft not fitted: its 4 runs give per_token_us")


def test_a_profiles_chunk_is_not_below_its_batch_and_the_work_estimate_counts_the_chunks():
    import json

    from pydantic import ValidationError

    from simulator.engines.profile import EngineProfile
    from simulator.serving.run import estimate_serving
    d = json.loads((ROOT / "data/engine_profiles/vllm-0.26.0-h100-llama-3.1-8b-eagle3.json").read_text())
    d["prefill"][0]["max_num_batched_tokens"] = 16
    with pytest.raises(ValidationError, match=r"max_num_batched_tokens 16: below max_num_seqs 64"):
        EngineProfile.model_validate(d)
    coarse, _ = _h100_closed_batch(256, 65536, 64)
    fine, _ = _h100_closed_batch(256, 65536, 64, "serving.chunked_prefill_tokens=1")
    assert estimate_serving(fine)[0] > 1000 * estimate_serving(coarse)[0]


def test_a_prefill_riding_a_decode_step_in_one_forward_adds_what_the_forward_over_both_adds():
    """serving_engine.mixed_forward 'one': a 1,024-token prompt riding a verify of 64 tokens whose own forward
    took 6 ms adds per_token_us (1024 + 64) + pairs - 6 ms; a short chunk rides free (the decode's weight
    reads); apart (no decode forward given) it adds its own tokens' time."""
    fit = _fit(True, per_run_us=0.0, per_step_us=900.0, per_token_us=20.0, per_token_pair_us=1e-3)
    pairs = 1024 * 1025 / 2
    apart = fit.step_prefill_us(1024, pairs, 1024 + 64)
    assert apart == pytest.approx(20.0 * 1024 + 1e-3 * pairs)
    one = fit.step_prefill_us(1024, pairs, 1024 + 64, 0.0, 6_000.0)
    assert one == pytest.approx(20.0 * (1024 + 64) + 1e-3 * pairs - 6_000.0)
    assert fit.step_prefill_us(8, 36.0, 8 + 64, 0.0, 6_000.0) == 0.0
