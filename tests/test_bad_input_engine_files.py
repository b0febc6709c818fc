"""Bad engine-side files, each one line naming the file, line and field (issue 47's silent
acceptances and tracebacks): engine profiles read strictly, points files through the project's
JSON reader, queue plans, op tables whose axes the op is not looked up by.

The generated cases of the same families are kind 13 of the fuzz (tests/fuzz/gen_engine.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tests.fuzz.cases import base_profile, base_scenario, dump_json
from tests.fuzz.gen_engine import ENGINE_PROFILE, ENGINE_SCENARIO, FIVE_K
from tests.fuzz.running import request_points, run, write_scenario


@pytest.fixture(scope="module")
def points(tmp_path_factory) -> dict[str, Path]:
    """A fake engine's steady points (`calibrate engine --engine fake --few`) and request-level points."""
    d = tmp_path_factory.mktemp("points")
    code, out = run(d, "calibrate", "engine", "--engine", "fake", "--few", "--out", "ep.json", "--points", "pts.jsonl")
    assert code == 0, out
    return {"steady": d / "pts.jsonl", "request": request_points(d / "req.jsonl")}


def _simulate_with_profile(folder: Path, profile: dict | str) -> tuple[int, str]:
    (folder / "s.yaml").write_text(ENGINE_SCENARIO.read_text())
    (folder / "e.json").write_text(profile if isinstance(profile, str) else json.dumps(profile))
    return run(folder, "simulate", "s.yaml", "--set", "serving_engine.engine_profile=e.json")


def _profile() -> dict:
    return json.loads(ENGINE_PROFILE.read_text())


# ---- engine profiles: strict, physical ranges -------------------------------------------------------
def _every_point(field, value):
    def edit(p):
        for pt in p["points"]:
            pt[field] = value
    return edit


@pytest.mark.parametrize("edit, words", [
    (_every_point("target_forward_us", 0), "target_forward_us: Input should be greater than or equal to 1"),
    (_every_point("sample_us", 1e-30), "sample_us: Input should be greater than or equal to 1"),
    (lambda p: p["points"][0].update(batch_size="1"), "points.0.batch_size: Input should be a valid integer"),
    (lambda p: p.update(async_scheduling="yes"), "async_scheduling: Input should be a valid boolean"),
    (lambda p: p.update(max_num_seqs=10**12), "max_num_seqs: Input should be less than or equal to 4096"),
    (lambda p: p.update(max_num_seqs=2), "max_num_seqs 2: below the batch of"),
    (lambda p: p["fits"]["sample_us"]["params"].update({k: 0.0 for k in p["fits"]["sample_us"]["params"]}),
     "fits.sample_us: every parameter is below 1 us"),
    (lambda p: p.update(target={}), "target: not a ModelShape's fields: hidden_size"),
])
def test_engine_profiles_are_read_strictly_with_physical_ranges(tmp_path, edit, words):
    prof = _profile()
    edit(prof)
    code, out = _simulate_with_profile(tmp_path, prof)
    assert code == 2 and "e.json" in out and words in out, out


def test_engine_profile_numbers_past_the_float_range_are_refused(tmp_path):
    text = json.dumps(_profile()).replace('"step_us": ', '"step_us": 1e400, "x": ', 1)
    code, out = _simulate_with_profile(tmp_path, text)
    assert code == 2 and "e.json" in out and "not valid JSON" in out, out


def test_a_draft_step_is_zero_at_one_step_or_takes_time():
    from pydantic import ValidationError

    from simulator.engines.profile import EnginePoint
    base = dict(num_steps=1, batch_size=1, prompt_len=64, context_len=64.0, step_us=100.0, mean_accept_length=1.5)
    assert EnginePoint(**base, draft_steps_us=0.0).draft_steps_us == 0.0
    for k, v in ((1, 1e-30), (2, 0.0), (2, 0.5)):
        with pytest.raises(ValidationError, match="draft_steps_us"):
            EnginePoint(**{**base, "num_steps": k}, draft_steps_us=v)


# ---- points files ------------------------------------------------------------------------------------
def _point_line(text: str) -> int:
    return next(i for i, ln in enumerate(text.splitlines()) if json.loads(ln)["kind"] == "point")


@pytest.mark.parametrize("raw, words", [
    ("NaN", "not a finite number"), ("Infinity", "not a finite number"), ("1e400", "not a finite number"),
    (FIVE_K, "a number with thousands of digits")])
def test_points_files_refuse_what_json_would_take(tmp_path, points, raw, words):
    lines = points["steady"].read_text().splitlines()
    i = _point_line("\n".join(lines))
    lines[i] = lines[i].replace('"elapsed_us":', f'"elapsed_us":{raw},"x":', 1)
    (tmp_path / "p.jsonl").write_text("\n".join(lines) + "\n")
    code, out = run(tmp_path, "calibrate", "engine", "--from-points", "p.jsonl", "--out", "prof.json")
    assert code == 2 and f"p.jsonl:{i + 1}" in out and words in out, out
    assert not (tmp_path / "prof.json").exists()


@pytest.mark.parametrize("how, words", [
    ("dup_key", "written twice"), ("deep", "nested deeper than"), ("bad_byte", "not UTF-8"),
    ("tp9", "tensor_parallel_size: Input should be less than or equal to 8")])
def test_points_files_refuse_keys_twice_nesting_bad_bytes_and_tp_9(tmp_path, points, how, words):
    lines = points["steady"].read_text().splitlines()
    i = 0 if how == "tp9" else _point_line("\n".join(lines))
    if how == "tp9":
        lines[i] = json.dumps({**json.loads(lines[i]), "tensor_parallel_size": 9})
    elif how == "dup_key":
        lines[i] = lines[i].replace("{", '{"label":"x",', 1)
    elif how == "deep":
        lines[i] = "[" * 5000 + "]" * 5000
    data = ("\n".join(lines) + "\n").encode()
    if how == "bad_byte":
        data = data.replace(b'"point"', b'"po\xffint"', 1)
    (tmp_path / "p.jsonl").write_bytes(data)
    code, out = run(tmp_path, "calibrate", "engine", "--from-points", "p.jsonl", "--out", "prof.json")
    assert code == 2 and f"p.jsonl:{i + 1}" in out and words in out, out


def test_request_level_lines_are_validated_the_same_way(tmp_path, points):
    lines = points["request"].read_text().splitlines()
    i = _point_line("\n".join(lines))
    for raw, words in (("NaN", "not a finite number"), ("-1", "start_us: Input should be greater than or equal to 0")):
        bad = list(lines)
        bad[i] = bad[i].replace('"start_us":', f'"start_us":{raw},"x":', 1) if raw == "NaN" else \
            json.dumps(_with_start(json.loads(bad[i]), -1.0))
        (tmp_path / "r.jsonl").write_text("\n".join(bad) + "\n")
        code, out = run(tmp_path, "live", "--from-points", "r.jsonl", "--out", "recs")
        assert code == 2 and f"r.jsonl:{i + 1}" in out and words in out, out
        assert not (tmp_path / "recs").exists()


def _with_start(rec: dict, value: float) -> dict:
    rec["point"]["repeats"][0]["requests"][0]["start_us"] = value
    return rec


def test_a_draft_tp_the_points_do_not_hold_is_refused(tmp_path, points):
    shutil.copy(points["steady"], tmp_path / "p.jsonl")
    code, out = run(tmp_path, "calibrate", "engine", "--from-points", "p.jsonl", "--out", "prof.json",
                    "--draft-tp", "2")
    assert code == 2 and "draft TP 2 over target TP 1" in out and not (tmp_path / "prof.json").exists()


# ---- queue plans -------------------------------------------------------------------------------------
PLAN = dict(engine="fake", session="calibrate", label="calibrate_s1", num_steps=1, target_config={},
            points=[dict(batch_size=1, prompt_len=64, acceptance_rate=0.7, timed_steps=8, warmup_steps=2, repeats=1)])


@pytest.mark.parametrize("text, words", [
    (json.dumps(PLAN).replace("{", '{"num_steps": 2, ', 1), "key 'num_steps' is written twice"),
    (json.dumps({**PLAN, "capture_sizes": [-1]}), "capture_sizes.0: Input should be greater than or equal to 1"),
    (json.dumps({**PLAN, "capture_sizes": [8, 4]}), "strictly increasing"),
    (json.dumps({**PLAN, "engine": "vllm"}), "target_config: not a model's config.json"),
    (json.dumps({**PLAN, "prompt_seed": -1}), "prompt_seed: Input should be greater than or equal to 0"),
    (json.dumps(PLAN).replace('"num_steps": 1', '"num_steps": 1e400'), "not a finite number"),
])
def test_queue_plans_are_read_strictly(tmp_path, text, words):
    (tmp_path / "q").mkdir()
    (tmp_path / "q" / "000_calibrate_s1.json").write_text(text)
    code, out = run(tmp_path, "calibrate", "engine-queue-run", "q", "pts.jsonl")
    assert code == 2 and "000_calibrate_s1.json" in out and words in out, out
    assert not (tmp_path / "pts.jsonl").exists()


# ---- op tables ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("axes", [["context_len"], ["num_tokens", "context_len"], ["batch_size"]])
def test_an_op_table_with_axes_its_op_is_not_looked_up_by_is_refused_where_read(tmp_path, axes):
    prof = base_profile()
    prof["ops"][0].update(axes=axes, grid={a: [1.0, 16.0, 256.0] for a in axes}, latency_us=[3.0] * 3 ** len(axes))
    write_scenario(tmp_path, base_scenario())
    (tmp_path / "p.json").write_text(dump_json(prof))
    code, out = run(tmp_path, "simulate", "s.yaml")
    assert code == 2 and "p.json: ops.0: axes" in out and "looked up by num_tokens only" in out, out


@pytest.mark.parametrize("edit, words", [
    (lambda r: r["point"]["repeats"][0]["steps"][0].update(t_us=1e-30), "t_us: Input should be greater than or equal to 1"),
    (lambda r: r["point"]["repeats"][0]["steps"][-1].update(t_us=1.0), "steps: t_us must rise"),
    (lambda r: r.update(wall_s=0.0), "wall_s: Input should be greater than or equal to 0.000001"),
    (lambda r: r["point"]["repeats"][0].update(elapsed_us=1e-30), "the run lasts until its last step returned")])
def test_request_steps_take_time_and_rise_and_a_point_takes_wall_time(tmp_path, points, edit, words):
    lines = points["request"].read_text().splitlines()
    i = _point_line("\n".join(lines))
    rec = json.loads(lines[i])
    edit(rec)
    lines[i] = json.dumps(rec)
    (tmp_path / "r.jsonl").write_text("\n".join(lines) + "\n")
    code, out = run(tmp_path, "live", "--from-points", "r.jsonl", "--out", "recs")
    assert code == 2 and f"r.jsonl:{i + 1}" in out and words in out, out
