"""SGLang engine-native pieces that run without SGLang or a GPU: the forced acceptance's pmf, the
batch-size CUDA-graph padding, the CLI's SGLang-only options, the committed SGLang records."""

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from calibration.engines.records import _acceptance
from calibration.engines.backends.sglang import iid_accept_length
from simulator.acceptance import iid_mean_accept_length
from simulator.cli import app
from simulator.engines.profile import load_engine_profile

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("a,k", [(0.5, 1), (0.7, 3), (0.9, 6), (1.0, 4), (0.3, 2)])
def test_match_expected_pmf_has_the_iid_mean_on_two_neighbouring_lengths(a, k):
    assert iid_accept_length(a, k) == pytest.approx(iid_mean_accept_length(a, k))
    acc = _acceptance("sglang", k, a)
    probs = acc["accept_length_probs"]
    assert sum(probs) == pytest.approx(1.0)
    assert sum(p * (i + 1) for i, p in enumerate(probs)) == pytest.approx(iid_mean_accept_length(a, k))
    assert sum(p > 0 for p in probs) <= 2
    assert _acceptance("vllm", k, a) == {"kind": "iid", "acceptance_rate": a}


def test_sglang_profile_pads_the_batch_not_the_tokens():
    prof = load_engine_profile("sglang-0.5.15-h200-llama-3.1-8b-eagle3")
    sizes = prof.cudagraph_capture_sizes
    assert prof.engine == "sglang" and 9 not in sizes and 10 in sizes
    assert prof.padded_tokens(9 * 4, 9) == 10 * 4
    assert prof.padded_tokens(64 * 2, 64) == 128


def test_committed_sglang_records_validate():
    res = CliRunner().invoke(app, ["validate", str(ROOT / "data/live/h200_sglang_0.5.15"), "--profile", "h200"])
    assert res.exit_code in (0, 1), res.output
    assert "batch bar" in res.output


@pytest.mark.parametrize("args,msg", [
    (["--engine", "vllm", "--topk", "4"], "SGLang's"),
    (["--engine", "sglang", "--topk", "1", "--num-draft-tokens", "8"], "a chain"),
    (["--engine", "sglang", "--topk", "4", "--num-steps", "3", "--num-draft-tokens", "40"], "--num-draft-tokens 40"),
    (["--engine", "sglang", "--topk", "0"], "--topk 0"),
])
def test_sglang_only_options_are_checked(tmp_path, args, msg):
    res = CliRunner().invoke(app, ["calibrate", "engine", "--out", str(tmp_path / "p.json"), *args])
    assert res.exit_code != 0
    assert msg in res.output


def test_variant_of_a_label():
    from calibration.engines.build import label_variant
    assert label_variant("calibrate_s3") == (1, None, True)
    assert label_variant("calibrate_s3_r2") == (1, None, True)
    assert label_variant("live_s3_t4_n8") == (4, 8, True)
    assert label_variant("calibrate_s0_nooverlap") == (1, None, False)
    assert label_variant("shard8_l3_s5") is None


P = ROOT / "data/engine_runs/h200_sglang_0.5.15/points.jsonl.gz"


def _shapes():
    from calibration.cli.engine import _configs
    return _configs("llama-3.1-8b-instruct", "eagle3-llama-3.1-8b")[2:]


def test_profiles_are_built_per_variant():
    from calibration.engines.build import build_profile
    t, d = _shapes()
    chain = build_profile([P], "c", t, d)
    tree = build_profile([P], "t", t, d, variant=(4, 8, True))
    sync = build_profile([P], "n", t, d, variant=(1, None, False))
    assert {p.num_steps for p in chain.points} == {0, 1, 2, 3, 4, 6} and chain.topk == 1
    assert {p.num_steps for p in tree.points} == {0, 3} and (tree.topk, tree.num_draft_tokens) == (4, 8)
    assert tree.attention_backend == "flashinfer"  # SGLang's own choice for topk > 1 on Hopper
    assert not sync.async_scheduling and {p.num_steps for p in sync.points} == {0, 3}
    # without its overlap scheduler the host's work is the step less the timed graph replays
    p = next(p for p in sync.points if p.num_steps == 3 and p.batch_size == 8)
    assert p.host_busy_us == pytest.approx(p.step_us - p.target_forward_us - p.sample_us - p.propose_us)
    left = build_profile([P], "x", t, d, exclude_labels=("calibrate_s3_r2",))
    assert len(left.points) == len(chain.points) - 14 and any("calibrate_s3_r2" in n for n in left.notes)


def test_tree_and_sync_records_name_their_shape():
    from calibration.engines.records import live_records
    t, d = _shapes()
    tree = live_records([P], t, d, variant=(4, 8, True))
    assert len(tree) == 56 and all(r.scenario.spec.topk == 4 and r.scenario.spec.num_draft_tokens == 8
                                   and r.paired_baseline_tok_per_s for _, r in tree)
    sync = live_records([P], t, d, variant=(1, None, False))
    assert len(sync) == 43 and all(re.search(r"_nooverlap(_r\d+)?\.json$", n) for n, _ in sync)
    assert all(not r.scenario.serving_engine.overlapped for _, r in sync)


def test_a_chain_profile_does_not_price_a_tree_or_a_sync_engine():
    from simulator.config import Scenario
    from simulator.costs.engine_native import profile_mismatch
    t, d = _shapes()
    from calibration.engines.records import live_records
    _, rec = live_records([P], t, d, variant=(4, 8, True))[0]
    chain = load_engine_profile("sglang-0.5.15-h200-llama-3.1-8b-eagle3")
    assert "topk 1" in profile_mismatch(chain, rec.scenario)
    tree = load_engine_profile("sglang-0.5.15-h200-llama-3.1-8b-eagle3-tree-t4-n8")
    assert profile_mismatch(tree, rec.scenario) is None
    _, srec = live_records([P], t, d, variant=(1, None, False))[-1]
    assert "overlap scheduling on" in profile_mismatch(chain, srec.scenario)
    data = rec.scenario.model_dump(mode="json")
    data["acceptance"] = {"kind": "iid", "acceptance_rate": 0.7}
    with pytest.raises(ValueError, match="'tree'.*'empirical'"):
        Scenario.model_validate(data)


def test_exclude_process_needs_from_points(tmp_path):
    res = CliRunner().invoke(app, ["calibrate", "engine", "--engine", "fake", "--out", str(tmp_path / "p.json"),
                                   "--exclude-process", "calibrate_s3"])
    assert res.exit_code != 0 and "--from-points" in res.output


def test_transformers_fallback_is_refused():
    from calibration.engines.backends.sglang_model import check_sglang_model
    fallback = type("TransformersForCausalLM", (), {"__module__": "sglang.srt.models.transformers"})
    own = type("DeepseekV3ForCausalLM", (), {"__module__": "sglang.srt.models.deepseek_v2"})
    with pytest.raises(RuntimeError, match="Transformers fallback"):
        check_sglang_model(fallback())
    assert check_sglang_model(own()).endswith("DeepseekV3ForCausalLM")


@pytest.mark.parametrize("folder,profile", [("h200_sglang_0.5.15_tree", "tree"), ("h200_sglang_0.5.15_no_overlap", "sync")])
def test_committed_variant_records_validate(folder, profile):
    res = CliRunner().invoke(app, ["validate", str(ROOT / "data/live" / folder), "--profile", "h200"])
    assert res.exit_code in (0, 1), res.output
    assert "batch bar" in res.output and "Traceback" not in res.output


def test_dsa_stand_ins_keep_deepseek_importable(monkeypatch):
    import importlib.util
    import sys
    if importlib.util.find_spec("cutlass") is not None:
        pytest.skip("CuTe DSL installed: no stand-in is needed")
    for name in ("sglang.srt.layers.attention.dsa_backend", "sglang.jit_kernel.dsa.cutedsl_paged_mqa_logits"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    from calibration.engines.backends.sglang_model import stub_dsa_backend
    note = stub_dsa_backend()
    assert "cutedsl_paged_mqa_logits" in note
    kmod = sys.modules["sglang.jit_kernel.dsa.cutedsl_paged_mqa_logits"]
    assert isinstance(kmod.CuteDSLPagedMQALogitsRunner, type)
    with pytest.raises(RuntimeError, match="nvidia-cutlass-dsl"):
        kmod.pick_dsl_expand()


def test_from_points_builds_from_the_batches_contexts_and_steps_asked_for(tmp_path):
    import json
    r = CliRunner().invoke(app, ["calibrate", "engine", "--engine", "sglang", "--from-points", str(P), "--out",
                                 str(tmp_path / "p.json"), "--batches", "1,8", "--context-lens", "1024",
                                 "--num-steps", "2"])
    assert r.exit_code == 0, r.output
    pts = json.loads((tmp_path / "p.json").read_text())["points"]
    assert {(p["num_steps"], p["batch_size"], p["prompt_len"]) for p in pts} == {
        (k, b, 1024) for k in (0, 2) for b in (1, 8)}
    r = CliRunner().invoke(app, ["calibrate", "engine", "--engine", "sglang", "--from-points", str(P), "--out",
                                 str(tmp_path / "q.json"), "--batches", "3"])
    assert r.exit_code != 0 and "at --batches 3" in r.output
    r = CliRunner().invoke(app, ["calibrate", "engine", "--engine", "sglang", "--from-points", str(P), "--out",
                                 str(tmp_path / "q.json"), "--num-steps", "5"])
    assert r.exit_code != 0 and "holds num_steps 1, 2, 3, 4, 6" in r.output


def test_sglang_cells_are_told_apart_by_the_forced_rate(tmp_path):
    """SGLang's records carry an empirical pmf that differs by num_steps; validate keys its cells by
    the rate the engine was forced to, so the three rates are three cells (28 in all, as vLLM's
    grid), and no record is taken for a second take of another."""
    import json
    import shutil
    one = tmp_path / "one_process_each"
    one.mkdir()
    for f in (ROOT / "data/live/h200_sglang_0.5.15").glob("*.json"):
        # a second engine process of a configuration is a second take (`_r2`; the live grid timed in 48-step
        # windows, process live_s3_w48, names its points t48x2)
        if not re.search(r"_r\d+$", f.stem) and "_t48x2_" not in f.name:
            shutil.copy(f, one / f.name)
    r = CliRunner().invoke(app, ["validate", str(one), "--profile", "h200", "--json", str(tmp_path / "v.json")])
    assert r.exit_code in (0, 1), r.output
    assert "more than one record in one folder" not in r.output
    assert "empirical (forced 0.5)" in r.output and "empirical (forced 0.9)" in r.output
    summary = json.loads((tmp_path / "v.json").read_text())["summaries"][0]
    assert summary["best_num_steps_cells"] == 28


def test_a_window_turns_recorded_steps_and_events_into_step_times():
    """The hooked engines' shared window (calibration.engines.backends.base): host periods from the step
    starts, spans from event pairs (ms -> us), the GPU period from one step's start to the next."""
    from calibration.engines.backends.base import RecordingWindow, window_step_times

    class Ev:
        def __init__(self, ms):
            self.ms = ms

        def elapsed_time(self, other):
            return other.ms - self.ms

    steps = [{"host_t": 1.0, "blocked_s": 0.001, "tokens": 16,
              "ev": {"exec": Ev(0.0), "fwd0": Ev(0.5), "fwd1": Ev(4.5), "ext0": Ev(5.0), "ext1": Ev(5.25)}},
             {"host_t": 1.006, "ev": {"exec": Ev(6.0)}}]
    out = window_step_times(steps, {"target_tokens_padded": "tokens"})
    assert out[0].host_period_us == pytest.approx(6000.0) and out[0].host_blocked_us == pytest.approx(1000.0)
    assert out[0].target_forward_us == pytest.approx(4000.0) and out[0].draft_extend_us == pytest.approx(250.0)
    assert out[0].gpu_period_us == pytest.approx(6000.0) and out[0].target_tokens_padded == 16
    assert out[0].sample_us is None and out[1].host_period_us is None and out[1].gpu_period_us is None

    class Torch:
        class cuda:
            synced = 0

            @classmethod
            def synchronize(cls):
                cls.synced += 1

    w = RecordingWindow()
    w._torch = Torch
    w.start_window(True)
    assert w._recording and w._instrument and w._steps == []
    w._instrument = False
    w._begin_step()
    closed = w._close_window()
    assert len(closed) == 1 and "host_t" in closed[0] and "ev" not in closed[0]
    assert not w._recording and w._steps == []
    assert Torch.cuda.synced == 1


def test_a_repeated_process_pairs_with_its_own_baseline(tmp_path):
    import gzip
    import json

    from calibration.engines.records import live_records
    t, d = _shapes()
    lines = [json.loads(s) for s in gzip.open(P, "rt")]
    again = []
    for ln in lines:
        if ln.get("label") in ("live_s0", "live_s3"):
            ln = json.loads(json.dumps(ln))
            ln["label"] += "_r9"
            if ln["kind"] == "point" and ln["point"]["num_steps"] == 0:
                for r in ln["point"]["repeats"]:
                    r["elapsed_us"] *= 2.0  # the second baseline process ran at half the speed
            again.append(ln)
    f = tmp_path / "points.jsonl"
    f.write_text("".join(json.dumps(x) + "\n" for x in lines + again))
    recs = dict(live_records([f], t, d))
    first, second = recs["sglang_b8_p1024_a0.7_t40x2_s3.json"], recs["sglang_b8_p1024_a0.7_t40x2_s3_r9.json"]
    assert second.paired_baseline_tok_per_s == pytest.approx(first.paired_baseline_tok_per_s / 2.0)
    assert recs["sglang_b8_p1024_a0.7_t40x2_s1.json"].paired_baseline_tok_per_s == first.paired_baseline_tok_per_s
    assert "sglang_b8_p1024_base_t40x2_s0_r9.json" in recs


def test_host_paced_sglang_spans_are_kept_and_busy_ones_scaled():
    """A speculative step whose GPU waited for the host (the seed shard at batch 1) keeps its graph
    spans as measured and counts no idle GPU work; a GPU-busy one (the 8B target at batch 64) has
    its parts scaled to the event-free step."""
    import gzip
    import json

    from calibration.engines.build import engine_point
    lines = [json.loads(s) for s in gzip.open(P, "rt")]

    def point(label, batch):
        return next(ln["point"] for ln in lines if ln["kind"] == "point" and ln["label"] == label
                    and ln["point"]["batch_size"] == batch)
    raw = point("shard8_l3_s5", 1)
    ep = engine_point(raw, "sglang")
    inst = next(r for r in raw["repeats"] if r["instrumented"])["means"]
    assert ep.gpu_bound and ep.gpu_parts_scale is None and ep.other_gpu_us == 0.0
    assert ep.target_forward_us == pytest.approx(inst["target_forward_us"])
    busy = engine_point(point("calibrate_s3", 64), "sglang")
    assert busy.gpu_bound and busy.gpu_parts_scale is not None and 0.9 < busy.gpu_parts_scale < 1.1


def test_the_blocked_time_hook_keeps_its_window_when_the_runner_starts_the_next():
    """SGLang's scheduler thread waits in `process_batch_result_decode` for a step's output copy while the runner's
    thread may close the window and start the next (a run's last step, a batch ahead): the hook adds the wait to
    the window it began in, and never reads the new, empty one (an IndexError that stopped the scheduler 5 times
    on 2026-12-07)."""
    from calibration.engines.backends.sglang import note_blocked

    class Backend:
        _recording = True
        _steps = [{"host_t": 0.0}]

    be = Backend()
    first = be._steps

    class Copy:
        def synchronize(self):  # the runner's thread meanwhile: end_window, then start_window of the next run
            be._steps = []

    class Result:
        copy_done = Copy()

    note_blocked(be, Result())
    assert "blocked_s" in first[-1] and first[-1]["blocked_s"] >= 0.0 and be._steps == []
    note_blocked(be, Result())  # an empty window: nothing to add to
    be._recording = False
    note_blocked(be, Result())
