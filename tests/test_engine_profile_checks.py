"""An engine profile a user edited or measured badly is refused in one line, not priced: every fitted form against
the profile's own points (simulator.engines.forms.check_fits), every point's parts against its step
(EnginePoint._consistent)."""

import json

import pytest

from simulator.engines.profile import EngineProfile
from simulator.profile import data_dir

PROFILE = "vllm-0.26.0-h200-llama-3.1-8b-eagle3.json"


def _raw(name: str = PROFILE) -> dict:
    return json.loads((data_dir() / "engine_profiles" / name).read_text())


def test_every_shipped_profile_passes_its_own_checks():
    for path in sorted((data_dir() / "engine_profiles").glob("*.json")):
        EngineProfile.model_validate(json.loads(path.read_text()))


@pytest.mark.parametrize("fit, param, value", [
    ("draft_us", "weights_us", 1e7), ("sample_us", "spec_us", 1e7), ("other_gpu_us", "c0_us", 1e7),
    ("propose_overhead_us", "c0_us", 1e7), ("host_busy_us", "c0_us", 1e5), ("host_busy_us_baseline", "c0_us", 1e5)])
def test_a_fit_far_above_its_own_points_is_refused(fit, param, value):
    raw = _raw()
    raw["fits"][fit]["params"][param] = value
    with pytest.raises(ValueError, match=f"fits.{fit}: prices the profile's own points"):
        EngineProfile.model_validate(raw)


def test_a_roofline_fit_far_below_its_own_points_is_refused():
    raw = _raw()
    raw["fits"]["draft_us"]["params"] = {k: v / 100 for k, v in raw["fits"]["draft_us"]["params"].items()}
    with pytest.raises(ValueError, match="fits.draft_us: prices the profile's own points 0.0"):
        EngineProfile.model_validate(raw)


def test_a_host_ten_times_its_points_is_refused():
    raw = _raw()
    raw["fits"]["host_busy_us"]["params"] = {k: 10 * v for k, v in raw["fits"]["host_busy_us"]["params"].items()}
    with pytest.raises(ValueError, match="fits.host_busy_us"):
        EngineProfile.model_validate(raw)


def _first_spec(raw: dict) -> dict:
    return next(p for p in raw["points"] if p["num_steps"] and p.get("target_forward_us"))


@pytest.mark.parametrize("field, value, says", [
    ("target_forward_us", lambda p: 100 * p["target_forward_us"], "target_forward_us .*above the step"),
    ("host_busy_us", lambda p: 1e8, "host_busy_us .*above the step"),
    ("accept_length_counts", lambda p: [-5, 3] + [0] * p["num_steps"], "greater than or equal to 0"),
    ("accept_length_counts", lambda p: [1] * (p["num_steps"] + 3), "counts, num_steps"),
    ("mean_accept_length", lambda p: p["num_steps"] + 2, "at most num_steps"),
    ("context_len", lambda p: 5, "below prompt_len")])
def test_a_point_at_odds_with_itself_is_refused(field, value, says):
    raw = _raw()
    pt = _first_spec(raw)
    pt[field] = value(pt)
    with pytest.raises(ValueError, match=says):
        EngineProfile.model_validate(raw)


# ---- points files: an engine line's settings, a point's engine, a run's requests ------------------------------------
E2E = "h100_vllm_0.26.0_e2e/e2e_2026-12-06.jsonl.gz"
CALIBRATE = "h100_vllm_0.26.0_calibrate/calibrate_2026-12-06.jsonl.gz"


def _lines(name: str = E2E, n: int = 8) -> list[dict]:
    import gzip
    with gzip.open(_runs() / name, "rt") as f:
        return [json.loads(next(f)) for _ in range(n)]


def _runs():
    from pathlib import Path
    return Path(__file__).resolve().parents[1] / "data" / "engine_runs"


def _read(tmp_path, lines: list[dict]):
    from calibration.engines.points import read_points_file
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps(ln) + "\n" for ln in lines))
    return read_points_file(path)


def test_the_untouched_lines_read(tmp_path):
    assert len(_read(tmp_path, _lines())) == 8


@pytest.mark.parametrize("key, value, says", [
    ("gpu_name", 5, "gpu_name: Input should be a valid string"),
    ("cudagraph_capture_sizes", "abc", "cudagraph_capture_sizes: Input should be a valid list"),
    ("variant", "x", "variant: Input should be a valid dictionary"),
    ("model", {"target": "llama"}, "model.target: Input should be a valid dictionary"),
    ("notes", 5, "notes: Input should be a valid list"),
    ("engine", "foo", "engine: Input should be")])
def test_an_engine_lines_settings_of_the_wrong_type_are_one_line(tmp_path, key, value, says):
    from simulator.inputs import UserInputError
    lines = _lines()
    eng = next(ln for ln in lines if ln["kind"] == "engine")
    eng["info"][key] = value
    with pytest.raises(UserInputError, match=f"p.jsonl:{lines.index(eng) + 1}: info: {says}"):
        _read(tmp_path, lines)


def test_a_point_of_another_engine_than_its_process_is_refused(tmp_path):
    from simulator.inputs import UserInputError
    lines = _lines()
    next(ln for ln in lines if ln["kind"] == "engine")["info"]["engine"] = "sglang"
    with pytest.raises(UserInputError, match="engine 'vllm' in process .* info.engine 'sglang'"):
        _read(tmp_path, lines)
    lines[-1]["engine"] = "foo"
    with pytest.raises(UserInputError, match="engine: Input should be"):
        _read(tmp_path, lines[-1:])


def test_a_run_at_odds_with_its_point_is_refused(tmp_path):
    from simulator.inputs import UserInputError
    lines = _lines()
    pt = next(ln for ln in lines if ln["kind"] == "point" and ln["point"]["workload"] == "closed_batch")
    late = json.loads(json.dumps(lines))
    pt["point"]["batch_size"] += 1
    with pytest.raises(UserInputError, match="requests, the point's batch_size says"):
        _read(tmp_path, lines)
    q = next(ln for ln in late if ln["kind"] == "point" and ln["point"]["workload"] == "closed_batch")
    r = q["point"]["repeats"][0]["requests"][0]
    r["token_times_us"] = [t * 100 for t in r["token_times_us"]]
    r.update(ttft_us=r["token_times_us"][0] - r["start_us"], finish_us=r["token_times_us"][-1])
    with pytest.raises(UserInputError, match="after the run's elapsed_us"):
        _read(tmp_path, late)


def _all_tokens_in_the_last_step(run: dict) -> None:
    total = sum(x["tokens"] for x in run["steps"])
    for x in run["steps"]:
        x["tokens"] = 0
    run["steps"][-1]["tokens"] = total


def _closed_run(lines: list[dict]) -> dict:
    pt = next(ln for ln in lines if ln["kind"] == "point" and ln["point"]["workload"] == "closed_batch"
              and ln["point"]["num_steps"])
    return pt["point"]["repeats"][0]


@pytest.mark.parametrize("edit, says", [
    (lambda r: r["requests"][0].update(ttft_us=r["requests"][0]["ttft_us"] * 2 + 1), "ttft_us .* is not its token times'"),
    (lambda r: r["requests"][0].update(finish_us=None), "finish_us None is not its token times'"),
    (lambda r: r.update(num_engine_steps=len(r["steps"]) + 1), "num_engine_steps .* past the run's"),
    (lambda r: r["steps"][-1].update(tokens=r["steps"][-1]["tokens"] + 5), "steps: their tokens sum to"),
    (lambda r: r.update(accept_length_counts=[0] * len(r["accept_length_counts"])), "accept_length_counts are all 0"),
    (lambda r: r.update(accept_length_counts=[0] * (len(r["accept_length_counts"]) - 1) + [10 ** 12]),
     "accept_length_counts sum to .* past the requests'"),
    (lambda r: r["steps"][5].update(emitted=9999), r"steps\[5\]: 9999 requests emitting"),
    (lambda r: r.update(elapsed_us=1e12), "elapsed_us 1e\\+12: the run lasts until its last step"),
    (lambda r: _all_tokens_in_the_last_step(r), r"steps\[\d+\]: 0 tokens to \d+ requests")])
def test_a_request_run_at_odds_with_its_own_steps_is_refused(tmp_path, edit, says):
    from simulator.inputs import UserInputError
    lines = _lines()
    edit(_closed_run(lines))
    with pytest.raises(UserInputError, match=says):
        _read(tmp_path, lines)


def test_a_request_without_its_tokens_or_a_closed_batch_sent_at_arrival_is_refused(tmp_path):
    """A run ends when each request has max_tokens tokens (one with none made the bench's records a traceback), and
    `sent` is a Poisson run's word."""
    from simulator.inputs import UserInputError
    lines = _lines()
    run = _closed_run(lines)
    q = run["requests"][0]
    gone = q["num_tokens"]
    q.update(num_tokens=0, token_times_us=[], ttft_us=None, finish_us=None)
    run["num_tokens"] -= gone
    for x in run["steps"]:  # the steps' tokens less the request's, each step keeping one a request it emitted to
        take = min(x["tokens"] - x["emitted"], gone)
        x["tokens"] -= take
        gone -= take
    assert gone == 0
    with pytest.raises(UserInputError, match="p.jsonl:2: point.repeats.0: accept_length_counts sum to .* past"):
        _read(tmp_path, lines)
    lines = _lines()
    next(ln for ln in lines if ln["kind"] == "point")["point"]["max_tokens"] += 1
    with pytest.raises(UserInputError, match="a request has other than max_tokens"):
        _read(tmp_path, lines)
    lines = _lines()
    next(ln for ln in lines if ln["kind"] == "point")["point"]["sent"] = "arrival"
    with pytest.raises(UserInputError, match="sent: 'arrival' is a Poisson run's"):
        _read(tmp_path, lines)


def test_a_step_decoding_more_requests_than_the_engines_max_num_seqs_is_refused(tmp_path):
    """An engine line's max_num_seqs bounds the requests one step emits to (read as it stood, a max_num_seqs of 1
    priced all but one of a batch's requests as queued)."""
    from simulator.inputs import UserInputError
    lines = _lines()
    assert lines[0]["info"]["max_num_seqs"] >= 4
    lines[0]["info"]["max_num_seqs"] = 1
    with pytest.raises(UserInputError, match="p.jsonl:2: a step of point .* emitted to \\d+ requests, past its process's "
                                             "info.max_num_seqs 1"):
        _read(tmp_path, lines)


def test_an_engine_line_without_its_engine_and_a_point_of_another_session_are_refused(tmp_path):
    from simulator.inputs import UserInputError
    lines = _lines()
    del lines[0]["info"]["engine"]
    with pytest.raises(UserInputError, match="p.jsonl:1: info.engine missing"):
        _read(tmp_path, lines)
    lines = _lines()
    lines[1]["session"] = "calibrate" if lines[0]["session"] == "live" else "live"
    with pytest.raises(UserInputError, match="p.jsonl:2: session .* whose engine line says session"):
        _read(tmp_path, lines)


def test_counts_far_from_the_points_acceptance_rate_are_refused(tmp_path):
    """A speculative point's accept-length counts are held to its acceptance_rate, loosely (0.5-2x the i.i.d.
    mean accept length, from 20 counted): a rate written for another point's counts is refused."""
    from simulator.inputs import UserInputError
    for name in (E2E, CALIBRATE):
        lines = _lines(name, 2)
        pt = lines[1]["point"]
        assert pt["num_steps"] >= 2 and sum(pt["repeats"][0]["accept_length_counts"]) >= 20
        _read(tmp_path, lines)  # as measured: read
        pt["acceptance_rate"] = 0.01  # the i.i.d. accept length ~1.01, the counts' mean over 2
        with pytest.raises(UserInputError, match="p.jsonl:2: .*accept_length_counts' mean is outside 0.5-2x the "
                                                 "i.i.d. accept length of acceptance_rate 0.01"):
            _read(tmp_path, lines)


def test_a_point_without_its_process_engine_line_is_refused(tmp_path):
    """A point is priced from its process's engine line (engine, settings, model): one without it is refused."""
    from simulator.inputs import UserInputError
    lines = _lines()
    with pytest.raises(UserInputError, match="p.jsonl:1: a point of process .* before any engine line of it"):
        _read(tmp_path, lines[1:])
    with pytest.raises(UserInputError, match="p.jsonl:1: a point of process"):
        _read(tmp_path, [lines[1], lines[0]])


def test_a_context_past_the_targets_positions_is_refused(tmp_path):
    from simulator.inputs import UserInputError
    lines = _lines()
    assert lines[0]["info"]["model"]["target"]["max_position_embeddings"] == 131072
    lines[0]["info"]["model"]["target"]["max_position_embeddings"] = 1000
    with pytest.raises(UserInputError, match="p.jsonl:2: a context of .* tokens in point .* max_position_embeddings 1000"):
        _read(tmp_path, lines)
    for bad in (0, "lots", 100.0):
        lines[0]["info"]["model"]["target"]["max_position_embeddings"] = bad
        with pytest.raises(UserInputError, match="p.jsonl:1: info.model.target.max_position_embeddings .* a whole number"):
            _read(tmp_path, lines)
    steady = _lines(CALIBRATE, 2)
    steady[1]["point"]["repeats"][0]["context_len"] = 2.0 ** 27
    with pytest.raises(UserInputError, match="p.jsonl:2: a context of 1.34218e\\+08 tokens"):
        _read(tmp_path, steady)


@pytest.mark.parametrize("update, says", [
    ({"per_token_us": 1e5}, "per_token_us 100000: above a whole decode step"),
    ({"per_token_us": 1e-3, "per_step_us": 0.0, "per_run_us": 0.0, "per_token_pair_us": 0.0, "eager_step_us": 0.0},
     "a step of its smallest prompt .* below 0.1x a decode step")])
def test_a_prefill_fit_at_odds_with_the_profiles_decode_is_refused(update, says):
    raw = _raw("vllm-0.26.0-h100-llama-3.1-8b-eagle3.json")
    raw["prefill"][0].update(update)
    with pytest.raises(ValueError, match=says):
        EngineProfile.model_validate(raw)


def test_the_other_gpu_work_is_fitted_at_its_points_where_some_measured_zero():
    """The step's other GPU work (the GPU period less its timed parts) is 0 at some SGLang points; fitted on
    residuals relative to the measured times its form fell to 0.004x its points (the H200 profile, before); relative
    to its own price it sits at them. A form through points of no scatter is that line exactly."""
    import numpy as np

    from simulator.engines import forms
    from simulator.evidence.engine_profile_fit import _fit_linear
    prof = EngineProfile.model_validate(_raw("sglang-0.5.15-h200-llama-3.1-8b-eagle3.json"))
    fit = _fit_linear(prof.points, "other_gpu_us")
    b, k, y = (np.array([r[i] for r in forms.linear_rows(prof.points, "other_gpu_us")], float) for i in range(3))
    assert (y <= 1.0).sum() >= 10  # points that measured 0 (counted as 1 us)
    assert 0.5 < float(np.median(forms.linear_priced(fit.params, b, k) / y)) < 2.0
    exact = [p.model_copy(update={"other_gpu_us": 100.0 + 2.0 * p.batch_size + 0.5 * p.batch_size * p.num_steps})
             for p in prof.points if p.num_steps and p.gpu_bound]
    line = _fit_linear(exact, "other_gpu_us").params
    assert line == pytest.approx({"c0_us": 100.0, "per_request_us": 2.0, "per_draft_token_us": 0.5}, rel=1e-6)


def test_every_committed_points_file_and_serving_record_holds_the_checks():
    """The invariants above hold on what the engines measured: each committed points file reads, each serving
    record validates."""
    from calibration.engines.points import read_points_file
    from simulator.evidence.live_records import LiveServingRun
    files = sorted(_runs().glob("*/*.jsonl.gz"))
    assert len(files) > 20 and sum(len(read_points_file(f)) for f in files) > 2000
    serving = sorted((_runs().parent / "live" / "h200_serving").glob("*.json"))
    assert len(serving) == 8
    for f in serving:
        LiveServingRun.model_validate_json(f.read_text())
