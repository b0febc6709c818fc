"""Engine-native calibration (calibration/engines/, simulator/engines/profile.py, simulator/costs/engine_native.py), on CPU.

The fake engine has the interface of the vLLM backend and known costs: the run loop, the engine
processes, the profile builder, the records and the pricing are tested end to end through it.
The committed vLLM 0.26.0 campaign on the H200 is checked as the docs state it.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from calibration.cli.calibrate import calibrate_app
from calibration.cli.live import live
from calibration.engines.backends.base import StepTimes
from calibration.engines.build import build_profile, engine_point
from calibration.engines.campaign import run_processes
from calibration.engines.backends.fake import FakeBackend
from calibration.engines.plans import calibrate_plans, few_run_keys, interleave, live_plans, model_configs, spread_order
from calibration.engines.records import live_records, write_records
from calibration.engines.run_loop import PointPlan, measure_point, prompt_pool, summarize_steps
from calibration.engines.backends.vllm import default_capture_sizes, write_model_dirs
from calibration.engines.worker import append_line, done_keys, read_lines, run_plan
from calibration.shapes import LLAMA_8B, eagle3_draft
from simulator.analytic import analyze, cycle_time_us
from simulator.acceptance import build_acceptance
from simulator.costs.forward import CostModel
from simulator.costs.engine_native import NativeCosts, profile_mismatch
from simulator.engines.profile import EngineProfile, load_engine_profile
from simulator.inputs import UserInputError
from simulator.profile import load_profile, resolve_profile_path
from simulator.scenario import scenario_from_dict
from simulator.evidence.validate import compare, load_records, with_engine_profile

ROOT = Path(__file__).resolve().parent.parent
TARGET, DRAFT = LLAMA_8B.model_dump(), eagle3_draft(LLAMA_8B).model_dump()
BASE = dict(engine="fake", target_config={}, draft_config={})
SHIPPED = "vllm-0.26.0-h200-llama-3.1-8b-eagle3"


@pytest.fixture(scope="module")
def fake_campaign(tmp_path_factory):
    """A fake engine's calibration at num_steps 1 and 3 and its live grid at 1, 2 and 3."""
    d = tmp_path_factory.mktemp("fake")
    pts = d / "points.jsonl"
    cal = calibrate_plans(BASE, [1, 3], [1, 8, 64], [256, 1024], 0.7, timed_steps=24)
    lv = live_plans(BASE, [1, 2, 3], [1, 8, 64], [256, 1024], [0.5, 0.7, 0.9], timed_steps=24)
    status = run_processes(interleave(cal, lv, 3), pts, in_process=True, log=lambda s: None)
    assert set(status.values()) == {"done"}
    prof = build_profile([pts], "fake", TARGET, DRAFT)
    (d / "prof.json").write_text(prof.model_dump_json())
    write_records(live_records([pts], TARGET, DRAFT, engine_profile=str(d / "prof.json")), d / "live")
    return d, prof


def _profile_h200():
    return load_profile(resolve_profile_path("h200"))


def test_fake_engine_live_grid_predicted_from_its_profile(fake_campaign):
    d, prof = fake_campaign
    pts = compare(load_records([d / "live"]), _profile_h200())
    err = np.abs([p.tok_per_s_error_frac for p in pts])
    assert len(pts) == 3 * 3 * (3 + 1) + 3 * 2  # 3 num_steps x 3 batches x (3 rates short prompt, 1 long); baselines
    assert np.median(err) < 0.01
    assert err.max() < 0.06  # num_steps 2 was never calibrated: the fitted forms price it
    k2 = [e for e, p in zip(err, pts) if p.num_steps == 2]
    assert max(k2) > 0  # priced, not looked up
    assert all(p.measured_speedup is not None for p in pts if p.speculative)


def test_profile_records_engine_and_points(fake_campaign):
    _, prof = fake_campaign
    assert prof.engine == "fake" and prof.async_scheduling
    assert {p.num_steps for p in prof.points} == {0, 1, 3}
    assert all(p.gpu_bound is not None for p in prof.points)
    assert set(prof.fits) >= {"target_forward_us", "draft_us", "sample_us", "host_busy_us"}


def test_native_cycle_is_the_longer_of_gpu_and_host_exactly(fake_campaign):
    """The closed form on native costs: cycle = max(host work, GPU work), no sync, exactly."""
    d, prof = fake_campaign
    rec = load_records([d / "live"])[0][1]
    for k, b in ((3, 8), (1, 64), (3, 1)):
        sc = rec.scenario.model_copy(update={
            "spec": rec.scenario.spec.model_copy(update={"num_steps": k, "num_draft_tokens": k + 1}),
            "workload": rec.scenario.workload.model_copy(update={"batch_size": b, "context_len": 1100})})
        cost = CostModel(sc, _profile_h200())
        nat = NativeCosts(prof)
        gpu, host = nat.step_us(b, k, 1100)
        assert cycle_time_us(cost, 1) == pytest.approx(max(gpu, host), rel=1e-12)
        assert cycle_time_us(cost, k + 1) == pytest.approx(max(gpu, host), rel=1e-12)  # padded draft prefill
        acc = build_acceptance(sc.acceptance, sc.spec)
        an = analyze(sc, cost, acc, truncate=False)
        a = sc.acceptance.acceptance_rate
        mean_len = (1 - a ** (k + 1)) / (1 - a)
        assert an.tok_per_s == pytest.approx(b * mean_len / max(gpu, host) * 1e6, rel=1e-9)
        assert cost.d2h_sync_us == 0.0
        assert any("engine-native profile" in n for n in cost.notes)


def test_measured_points_are_looked_up_and_linear_in_context(fake_campaign):
    _, prof = fake_campaign
    nat = NativeCosts(prof)
    pts = sorted((p for p in prof.points if p.num_steps == 3 and p.batch_size == 8), key=lambda p: p.context_len)
    lo, hi = pts[0], pts[-1]
    assert nat.target_forward_us(8, 3, lo.context_len) == pytest.approx(lo.target_forward_us, rel=1e-9)
    mid = (lo.context_len + hi.context_len) / 2
    assert nat.target_forward_us(8, 3, mid) == pytest.approx((lo.target_forward_us + hi.target_forward_us) / 2,
                                                             rel=1e-9)
    assert nat.host_us(8, 3, mid) == pytest.approx((lo.host_busy_us + hi.host_busy_us) / 2, rel=1e-9)
    assert "target forward: measured" in nat.sources


def test_few_runs_predict_the_rest(fake_campaign, tmp_path):
    """The few-run workflow on the fake engine: 2 baselines and one point per num_steps."""
    pts = tmp_path / "points.jsonl"
    ks, bs, ps = [1, 2, 3, 6], [1, 2, 4, 8, 16, 32, 64], [256, 1024]
    keys = set(few_run_keys(ks, bs, ps))
    assert len(keys) == 2 + len(ks) and (0, 1, 256) in keys and (0, 64, 1024) in keys
    plans = calibrate_plans(BASE, ks, bs, ps, 0.7, timed_steps=24)
    plans = [p.model_copy(update={"points": [q for q in p.points if (p.num_steps, q["batch_size"], q["prompt_len"])
                                             in keys]}) for p in plans]
    run_processes(plans, pts, in_process=True, log=lambda s: None)
    few = build_profile([pts], "few", TARGET, DRAFT, keep=lambda k: k in keys)
    (tmp_path / "few.json").write_text(few.model_dump_json())
    d, _ = fake_campaign
    recs = with_engine_profile(load_records([d / "live"]), str(tmp_path / "few.json"))
    rest = [p for p in compare(recs, _profile_h200()) if (p.num_steps, p.batch_size, p.context_len) not in keys]
    err = np.abs([p.tok_per_s_error_frac for p in rest])
    assert np.median(err) <= 0.05 and err.max() <= 0.12


def test_engine_profile_for_another_model_is_not_used_and_says_why(fake_campaign):
    d, _ = fake_campaign
    data = _load_yaml(ROOT / "scenarios" / "tp1_draft.yaml")
    data["serving_engine"] = {"kind": "vllm", "engine_profile": str(d / "prof.json")}
    sc = scenario_from_dict(data, "tp1_draft.yaml", ROOT / "scenarios")
    assert "target is another shape" in profile_mismatch(load_engine_profile(str(d / "prof.json")), sc)
    cost = CostModel(sc, _profile_h200())
    assert cost.native is None
    assert any("not used" in n for n in cost.notes)


def _load_yaml(path: Path) -> dict:
    import yaml
    return yaml.safe_load(path.read_text())


def test_scenario_naming_a_missing_engine_profile_is_one_line():
    data = _load_yaml(ROOT / "scenarios" / "tp1_draft.yaml")
    data["serving_engine"] = {"kind": "vllm", "engine_profile": "no-such-profile"}
    with pytest.raises(UserInputError, match=r"x\.yaml: serving_engine\.engine_profile: engine profile 'no-such"):
        scenario_from_dict(data, "x.yaml", ROOT / "scenarios")


def test_worker_resumes_and_reads_gzip_and_torn_lines(tmp_path):
    plan = calibrate_plans(BASE, [3], [1, 4], [128], 0.7, timed_steps=8)[1]
    out = tmp_path / "p.jsonl"
    assert run_plan(plan, out, tmp_path, log=lambda s: None) == 2
    assert run_plan(plan, out, tmp_path, log=lambda s: None) == 0  # resumed: nothing measured again
    with open(out, "a") as f:
        f.write('{"schema": "engine_points/1", "kind": "point", "tor')  # a torn last line
    assert len(done_keys(out)) == 2
    gz = tmp_path / "p.jsonl.gz"
    gz.write_bytes(gzip.compress(out.read_bytes()))
    assert len(read_lines(gz)) == len(read_lines(out)) == 3  # the engine line and two points
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_text("not gzip")
    with pytest.raises(UserInputError, match="not a readable points file"):
        read_lines(bad)


def test_run_loop_counts_accept_lengths_per_request_and_step():
    be = FakeBackend(num_steps=3, seed=1)
    res = measure_point(be, PointPlan(batch_size=4, prompt_len=64, acceptance_rate=0.6, timed_steps=50, repeats=2,
                                      instrument_first=True), prompt_pool(4, 64), 8192)
    r0, r1 = res["repeats"]
    assert r0["instrumented"] and not r1["instrumented"]
    assert sum(r0["accept_length_counts"]) == 4 * 50
    mean = np.dot(np.arange(1, 5), np.sum([r0["accept_length_counts"], r1["accept_length_counts"]], axis=0)) / 400
    a = 0.6
    assert mean == pytest.approx((1 - a ** 4) / (1 - a), abs=0.25)
    assert r0["means"]["target_forward_us"] is not None and r1["means"]["target_forward_us"] is None
    assert r1["host_busy_us"] == pytest.approx(be.costs.host_us(4, 3), rel=0.05)
    assert not be.requests  # aborted at the end
    pt = engine_point(res)
    assert pt.gpu_bound and pt.step_us == pytest.approx(r1["elapsed_us"] / 50)
    assert summarize_steps([StepTimes(target_tokens_padded=16), StepTimes(target_tokens_padded=16),
                            StepTimes()])["target_tokens_padded"] == 16


def test_engine_process_runs_as_its_own_process_through_the_cli(tmp_path):
    """The campaign starts each engine process as `specdecsim calibrate engine-process` (one CLI)."""
    plan = calibrate_plans(BASE, [3], [2], [64], 0.7, timed_steps=8)[1]
    status = run_processes([plan], tmp_path / "p.jsonl", deadline_s=120, log=lambda s: None)
    assert status == {"calibrate_s3": "done"}
    assert len(done_keys(tmp_path / "p.jsonl")) == 1
    assert run_processes([plan], tmp_path / "p.jsonl", log=lambda s: None) == {"calibrate_s3": "skipped"}


def test_campaign_order_spreads_num_steps_and_pairs_processes():
    assert spread_order([1, 2, 3, 4, 6]) == [3, 1, 6, 2, 4]
    cal = calibrate_plans(BASE, [1, 3], [1], [64], 0.7)
    lv = live_plans(BASE, [1, 2, 3], [1], [64], [0.7])
    labels = [p.label for p in interleave(cal, lv, 3)]
    assert labels == ["calibrate_s3", "live_s3", "calibrate_s0", "live_s0", "calibrate_s1", "live_s1", "live_s2"]


def test_vllm_backend_helpers_without_vllm(tmp_path):
    sizes = default_capture_sizes()
    assert sizes[:4] == [1, 2, 4, 8] and sizes[-1] == 512 and 248 in sizes and 264 not in sizes and len(sizes) == 51
    t, d = model_configs()
    assert t["architectures"] == ["LlamaForCausalLM"] and d["architectures"] == ["LlamaForCausalLMEagle3"]
    td, dd = write_model_dirs(tmp_path, t, d)
    assert json.loads((td / "config.json").read_text())["num_hidden_layers"] == 32
    assert json.loads((dd / "config.json").read_text())["draft_vocab_size"] == 32000


def test_cli_calibrate_and_live_with_the_fake_engine(tmp_path):
    runner = CliRunner()
    r = runner.invoke(calibrate_app, ["engine", "--engine", "fake", "--out", str(tmp_path / "f.json"),
                                      "--num-steps", "1,3", "--batches", "1,8", "--context-lens", "256"])
    assert r.exit_code == 0, r.output
    assert EngineProfile.model_validate_json((tmp_path / "f.json").read_text()).points
    app = typer.Typer()
    app.command("live")(live)
    app.command("other")(lambda: None)
    r = runner.invoke(app, ["live", "--engine", "fake", "--out", str(tmp_path / "live"), "--batches", "1,8",
                            "--engine-profile", str(tmp_path / "f.json")])
    assert r.exit_code == 0, r.output
    assert len(list((tmp_path / "live").glob("*.json"))) > 10
    for args, msg in ((["engine", "--engine", "fake", "--out", str(tmp_path / "g.json"), "--acceptance", "2"],
                       "--acceptance 2.0: a rate in (0, 1]"),
                      (["engine", "--engine", "tgi", "--out", str(tmp_path / "g.json")], "--engine"),
                      (["engine", "--from-points", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "g.json")],
                       "no such file")):
        r = runner.invoke(calibrate_app, args)
        assert r.exit_code == 2 and msg in r.output, r.output


def test_shipped_vllm_campaign_validates_as_documented():
    """docs/engines/vllm.md: the 154 fresh vLLM records (num_steps 1, 2, 3, 4, 6) from the
    engine-native profile alone."""
    recs = load_records([ROOT / "data" / "live" / "h200_vllm_0.26.0"])
    assert len(recs) == 154
    assert {r.scenario.spec.num_steps for _, r in recs if r.speculative} == {1, 2, 3, 4, 6}
    pts = compare(with_engine_profile(recs, SHIPPED), _profile_h200())
    err = np.abs([p.tok_per_s_error_frac for p in pts])
    assert np.median(err) <= 0.03
    prof = load_engine_profile(SHIPPED)
    no_graph = {(p.num_steps, p.batch_size) for p in prof.points if p.num_steps and p.target_tokens_padded is None}
    assert no_graph == {(2, 4)}  # the one cell vLLM ran without a full CUDA graph (host-bound, bimodal)
    rest = [abs(p.tok_per_s_error_frac) for p in pts if (p.num_steps, p.batch_size) not in no_graph]
    assert max(rest) <= 0.08
    sp = [abs(p.predicted_speedup - p.measured_speedup) for p in pts if p.measured_speedup is not None]
    assert sum(s <= 0.05 for s in sp) >= 0.9 * len(sp)


def test_full_graph_rule_matches_every_measured_vllm_cell():
    """vLLM's capture rule (EngineProfile.full_graph_verify) against what the engine did: the one
    measured cell that recorded no full-graph replay of the target is the one the rule names."""
    prof = load_engine_profile(SHIPPED)
    for p in prof.points:
        if p.num_steps and p.gpu_bound is not None:
            assert prof.full_graph_verify(p.batch_size, p.num_steps) == (p.target_tokens_padded is not None), p
    assert not prof.full_graph_verify(64, 8)  # 576 tokens: past the largest capture size


def test_full_graph_rule_pads_requests_as_the_dispatcher_does():
    """vLLM V2's dispatcher runs n tokens at the smallest captured count >= n: 7 requests of 3
    tokens (21) run the 24-token uniform-decode graph of 8 requests, padded; 4 of 3 (12) fall on
    the 16-token piecewise graph, the rounded 18 lying above it."""
    from simulator.engines.profile import full_graph_verify
    sizes = [1, 2, 4, 8, 16, 24, 32]
    assert full_graph_verify(7, 2, sizes) and not full_graph_verify(4, 2, sizes)
    assert full_graph_verify(8, 2, sizes, max_num_seqs=8) and not full_graph_verify(8, 2, sizes, max_num_seqs=4)
    assert not full_graph_verify(16, 2, sizes)  # 48 tokens: past the largest capture size
    assert full_graph_verify(5, 0, sizes) and full_graph_verify(3, 2, [])


def test_few_runs_stay_on_full_graph_cells():
    """A few-run point is moved off a cell whose verify has no full CUDA graph (host-bound: it
    says nothing of the GPU parts), to the nearest batch size that has one."""
    ks, bs, ps = [1, 2, 3, 4, 6], [1, 2, 4, 8, 16, 32, 64], [1024, 4096]
    plain = few_run_keys(ks, bs, ps)
    ruled = few_run_keys(ks, bs, ps, lambda b, k: not (k == 2 and b == 4))
    assert (2, 4, 4096) in plain and (2, 4, 4096) not in ruled and (2, 2, 4096) in ruled
    assert len(ruled) == len(plain) == 2 + len(ks)
    assert few_run_keys(ks, bs, ps, lambda b, k: False) == plain  # nowhere better: kept


def test_few_runs_measure_the_two_largest_verifies():
    """The two largest num_steps both run at the largest batch (two points on the roofline's
    compute-bound side), the others below it, down to the smallest batch; one run per num_steps."""
    ks, bs, ps = [1, 2, 3, 4, 6], [1, 2, 4, 8, 16, 32, 64], [1024, 4096]
    keys = few_run_keys(ks, bs, ps)
    spec = {k: b for k, b, _ in keys if k}
    assert sorted(spec) == ks and spec[6] == spec[4] == 64
    assert all(spec[k] < 64 for k in (1, 2, 3)) and spec[1] == 1
    assert {p for k, _, p in keys if k in (6, 4)} == set(ps)  # the two at both contexts
    assert {k: b for k, b, _ in few_run_keys([2, 5], bs, ps) if k} == {5: 64, 2: 64}
    assert {k: b for k, b, _ in few_run_keys([3], [8], ps) if k} == {3: 8}


def test_engine_model_configs_give_their_shapes():
    """Any target / draft pair under data/models/engine/ gives the shapes its records and profile
    carry (a Qwen3 MoE target with its EAGLE-3 draft); names that are not file names are refused."""
    from calibration.cli.engine import _configs
    _, _, t, d = _configs("qwen3-30b-a3b", "eagle3-qwen3-30b-a3b")
    assert (t["name"], t["n_routed_experts"], t["num_experts_per_tok"], t["moe_intermediate_size"]) == \
        ("qwen3-30b-a3b", 128, 8, 768)
    assert d["name"] == "eagle3-qwen3-30b-a3b" and d["num_hidden_layers"] == 1 and not d["n_routed_experts"]
    assert d["draft_vocab_size"] == 32000 and d["num_fc_input_hidden_states"] == 3
    with pytest.raises(ValueError, match="a config name"):
        model_configs("../x", "y")
    r = CliRunner().invoke(calibrate_app, ["engine", "--engine", "fake", "--out", "/tmp/x.json", "--target",
                                           "qwen3-30b-a3b", "--draft", "llama-3.1-8b-instruct"])
    assert r.exit_code == 2 and "one decoder layer" in r.output, r.output


SHIPPED_POINTS = ROOT / "data" / "engine_runs" / "h200_vllm_0.26.0" / "points.jsonl.gz"


def _lines() -> list[dict]:
    return [json.loads(x) for x in gzip.decompress(SHIPPED_POINTS.read_bytes()).decode().splitlines()]


def test_engine_profile_refused_whole_at_load(tmp_path):
    prof = json.loads((ROOT / "data" / "engine_profiles" / f"{SHIPPED}.json").read_text())
    cases = [({"fits": {}}, "fits lacks target_forward_us"),
             ({"cudagraph_capture_sizes": [0, -1]}, "strictly increasing"),
             ({"points": []}, "points"),
             ({"catalog_gpu": "nonexistent-gpu"}, "not in the hardware catalog")]
    bad_param = json.loads(json.dumps(prof))
    bad_param["fits"]["target_forward_us"]["params"]["per_token_us"] = 1e30
    for i, (update, msg) in enumerate(cases + [(None, "less than or equal to 10000000")]):
        data = bad_param if update is None else {**prof, **update}
        f = tmp_path / f"p{i}.json"
        f.write_text(json.dumps(data))
        with pytest.raises(UserInputError, match=msg):
            load_engine_profile(str(f))
    with pytest.raises(UserInputError, match="a folder"):
        load_engine_profile(str(tmp_path) + "/")


def test_points_files_are_validated_line_by_line(tmp_path):
    from calibration.engines.points import read_points_files
    lines = _lines()
    i = next(n for n, r in enumerate(lines) if r["kind"] == "point")
    for field, value, msg in (("elapsed_us", "fast", "elapsed_us"), ("elapsed_us", -5.0, "elapsed_us"),
                              ("accept_length_counts", [1, 2], "accept_length_counts has 2 entries"),
                              ("context_len", -5.0, "context_len")):
        bad = json.loads(json.dumps(lines))
        bad[i]["point"]["repeats"][0][field] = value
        f = tmp_path / "bad.jsonl"
        f.write_text("\n".join(json.dumps(r) for r in bad) + "\n")
        with pytest.raises(UserInputError, match=rf"bad\.jsonl:{i + 1}.*{msg}"):
            read_points_files([f])
    f = tmp_path / "torn.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in lines[:5]) + "\n" + json.dumps(lines[5])[:40])
    notes: list[str] = []
    assert len(read_points_files([f], notes)) == 5 and "torn last line" in notes[0]
    r = CliRunner().invoke(calibrate_app, ["engine", "--from-points", str(f), "--out", str(tmp_path / "p.json")])
    assert r.exit_code == 2 and "torn last line" in r.output and "Traceback" not in r.output
    assert "torn.jsonl: the calibration points" in " ".join(r.output.split()) and "too few to fit" in r.output
    assert not (tmp_path / "p.json").exists()
    f2 = tmp_path / "mid.jsonl"
    f2.write_text(json.dumps(lines[0]) + "\nnot json\n" + json.dumps(lines[1]) + "\n")
    with pytest.raises(UserInputError, match=r"mid\.jsonl:2: not a JSON line"):
        read_points_files([f2])
    copy = tmp_path / "copy.jsonl"
    copy.write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    assert len(read_points_files([copy, copy])) == len(lines)  # one file given twice counts once
    with pytest.raises(UserInputError, match="is also in"):
        read_points_files([copy, SHIPPED_POINTS])


def test_resume_appends_after_a_torn_line(tmp_path):
    out = tmp_path / "p.jsonl"
    append_line(out, {"kind": "engine", "label": "x"})
    with open(out, "a") as f:
        f.write('{"schema": "engine_points/1", "kind": "po')
    append_line(out, {"kind": "engine", "label": "y"})
    assert [r["label"] for r in read_lines(out)] == ["x", "y"]


def test_cli_refuses_bad_engine_options_in_one_line(tmp_path):
    runner = CliRunner()
    foreign = tmp_path / "notes.txt"
    foreign.write_text("hello")
    copy = tmp_path / "copy.jsonl"
    copy.write_text(gzip.decompress(SHIPPED_POINTS.read_bytes()).decode())
    base = ["engine", "--engine", "fake", "--out", str(tmp_path / "o.json")]
    for args, msg in ((base + ["--deadline-s", "nan"], "--deadline-s nan: seconds"),
                      (base + ["--context-lens", "8192"], "--context-lens 8192: prompt_len 8192 leaves"),
                      (base + ["--points", str(foreign)], "is not an engine points file"),
                      (base + ["--catalog-gpu", "nope"], "--catalog-gpu 'nope': not in the hardware catalog"),
                      (["engine", "--from-points", str(copy), "--out", str(copy), "--force"], "is one of the --from-points"),
                      (["engine", "--from-points", str(tmp_path), "--out", str(tmp_path / "o.json")], "a folder")):
        r = runner.invoke(calibrate_app, args)
        assert r.exit_code == 2 and msg in r.output, (args, r.output)
    assert foreign.read_text() == "hello"
    import importlib.util
    if importlib.util.find_spec("vllm") is None:
        r = runner.invoke(calibrate_app, ["engine", "--engine", "vllm", "--out", str(tmp_path / "v.json")])
        assert r.exit_code == 2 and "vllm is not installed" in r.output and "Traceback" not in r.output


def test_notes_say_where_a_scenario_leaves_the_measured_points():
    data = _load_yaml(ROOT / "scenarios" / "vllm_llama8b_h200.yaml")
    data["workload"] = {**data["workload"], "batch_size": 5, "context_len": 100_000}
    data["spec"] = {**data["spec"], "num_steps": 2, "num_draft_tokens": 3}
    sc = scenario_from_dict(data, "x.yaml", ROOT / "scenarios")
    notes = CostModel(sc, _profile_h200()).notes
    assert any("batch 5 was not measured" in n for n in notes)
    assert any("context 100,000 is outside the measured" in n for n in notes)
    assert any("(15 tokens) gets no full CUDA graph" in n for n in notes)


def test_native_pricing_follows_the_what_if_compute_scale():
    data = _load_yaml(ROOT / "scenarios" / "vllm_llama8b_h200.yaml")
    base = CostModel(scenario_from_dict(data, "x.yaml", ROOT / "scenarios"), _profile_h200())
    data["costs"] = {"compute_latency_scale": 0.5}
    half = CostModel(scenario_from_dict(data, "x.yaml", ROOT / "scenarios"), _profile_h200())
    assert half.verify_forward().gpu_us == pytest.approx(base.verify_forward().gpu_us / 2, rel=1e-12)
    assert half.host_schedule_us == base.host_schedule_us  # host work is not compute


def test_shipped_qwen3_moe_vllm_records_load_and_are_moe():
    """data/live/h200_vllm_0.26.0_qwen3-30b-a3b: vLLM's live runs of the MoE target (the baseline and
    num_steps 3 in two processes, paired with the baseline's), rebuilt from the committed points
    files as committed, each naming the MoE profile of its shape."""
    d = ROOT / "data" / "live" / "h200_vllm_0.26.0_qwen3-30b-a3b"
    recs = load_records([d])
    assert len(recs) == 70 and sum(r.speculative and r.scenario.spec.num_steps == 3 for _, r in recs) == 56
    assert all(r.scenario.target.n_routed_experts == 128 for _, r in recs)
    assert all(r.paired_baseline_tok_per_s for _, r in recs if r.speculative)
    runs = ROOT / "data" / "engine_runs" / "h200_vllm_0.26.0_qwen3-30b-a3b"
    pts = [runs / f for f in ("points.jsonl.gz", "points_2026-12-03.jsonl.gz", "points_2026-12-04.jsonl.gz")]
    _, _, t, dr = __import__("calibration.cli.engine", fromlist=["_configs"])._configs(
        "qwen3-30b-a3b", "eagle3-qwen3-30b-a3b")
    rebuilt = dict(live_records(pts, t, dr))
    for path, rec in recs:
        assert rebuilt[Path(path).name].tok_per_s == pytest.approx(rec.tok_per_s, rel=1e-12)
    for _, r in recs:  # the engine's own accept lengths, near the i.i.d. mean at rate a
        if not r.speculative:
            continue
        a = r.scenario.acceptance.acceptance_rate
        assert abs(r.mean_accept_length - (1 - a ** 4) / (1 - a)) < 0.4


@pytest.mark.parametrize("damage, msg", [
    ("points", "step_us: Input should be greater than or equal to 1 (got 0.0)"),
    ("fits", "fits.target_forward_us: every parameter is below 1 us (largest 1e-320)")])
def test_an_engine_profile_that_prices_no_time_is_refused_in_a_line(tmp_path, damage, msg):
    """A profile whose measured steps are 0 us, or whose target forward's fitted form prices (next to)
    nothing, is refused where it is read (it once divided by zero inside validate, or gave tok/s = inf)."""
    import json

    from typer.testing import CliRunner

    from simulator.cli import app
    root = Path(__file__).resolve().parents[1]
    prof = json.loads((root / "data" / "engine_profiles" / "vllm-0.26.0-h200-llama-3.1-8b-eagle3.json").read_text())
    if damage == "points":
        for pt in prof["points"]:
            pt.update({k: 0.0 for k, v in pt.items() if k.endswith("_us") and isinstance(v, float)})
    else:
        for fit in prof["fits"].values():
            fit["params"] = {k: 1e-320 for k in fit["params"]}
    f = tmp_path / "ep.json"
    f.write_text(json.dumps(prof))
    rec = sorted((root / "data" / "live" / "h200_vllm_0.26.0").glob("vllm_b16_p1024_*.json"))[0]
    r = CliRunner().invoke(app, ["validate", str(rec), "--engine-profile", str(f)])
    assert r.exit_code == 2 and "Traceback" not in r.output and msg in " ".join(r.output.split()), r.output
