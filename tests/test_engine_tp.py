"""Engine TP groups (issue 28): one process a rank (calibration/engines/tp_launch.py), on CPU.

The fake engine runs over a gloo group: the ranks check every step that they ran the same batch,
the target pays allreduces per layer and the draft's placement (sharded with the target or on one
GPU) changes what it costs. Calibration at both placements, the live grid, the profiles and
`validate`'s faster-placement check run end to end here, as the GPU queues run them.
"""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from calibration.engines.build import build_profile, engine_group, of_group
from calibration.engines.campaign import run_processes
from calibration.engines.backends.fake import FAIL_ENV, TARGET_LAYERS, FakeCosts, allreduce_us
from calibration.engines.plans import ProcessPlan, calibrate_plans, live_plans
from calibration.engines.records import live_records, write_records
from calibration.engines.worker import read_lines
from calibration.shapes import LLAMA_8B, eagle3_draft
from simulator.costs.engine_native import profile_mismatch
from simulator.engines.profile import EngineProfile, placement_label
from simulator.evidence.validate import compare, load_records, summarize
from simulator.profile import load_profile, resolve_profile_path

ROOT = Path(__file__).resolve().parent.parent
TARGET, DRAFT = LLAMA_8B.model_dump(), eagle3_draft(LLAMA_8B).model_dump()
BASE = dict(engine="fake", target_config={}, draft_config={}, tensor_parallel_size=2)
BATCHES, PROMPTS = [1, 8, 32], [512, 2048]


def _label(plans: list[ProcessPlan], suffix: str) -> list[ProcessPlan]:
    return [p.model_copy(update={"label": p.label + suffix}) for p in plans]


@pytest.fixture(scope="module")
def tp2_campaign(tmp_path_factory):
    """A fake engine over a TP group of 2 (two processes, gloo): the draft sharded with the target
    and on one GPU, calibrated and live at num_steps 2 and 4."""
    d = tmp_path_factory.mktemp("tp2")
    pts = d / "points.jsonl"
    plans = []
    for dtp, sfx in ((None, "_tp2"), (1, "_tp2_d1")):
        base = {**BASE, "draft_tensor_parallel_size": dtp}
        cal = calibrate_plans(base, [2, 4], BATCHES, PROMPTS, 0.7, timed_steps=16)
        live = live_plans(base, [2, 4], BATCHES, PROMPTS, [0.6, 0.9], timed_steps=16)
        if dtp is not None:  # a baseline runs no draft: the placements share it
            cal, live = [p for p in cal if p.num_steps], [p for p in live if p.num_steps]
        plans += _label(cal, sfx) + _label(live, sfx)
    t0 = time.monotonic()
    status = run_processes(plans, pts, in_process=True, log=lambda s: None)  # a group is processes anyway
    assert set(status.values()) == {"done"}, status
    assert time.monotonic() - t0 < 240
    records = []
    for group, name in (((2, 2), "shared"), ((2, 1), "one")):
        prof = build_profile([pts], name, TARGET, DRAFT, group=group)
        (d / f"{name}.json").write_text(prof.model_dump_json())
        records += live_records([pts], TARGET, DRAFT, engine_profile=str(d / f"{name}.json"), group=group)
    write_records(records, d / "live")
    return d, pts


def test_every_rank_ran_and_rank_0_alone_wrote(tp2_campaign):
    d, pts = tp2_campaign
    lines = read_lines(pts)
    engines = [r for r in lines if r["kind"] == "engine"]
    assert engines and all(e["tensor_parallel_size"] == 2 and e["info"]["tp_size"] == 2 for e in engines)
    asked = {e["label"]: (e["draft_tensor_parallel_size_asked"], e["info"]["draft_tp_size"]) for e in engines}
    assert asked["calibrate_s2_tp2"] == (None, 2) and asked["calibrate_s2_tp2_d1"] == (1, 1)
    assert asked["calibrate_s0_tp2"] == (None, None)
    keys = [(r["label"], r["point"]["key"]) for r in lines if r["kind"] == "point"]
    assert len(keys) == len(set(keys))  # one line a point: rank 1 wrote none
    assert not [r for r in lines if r["kind"] == "error"]
    logs = sorted((pts.parent / "points.jsonl.plans").glob("*.rank1.log"))
    assert logs and all("TP group" not in f.read_text() for f in logs)  # the rank's own log, not the launcher's


def test_profiles_record_the_group_the_engine_ran(tp2_campaign):
    d, _ = tp2_campaign
    shared = EngineProfile.model_validate_json((d / "shared.json").read_text())
    one = EngineProfile.model_validate_json((d / "one.json").read_text())
    assert (shared.tp_size, shared.draft_tp_size, one.tp_size, one.draft_tp_size) == (2, 2, 2, 1)
    # the baseline is measured once and priced alike in both
    assert [p for p in shared.points if not p.num_steps] == [p for p in one.points if not p.num_steps]


def test_validate_predicts_both_placements_and_the_faster_one(tp2_campaign):
    d, _ = tp2_campaign
    recs = load_records([d / "live"])
    assert {r.scenario.placement.label for _, r in recs if r.speculative} == {"shared_tp", "tp1_colocated"}
    points = compare(recs, load_profile(resolve_profile_path("h200")))
    errs = sorted(abs(p.tok_per_s_error_frac) for p in points)
    assert errs[len(errs) // 2] <= 0.03 and errs[-1] <= 0.08, errs[-5:]
    s = summarize(points)[0]
    assert s.faster_placement_cells >= 10 and s.faster_placement_agree == s.faster_placement_cells
    # the placements do differ in the fake, and which one wins depends on the point
    by = {}
    for p in points:
        if p.speculative:
            by.setdefault((p.num_steps, p.acceptance, p.batch_size, p.context_len), {})[p.placement] = p.measured_tok_per_s
    ratios = [c["tp1_colocated"] / c["shared_tp"] for c in by.values() if len(c) == 2]
    assert min(ratios) < 0.97 and max(ratios) > 1.0  # the draft's allreduces outgrow what sharding saves


def test_a_profile_prices_only_the_placement_it_ran(tp2_campaign):
    d, _ = tp2_campaign
    one = EngineProfile.model_validate_json((d / "one.json").read_text())
    recs = load_records([d / "live"])
    shared = next(r for _, r in recs if r.speculative and r.scenario.placement.label == "shared_tp")
    why = profile_mismatch(one, shared.scenario)
    assert why and "draft ran at tp 1" in why and "shared_tp" in why
    ded = shared.scenario.model_copy(update={"placement": shared.scenario.placement.model_validate(
        {"kind": "dedicated", "draft_tp_size": 1})})
    assert "GPU of its own" in profile_mismatch(one, ded)


def test_a_failed_rank_ends_the_group_with_an_error_line(tmp_path, monkeypatch):
    plan = ProcessPlan(**BASE, session="calibrate", label="calibrate_s3_tp2", num_steps=3,
                       points=[dict(batch_size=4, prompt_len=256, acceptance_rate=0.7, timed_steps=8)])
    monkeypatch.setenv(FAIL_ENV, "1:5")  # rank 1 exits at its fifth decode step
    pts = tmp_path / "points.jsonl"
    t0 = time.monotonic()
    status = run_processes([plan], pts, log=lambda s: None)
    assert time.monotonic() - t0 < 60  # rank 0 did not wait in a collective for ever
    assert status["calibrate_s3_tp2"].startswith(("failed", "points failed"))
    errors = [r for r in read_lines(pts) if r["kind"] == "error"]
    assert errors and any("rank 1 of 2: exit code 17" in r["error"] for r in errors)
    assert not [r for r in read_lines(pts) if r["kind"] == "point"]


def test_no_rank_outlives_its_launcher(tmp_path):
    """A launcher ended by a signal (or killed by a campaign's deadline) ends its ranks: none goes on
    writing to the points file."""
    import os
    import signal
    import subprocess
    import sys
    plan = ProcessPlan(**BASE, session="calibrate", label="calibrate_s3_tp2", num_steps=3,
                       points=[dict(batch_size=b, prompt_len=256, acceptance_rate=0.7, timed_steps=4000)
                               for b in (1, 2, 4, 8)])
    f = tmp_path / "plan.json"
    f.write_text(plan.model_dump_json())
    pts = tmp_path / "points.jsonl"
    for sig in (signal.SIGTERM, signal.SIGKILL):
        launcher = subprocess.Popen([sys.executable, "-m", "simulator.cli", "calibrate", "engine-process", str(f),
                                     str(pts)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                    cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        deadline = time.monotonic() + 60
        while not [ln for ln in read_lines(pts) if ln["kind"] == "engine"] and time.monotonic() < deadline:
            time.sleep(0.2)  # the ranks are up
        ranks = _children(launcher.pid)
        assert len(ranks) == 2
        launcher.send_signal(sig)
        launcher.wait(timeout=30)
        deadline = time.monotonic() + 30
        while any(_alive(r) for r in ranks) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(r) for r in ranks), sig
        pts.unlink()


def _children(pid: int) -> list[int]:
    from tests.conftest import child_pids
    return child_pids(pid)


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_points_of_two_groups_need_one_chosen(tp2_campaign):
    _, pts = tp2_campaign
    with pytest.raises(ValueError, match="several TP groups.*--tp and --draft-tp"):
        build_profile([pts], "x", TARGET, DRAFT)
    with pytest.raises(ValueError, match="no points of tp 4"):
        build_profile([pts], "x", TARGET, DRAFT, group=(4, 4))
    assert build_profile([pts], "x", TARGET, DRAFT, group=(None, 1)).tp_size == 2  # the only target TP there


def test_the_group_is_what_the_engine_built_not_what_was_asked():
    # vLLM 0.26 accepts draft_tensor_parallel_size 1 for an EAGLE-3 draft and builds it over the group
    asked_one = {"label": "calibrate_s3_tp2_d1", "num_steps": 3, "tensor_parallel_size": 2,
                 "draft_tensor_parallel_size_asked": 1, "info": {"tp_size": 2, "draft_tp_size": 2}}
    assert engine_group(asked_one) == (2, 2)
    assert engine_group({"label": "calibrate_s3", "num_steps": 3, "info": {}}) == (1, 1)  # before TP groups
    assert engine_group({"label": "calibrate_s0_tp2", "num_steps": 0, "info": {"tp_size": 2}}) == (2, None)
    line = {"label": "calibrate_s3_tp2_d1", "point": {"num_steps": 3}}
    with pytest.raises(ValueError, match="no points of tp 2, draft tp 1 as the engine ran them"):
        of_group([asked_one], [line], (2, 1), "f")
    assert placement_label(2, 2) == "shared_tp" and placement_label(8, 1) == "tp1_colocated"


def test_fake_costs_split_over_the_group_and_pay_its_allreduces():
    c = FakeCosts()
    one, two = c.target_forward_us(8, 8, 1024, 1), c.target_forward_us(8, 8, 1024, 2)
    assert two == pytest.approx(60.0 + (one - 60.0) / 2 + 2 * TARGET_LAYERS * allreduce_us(8, 2))
    assert c.draft_step_us(1, 1024, 2) < c.draft_step_us(1, 1024, 1)
    assert c.draft_tokens_broadcast_us(8, 3, 1) == 0.0 < c.draft_tokens_broadcast_us(8, 3, 8)


def test_plans_refuse_a_draft_tp_the_engines_do_not_take():
    with pytest.raises(ValueError, match="1 or the target's tensor_parallel_size"):
        ProcessPlan(**{**BASE, "tensor_parallel_size": 4}, draft_tensor_parallel_size=2, session="calibrate",
                    label="x", num_steps=3, points=[dict(batch_size=1, prompt_len=256, acceptance_rate=0.7)])
    with pytest.raises(ValueError, match="SGLang runs an EAGLE draft in the target's TP group"):
        ProcessPlan(**{**BASE, "engine": "sglang"}, draft_tensor_parallel_size=1, session="calibrate",
                    label="x", num_steps=3, points=[dict(batch_size=1, prompt_len=256, acceptance_rate=0.7)])


@pytest.mark.parametrize("args, msg", [
    (["calibrate", "engine", "--engine", "fake", "--out", "{d}/p.json", "--tp", "2", "--draft-tp", "3"],
     "--draft-tp 3: 1 or the target's --tp (2)"),
    (["calibrate", "engine", "--engine", "fake", "--out", "{d}/p.json", "--tp", "9"], "--tp 9: 1..8 GPUs"),
    (["calibrate", "engine", "--engine", "sglang", "--out", "{d}/p.json", "--tp", "2", "--draft-tp", "1"],
     "SGLang runs an EAGLE draft in the target's TP group"),
    (["live", "--out", "{d}/live", "--draft-tp", "1"], "--draft-tp goes with --engine or --from-points"),
    (["calibrate", "engine", "--engine", "fake", "--out", "{d}/p.json", "--draft-tp", "1"], "give --tp too"),
])
def test_tp_options_refused_in_one_line(tmp_path, args, msg):
    from simulator.cli import app
    r = CliRunner().invoke(app, [a.format(d=tmp_path) for a in args], env={"COLUMNS": "200"})
    assert r.exit_code != 0 and msg in r.output and "Traceback" not in r.output, r.output
    assert len([ln for ln in r.output.splitlines() if ln.strip()]) == 1, r.output


def test_the_group_path_ran_on_the_lent_h200():
    """The committed group-of-one runs (queues vllm-h200-group1, sglang-h200-group1): each engine's
    line records the group and the draft's TP as built, and every point was measured."""
    for folder, engine in (("h200_vllm_0.26.0_group", "vllm"), ("h200_sglang_0.5.15_group", "sglang")):
        lines = [json.loads(ln) for ln in gzip.open(ROOT / "data" / "engine_runs" / folder / "points_2026-12-04.jsonl.gz",
                                                      "rt")]
        eng = [r for r in lines if r["kind"] == "engine"]
        assert len(eng) == 1 and eng[0]["info"]["engine"] == engine
        assert (eng[0]["info"]["tp_size"], eng[0]["info"]["draft_tp_size"]) == (1, 1)
        assert sorted(r["point"]["batch_size"] for r in lines if r["kind"] == "point") == [1, 8, 32]
        assert not [r for r in lines if r["kind"] == "error"]
