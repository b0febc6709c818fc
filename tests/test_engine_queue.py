"""The session queue of engine processes (calibration/engines/queue.py, campaign.run_queue) and the
engine commands that write, run and read it (`calibrate engine-queue`, `engine-queue-run`, `live
--from-points`), without an engine or a GPU."""

import pytest

from calibration.engines.campaign import run_queue
from calibration.engines.plans import ProcessPlan, model_configs
from calibration.engines.queue import queue_plans, write_queue

MOE_POINTS = "qwen3-30b-a3b.points.jsonl"  # sglang-h200-moe's MoE processes (their labels are the chain's)
from calibration.engines.worker import read_lines


def test_sglang_h200_queue_is_unique_and_ordered(tmp_path):
    plans = queue_plans("sglang-h200")
    labels = [p.label for p in plans]
    assert len(set(labels)) == len(labels)
    assert labels[0] == "calibrate_s3_r2" and labels.index("calibrate_s6") < labels.index("shard8_l3_s0")
    tree = [p for p in plans if p.label.endswith("_t4_n8")]
    assert tree and all(p.topk == 4 and p.num_draft_tokens == 8 and p.num_steps == 3 for p in tree)
    assert all(not p.overlap for p in plans if p.label.endswith("_nooverlap"))
    files = write_queue(plans, tmp_path / "q")
    assert [f.name for f in files][:2] == ["000_calibrate_s3_r2.json", "001_calibrate_s3.json"]


def test_engine_queue_cli_writes_and_runs_a_queue(tmp_path):
    from typer.testing import CliRunner

    from simulator.cli import app
    r = CliRunner().invoke(app, ["calibrate", "engine-queue", "sglang-h200", str(tmp_path / "q")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "q" / "000_calibrate_s3_r2.json").is_file()
    r = CliRunner().invoke(app, ["calibrate", "engine-queue", "nosuch", str(tmp_path / "q2")])
    assert r.exit_code != 0 and "sglang-h200" in r.output
    r = CliRunner().invoke(app, ["calibrate", "engine-queue-run", str(tmp_path / "none"), str(tmp_path / "p.jsonl")])
    assert r.exit_code != 0 and "not a folder" in r.output


def test_run_queue_runs_fake_processes_in_name_order_and_resumes(tmp_path):
    from calibration.engines.plans import calibrate_plans
    plans = calibrate_plans(dict(engine="fake", target_config={}, draft_config={}), [2], [1, 4], [256], 0.7,
                            timed_steps=8, repeats=1)
    write_queue(list(reversed(plans)), tmp_path / "q")  # s2 first, then the baseline
    pts = tmp_path / "points.jsonl"
    status = run_queue(tmp_path / "q", pts, deadline_s=600, log=lambda s: None)
    assert status == {"calibrate_s2": "done", "calibrate_s0": "done"}
    engines = [r["label"] for r in read_lines(pts) if r["kind"] == "engine"]
    assert engines == ["calibrate_s2", "calibrate_s0"]
    assert run_queue(tmp_path / "q", pts, log=lambda s: None) == {"calibrate_s2": "skipped", "calibrate_s0": "skipped"}


def test_a_process_with_its_own_points_file_writes_there_and_resumes_from_it(tmp_path):
    from calibration.engines.plans import calibrate_plans
    plans = calibrate_plans(dict(engine="fake", target_config={}, draft_config={}), [2], [1], [256], 0.7,
                            timed_steps=8, repeats=1)
    other = [p.model_copy(update={"points_file": "other.points.jsonl"}) for p in plans]
    write_queue(plans, tmp_path / "q")
    write_queue(other, tmp_path / "q2")
    pts = tmp_path / "points.jsonl"
    assert set(run_queue(tmp_path / "q", pts, log=lambda s: None).values()) == {"done"}
    # the same labels, another model: not skipped, written beside the queue's file
    assert set(run_queue(tmp_path / "q2", pts, log=lambda s: None).values()) == {"done"}
    assert set(run_queue(tmp_path / "q2", pts, log=lambda s: None).values()) == {"skipped"}
    mine = [r["label"] for r in read_lines(tmp_path / "other.points.jsonl") if r["kind"] == "engine"]
    assert mine == ["calibrate_s0", "calibrate_s2"]
    assert len([r for r in read_lines(pts) if r["kind"] == "engine"]) == 2
    with pytest.raises(ValueError, match="points_file"):
        plans[0].model_copy(update={"points_file": None}).model_validate({**plans[0].model_dump(),
                                                                           "points_file": "../x.jsonl"})


def test_moe_queue_keeps_the_moe_target_in_its_own_points_file():
    plans = queue_plans("sglang-h200-moe")
    assert plans[0].label == "shard8_l3_s0"
    moe = [p for p in plans if p.points_file]
    assert {p.points_file for p in moe} == {MOE_POINTS} and len(moe) == 4
    assert all(p.target_config["model_type"] == "qwen3_moe" and p.uniform_expert_routing for p in moe)
    for group in ([p for p in plans if p.points_file], [p for p in plans if not p.points_file]):
        labels = [p.label for p in group]
        assert len(set(labels)) == len(labels)


def test_next_queue_runs_the_seed_rank_first_and_repeats_each_configuration():
    from calibration.engines.build import label_variant
    labels = [p.label for p in queue_plans("sglang-h200-next")]
    assert labels[:4] == ["shard8_l3_s0", "shard8_l3_s5", "shard8_l9_s0", "shard8_l9_s5"]
    assert len(set(labels)) == len(labels)
    assert all(label_variant(x) is not None for x in labels if not x.startswith("shard"))
    assert "live_s3_r2" in labels and "calibrate_s3_t4_n8_r2" in labels and "live_s0_nooverlap_r2" in labels


def _cli(*args):
    from typer.testing import CliRunner

    from simulator.cli import app
    return CliRunner().invoke(app, list(map(str, args)))


def test_engine_queue_refuses_a_folder_that_holds_files(tmp_path):
    (tmp_path / "q").mkdir()
    (tmp_path / "q" / "mine.json").write_text('{"mine": 1}')
    r = _cli("calibrate", "engine-queue", "sglang-h200", tmp_path / "q")
    assert r.exit_code != 0 and "not empty" in r.output
    assert (tmp_path / "q" / "mine.json").read_text() == '{"mine": 1}'


def test_engine_queue_run_refuses_what_it_cannot_run_and_never_appends_to_a_foreign_file(tmp_path):
    from calibration.engines.plans import calibrate_plans
    q = tmp_path / "q"
    write_queue(calibrate_plans(dict(engine="fake", target_config={}, draft_config={}), [2], [1], [256], 0.7,
                                timed_steps=8, repeats=1), q)
    foreign = tmp_path / "profile.json"
    foreign.write_text('{"name": "mine"}\n')
    r = _cli("calibrate", "engine-queue-run", q, foreign)
    assert r.exit_code != 0 and "not an engine points file" in r.output
    assert foreign.read_text() == '{"name": "mine"}\n'
    r = _cli("calibrate", "engine-queue-run", q, tmp_path / "p.jsonl.gz")
    assert r.exit_code != 0 and "compressed" in r.output
    r = _cli("calibrate", "engine-queue-run", q, tmp_path / "p.jsonl", "--deadline-s", "5")
    assert r.exit_code != 0 and "more than 21" in r.output
    (tmp_path / "empty").mkdir()
    r = _cli("calibrate", "engine-queue-run", tmp_path / "empty", tmp_path / "p.jsonl")
    assert r.exit_code != 0 and "no ProcessPlan files" in r.output
    bad = tmp_path / "bad"
    bad.mkdir()
    plan = (q / "000_calibrate_s0.json").read_text()
    for name, text in (("a.json", plan.replace('"calibrate_s0"', '"../../escape"')),
                       ("b.json", plan.replace('"engine": "fake"', '"engine": "tensorrt"')),
                       ("c.json", "{not json")):
        for f in bad.iterdir():
            f.unlink()
        (bad / name).write_text(text)
        r = _cli("calibrate", "engine-queue-run", bad, tmp_path / "p.jsonl")
        assert r.exit_code != 0 and name in r.output and "Traceback" not in r.output, r.output
    assert not (tmp_path / "escape.json").exists()


def test_live_refuses_an_engine_profile_of_another_shape(tmp_path):
    from pathlib import Path
    P = Path(__file__).resolve().parent.parent / "data/engine_runs/h200_sglang_0.5.15/points.jsonl.gz"
    r = _cli("live", "--from-points", P, "--out", tmp_path / "w",
             "--engine-profile", "sglang-0.5.15-h200-llama-3.1-8b-eagle3-tree-t4-n8")
    import re
    assert r.exit_code != 0 and re.search(r"does not price (\d+) of the \1 records", r.output), r.output
    assert not (tmp_path / "w").exists() or not any((tmp_path / "w").iterdir())
    r = _cli("live", "--from-points", P, "--out", tmp_path / "w", "--engine-profile", "")
    assert r.exit_code != 0 and "--engine-profile ''" in r.output


def test_a_tree_may_verify_as_many_tokens_as_its_nodes():
    from calibration.cli.engine import _variant
    assert _variant("sglang", 4, 16, False, [3])["key"] == (4, 16, True)  # 1 + 4 + 2 * 16 = 37 nodes at most
    import typer
    with pytest.raises(typer.Exit):
        _variant("sglang", 4, 40, False, [3])
    with pytest.raises(typer.Exit):
        _variant("fake", 4, 8, False, [3])


def test_eager_queue_measures_the_seed_rank_without_graphs_then_orders_live_before_calibrate():
    from calibration.engines.build import label_variant
    plans = queue_plans("sglang-h200-eager")
    eager = [p for p in plans if p.label.endswith("_eager")]
    assert [p.label for p in eager] == ["shard8_l3_s0_eager", "shard8_l3_s5_eager", "shard8_l9_s0_eager",
                                        "shard8_l9_s5_eager"]
    assert all(not p.cuda_graphs for p in eager) and all(p.cuda_graphs for p in plans if p not in eager)
    labels = [p.label for p in plans]
    assert labels.index("live_s3_r3") < labels.index("calibrate_s3_r3") and len(set(labels)) == len(labels)
    assert label_variant("calibrate_s3_r3") == (1, None, True) and label_variant("shard8_l3_s5_eager") is None


def test_protocol_queue_times_live_in_calibration_windows_and_back():
    """sglang-h200-protocol: the live grid in 48-step windows, a calibration in 40-step ones, a
    plain pair; all of the num_steps-3 chain (the `_w` suffix keeps the variant)."""
    from calibration.engines.build import label_variant
    plans = {p.label: p for p in queue_plans("sglang-h200-protocol")}
    assert list(plans)[:4] == ["live_s3_w48", "calibrate_s3_w40", "calibrate_s3_r4", "live_s3_r4"]
    assert {q["timed_steps"] for q in plans["live_s3_w48"].points} == {48}
    assert {q["timed_steps"] for q in plans["calibrate_s3_w40"].points} == {40}
    assert not any(q["instrument_first"] for q in plans["live_s3_w48"].points)
    assert all(q["instrument_first"] for q in plans["calibrate_s3_w40"].points)
    assert all(label_variant(x) == (1, None, True) for x in list(plans)[:4])
    assert label_variant("live_s3_nooverlap_w48_r2") == (1, None, False) and label_variant("live_s3_w") is None


@pytest.mark.parametrize("point,msg", [
    ({"batch_size": 1, "prompt_len": 64, "acceptance_rate": None, "bogus": 1}, "points[0].bogus"),
    ({"batch_size": 0, "prompt_len": 64, "acceptance_rate": None}, "points[0].batch_size"),
    ({"batch_size": "abc", "prompt_len": 64, "acceptance_rate": None}, "points[0].batch_size"),
    ({"batch_size": 1, "prompt_len": 10**9, "acceptance_rate": None}, "points[0].prompt_len"),
    ({"batch_size": 1, "prompt_len": 64, "acceptance_rate": 2.0}, "points[0].acceptance_rate"),
    ({"batch_size": 1, "prompt_len": 64, "acceptance_rate": None, "timed_steps": 0}, "points[0].timed_steps"),
    ({"batch_size": 1, "prompt_len": 64, "acceptance_rate": None, "repeats": 0}, "points[0].repeats"),
    ({"batch_size": 1, "prompt_len": 9000, "acceptance_rate": None}, "max_model_len"),
    ({"batch_size": 100, "prompt_len": 64, "acceptance_rate": None}, "max_num_seqs"),
    ({"batch_size": 1, "prompt_len": 64, "acceptance_rate": 0.5}, "None exactly when num_steps is 0"),
])
def test_a_queue_with_a_bad_point_is_refused_before_anything_runs(tmp_path, point, msg):
    import json

    from typer.testing import CliRunner

    from simulator.cli import app
    q = tmp_path / "q"
    q.mkdir()
    good = dict(engine="fake", session="calibrate", label="a", num_steps=0, target_config={},
                points=[{"batch_size": 1, "prompt_len": 64, "acceptance_rate": None, "timed_steps": 4, "repeats": 1}])
    (q / "000_a.json").write_text(json.dumps(good))
    (q / "001_b.json").write_text(json.dumps({**good, "label": "b", "points": [point]}))
    r = CliRunner().invoke(app, ["calibrate", "engine-queue-run", str(q), str(tmp_path / "o" / "p.jsonl"),
                                 "--deadline-s", "60"])
    assert r.exit_code == 2 and msg in r.output and "001_b.json" in r.output and "Traceback" not in r.output, r.output
    assert not (tmp_path / "o" / "p.jsonl").exists()  # the good plan did not run either


def test_queue_strings_are_not_numbers_and_points_files_are_not_appended_to_foreign_files(tmp_path):
    import json

    from typer.testing import CliRunner

    from simulator.cli import app
    q = tmp_path / "q"
    q.mkdir()
    plan = dict(engine="fake", session="calibrate", label="a", num_steps=0, target_config={},
                points=[{"batch_size": 1, "prompt_len": 64, "acceptance_rate": None, "timed_steps": 4, "repeats": 1}])
    (q / "000_a.json").write_text(json.dumps({**plan, "max_total_tokens": "300"}))
    r = CliRunner().invoke(app, ["calibrate", "engine-queue-run", str(q), str(tmp_path / "p.jsonl"), "--deadline-s", "60"])
    assert r.exit_code == 2 and "max_total_tokens" in r.output, r.output
    (q / "000_a.json").write_text(json.dumps({**plan, "points_file": "other.jsonl"}))
    (tmp_path / "other.jsonl").write_text("precious\n")
    r = CliRunner().invoke(app, ["calibrate", "engine-queue-run", str(q), str(tmp_path / "p.jsonl"), "--deadline-s", "60"])
    assert r.exit_code == 2 and "points_file" in r.output and "not an engine points file" in r.output, r.output
    assert (tmp_path / "other.jsonl").read_text() == "precious\n"
    r = CliRunner().invoke(app, ["calibrate", "engine-queue-run", str(q), str(tmp_path / "p.jsonl"), "--deadline-s", "21"])
    assert r.exit_code == 2 and "more than 21" in r.output


def test_a_queue_folder_named_plans_beside_its_points_resumes(tmp_path):
    import json
    q = tmp_path / "plans"
    q.mkdir()
    plan = dict(engine="fake", session="calibrate", label="a", num_steps=0, target_config={},
                points=[{"batch_size": 1, "prompt_len": 64, "acceptance_rate": None, "timed_steps": 4, "repeats": 1}])
    (q / "000_a.json").write_text(json.dumps(plan))
    pts = tmp_path / "points.jsonl"
    assert run_queue(q, pts, log=lambda s: None) == {"a": "done"}
    assert run_queue(q, pts, log=lambda s: None) == {"a": "skipped"}
    assert [f.name for f in q.iterdir()] == ["000_a.json"]


def test_a_process_whose_points_failed_is_not_reported_done(tmp_path):
    import json
    q = tmp_path / "q"
    q.mkdir()
    plan = dict(engine="fake", session="calibrate", label="a", num_steps=0, target_config={}, max_model_len=256,
                points=[{"batch_size": 1, "prompt_len": 64, "acceptance_rate": None, "timed_steps": 20000,
                         "repeats": 1}])
    (q / "000_a.json").write_text(json.dumps(plan))
    pts = tmp_path / "points.jsonl"
    assert run_queue(q, pts, log=lambda s: None) == {"a": "points failed (error lines)"}
    assert [r["kind"] for r in read_lines(pts)] == ["engine", "error"]


def test_engine_queue_help_names_every_queue():
    from typer.testing import CliRunner

    from calibration.engines.queue import QUEUES
    from simulator.cli import app
    r = CliRunner().invoke(app, ["calibrate", "engine-queue", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and all(name in r.output for name in QUEUES), r.output


def test_the_mla_queue_runs_deepseek_v2_lite_with_a_capped_kv_pool():
    """Queue sglang-h200-mla: DeepSeek-V2-Lite's shape (MLA, no q compression) with its EAGLE-3 draft,
    the baseline and num_steps 3 over contexts 1k-16k, in a points file of its own, the KV pool capped
    so the GQA draft's pool (the target's token count) fits beside the MLA target's."""
    from calibration.cli.engine import _configs
    from calibration.engines.queue import QUEUES
    MLA_POINTS = "deepseek-v2-lite.points.jsonl"
    plans = QUEUES["sglang-h200-mla"]()
    assert [p.label for p in plans] == ["calibrate_s3", "live_s3", "calibrate_s0", "live_s0"]
    assert all(p.points_file == MLA_POINTS and p.uniform_expert_routing and p.max_total_tokens for p in plans)
    assert {q["prompt_len"] for p in plans for q in p.points} == {1024, 4096, 8192, 16384}
    assert all(q["prompt_len"] + 256 < p.max_model_len for p in plans for q in p.points)
    biggest = max(q["batch_size"] * (q["prompt_len"] + 256) for p in plans for q in p.points)
    assert biggest < plans[0].max_total_tokens
    _, _, t, d = _configs("deepseek-v2-lite", "eagle3-deepseek-v2-lite")
    assert (t["kv_lora_rank"], t["q_lora_rank"], t["n_routed_experts"], t["num_experts_per_tok"]) == (512, None, 64, 6)
    assert d["num_hidden_layers"] == 1 and d["hidden_size"] == t["hidden_size"] == 2048


def test_the_mla_records_and_profile_are_rebuilt_as_committed():
    """data/live/h200_sglang_0.5.15_deepseek-v2-lite and its profile: rebuilt from the committed points
    as committed; the verify's forward (4 tokens a request) was timed at every context, and it grows
    with the context at batch 32 (MLA's latent cache read per token)."""
    from pathlib import Path

    from calibration.cli.engine import _configs
    from calibration.engines.records import live_records
    from simulator.engines.profile import load_engine_profile
    ROOT = Path(__file__).resolve().parents[1]
    from simulator.evidence.validate import load_records
    pts = ROOT / "data" / "engine_runs" / "h200_sglang_0.5.15_deepseek-v2-lite" / "points.jsonl.gz"
    recs = load_records([ROOT / "data" / "live" / "h200_sglang_0.5.15_deepseek-v2-lite"])
    _, _, t, d = _configs("deepseek-v2-lite", "eagle3-deepseek-v2-lite")
    rebuilt = dict(live_records([pts], t, d))
    assert len(recs) == len(rebuilt) == 30
    for path, rec in recs:
        assert rebuilt[Path(path).name].tok_per_s == pytest.approx(rec.tok_per_s, rel=1e-12)
        assert rec.scenario.target.kv_lora_rank == 512
    prof = load_engine_profile("sglang-0.5.15-h200-deepseek-v2-lite-eagle3")
    verify = sorted((p.context_len, p.target_forward_us) for p in prof.points if p.num_steps == 3 and p.batch_size == 32)
    assert len(verify) == 4 and verify[-1][1] > 1.15 * verify[0][1]


def test_points_of_another_model_are_refused_where_their_engine_says_which_ran(tmp_path):
    """An engine line records the target and draft configs it ran (since 2026-12-04); `calibrate engine
    --from-points` and `live --from-points` with another --target refuse them in one line, and lines
    without that record (older files) are not checked."""
    import gzip
    import json
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    src = root / "data" / "engine_runs" / "h200_sglang_0.5.15_deepseek-v2-lite" / "points.jsonl.gz"
    t, d = model_configs("deepseek-v2-lite", "eagle3-deepseek-v2-lite")
    lines = [json.loads(s) for s in gzip.open(src, "rt")]
    for ln in lines:
        if ln["kind"] == "engine":
            ln["info"]["model"] = {"target": t, "draft": d}
    f = tmp_path / "p.jsonl"
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    ok = _cli("calibrate", "engine", "--from-points", f, "--target", "deepseek-v2-lite", "--draft",
              "eagle3-deepseek-v2-lite", "--out", tmp_path / "ok.json")
    assert ok.exit_code == 0, ok.output
    for cmd in (["calibrate", "engine", "--out", tmp_path / "bad.json"], ["live", "--out", tmp_path / "w"]):
        r = _cli(*cmd, "--from-points", f, "--target", "qwen3-30b-a3b", "--draft", "eagle3-qwen3-30b-a3b")
        assert r.exit_code != 0 and "ran another target: num_hidden_layers 27 (given 48)" in r.output, r.output
        assert "Traceback" not in r.output
    old = _cli("calibrate", "engine", "--from-points", src, "--target", "qwen3-30b-a3b", "--draft",
               "eagle3-qwen3-30b-a3b", "--out", tmp_path / "old.json")
    assert old.exit_code != 0 and "ran a target of 27 layers (given 48)" in old.output  # the depth recorded


def test_engine_queue_force_replaces_only_a_queue(tmp_path):
    """`engine-queue NAME DIR --force` replaces a queue written there before; a folder with other files
    is refused even with --force, and without --force a queue folder says --force would replace it."""
    q = tmp_path / "q"
    assert _cli("calibrate", "engine-queue", "sglang-h200-mla", q).exit_code == 0
    r = _cli("calibrate", "engine-queue", "vllm-h200-next", q)
    assert r.exit_code != 0 and "--force replaces the queue there" in r.output
    r = _cli("calibrate", "engine-queue", "vllm-h200-next", q, "--force")
    assert r.exit_code == 0 and sorted(f.name for f in q.iterdir()) == ["000_calibrate_s3.json", "001_calibrate_s0.json"]
    (q / "notes.txt").write_text("mine")
    r = _cli("calibrate", "engine-queue", "vllm-h200-next", q, "--force")
    assert r.exit_code != 0 and "other files" in r.output and (q / "notes.txt").exists()


def test_a_queue_of_an_engine_not_installed_here_is_refused_before_any_process_starts(tmp_path):
    import importlib.util

    from typer.testing import CliRunner

    from simulator.cli import app
    if importlib.util.find_spec("vllm") is not None and importlib.util.find_spec("torch") is not None:
        pytest.skip("vLLM is installed here")
    q = tmp_path / "q"
    runner = CliRunner()
    assert runner.invoke(app, ["calibrate", "engine-queue", "vllm-h200-hostspeed", str(q)]).exit_code == 0
    r = runner.invoke(app, ["calibrate", "engine-queue-run", str(q), str(tmp_path / "p.jsonl"), "--deadline-s", "60"])
    assert r.exit_code == 2 and "calibrate_s2_r2 and the other vllm plans" in r.output and "not installed" in r.output
    assert sorted(x.name for x in tmp_path.iterdir()) == ["q"]  # no points file, models or plan copies


def test_the_mla_paths_queue_runs_both_vllm_verify_paths_at_the_published_cases_contexts():
    """Queue vllm-h200-mla-paths: the MLA target at num_steps 3 on TRITON_MLA (vLLM's pick on SM120: the
    verify on MLA's prefill path) and on vLLM's own H200 choice, each in a points file of its own, at the
    contexts of the published Kimi-K2.5 verify-path case; the engine gets the backend for its MLA layers
    only; another engine's plan refuses the setting in one line."""
    from pathlib import Path

    from calibration.engines.build import CHAIN, label_variant
    from calibration.engines.plans import ProcessPlan
    from calibration.engines.queue import QUEUES
    MLA_PATH_CONTEXTS = [2048, 10000, 30000]  # the published Kimi-K2.5 verify-path case's contexts
    from calibration.engines.backends.vllm import llm_kwargs
    from simulator.evidence.cases import load_case_file
    plans = QUEUES["vllm-h200-mla-paths"]()
    assert [(p.label, p.mla_attention_backend) for p in plans] == [("calibrate_s3_mla_triton", "TRITON_MLA"),
                                                                   ("calibrate_s3_mla_default", None)]
    assert len({p.points_file for p in plans}) == 2 and all(p.num_steps == 3 for p in plans)
    assert all(label_variant(p.label) == CHAIN for p in plans)  # a profile builds from either file
    assert all(p.engine_env == {"VLLM_USE_V2_MODEL_RUNNER": "0"} and p.uniform_expert_routing for p in plans)
    cf = load_case_file(Path(__file__).resolve().parents[1] / "data" / "cases" / "public.yaml")
    kimi = next(c for c in cf.cases if c.id == "vllm-kimi-k25-8x-rtxpro6000-pcie-verify-graph")
    assert sorted({r.context_len or kimi.scenario.context_len for r in kimi.runs}) == MLA_PATH_CONTEXTS
    assert {q["prompt_len"] for p in plans for q in p.points} == set(MLA_PATH_CONTEXTS)
    assert all(q["prompt_len"] + 1024 < p.max_model_len for p in plans for q in p.points)
    kw = llm_kwargs("t", "d", 3, max_model_len=32768, max_num_seqs=64, gpu_memory_utilization=0.85,
                    capture_sizes=[1, 2, 4], mla_attention_backend=plans[0].mla_attention_backend)
    assert kw["attention_config"] == {"backend_per_kind": {"mla_attention": "TRITON_MLA"}}
    assert "attention_config" not in llm_kwargs("t", None, 0, max_model_len=4096, max_num_seqs=8,
                                                gpu_memory_utilization=0.5, capture_sizes=[1])
    with pytest.raises(ValueError, match="mla_attention_backend TRITON_MLA: a vLLM setting; this plan's engine is sglang"):
        ProcessPlan(**{**plans[0].model_dump(), "engine": "sglang"})
    t_llama, _ = model_configs()
    with pytest.raises(ValueError, match="the target has no MLA layers"):
        ProcessPlan(**{**plans[0].model_dump(), "target_config": t_llama})
    with pytest.raises(ValueError, match="mla_attention_backend"):
        ProcessPlan(**{**plans[0].model_dump(), "mla_attention_backend": "CUTLASS_MLA"})  # SM100 only
    both = QUEUES["vllm-h200-mla-all"]()  # the paths, then vllm-h200-next, in one queue of distinct labels per file
    assert both[:2] == plans and both[2:] == QUEUES["vllm-h200-next"]()
    assert len({(p.points_file, p.label) for p in both}) == len(both) == len({p.label for p in both})


def test_a_plan_file_with_two_problems_names_both_on_one_line(tmp_path):
    """`engine-queue-run` on a plan with a misspelt field (a missing one and an extra one): one error
    line, the two problems kept apart by '; ', no traceback."""
    import json
    q = tmp_path / "q"
    assert _cli("calibrate", "engine-queue", "vllm-h200-mla-paths", q).exit_code == 0
    f = sorted(q.glob("*.json"))[0]
    d = json.loads(f.read_text())
    d["num_step"] = d.pop("num_steps")
    f.write_text(json.dumps(d))
    r = _cli("calibrate", "engine-queue-run", q, tmp_path / "p.jsonl")
    out = " ".join(r.output.split())
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "missing field num_steps; " in out and "num_step: Extra inputs are not permitted; did you mean 'num_steps'?" in out


def test_a_calibration_with_a_prefill_grid_measures_the_prefill_alone_in_the_same_process(tmp_path):
    from calibration.engines.plans import calibrate_plans
    plans = calibrate_plans(dict(engine="fake", target_config={}, draft_config={}), [2], [1, 4], [256], 0.7,
                            timed_steps=8, repeats=1, prefill=([1, 3], [128, 512]))
    for p in plans:  # the steady points first, then the prefill alone (one new token) at 2 x 2
        pre = [q for q in p.points if q.get("workload") == "closed_batch"]
        assert [(q["batch_size"], q["prompt_len"], q["max_tokens"]) for q in pre] == [
            (3, 512, 1), (1, 512, 1), (3, 128, 1), (1, 128, 1)]
        assert all(q["acceptance_rate"] == (0.7 if p.num_steps else None) for q in pre)
    write_queue(plans, tmp_path / "q")
    pts = tmp_path / "points.jsonl"
    assert set(run_queue(tmp_path / "q", pts, deadline_s=600, log=lambda s: None).values()) == {"done"}
    got = [r["point"] for r in read_lines(pts) if r["kind"] == "point"]
    assert len(got) == 2 * (2 + 4)
    pre = [p for p in got if p.get("workload") == "closed_batch"]
    assert len(pre) == 8 and all(p["repeats"][0]["num_tokens"] == p["batch_size"] for p in pre)


def test_the_calibrate_campaign_measures_the_prefill_in_its_calibration_processes():
    plans = queue_plans("vllm-calibrate")
    cal = [p for p in plans if p.session == "calibrate"]
    assert [p.label for p in cal] == ["calibrate_s3", "calibrate_s0", "calibrate_s5"]
    assert all(sum(q.get("workload") == "closed_batch" for q in p.points) == 12 for p in cal)
