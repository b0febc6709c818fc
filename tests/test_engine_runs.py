"""simulator.evidence.importers: engine outputs -> ObservedRuns, format detection, one-line errors, acceptance.

Fixtures in tests/data/engine_runs/ hold made-up numbers in each engine's line format.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.workload_config import IidAcceptance, PositionalAcceptance
from simulator.evidence.importers import FORMATS, ObservedRun, acceptance_from_run, detect_format, load_runs
from simulator.evidence.importers.acceptance import conditional_rates, iid_rate
from simulator.evidence.importers.traces import parse_trace
from simulator.inputs import UserInputError

DATA = Path(__file__).parent / "data" / "engine_runs"
approx = pytest.approx


def one(name: str) -> ObservedRun:
    runs = load_runs(DATA / name)
    assert len(runs) == 1
    return runs[0]


# ---- format detection ---------------------------------------------------------------------------
@pytest.mark.parametrize("name, fmt", [
    ("sglang_server.log", "sglang_server_log"),
    ("sglang_bench_serving.txt", "sglang_bench_serving"),
    ("sglang_bench_one_batch.txt", "sglang_bench_one_batch"),
    ("sglang_bench_one_batch_server.txt", "sglang_bench_one_batch_server"),
    ("vllm_server.log", "vllm_spec_decode_log"),
    ("vllm_metrics.prom", "vllm_prometheus"),
    ("vllm_bench_serve.txt", "vllm_bench_serve"),
    ("vllm_latency.txt", "vllm_bench_latency"),
    ("trtllm_bench.txt", "trtllm_bench"),
    ("eagle3_trace.json", "torch_profiler_trace"),
    ("vllm_bench_serve.json", "vllm_bench_serve_json"),
    ("vllm_latency.json", "vllm_bench_latency"),
])
def test_detect_format_names_each_fixture(name, fmt):
    assert detect_format((DATA / name).read_text(), name) == fmt


@pytest.mark.parametrize("name, fmt", [
    ("sglang_bench_serving.jsonl", "sglang_bench_serving_jsonl"),
    ("sglang_bench_one_batch_server.jsonl", "sglang_bench_one_batch_server"),
    ("sglang_bench_speculative.jsonl", "sglang_bench_speculative"),
])
def test_jsonl_records_are_told_apart_by_their_keys(name, fmt):
    assert {r.source_format for r in load_runs(DATA / name)} == {fmt}


def test_a_named_format_gives_the_same_runs_as_auto():
    assert load_runs(DATA / "vllm_server.log", format="vllm_spec_decode_log") == load_runs(DATA / "vllm_server.log")


def test_every_source_format_is_a_known_format():
    assert "torch_profiler_trace" in FORMATS and "sglang_server_log" in FORMATS


# ---- SGLang -------------------------------------------------------------------------------------
def test_sglang_server_log_one_run_per_decode_line():
    runs = load_runs(DATA / "sglang_server.log")
    assert [r.source_line for r in runs] == [3, 4, 5]  # the prefill line is skipped
    new, comma, old = runs
    assert (new.engine, new.batch_size, new.accept_length, new.acceptance_rate, new.cuda_graph,
            new.output_tok_per_s, new.speculative) == ("sglang", 4, 3.21, 0.64, True, 812.5, True)
    assert (comma.batch_size, comma.accept_length, comma.acceptance_rate, comma.cuda_graph,
            comma.output_tok_per_s) == (8, 2.95, None, False, 1500.25)
    # an old line: no accept len, no cuda graph
    assert (old.batch_size, old.accept_length, old.cuda_graph, old.output_tok_per_s, old.speculative) == \
        (1, None, None, 147.64, None)


def test_sglang_bench_serving_block():
    r = one("sglang_bench_serving.txt")
    assert (r.engine, r.source_line, r.batch_size, r.accept_length, r.output_tok_per_s, r.tpot_ms) == \
        ("sglang", 1, 15.5, 3.4, 1638.4, 9.25)


def test_sglang_bench_serving_jsonl_records():
    spec, plain = load_runs(DATA / "sglang_bench_serving.jsonl")
    assert (spec.batch_size, spec.accept_length, spec.output_tok_per_s, spec.tpot_ms, spec.speculative) == \
        (30.25, 2.8, 2100.5, 11.2, True)
    assert (plain.source_line, plain.accept_length, plain.speculative) == (2, None, None)


def test_sglang_bench_one_batch_reads_the_benchmark_not_the_warmup():
    r = one("sglang_bench_one_batch.txt")
    assert (r.source_line, r.batch_size, r.output_tok_per_s, r.speculative) == (10, 4, 579.71, False)
    assert r.step_ms == approx(6.90) and r.tpot_ms == approx(6.90)


def test_sglang_bench_one_batch_server_text_and_jsonl():
    text = one("sglang_bench_one_batch_server.txt")
    assert (text.batch_size, text.e2e_latency_ms, text.output_tok_per_s, text.accept_length) == \
        (8, approx(3500.0), 640.0, 3.05)
    rec = one("sglang_bench_one_batch_server.jsonl")
    assert (rec.batch_size, rec.e2e_latency_ms, rec.output_tok_per_s, rec.accept_length) == \
        (16, approx(4250.0), 1020.5, None)  # acc_length -1: no speculation


def test_sglang_bench_speculative_records():
    base, spec = load_runs(DATA / "sglang_bench_speculative.jsonl")
    assert (base.speculative, base.num_steps, base.step_ms, base.tpot_ms) == (False, None, approx(8.0), approx(8.0))
    assert (spec.speculative, spec.num_steps, spec.topk, spec.num_draft_tokens, spec.accept_length) == \
        (True, 3, 1, 4, 3.2)
    assert spec.step_ms == approx(10.0) and spec.tpot_ms == approx(10.0 / 3.2)
    assert spec.output_tok_per_s == approx(320.0 * 4)  # speed is per request


# ---- vLLM ---------------------------------------------------------------------------------------
def test_vllm_spec_decode_log_lines():
    first, second = load_runs(DATA / "vllm_server.log")
    assert (first.source_line, first.accept_length, first.accepted_tokens, first.drafted_tokens) == (2, 2.7, 6000, 10500)
    assert first.per_position_acceptance == [0.8, 0.56, 0.34] and first.num_steps == 3
    assert first.acceptance_rate == approx(0.571)
    # the engine's stats line just before it gives the running requests and throughput
    assert (first.batch_size, first.output_tok_per_s) == (8, 950.5)
    assert (second.batch_size, second.output_tok_per_s, second.acceptance_rate) == (None, None, approx(0.5))


def test_vllm_nan_rate_of_an_interval_without_drafts_is_absent(tmp_path):
    path = tmp_path / "v.log"
    path.write_text("SpecDecoding metrics: Mean acceptance length: 1.00, Accepted throughput: 0.00 tokens/s, "
                    "Drafted throughput: 0.00 tokens/s, Accepted: 0 tokens, Drafted: 0 tokens, "
                    "Per-position acceptance rate: 0.000, 0.000, Avg Draft acceptance rate: nan%\n")
    r = one_of(path)
    assert (r.acceptance_rate, r.accept_length, r.drafted_tokens, r.num_steps) == (None, 1.0, 0, 2)


def one_of(path: Path) -> ObservedRun:
    runs = load_runs(path)
    assert len(runs) == 1
    return runs[0]


def test_vllm_prometheus_counters_summed_over_engines():
    r = one("vllm_metrics.prom")
    assert (r.num_drafts, r.drafted_tokens, r.accepted_tokens, r.num_steps) == (1000, 3000, 1500, 3)
    assert r.accept_length == approx(1.0 + 1500 / 1000)
    assert r.acceptance_rate == approx(0.5)
    assert r.per_position_acceptance == approx([0.8, 0.45, 0.25])


def test_vllm_bench_serve_block_and_json_agree():
    text, saved = one("vllm_bench_serve.txt"), one("vllm_bench_serve.json")
    for r in (text, saved):
        assert (r.engine, r.batch_size, r.accept_length, r.num_drafts, r.drafted_tokens, r.accepted_tokens,
                r.output_tok_per_s, r.tpot_ms, r.num_steps) == ("vllm", 16, 2.8, 35000, 105000, 63000, 2374.72, 6.45, 3)
        assert r.acceptance_rate == approx(0.6)
        assert r.per_position_acceptance == approx([0.8, 0.6, 0.4])


def test_vllm_latency_text_and_json():
    assert one("vllm_latency.txt").e2e_latency_ms == approx(1500.0)
    assert one("vllm_latency.json").e2e_latency_ms == approx(2250.0)


# ---- TensorRT-LLM -------------------------------------------------------------------------------
def test_trtllm_bench_report():
    r = one("trtllm_bench.txt")
    assert (r.engine, r.speculative, r.batch_size, r.output_tok_per_s, r.tpot_ms, r.accept_length,
            r.acceptance_rate) == ("trtllm", True, 31.5, 2560.0, 11.5, 2.75, 0.6)


# ---- traces -------------------------------------------------------------------------------------
def test_chrome_trace_phase_time_per_cycle():
    """Two cycles, hand-computed: draft kernels 30 + 20 us per cycle, verify 100 then 120 + 2 (a
    memcpy), draft_extend 40; GPU idle inside the cycles 60 and 58 us. A sampling kernel launched
    outside every range is left out."""
    r = one("eagle3_trace.json")
    assert (r.engine, r.num_cycles, r.speculative) == ("live_loop", 2, True)
    assert r.phase_gpu_us == approx({"draft": 50.0, "verify": 111.0, "draft_extend": 40.0})
    assert r.phase_span_us == approx({"draft": 60.0, "verify": 111.0, "draft_extend": 40.0})
    assert r.host_gap_us == approx(59.0)


def test_chrome_trace_gpu_annotations_assign_kernels_by_time():
    def x(cat, name, ts, dur, **args):
        return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "args": args}
    events = [x("gpu_user_annotation", "decode", 0, 100), x("gpu_user_annotation", "decode", 200, 100),
              x("kernel", "gemm", 10, 50), x("kernel", "attn", 70, 20), x("kernel", "gemm", 210, 60)]
    r = parse_trace(events, "t.json")[0]
    assert (r.num_cycles, r.speculative) == (2, False)
    assert r.phase_gpu_us == approx({"decode": 65.0})
    assert r.host_gap_us == approx(5.0)  # 10 us idle in the first cycle, none in the second


# ---- acceptance ---------------------------------------------------------------------------------
def test_positional_from_unconditional_rates():
    r = one("vllm_bench_serve.json")
    model = acceptance_from_run(r)
    assert model["kind"] == "positional"
    assert model["acceptance_rates"] == approx([0.8, 0.6 / 0.8, 0.4 / 0.6])
    PositionalAcceptance.model_validate(model)


def test_conditional_rates_zero_after_a_zero_position():
    assert conditional_rates([0.5, 0.0, 0.0]) == [0.5, 0.0, 0.0]


@pytest.mark.parametrize("alpha, num_steps", [(0.0, 3), (0.3, 1), (0.62, 3), (0.9, 7), (1.0, 5)])
def test_iid_rate_inverts_the_closed_form(alpha, num_steps):
    """E[accept_length] = (1 - a**(n + 1)) / (1 - a) (Leviathan et al. 2023); n + 1 at a = 1."""
    al = num_steps + 1.0 if alpha == 1.0 else (1 - alpha ** (num_steps + 1)) / (1 - alpha)
    assert iid_rate(al, num_steps) == approx(alpha, abs=1e-9)


def test_iid_from_mean_accept_length_needs_num_steps():
    r = one("trtllm_bench.txt")
    with pytest.raises(UserInputError, match="without num_steps"):
        acceptance_from_run(r)
    model = acceptance_from_run(r, num_steps=3)
    assert model["kind"] == "iid"
    a = model["acceptance_rate"]
    assert 1 + a + a ** 2 + a ** 3 == approx(2.75)
    IidAcceptance.model_validate(model)


def test_acceptance_of_a_run_without_acceptance_is_one_line():
    with pytest.raises(UserInputError) as e:
        acceptance_from_run(one("vllm_latency.txt"))
    assert "\n" not in str(e.value) and "vllm_latency.txt:2" in str(e.value)


def test_accept_length_beyond_num_steps_is_refused():
    with pytest.raises(UserInputError, match=r"outside \[1, num_steps \+ 1 = 2\]"):
        acceptance_from_run(one("trtllm_bench.txt"), num_steps=1)


# ---- one-line errors ----------------------------------------------------------------------------
@pytest.mark.parametrize("name, where, what", [
    ("not_engine.csv", "not_engine.csv:1:", "not a known engine output"),
    ("truncated_trace.json", "truncated_trace.json:", "not valid JSON"),
    ("vllm_bad_spec.log", "vllm_bad_spec.log:2:", "without 'Drafted: N tokens'"),
    ("sglang_bad_decode.log", "sglang_bad_decode.log:2:", "without 'gen throughput (token/s)'"),
])
def test_wrong_files_are_one_line_errors(name, where, what):
    with pytest.raises(UserInputError) as e:
        load_runs(DATA / name)
    msg = str(e.value)
    assert "\n" not in msg and where in msg and what in msg and "expected" in msg


def test_truncated_trace_names_its_line(tmp_path):
    with pytest.raises(UserInputError, match=r"truncated_trace\.json:\d+:\d+: not valid JSON.*Chrome trace"):
        load_runs(DATA / "truncated_trace.json")


@pytest.mark.parametrize("text, where, what", [
    ("Decode batch. #running-req: four, gen throughput (token/s): 1.0,\n", ":1:", "'#running-req' is 'four'"),
    ("x\nDecode batch. #running-req: 4, cuda graph: yes, gen throughput (token/s): 1.0,\n", ":2:", "'cuda graph'"),
    ('vllm:spec_decode_num_drafts_total{engine="0" 12\n', ":1:", "not a Prometheus sample line"),
    ('vllm:spec_decode_num_draft_tokens_total 12\n', ":1:", "no vllm:spec_decode_num_drafts_total"),
    ("= PERFORMANCE OVERVIEW\nRequest Throughput (req/sec):  1.0\n", ":1:", "without 'Total Output Throughput"),
    ('{"batch_size": 4, "steps": 3, "acc_length": "3.2", "step_time": 0.01, "speed": 320}\n', ":1:",
     "'acc_length' is '3.2', not a number"),
    ('{"output_throughput": 1.0, "accept_length": 2.0}\n{"output_throughput": 1.0, \n', ":2:", "not valid JSON"),
    ('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": "1", "dur": 2}]}', "traceEvents[0]",
     "ts is '1'"),
    ('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2}]}', "run.txt:",
     "no user_annotation range named after a phase"),
    ("Avg latency: fast seconds\n", ":1:", "not a number"),
])
def test_malformed_lines_name_the_line(tmp_path, text, where, what):
    path = tmp_path / "run.txt"
    path.write_text(text)
    with pytest.raises(UserInputError) as e:
        load_runs(path)
    msg = str(e.value)
    assert "\n" not in msg and where in msg and what in msg, msg


def test_unknown_format_name_is_refused():
    with pytest.raises(UserInputError, match="expected 'auto' or one of"):
        load_runs(DATA / "vllm_server.log", format="vllm")


def test_a_file_of_the_named_format_without_runs_is_refused():
    with pytest.raises(UserInputError, match="no run found"):
        load_runs(DATA / "trtllm_bench.txt", format="sglang_server_log")


def test_json_lines_of_unknown_records_are_refused(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps({"a": 1}) + "\n" + json.dumps({"b": 2}) + "\n")
    with pytest.raises(UserInputError, match=r"x\.jsonl:1: a JSON record with keys"):
        load_runs(path)


def test_chrome_trace_graph_replays_cycles_and_sync_tail():
    """Host ranges around cudaGraphLaunch calls: the graph's kernels (correlation of the launch) run
    after the host range ends and still count for its phase; 'cycle' ranges give the wall time,
    each cycle's spans, and the sync tail (last kernel end to the end of the host's sync range)."""
    def x(cat, name, ts, dur, **args):
        return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "args": args}
    events = []
    for c, t0 in enumerate((0, 1000)):
        events += [x("user_annotation", "cycle", t0, 900), x("user_annotation", "verify", t0 + 10, 20),
                   x("cuda_runtime", "cudaGraphLaunch", t0 + 12, 8, correlation=10 + c),
                   x("user_annotation", "sync", t0 + 40, 600),
                   x("kernel", "gemm", t0 + 50, 300, correlation=10 + c),
                   x("kernel", "attn", t0 + 360, 200, correlation=10 + c)]
    events.append(x("kernel", "outside", 2000, 5))  # no cycle range holds it
    r = parse_trace(events, "g.json")[0]
    assert (r.num_cycles, r.cycle_us, r.graph_launch_us) == (2, approx(900.0), approx(8.0))
    assert r.phase_span_us == approx({"verify": 510.0})
    assert r.cycle_phase_span_us == [approx({"verify": 510.0}), approx({"verify": 510.0})]
    assert r.sync_tail_us == approx(80.0)  # sync ends at 640, the last kernel at 560


def test_a_real_h200_live_loop_trace_imports_with_every_phase():
    """data/traces/h200_live_loop_1b_s3: torch.profiler traces of the project's live loop on the lent
    H200 (`bash calibration/h200_run.sh traces-session`; 1B target, 3 steps, 4 cycles, CUDA graphs)."""
    from pathlib import Path

    from simulator.evidence.importers import load_runs
    folder = Path(__file__).resolve().parents[1] / "data" / "traces" / "h200_live_loop_1b_s3"
    spec = load_runs(folder / "1b_b1_s3.trace.json")[0]
    assert spec.source_format == "torch_profiler_trace" and spec.num_cycles == 4
    for phase in ("draft_extend", "draft", "verify", "accept"):
        assert spec.phase_gpu_us[phase] > 0
        assert spec.phase_span_us[phase] >= spec.phase_gpu_us[phase]
    assert spec.phase_gpu_us["verify"] > spec.phase_gpu_us["draft"] / 3  # one 4-token target verify vs 3 draft steps
    assert spec.cycle_us > sum(spec.phase_span_us.values())
    base = load_runs(folder / "1b_b1_base.trace.json")[0]
    assert set(base.phase_gpu_us) >= {"decode"} and base.phase_gpu_us["decode"] < spec.phase_gpu_us["verify"]


# ---- streaming and operating points (issue 27: a server log of a day) ----------------------------
def _decode_line(b: int, tok_s: float, al: float | None = None) -> str:
    acc = f"accept len: {al:.2f}, " if al is not None else ""
    return (f"[2026-01-01 00:00:00 TP0] Decode batch. #running-req: {b}, #token: 300, token usage: 0.01, {acc}"
            f"cuda graph: True, gen throughput (token/s): {tok_s:.2f}, #queue-req: 0,\n")


def test_iter_runs_streams_a_server_log_as_load_runs_reads_it():
    from simulator.evidence.importers import iter_runs
    path = DATA / "sglang_server.log"
    assert [r.model_dump() for r in iter_runs(path)] == [r.model_dump() for r in load_runs(path)]
    assert [r.model_dump() for r in iter_runs(DATA / "vllm_server.log")] == \
        [r.model_dump() for r in load_runs(DATA / "vllm_server.log")]


def test_iter_runs_names_the_line_of_bad_bytes_a_long_line_and_an_empty_log(tmp_path):
    from simulator.evidence.importers import iter_runs
    f = tmp_path / "s.log"
    f.write_bytes((_decode_line(4, 100.0) * 3).encode() + b"\xff\xfe Decode batch\n")
    with pytest.raises(UserInputError, match=r"s.log:4: not UTF-8"):
        list(iter_runs(f))
    f.write_text(_decode_line(4, 100.0) + "x" * (2 << 20) + "\n")
    with pytest.raises(UserInputError, match=r"s.log:2: a line of over"):
        list(iter_runs(f, "sglang_server_log"))
    f.write_text("[2026] Prefill batch. #new-seq: 1\n")
    with pytest.raises(UserInputError, match="no run found"):
        list(iter_runs(f, "sglang_server_log"))


def test_an_out_of_range_figure_names_file_line_and_field(tmp_path):
    f = tmp_path / "s.log"
    f.write_text(_decode_line(4, 100.0) + _decode_line(4, -5.0))
    with pytest.raises(UserInputError, match=r"s.log:2: output_tok_per_s: .*greater than or equal to 0 \(got -5.0\)"):
        load_runs(f)


def test_operating_points_average_the_lines_of_one_set_up(tmp_path):
    from simulator.evidence.importers import operating_points
    f = tmp_path / "s.log"
    f.write_text(_decode_line(8, 1000.0, 3.0) + _decode_line(4, 400.0) + _decode_line(8, 1200.0, 2.0)
                 + _decode_line(8, 1100.0, 2.5) + _decode_line(4, 440.0))
    pts = operating_points(load_runs(f))
    assert [(p.batch_size, p.speculative, p.num_intervals, p.source_line) for p in pts] == \
        [(8.0, True, 3, 1), (4.0, None, 2, 2)]
    assert pts[0].output_tok_per_s == pytest.approx(1100.0) and pts[0].accept_length == pytest.approx(2.5)
    assert pts[1].output_tok_per_s == pytest.approx(420.0) and pts[1].accept_length is None
    assert operating_points(pts) == pts  # folding points again changes nothing
    (trace,) = load_runs(DATA / "eagle3_trace.json")
    assert operating_points([trace, trace]) == [trace, trace]  # traces stay whole


def test_from_runs_fits_points_as_it_fits_their_lines(tmp_path):
    """The weighted fit on operating points is the fit on the lines when a point's lines agree."""
    from simulator.evidence.engine_fit import fit_engine, run_observations
    from simulator.evidence.importers import operating_points
    from simulator.scenario import load_scenario
    sc = load_scenario(Path(__file__).parent / "data" / "engine_fit" / "sglang_llama8b_h100.yaml")
    f = tmp_path / "s.log"
    f.write_text(_decode_line(1, 150.0) * 3 + _decode_line(4, 560.0) + _decode_line(1, 330.0, 2.8) * 2
                 + _decode_line(4, 1150.0, 2.8) * 4)
    lines, pts = load_runs(f), operating_points(load_runs(f))
    assert len(lines) == 10 and len(pts) == 4
    by_line = fit_engine("sglang", run_observations(sc, lines, "s"))
    by_point = fit_engine("sglang", run_observations(sc, pts, "s"))
    for k, v in by_line.params.items():
        assert by_point.params[k] == pytest.approx(v, rel=1e-4)
        assert by_point.stderr[k] == pytest.approx(by_line.stderr[k], rel=1e-3)


def test_a_vllm_server_log_streams_without_being_held(tmp_path, monkeypatch):
    """A vLLM log is read line by line (load.STREAMED), so a log past load_runs' bound still reads."""
    from simulator.evidence.importers import iter_runs, load
    src = (DATA / "vllm_server.log").read_text()
    f = tmp_path / "big.log"
    f.write_text(src * 3)
    one = len(load_runs(DATA / "vllm_server.log"))
    monkeypatch.setattr(load, "MAX_TRACE_BYTES", 10)  # load_runs would refuse the file whole
    runs = list(iter_runs(f))
    assert one and len(runs) == 3 * one
    assert all(r.source_format == "vllm_spec_decode_log" for r in runs)
