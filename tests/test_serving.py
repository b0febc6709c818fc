"""Serving mode (simulator.serving): arrivals, queueing, KV limits, the spec policy, traces."""

from pathlib import Path

import numpy as np
import pytest

from simulator.acceptance import build_acceptance
from simulator.analytic import analyze
from simulator.costs.forward import CostModel
from simulator.scenario import UserInputError, load_profile_for, load_scenario
from simulator.serving.costs import StepCosts
from simulator.serving.metrics import serving_metrics
from simulator.serving.run import run_serving, simulate_serving
from simulator.studies.serving_sweep import crossover
from simulator.serving.workload import read_trace
from simulator.units import MS_PER_S, US_PER_S

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "scenarios" / "llama8b_h200.yaml"
_PROFILE = {}


def serving_scenario(*overrides: str, arrivals: str = "closed_loop", input_len: str = "fixed"):
    sets = ["costs.source=per_op", f"serving.arrivals.kind={arrivals}", "serving.output_len.kind=fixed",
            "serving.output_len.tokens=32"]
    if input_len == "fixed":
        sets += ["serving.input_len.kind=fixed", "serving.input_len.tokens=256"]
    if arrivals == "closed_loop":
        sets.append("serving.arrivals.concurrency=4")
    sc = load_scenario(BASE, sets + list(overrides))
    if "h200" not in _PROFILE:
        _PROFILE["h200"] = load_profile_for(sc, base_dir=BASE.parent)[0]
    return sc, _PROFILE["h200"]


def test_littles_law_on_a_poisson_run():
    sc, prof = serving_scenario("serving.arrivals.rate_per_s=20", "serving.num_requests=1500",
                                "serving.warmup_s=5", "seed=3", arrivals="poisson")
    rec = run_serving(sc, prof)
    res = serving_metrics(rec, sc.serving.warmup_s, None, None)
    # L = lambda W, within the sampling error of ~1200 measured requests
    assert res.mean_requests_in_system == pytest.approx(20 * res.e2e_latency_ms.mean / MS_PER_S, rel=0.08)
    assert res.mean_requests_in_system > 1.0


def test_a_closed_batch_counts_its_requests_in_the_system_until_the_last_finishes():
    """Every request arrives at 0: the time average runs to the last finish (Little's law's integral: the
    requests' time in the system over the run), not over an empty window (0.00 before)."""
    sc, prof = serving_scenario("serving.num_requests=8", arrivals="closed_batch")
    rec = run_serving(sc, prof)
    res = serving_metrics(rec, 0.0, None, None)
    span_ms = float(np.nanmax(rec.finish_us)) / 1e3
    assert res.mean_requests_in_system == pytest.approx(8 * res.e2e_latency_ms.mean / span_ms, rel=1e-9)
    assert 4 < res.mean_requests_in_system <= 8


def test_single_request_with_free_prefill_equals_the_steady_closed_form():
    m = 64
    sc, prof = serving_scenario("serving.arrivals.concurrency=1", "serving.num_requests=1",
                                "serving.prefill_latency_scale=0", "serving.input_len.tokens=1024",
                                f"serving.output_len.tokens={m + 1}", "acceptance.acceptance_rate=1.0",
                                "workload.batch_size=1", "workload.context_len=1056", f"workload.max_new_tokens={m}")
    rec = run_serving(sc, prof)
    cost = CostModel(sc, prof)
    an = analyze(sc, cost, build_acceptance(sc.acceptance, sc.spec))
    # the prefill step (free) emits the first token; the other m tokens decode as in the steady batch
    ttft = rec.first_token_us[0] - rec.arrival_us[0]
    assert ttft == pytest.approx(StepCosts(sc, prof).prefill_only_overhead_us())
    assert 0 < ttft < 1000
    tpot = (rec.finish_us[0] - rec.first_token_us[0]) / m
    assert tpot == pytest.approx(an.tpot_us, rel=0.01)
    assert set(rec.step_batch_size[rec.step_batch_size > 0]) == {1}


def test_queueing_appears_when_arrivals_exceed_capacity():
    common = ("serving.num_requests=80", "serving.max_running_requests=4", "seed=1")
    low, prof = serving_scenario("serving.arrivals.rate_per_s=1", *common, arrivals="poisson")
    high, _ = serving_scenario("serving.arrivals.rate_per_s=200", *common, arrivals="poisson")
    r_low = serving_metrics(run_serving(low, prof), 0, None, None)
    r_high = serving_metrics(run_serving(high, prof), 0, None, None)
    assert r_low.queue_ms.p50 < 50
    assert r_high.queue_ms.p50 > 20 * max(r_low.queue_ms.p50, 1e-3)
    assert r_high.mean_requests_in_system > 4
    assert r_high.ttft_ms.p90 > 5 * r_low.ttft_ms.p90


def test_kv_capacity_limits_running_requests():
    free, prof = serving_scenario("serving.arrivals.concurrency=16", "serving.num_requests=48")
    tight, _ = serving_scenario("serving.arrivals.concurrency=16", "serving.num_requests=48",
                                "serving.kv_cache_tokens=900")  # 3 requests of 256 + 32 tokens
    assert run_serving(free, prof).step_batch_size.max() > 3
    rec = run_serving(tight, prof)
    assert rec.step_batch_size.max() <= 3
    assert np.all(~np.isnan(rec.finish_us))


def test_kv_pressure_preempts_and_recomputes():
    sc, prof = serving_scenario("serving.arrivals.concurrency=4", "serving.num_requests=12",
                                "serving.output_len.tokens=200", "serving.kv_cache_tokens=600")
    rec = run_serving(sc, prof)
    assert rec.num_preemptions.sum() > 0
    assert np.all(~np.isnan(rec.finish_us))
    assert np.all(rec.finish_us > rec.first_token_us)


def test_spec_off_above_batch_and_num_steps_by_batch_switch():
    sc, prof = serving_scenario("serving.arrivals.concurrency=8", "serving.num_requests=64",
                                "serving.spec_off_above_batch=6")
    sc = sc.model_validate({**sc.model_dump(), "serving": {**sc.serving.model_dump(),
                           "num_steps_by_batch": [{"batch_size": 3, "num_steps": 2}]}})
    rec = run_serving(sc, prof)
    b, s = rec.step_batch_size, rec.step_num_steps
    assert (b > 6).any() and np.all(s[b > 6] == 0)
    assert np.all(s[(b >= 3) & (b <= 6)] == 2)
    assert np.all(s[(b >= 1) & (b < 3)] == sc.spec.num_steps)
    off, _ = serving_scenario("serving.arrivals.concurrency=8", "serving.num_requests=64",
                              "serving.spec_off_above_batch=0")
    assert np.all(run_serving(off, prof).step_num_steps == 0)


def test_policy_entry_must_fit_the_acceptance_model():
    with pytest.raises(UserInputError, match="num_steps_by_batch"):
        serving_scenario("serving.num_steps_by_batch=[{batch_size: 4, num_steps: 2, topk: 2, "
                         "num_draft_tokens: 4}]")


def test_trace_file_runs_and_bad_rows_fail_in_one_line(tmp_path):
    good = tmp_path / "trace.csv"
    good.write_text("arrival_s,input_tokens,output_tokens\n0.5,128,16\n0.0,64,8\n1.25,256,32\n")
    t = read_trace(good)
    assert list(t.arrival_s) == [0.0, 0.5, 1.25] and list(t.input_tokens) == [64, 128, 256]
    jl = tmp_path / "trace.jsonl"
    jl.write_text('{"arrival_s": 0, "input_tokens": 10, "output_tokens": 5}\n\n'
                  '{"arrival_s": 0.1, "input_tokens": 20, "output_tokens": 6}\n')
    assert list(read_trace(jl).output_tokens) == [5, 6]
    sc, prof = serving_scenario(f"serving.arrivals.path={good}", arrivals="trace")
    rec = run_serving(sc, prof)
    assert list(rec.arrival_us) == [0.0, 0.5 * US_PER_S, 1.25 * US_PER_S]
    assert list(rec.output_tokens) == [8, 16, 32]
    bad = {"missing.csv": ("arrival_s,input_tokens\n0,5\n", ":1: "),
           "float.csv": ("arrival_s,input_tokens,output_tokens\n0,5,7\n0.1,2.5,3\n", ":3: input_tokens"),
           "negative.csv": ("arrival_s,input_tokens,output_tokens\n-1,5,7\n", ":2: arrival_s"),
           "empty.csv": ("arrival_s,input_tokens,output_tokens\n0,,7\n", ":2: no input_tokens"),
           "bad.jsonl": ('{"arrival_s": 0, "input_tokens": 1, "output_tokens": 1}\n[1, 2]\n', ":2: "),
           "zero.jsonl": ('{"arrival_s": 0, "input_tokens": 0, "output_tokens": 1}\n', ":1: input_tokens"),
           # text where JSON has numbers; CSV counts Python would read but a CSV tool would not
           "text.jsonl": ('{"arrival_s": "0", "input_tokens": 100, "output_tokens": 50}\n',
                          ":1: arrival_s must be a JSON number, got the string '0'"),
           "underscore.csv": ("arrival_s,input_tokens,output_tokens\n0,1_000,50\n", ":2: input_tokens"),
           "exponent.csv": ("arrival_s,input_tokens,output_tokens\n0,100,5e1\n", ":2: output_tokens"),
           "inf.csv": ("arrival_s,input_tokens,output_tokens\ninf,100,50\n", ":2: arrival_s")}
    for name, (text, fragment) in bad.items():
        p = tmp_path / name
        p.write_text(text)
        with pytest.raises(UserInputError) as e:
            read_trace(p)
        msg = str(e.value)
        assert f"{p}{fragment}" in msg and "\n" not in msg, msg


def test_same_seed_same_run_other_seed_another():
    a, prof = serving_scenario("serving.arrivals.rate_per_s=10", "serving.num_requests=60",
                               "acceptance.rate_concentration=10", "serving.input_len.kind=uniform",
                               "serving.input_len.min_tokens=16", "serving.input_len.max_tokens=512",
                               arrivals="poisson", input_len="uniform")
    r1, r2 = run_serving(a, prof), run_serving(a, prof)
    for f in ("arrival_us", "finish_us", "first_token_us", "itl_us", "step_accepted"):
        np.testing.assert_array_equal(getattr(r1, f), getattr(r2, f))
    r3 = run_serving(a.model_copy(update={"seed": 1}), prof)
    assert not np.array_equal(r1.finish_us, r3.finish_us)


def test_speedup_and_crossover():
    sc, prof = serving_scenario("serving.num_requests=16")
    res = simulate_serving(sc, prof)
    assert res.speedup == pytest.approx(res.output_tok_per_s / res.baseline_output_tok_per_s)
    rows = [{"c": 1, "serving_output_tok_per_s": 2.0, "serving_baseline_output_tok_per_s": 1.0},
            {"c": 8, "serving_output_tok_per_s": 1.0, "serving_baseline_output_tok_per_s": 1.0},
            {"c": 4, "serving_output_tok_per_s": 1.5, "serving_baseline_output_tok_per_s": 1.0}]
    (row,) = crossover(rows, "c", [])
    assert row["crossover"] == 8 and row["last_paying"] == 4


def test_step_costs_grow_with_batch_and_context():
    sc, prof = serving_scenario()
    c = StepCosts(sc, prof)
    assert c.decode_step_us(64, None, 1024) > c.decode_step_us(1, None, 1024)
    assert c.decode_step_us(8, sc.spec, 8192) > c.decode_step_us(8, sc.spec, 512)
    assert c.prefill_us(4096, 0) > c.prefill_us(512, 0) > 0
    assert c.prefill_us(0, 0) == 0.0


def test_estimates_read_trace_and_length_files_for_their_real_size(tmp_path):
    """A trace's requests and output lengths, and a length file's mean, go into the estimate
    (they were taken as 1,000 requests of 256 tokens whatever the files held)."""
    import yaml

    from simulator.serving.run import estimate_serving
    root = Path(__file__).resolve().parents[1]
    data = yaml.safe_load((root / "scenarios" / "serving_poisson.yaml").read_text())
    (tmp_path / "trace.csv").write_text("arrival_s,input_tokens,output_tokens\n"
                                        + "".join(f"{i * 0.01},128,2000\n" for i in range(20000)))
    (tmp_path / "lengths.txt").write_text("4000\n6000\n")
    data["serving"] = {k: v for k, v in data["serving"].items() if k not in ("num_requests", "duration_s")}
    data["serving"]["arrivals"] = {"kind": "trace", "path": "trace.csv"}
    data["profile"] = str(root / "data" / "profiles" / "h200.json")
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    sec, mem, n = estimate_serving(load_scenario(tmp_path / "s.yaml"))
    assert n == 20000
    data["serving"]["arrivals"] = {"kind": "poisson", "rate_per_s": 4}
    data["serving"]["num_requests"] = 20000
    data["serving"]["output_len"] = {"kind": "file", "path": "lengths.txt"}
    (tmp_path / "s2.yaml").write_text(yaml.safe_dump(data))
    sec2, mem2, n2 = estimate_serving(load_scenario(tmp_path / "s2.yaml"))
    assert n2 == 20000 and sec2 == pytest.approx(sec * 2.5, rel=0.01)  # 5000 tokens a request vs 2000


def test_a_serving_sweep_is_estimated_with_its_serving_des(tmp_path):
    from typer.testing import CliRunner

    from simulator.cli import app
    root = Path(__file__).resolve().parents[1]
    r = CliRunner().invoke(app, ["sweep", str(root / "scenarios" / "serving_poisson.yaml"), "--out", str(tmp_path / "sw"),
                                 "--grid", "serving.num_requests=1000000"])
    assert r.exit_code == 2 and "over the 10 min limit" in r.output, r.output
    assert not (tmp_path / "sw").exists()


def test_a_closed_batch_sends_every_request_at_once_and_equals_a_closed_loop_of_its_size():
    """LLM.generate of B prompts: B requests at t = 0, none after; the same schedule as a closed
    loop of concurrency B sending B requests in all."""
    batch = serving_scenario("serving.num_requests=6", arrivals="closed_batch")
    loop = serving_scenario("serving.num_requests=6", "serving.arrivals.concurrency=6")
    a, b = run_serving(*batch), run_serving(*loop)
    assert len(a.arrival_us) == 6 and np.all(a.arrival_us == 0.0)
    assert np.allclose(a.finish_us, b.finish_us) and np.allclose(a.first_token_us, b.first_token_us)


def test_a_closed_batch_needs_its_size():
    with pytest.raises(UserInputError, match="closed_batch"):
        serving_scenario("serving.duration_s=5", arrivals="closed_batch")


def test_a_closed_batch_with_free_prefill_and_full_acceptance_takes_the_closed_form_time():
    """B requests at t = 0, prefill free, every draft accepted (accept length k + 1): one prefill step
    emits each request's first token, then ceil((N - 1) / (k + 1)) cycles at the whole batch, the last
    cycle's tokens past N thrown away; the run is exactly that many steady cycles at batch B."""
    b, n, k = 4, 30, 3
    sc, prof = serving_scenario("serving.num_requests=4", "serving.prefill_latency_scale=0",
                                "serving.input_len.tokens=1024", f"serving.output_len.tokens={n}",
                                "acceptance.acceptance_rate=1.0", f"spec.num_steps={k}", f"spec.num_draft_tokens={k + 1}",
                                f"workload.batch_size={b}", arrivals="closed_batch")
    rec = run_serving(sc, prof)
    cycles = -(-(n - 1) // (k + 1))
    decode = rec.step_batch_size > 0
    assert decode.sum() == cycles and set(rec.step_batch_size[decode]) == {b}
    assert np.all(rec.output_tokens == n) and np.all(rec.first_token_us == rec.first_token_us[0])
    costs = StepCosts(sc, prof)
    per_cycle = (rec.step_end_us - rec.step_start_us)[decode]
    assert rec.finish_us.max() == pytest.approx(rec.first_token_us[0] + per_cycle.sum())
    ctx = [costs.decode_step_us(b, sc.spec, c, extend_len=k + 1) for c in (1024, 1024 + n)]
    assert min(ctx) * 0.999 <= per_cycle.min() and per_cycle.max() <= max(ctx) * 1.001


def test_simulate_names_the_workload_it_predicts(tmp_path):
    """A steady batch says so in its title and prices LLM.generate's closed batch beside it; a
    closed batch's serving table names itself."""
    from typer.testing import CliRunner

    from simulator.cli import build_app
    scen = str(ROOT / "scenarios" / "vllm_llama8b_h200.yaml")
    r = CliRunner().invoke(build_app(), ["simulate", scen], env={"COLUMNS": "200", "SPECDECSIM_GENERATE_MAX_S": "3"})
    assert r.exit_code == 0 and "steady batch 8" in r.output and "LLM.generate of these 8 prompts" in r.output
    r = CliRunner().invoke(build_app(), ["simulate", scen, "--set", "serving.arrivals.kind=closed_batch", "--set",
                                         "serving.num_requests=8"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "closed batch of 8 requests at t = 0 (LLM.generate)" in r.output and "steady batch" not in r.output


def _short_closed_loop(concurrency: int, num_requests: int, seed: int, switch: str) -> dict:
    """{True, False: the serving records} of a closed loop of 512-token prompts and 8-40 new tokens on the
    vLLM scenario, `switch` (a boolean field) on and off."""
    base = ROOT / "scenarios" / "vllm_llama8b_h200.yaml"
    sets = ["serving.arrivals.kind=closed_loop", f"serving.arrivals.concurrency={concurrency}",
            f"serving.num_requests={num_requests}", "serving.input_len.kind=fixed", "serving.input_len.tokens=512",
            "serving.output_len.kind=uniform", "serving.output_len.min_tokens=8", "serving.output_len.max_tokens=40",
            f"seed={seed}"]
    runs = {}
    for on in (True, False):
        sc = load_scenario(base, sets + [f"{switch}={str(on).lower()}"])
        runs[on] = run_serving(sc, load_profile_for(sc, base_dir=base.parent)[0])
    return runs


def test_an_engine_that_schedules_a_step_ahead_admits_a_joining_request_a_step_later():
    """vLLM's async scheduling / SGLang's overlap scheduler: a request sent when another finished (a
    closed loop) is admitted at the end of the step that was already planned, not at once."""
    runs = _short_closed_loop(3, 9, 4, "serving_engine.overlap_scheduler")
    lag, now = runs[True], runs[False]
    assert (now.admit_us == now.arrival_us).all()  # no step ahead: admitted where sent
    later = lag.arrival_us > 0
    assert later.sum() == 6 and (lag.admit_us[later] > lag.arrival_us[later]).all()
    for a, adm in zip(lag.arrival_us[later], lag.admit_us[later]):  # at the end of the step under way
        assert adm == pytest.approx(lag.step_end_us[lag.step_start_us >= a - 1e-9].min())


def test_an_engine_that_does_not_mix_runs_a_joining_prefill_alone():
    """SGLang's default (no --enable-mixed-chunk): a step that prefills a joining request carries no
    decode (the running batch waits for it); vLLM's chunked prefill mixes it into the decode step. A
    closed loop at concurrency 2: every step with prefill tokens after the first has a decode batch
    with mixing and none without."""
    runs = _short_closed_loop(2, 8, 5, "serving_engine.mixed_chunk")
    for mixed, rec in runs.items():
        pre = rec.step_prefill_tokens > 0
        assert pre.sum() >= 6  # the first prefill and the joining requests'
        if mixed:
            assert (rec.step_batch_size[pre][1:] > 0).any()
        else:
            assert (rec.step_batch_size[pre] == 0).all()
        assert np.isfinite(rec.finish_us).all()
    with pytest.raises(Exception):
        load_scenario(base, ["serving_engine.mixed_chunk=7"])


def test_requests_given_their_own_rates_draw_from_them():
    """A replay of measured requests (validate-serving --acceptance replay): rate 0 accepts one token a
    step, rate 1 all num_steps + 1; a closed batch of 41-token requests at num_steps 3 takes exactly 40
    and 10 decode steps for them, whatever the scenario's own acceptance; a SGLang-style draw
    (per_batch_step) gives every request of a step the same accept length."""
    base = ROOT / "scenarios" / "vllm_llama8b_h200.yaml"
    sets = ["serving.arrivals.kind=closed_batch", "serving.num_requests=2", "serving.input_len.kind=fixed",
            "serving.input_len.tokens=256", "serving.output_len.kind=fixed", "serving.output_len.tokens=41",
            "spec.num_steps=3", "acceptance.acceptance_rate=0.5"]
    sc = load_scenario(base, sets)
    prof = load_profile_for(sc, base_dir=base.parent)[0]
    rec = run_serving(sc, prof, request_rates=[0.0, 1.0])
    assert np.bincount(rec.itl_request_idx, minlength=2).tolist() == [40, 10]
    with pytest.raises(ValueError, match="request_rates"):
        run_serving(sc, prof, request_rates=[1.5])
    wide = load_scenario(base, sets + ["serving.num_requests=4", "acceptance.draw=per_batch_step"])
    rec = run_serving(wide, prof)
    gaps = np.bincount(rec.itl_request_idx, minlength=4)
    assert len(set(gaps.tolist())) == 1  # alike draws: all four finish on the same step


def test_a_figure_a_record_cannot_give_is_null_in_the_json_not_nan(tmp_path):
    """A record without ITL gaps (its itl lists empty) has no ITL p50: validate-serving's JSON holds null
    there (standard JSON, no NaN or Infinity) and its table a dash."""
    import json as _json

    from typer.testing import CliRunner

    from simulator.cli import build_app
    src = ROOT / "data" / "live" / "h200_serving" / "8b_graph_serving_c4_s3_a70.json"
    rec = _json.loads(src.read_text())
    rec["itl_request_idx"], rec["itl_us"] = [], []
    bad = tmp_path / "no_itl.json"
    bad.write_text(_json.dumps(rec))
    out = tmp_path / "v.json"
    r = CliRunner().invoke(build_app(), ["validate-serving", str(bad), "--profile", "h200_batch", "--json", str(out)],
                           env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    row = _json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))["points"][0]
    assert row["itl_p50_error_frac"] is None and row["measured_itl_p50_ms"] is None
    assert "inf" not in r.output and "nan" not in r.output.lower()


def test_arrivals_listed_inline_replay_at_their_times_and_a_lone_request_is_a_batch_of_one():
    """A trace's arrivals listed inline (a live Poisson run's own, lengths from input_len / output_len):
    each request arrives at its listed time; requests far apart run alone, each as a closed batch of one
    (same seed: same draws), and the list must be the only source."""
    from pydantic import ValidationError

    from simulator.serving.config import TraceArrivals
    times = [0.0, 5.0, 10.0]
    sc, prof = serving_scenario("seed=4", arrivals="closed_batch", *["serving.num_requests=1"])
    one = run_serving(sc, prof)
    listed = sc.model_copy(update={"serving": sc.serving.model_copy(update={
        "arrivals": TraceArrivals(arrival_s=times), "num_requests": None})})
    rec = run_serving(listed, prof)
    assert rec.arrival_us.tolist() == pytest.approx([t * US_PER_S for t in times])
    lone = rec.finish_us - rec.arrival_us
    assert lone[0] == pytest.approx(one.finish_us[0] - one.arrival_us[0], rel=1e-9)
    assert np.all(lone < 1 * US_PER_S)  # each done long before the next arrives
    with pytest.raises(ValidationError, match="exactly one"):
        TraceArrivals()
    with pytest.raises(ValidationError, match="exactly one"):
        TraceArrivals(path="t.csv", arrival_s=[0.0])
    with pytest.raises(ValidationError, match="greater than or equal to 0"):
        TraceArrivals(arrival_s=[-1.0])


def test_a_listed_trace_cut_by_duration_is_estimated_at_the_requests_it_sends():
    """100,000 arrivals listed 0.01 s apart with duration_s 1 send 100 requests: the run-size estimate counts
    those, not the whole list (a hostile try was refused as an hour's run)."""
    from simulator.serving.config import TraceArrivals
    from simulator.serving.run import estimate_serving
    sc, _ = serving_scenario("seed=1", arrivals="closed_batch", *["serving.num_requests=1"])
    listed = sc.model_copy(update={"serving": sc.serving.model_copy(update={
        "arrivals": TraceArrivals(arrival_s=[i * 0.01 for i in range(100_000)]), "num_requests": None,
        "duration_s": 1.0})})
    assert estimate_serving(listed)[2] == 100
