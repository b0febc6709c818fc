"""Live serving runs on a CPU (tiny shapes, eager): the record, its metrics, the DES comparison,
the CLI's one-line errors. No accuracy bar here (a CPU's step times are not a profile's)."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from typer.testing import CliRunner  # noqa: E402

from calibration.live import serving as S  # noqa: E402
from simulator.cli import app  # noqa: E402
from simulator.config import Scenario  # noqa: E402
from simulator.evidence.live_records import LiveServingRun  # noqa: E402
from simulator.evidence.validate_serving import check_record, serving_bar  # noqa: E402
from simulator.serving.metrics import serving_metrics  # noqa: E402
from tests.test_live import DRAFT, TARGET, _one_line_error  # noqa: E402

CONTEXT = 32


@pytest.fixture(autouse=True)
def _tiny(monkeypatch):
    """Tiny shapes under the size key 8b, a short window, short outputs, one thread."""
    t = Scenario.model_validate(dict(target=TARGET, draft=DRAFT, acceptance=dict(kind="iid", acceptance_rate=0.7)))
    monkeypatch.setattr(S, "SIZES", {"8b": (t.target, t.draft)})
    monkeypatch.setattr(S, "CONTEXT_LEN", CONTEXT)
    monkeypatch.setattr(S, "OUTPUT_TOKENS", (3, 9))
    monkeypatch.setattr(S, "WARMUP_CYCLES", 1)
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _run(concurrency=3, speculative=True, num_requests=7):
    sc = S.serving_scenario("8b", concurrency, 3, 0.7, num_requests, graph=False)
    return S.run_live_serving(sc, speculative, device="cpu", warmup_cycles=1)


@pytest.mark.parametrize("speculative", [True, False])
def test_live_serving_record_is_consistent(speculative):
    rec = _run(speculative=speculative)
    again = LiveServingRun.model_validate_json(rec.model_dump_json())
    assert again == rec
    n, c = len(rec.arrival_us), rec.scenario.serving.arrivals.concurrency
    assert n == 7 and all(3 <= k <= 9 for k in rec.output_tokens)
    assert max(rec.step_batch_size) <= c and rec.step_batch_size[0] == 0  # the first step admits the first C
    assert sorted(rec.arrival_us)[:c] == [0.0] * c  # closed loop: C at once, the rest at finishes
    assert sum(1 for a in rec.arrival_us if a > 0) == n - c
    assert rec.step_start_us[1:] == rec.step_end_us[:-1]  # the clock is the wall clock, step after step
    # every token is emitted: 1 at the first step, the rest by decode steps
    assert sum(rec.step_accepted) >= sum(rec.output_tokens) - n
    assert rec.result == serving_metrics(rec.serving_records(), 0.0, None, None)
    assert rec.result.output_tok_per_s == pytest.approx(sum(rec.output_tokens) / (max(rec.finish_us) * 1e-6))
    assert (any(rec.step_num_steps) == speculative) and rec.result.num_requests == n


def test_the_schedule_is_the_seeded_one_and_the_des_replays_it(tmp_path):
    """Two live runs of one scenario serve the same schedule; the DES on the recorded scenario
    serves it too (same steps, batches, accept lengths, output lengths)."""
    from simulator.profile import load_profile, resolve_profile_path
    a, b = _run(), _run()
    assert (a.step_batch_size, a.step_accepted, a.output_tokens) == (b.step_batch_size, b.step_accepted,
                                                                       b.output_tokens)
    prof = load_profile(resolve_profile_path("h200"))
    row = check_record("x.json", a, prof, "per_op")
    assert row.same_schedule and row.concurrency == 3 and row.num_requests == 7
    assert row.tok_per_s_error_frac == pytest.approx(row.predicted_tok_per_s / row.measured_tok_per_s - 1)
    met, line = serving_bar([row])
    assert ("met" in line) and isinstance(met, bool)


def test_live_serving_cli_writes_resumes_and_validates(tmp_path):
    out = tmp_path / "runs"
    argv = ["live", "--serving", "--device", "cpu", "--out", str(out), "--concurrency", "1,2", "--requests", "3"]
    r = CliRunner().invoke(app, argv)
    assert r.exit_code == 0, r.output
    names = sorted(f.name for f in out.glob("*.json"))
    assert names == sorted(f"8b_eager_serving_c{c}_{w}.json" for c in (1, 2) for w in ("s3_a70", "baseline"))
    stamps = {f.name: f.stat().st_mtime_ns for f in out.glob("*.json")}
    assert CliRunner().invoke(app, argv).exit_code == 0  # resume: nothing runs again
    assert stamps == {f.name: f.stat().st_mtime_ns for f in out.glob("*.json")}
    r = CliRunner().invoke(app, ["validate-serving", str(out), "--profile", "h200", "--costs-source", "per_op",
                                 "--json", str(tmp_path / "v.json")])
    assert r.exit_code == 0, r.output
    data = json.loads((tmp_path / "v.json").read_text())
    assert data["specdecsim_output"] == "serving_validation/2" and len(data["points"]) == 4
    assert all(p["same_schedule"] for p in data["points"])
    assert "serving bar (5% on tok/s and TPOT p50, 4 runs)" in r.output


def test_record_refuses_inconsistent_columns():
    rec = _run(concurrency=2, num_requests=3).model_dump(mode="json")
    bad = dict(rec, finish_us=rec["finish_us"][:-1])
    with pytest.raises(ValueError, match="one entry per request"):
        LiveServingRun.model_validate(bad)
    bad = dict(rec, first_token_us=[f + 1e9 for f in rec["first_token_us"]])
    with pytest.raises(ValueError, match="arrival_us <= admit_us <= first_token_us <= finish_us"):
        LiveServingRun.model_validate(bad)
    late = max(rec["step_end_us"]) + 1e6
    bad = dict(rec, finish_us=[late] * len(rec["finish_us"]))
    with pytest.raises(ValueError, match="after the last step's end"):
        LiveServingRun.model_validate(bad)
    bad = dict(rec, itl_us=[t * 3 for t in rec["itl_us"]])
    with pytest.raises(ValueError, match=r"inter-token gaps \(itl_us\) summing to .* finish_us - first_token_us"):
        LiveServingRun.model_validate(bad)
    zero = dict(rec, arrival_us=[0.0] * len(rec["arrival_us"]), admit_us=[0.0] * len(rec["arrival_us"]),
                first_token_us=[0.0] * len(rec["arrival_us"]), finish_us=[0.0] * len(rec["arrival_us"]),
                itl_us=[0.0] * len(rec["itl_us"]))
    with pytest.raises(ValueError, match="tokens, all at 0 us"):
        LiveServingRun.model_validate(zero)
    swapped = dict(rec, step_start_us=list(reversed(rec["step_start_us"])))
    with pytest.raises(ValueError, match="steps run one after another"):
        LiveServingRun.model_validate(swapped)
    long = dict(rec, step_end_us=rec["step_end_us"][:-1] + [1e12])
    with pytest.raises(ValueError, match="after the last request finished"):
        LiveServingRun.model_validate(long)
    bad = dict(rec, step_accepted=list(rec["step_batch_size"]), speculative=True)
    if sum(rec["output_tokens"]) - len(rec["output_tokens"]) > sum(rec["step_batch_size"]):
        with pytest.raises(ValueError, match="step_accepted sums to"):
            LiveServingRun.model_validate(bad)
    bad = dict(rec, step_batch_size=[99] * len(rec["step_batch_size"]))
    with pytest.raises(ValueError, match="exceeds concurrency"):
        LiveServingRun.model_validate(bad)
    spec = _run(concurrency=2, num_requests=3, speculative=True).model_dump(mode="json")
    most = spec["scenario"]["spec"]["num_steps"]
    bad = dict(spec, step_num_steps=[most + 1] * len(spec["step_num_steps"]))
    with pytest.raises(ValueError, match=f"step 0 drafts {most + 1} steps at a decode batch of .* allows {most} there"):
        LiveServingRun.model_validate(bad)
    b = max(spec["step_batch_size"])  # the policy at each step's batch: speculation off above b - 1
    off = json.loads(json.dumps(spec))
    off["scenario"]["serving"]["spec_off_above_batch"] = b - 1
    with pytest.raises(ValueError, match=f"drafts {most} steps at a decode batch of {b} .* allows 0 there"):
        LiveServingRun.model_validate(off)
    off["scenario"]["serving"]["spec_off_above_batch"] = None
    off["scenario"]["serving"]["num_steps_by_batch"] = [{"batch_size": b, "num_steps": 1}]
    if most > 1:
        with pytest.raises(ValueError, match=f"drafts {most} steps at a decode batch of {b} .* allows 1 there"):
            LiveServingRun.model_validate(off)


def test_live_serving_refuses_a_scenario_the_loop_cannot_serve():
    sc = S.serving_scenario("8b", 2, 3, 0.7, 4, graph=False)
    for update, says in ((dict(prefill_latency_scale=1.0), "prefill_latency_scale must be 0"),
                         (dict(max_running_requests=4), "max_running_requests must equal"),
                         (dict(decode_context_len=None), "decode_context_len must equal")):
        bad = sc.model_copy(update={"serving": sc.serving.model_copy(update=update)})
        with pytest.raises(ValueError, match=says):
            S.run_live_serving(bad, True, device="cpu")


@pytest.mark.parametrize("argv, says", [
    (["--serving", "--concurrency", "0"], "--concurrency must be a comma-separated list of integers in 1..1024"),
    (["--serving", "--concurrency", "a,b"], "--concurrency must be"),
    (["--serving", "--requests", "0"], "--requests must be >= 1, got 0"),
    (["--serving", "--num-steps", "99"], "--num-steps must be 1..16"),
    (["--serving", "--tp", "2"], "--serving runs on one GPU"),
    (["--serving", "--batch-grid"], "different grids"),
    (["--concurrency", "4"], "--concurrency goes with --serving"),
    (["--serving", "--sizes", "70b"], "--sizes must be a comma-separated list of"),
])
def test_live_serving_refuses_bad_options_in_one_line(tmp_path, argv, says):
    result = CliRunner().invoke(app, ["live", "--out", str(tmp_path / "out"), "--device", "cpu", *argv])
    assert says in _one_line_error(result)
    assert not (tmp_path / "out").exists()


def test_validate_serving_bad_inputs_are_one_line(tmp_path):
    (tmp_path / "not_json.json").write_text("{")
    (tmp_path / "other.json").write_text(json.dumps({"kind": "x"}))
    rec = _run(concurrency=1, num_requests=2).model_dump(mode="json")
    (tmp_path / "broken.json").write_text(json.dumps(dict(rec, itl_us="x")))
    for args, says in (([str(tmp_path / "missing")], "no such record file or folder"),
                       ([str(tmp_path / "not_json.json")], "not_json.json"),
                       ([str(tmp_path / "other.json")], "not a live serving record"),
                       ([str(tmp_path / "broken.json")], "itl_us"),
                       ([str(tmp_path / "broken.json"), "--costs-source", "nope"], "--costs-source must be")):
        assert says in _one_line_error(CliRunner().invoke(app, ["validate-serving", *args]))


def test_des_decode_context_len_prices_a_static_window(monkeypatch):
    """decode_context_len replaces the batch's mean context in the DES's decode step (8B shapes)."""
    from calibration.shapes import SIZES
    from simulator.profile import load_profile, resolve_profile_path
    from simulator.serving.run import run_serving
    monkeypatch.setattr(S, "SIZES", SIZES)
    prof = load_profile(resolve_profile_path("h200"))
    sc = S.serving_scenario("8b", 2, 3, 0.7, 4, graph=False)
    fixed = run_serving(sc, prof, True)
    long = run_serving(sc.model_copy(update={"serving": sc.serving.model_copy(update={"decode_context_len": 8192})}),
                        prof, True)
    assert np.array_equal(fixed.step_batch_size, long.step_batch_size)
    assert long.step_end_us[-1] > fixed.step_end_us[-1]


def test_the_committed_h200_serving_runs_meet_the_bar():
    """data/live/h200_serving (one H200, 8B shapes, C = 1, 4, 16, 32, s3 a0.7 and baseline) against
    data/profiles/h200_batch.json whole forwards: tok/s and TPOT p50 within 5% (measured 0.8%, 1.1%)."""
    from pathlib import Path

    from simulator.profile import load_profile
    from simulator.evidence.validate_serving import load_serving_records
    root = Path(__file__).resolve().parent.parent
    recs = load_serving_records([root / "data/live/h200_serving"])
    prof = load_profile(root / "data/profiles/h200_batch.json")
    rows = [check_record(src, rec, prof, "whole_forward") for src, rec in recs]
    assert len(rows) == 8 and all(r.same_schedule for r in rows)
    assert serving_bar(rows)[0], serving_bar(rows)[1]



def test_a_cpu_run_larger_than_the_hosts_memory_is_refused_before_it_builds(monkeypatch):
    """On a CPU the live loop's models and KV cache are held to the host's available memory (the kernel kills a
    process past it without a word): refused in one line naming the need and what is available."""
    import torch

    import calibration.live.run as R
    sc = S.serving_scenario("8b", 2, 3, 0.7, 3, graph=False)
    monkeypatch.setattr(R, "host_available_bytes", lambda: 1000)  # this module's models are small (its fixture)
    with pytest.raises(RuntimeError, match=r"need about [\d.,]+ GB in torch.float32 on the CPU .* 0.0 GB available"):
        R.check_host_memory(sc, torch.device("cpu"), torch.float32)
    R.check_host_memory(sc, torch.device("cuda"), torch.bfloat16)  # CUDA: torch's own error says it
    for avail in (10**15, None):
        monkeypatch.setattr(R, "host_available_bytes", lambda a=avail: a)
        R.check_host_memory(sc, torch.device("cpu"), torch.float32)
