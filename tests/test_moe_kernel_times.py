"""An engine's own fused-MoE time per layer (`serving_engine.moe_layer_latency_us`): the reader of
SGLang's / vLLM's MoE benchmark output and of `calibrate engine-moe`'s records, how it prices the
target's routed experts, and `specdecsim calibrate moe-kernel-times`."""

from __future__ import annotations

from pathlib import Path

import re

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from simulator.analytic import cycle_time_us
from simulator.costs.forward import CostModel, engine_moe_layer_us
from simulator.evidence.importers.moe_bench import load_moe_kernel_times
from simulator.inputs import UserInputError
from tests.conftest import TINY_TARGET, flat_profile, make_scenario

DATA = Path(__file__).parent / "data" / "engine_runs"
MOE_TARGET = {**TINY_TARGET, "name": "tiny-moe", "n_routed_experts": 8, "num_experts_per_tok": 2,
              "moe_intermediate_size": 32, "first_k_dense_replace": 1, "num_hidden_layers": 3}


def test_both_engines_outputs_read_as_tokens_to_us():
    assert load_moe_kernel_times(DATA / "moe_bench_sglang.txt") == {1: 40.0, 2: 48.0, 4: 64.0, 8: 80.0}
    assert load_moe_kernel_times(DATA / "moe_bench_vllm.txt") == {1: 25.5, 16: 70.25}


@pytest.mark.parametrize("text, where, what", [
    ("nothing here\n", ":", "no MoE kernel times found"),
    ("Batch size: 1, config: {}\nBatch size: 2, config: {}\nKernel time: 3 us\n", ":1:", "no 'Kernel time' line"),
    ("Kernel time: 3 us\n", ":1:", "no 'Batch size' line before it"),
    ("Batch size: x, config: {}\nKernel time: 3 us\n", ":1:", "batch size 'x' is not an integer"),
    ("Batch size: 1, config: {}\nKernel time: nan us\n", ":2:", "not a positive finite number"),
    ("Batch size: 1, config: {}\nKernel time: -4 us\n", ":2:", "not a positive finite number"),
    ("Batch size: 1, config: {}\nKernel time: 3 us\nBatch size: 1, config: {}\nKernel time: 4 us\n", ":3:",
     "more than one run"),
    ("Batch size: 1, config: {}\n", ":1:", "no 'Kernel time' line"),
])
def test_a_malformed_output_is_one_line_naming_file_and_line(tmp_path, text, where, what):
    f = tmp_path / "moe.txt"
    f.write_text(text)
    with pytest.raises(UserInputError) as e:
        load_moe_kernel_times(f)
    msg = str(e.value)
    assert "\n" not in msg and f"{f}{where}" in msg and what in msg


def test_the_table_is_linear_in_log_tokens_inside_and_a_lower_bound_outside():
    table = {2: 40.0, 8: 64.0, 32: 70.0}
    assert engine_moe_layer_us(table, 4, model_us=500.0) == pytest.approx(52.0)  # inside: the engine's, even below
    assert engine_moe_layer_us(table, 16, model_us=1.0) == pytest.approx(67.0)
    assert engine_moe_layer_us(table, 1, model_us=10.0) == 40.0       # below the range: at least the first value
    assert engine_moe_layer_us(table, 1, model_us=55.0) == 55.0
    assert engine_moe_layer_us(table, 4096, model_us=900.0) == 900.0  # above: at least the last value
    assert engine_moe_layer_us(table, 4096, model_us=10.0) == 70.0


def _engine_sc(floor=None, **engine):
    eng = {"kind": "sglang", "host_cycle_us": 100.0, "host_decode_step_us": 50.0, **engine}
    if floor is not None:
        eng["moe_layer_latency_us"] = floor
    return make_scenario(target=MOE_TARGET, serving_engine=eng)


def test_the_table_adds_exactly_its_excess_per_moe_layer_to_decode_and_verify():
    """Flat profile: every compute op costs 10 us, so each of the 2 MoE layers' expert op goes from
    10 us to the table's value: the decode step grows by 2 x (40 - 10) us, the verify (4 tokens)
    by 2 x (64 - 10), and the cycle's closed form by their sum plus the draft's (no MoE draft)."""
    plain, floored = CostModel(_engine_sc(), flat_profile()), CostModel(_engine_sc({1: 40.0, 4: 64.0}), flat_profile())
    moe_layers = sum(MOE_TARGET["first_k_dense_replace"] <= i for i in range(MOE_TARGET["num_hidden_layers"]))
    gpu = lambda f: sum(k.gpu_us for k in f.kernels)  # noqa: E731
    assert gpu(floored.decode_forward()) - gpu(plain.decode_forward()) == pytest.approx(moe_layers * 30.0)
    assert gpu(floored.verify_forward()) - gpu(plain.verify_forward()) == pytest.approx(moe_layers * 54.0)
    assert gpu(floored.draft_step_forward(0)) == pytest.approx(gpu(plain.draft_step_forward(0)))
    assert cycle_time_us(floored, 1) - cycle_time_us(plain, 1) == pytest.approx(moe_layers * 54.0)


def test_a_serving_prefill_chunk_prices_its_experts_by_the_table_as_the_cycle_does():
    """One op-pricing rule (CostModel.op_gpu_us) for the cycle's forwards and serving's prefill
    chunks: a 16-token chunk's 2 MoE layers go from the flat profile's 10 us to the table's 56 us
    (40 at 1 token, 64 at 64, linear in log2 tokens), and the chunk's other ops are priced alike."""
    from simulator.serving.costs import StepCosts
    plain, floored = StepCosts(_engine_sc(), flat_profile()), StepCosts(_engine_sc({1: 40.0, 64: 64.0}), flat_profile())
    moe_layers = sum(MOE_TARGET["first_k_dense_replace"] <= i for i in range(MOE_TARGET["num_hidden_layers"]))
    assert floored.prefill_us(16, 0) - plain.prefill_us(16, 0) == pytest.approx(moe_layers * 46.0)


def test_a_table_below_the_model_replaces_it_in_range_and_the_live_loop_has_none():
    """Flat profile, expert op 10 us: a table of 1 us over 1..64 tokens prices the 2 MoE layers'
    experts at 1 us (the verify drops 2 x 9 us); a table starting at 8 tokens leaves the decode
    (1 token, below its range, 5 < 10) as it was."""
    plain = CostModel(_engine_sc(), flat_profile())
    low = CostModel(_engine_sc({1: 1.0, 64: 1.0}), flat_profile())
    gpu = lambda f: sum(k.gpu_us for k in f.kernels)  # noqa: E731
    assert gpu(plain.verify_forward()) - gpu(low.verify_forward()) == pytest.approx(2 * 9.0)
    above = CostModel(_engine_sc({8: 5.0, 64: 5.0}), flat_profile())
    assert gpu(above.decode_forward()) == pytest.approx(gpu(plain.decode_forward()))
    with pytest.raises(Exception, match="moe_layer_latency_us"):
        make_scenario(target=MOE_TARGET, serving_engine={"kind": "live_loop", "moe_layer_latency_us": {1: 5.0}})


def test_engine_moe_records_read_by_shape_and_routing(tmp_path):
    rec = lambda shape, t, routing, us: ('{"shape": "%s", "tokens": %d, "routing": "%s", "kernels_us": %s}'  # noqa: E731
                                         % (shape, t, routing, us))
    f = tmp_path / "moe.jsonl"
    f.write_text("\n".join([rec("a", 1, "rotating", 60), rec("a", 1, "same", 55), rec("a", 4, "rotating", 90),
                            rec("b", 1, "rotating", 70)]) + "\n")
    assert load_moe_kernel_times(f, "a") == {1: 60.0, 4: 90.0}
    assert load_moe_kernel_times(f, "a", "same") == {1: 55.0}
    for shape, routing, what in [(None, "rotating", "pick one with --shape (a, b)"), ("c", "rotating", "no shape 'c'"),
                                 ("b", "same", "no 'same' records of b"), ("a", "both", "one of rotating, same")]:
        with pytest.raises(UserInputError, match=re.escape(what)):
            load_moe_kernel_times(f, shape, routing)
    f.write_text(rec("a", 1, "rotating", 60) + "\n{broken\n")
    with pytest.raises(UserInputError, match=r"moe\.jsonl:2: not valid JSON"):
        load_moe_kernel_times(f, "a")
    with pytest.raises(UserInputError, match="text output, which holds one shape"):
        load_moe_kernel_times(DATA / "moe_bench_vllm.txt", "a")


def test_the_shipped_h200_measurement_reads_for_each_shape():
    f = Path(__file__).parents[1] / "data" / "measurements" / "h200_sglang_triton_moe.jsonl"
    for shape in ("deepseek-v3-tp8", "kimi-k2-tp8", "qwen3-235b-tp8", "qwen3-235b-tp8-default-config"):
        t = load_moe_kernel_times(f, shape)
        assert list(t) == [1, 2, 4, 8, 16, 24, 32, 64] and all(v > 0 for v in t.values())


@pytest.mark.parametrize("table", [{0: 5.0}, {1: 0.0}, {1: -3.0}, {1: float("nan")}, {}, {1: 2e6}])
def test_an_absurd_table_is_refused_by_field(table):
    with pytest.raises(Exception, match="moe_layer_latency_us"):
        _engine_sc(table)


def _scenario_file(tmp_path, engine):
    data = dict(name="moe", profile="h200", target={**MOE_TARGET}, draft={**make_scenario().draft.model_dump(
        include={"name", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                 "intermediate_size", "vocab_size", "draft_vocab_size", "num_fc_input_hidden_states"})},
        tp_size=1, spec=dict(num_steps=3, topk=1, num_draft_tokens=4),
        acceptance=dict(kind="iid", acceptance_rate=0.6), serving_engine=engine)
    f = tmp_path / "sc.yaml"
    f.write_text(yaml.safe_dump(data))
    return f


def test_calibrate_moe_kernel_times_writes_the_table_and_guards_its_output(tmp_path):
    from simulator.cli import app
    from simulator.scenario import load_scenario
    sc = _scenario_file(tmp_path, {"kind": "vllm"})
    out = tmp_path / "out.yaml"
    r = CliRunner().invoke(app, ["calibrate", "moe-kernel-times", str(sc), str(DATA / "moe_bench_sglang.txt"),
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "measured us" in r.output and "modelled us" in r.output
    assert load_scenario(out).serving_engine.moe_layer_latency_us == {1: 40.0, 2: 48.0, 4: 64.0, 8: 80.0}
    # an earlier output of this command is replaced; any other file needs --force
    r = CliRunner().invoke(app, ["calibrate", "moe-kernel-times", str(sc), str(DATA / "moe_bench_vllm.txt"),
                                 "--out", str(out)])
    assert r.exit_code == 0 and load_scenario(out).serving_engine.moe_layer_latency_us == {1: 25.5, 16: 70.25}
    other = tmp_path / "mine.yaml"
    other.write_text("keep me\n")
    r = CliRunner().invoke(app, ["calibrate", "moe-kernel-times", str(sc), str(DATA / "moe_bench_vllm.txt"),
                                 "--out", str(other)])
    assert r.exit_code != 0 and "--force" in r.output and other.read_text() == "keep me\n"


@pytest.mark.parametrize("engine, log, what", [
    ({"kind": "live_loop"}, "moe_bench_vllm.txt", "live_loop"),
    ({"kind": "sglang"}, "vllm_server.log", "no MoE kernel times found"),
])
def test_calibrate_moe_kernel_times_refuses_with_one_line(tmp_path, engine, log, what):
    from simulator.cli import app
    sc = _scenario_file(tmp_path, engine)
    r = CliRunner().invoke(app, ["calibrate", "moe-kernel-times", str(sc), str(DATA / log), "--out",
                                 str(tmp_path / "o.yaml")])
    assert r.exit_code != 0 and what in r.output and "Traceback" not in r.output
    assert not (tmp_path / "o.yaml").exists()


def test_the_reader_and_floor_agree_on_a_published_shape_of_curve():
    """Sanity of the interpolation on SGLang's published B200 DeepSeek-R1 TP8 fp8 kernel times
    (sglang PR #11816): between measured token counts the price stays between its neighbours."""
    table = {1: 52.65, 2: 60.35, 4: 79.09, 8: 95.47, 16: 138.68, 24: 175.80}
    vals = [engine_moe_layer_us(table, t, model_us=0.0) for t in np.arange(1, 25)]
    assert all(a <= b for a, b in zip(vals, vals[1:]))


# ---- bad input found by trying the feature as a user would ------------------------------------------
@pytest.mark.parametrize("text, what", [
    ("Start tuning over 1920 configurations...\nTue Dec  1 00:00:00 2026] Completed tuning for batch_size=1, "
     "best_time=52.65 us\nTuning took 80.00 seconds\n", "the output of a --tune run"),
    ("Batch size: 1.0, config: {}\nKernel time: 3 us\n", "batch size '1.0' is not an integer"),
    ("".join(f"Batch size: {b}, config: {{}}\nKernel time: {b + 10} us\n" for b in range(1, 258)),
     "257 batch sizes; serving_engine.moe_layer_latency_us takes at most 256"),
])
def test_a_tune_run_a_float_batch_and_too_many_sizes_are_one_line(tmp_path, text, what):
    f = tmp_path / "moe.txt"
    f.write_text(text)
    with pytest.raises(UserInputError) as e:
        load_moe_kernel_times(f)
    assert "\n" not in str(e.value) and str(f) in str(e.value) and what in str(e.value)


def test_a_binary_or_utf16_log_is_refused_as_not_utf8_and_windows_line_ends_read(tmp_path):
    """The log is read as every user file is (simulator.inputs.read_text), not with bad bytes
    replaced: a binary file or a PowerShell UTF-16 redirect says so instead of 'no times found'."""
    f = tmp_path / "moe.txt"
    f.write_bytes(b"\xff\xfeB\x00a\x00t\x00")
    with pytest.raises(UserInputError, match="moe.txt: not UTF-8"):
        load_moe_kernel_times(f)
    f.write_bytes((DATA / "moe_bench_vllm.txt").read_bytes().replace(b"\n", b"\r\n"))
    assert load_moe_kernel_times(f) == {1: 25.5, 16: 70.25}


def test_token_counts_written_as_text_are_the_integers_they_spell():
    """JSON object keys are text: a sweep's scenario_json, `calibrate from-runs`' copies of the
    scenario and JSON-style YAML ('8': 90) were refused as 'Input should be a valid integer'."""
    sc = _engine_sc({"1": 40.0, "4": 64.0})
    assert sc.serving_engine.moe_layer_latency_us == {1: 40.0, 4: 64.0}
    from simulator.config import Scenario
    again = Scenario.model_validate(sc.model_dump(mode="json"), strict=True)
    assert again.serving_engine.moe_layer_latency_us == {1: 40.0, 4: 64.0}
    with pytest.raises(Exception, match="token count 1 is written twice"):
        _engine_sc({1: 40.0, "1": 50.0})
    for key in ("1.5", 1.0, True):
        with pytest.raises(Exception, match=r"is not a token count: keys are integers 1\.\.1,000,000"):
            _engine_sc({key: 40.0})


def test_set_on_a_table_entry_replaces_or_adds_it(tmp_path):
    from simulator.scenario import load_scenario
    sc = _scenario_file(tmp_path, {"kind": "sglang", "moe_layer_latency_us": {1: 40.0, 4: 64.0}})
    loaded = load_scenario(sc, ["serving_engine.moe_layer_latency_us.1=70", "serving_engine.moe_layer_latency_us.16=90"])
    assert loaded.serving_engine.moe_layer_latency_us == {1: 70.0, 4: 64.0, 16: 90.0}


def test_a_sweep_with_the_table_draws_its_dashboard(tmp_path):
    """sweep --html (and plot) read the sweep's scenario_json back: its JSON keys are text."""
    from simulator.cli import app
    sc = _scenario_file(tmp_path, {"kind": "sglang", "moe_layer_latency_us": {1: 40.0, 4: 64.0}})
    r = CliRunner().invoke(app, ["sweep", str(sc), "--grid", "spec.num_steps=1..2", "--out", str(tmp_path / "sw"),
                                 "--html", "--des-sample", "0"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "sw" / "plots" / "index.html").is_file()
    r = CliRunner().invoke(app, ["sweep", str(sc), "--grid", "serving_engine.moe_layer_latency_us={1: 50},{1: 80}",
                                 "--out", str(tmp_path / "sw2"), "--des-sample", "0"])
    assert r.exit_code == 0, r.output


def test_from_runs_fits_a_scenario_holding_the_table_with_its_profile_beside_it(tmp_path):
    """`calibrate from-runs` copies the scenario through JSON (text keys) and loads the profile:
    a scenario written by moe-kernel-times, whose profile is a JSON beside it, was refused."""
    import shutil

    from simulator.cli import app
    from simulator.evidence.engine_fit import predict
    from simulator.profile import shipped_profiles_dir
    from simulator.scenario import load_scenario
    (tmp_path / "sc").mkdir()
    shutil.copy(shipped_profiles_dir() / "h200.json", tmp_path / "sc" / "mine.json")
    sc = _scenario_file(tmp_path / "sc", {"kind": "sglang", "moe_layer_latency_us": {1: 40.0, 4: 64.0}})
    data = yaml.safe_load(sc.read_text())
    sc.write_text(yaml.safe_dump({**data, "profile": "mine.json"}))
    truth = load_scenario(sc)
    spec, base = predict(truth.model_copy(update={"profile": str(tmp_path / "sc" / "mine.json")}))
    al = 1 + 0.6 + 0.6 ** 2 + 0.6 ** 3
    log = tmp_path / "server.log"
    log.write_text(
        "[2026-01-01 00:00:00 TP0] Decode batch. #running-req: 1, #token: 300, token usage: 0.00, "
        f"cuda graph: True, gen throughput (token/s): {base:.4f}, #queue-req: 0,\n"
        "[2026-01-01 00:01:00 TP0] Decode batch. #running-req: 1, #token: 600, token usage: 0.00, "
        f"accept len: {al:.6f}, cuda graph: True, gen throughput (token/s): {spec * 1.1:.4f}, #queue-req: 0,\n")
    out = tmp_path / "other" / "fitted.yaml"
    r = CliRunner().invoke(app, ["calibrate", "from-runs", str(sc), str(log), "--out", str(out)])
    assert r.exit_code == 0, r.output
    fitted = load_scenario(out)  # the profile path now relative to out's folder
    assert fitted.serving_engine.moe_layer_latency_us == {1: 40.0, 4: 64.0}
    assert yaml.safe_load(out.read_text())["profile"] == "../sc/mine.json"


def test_moe_kernel_times_finds_a_profile_beside_the_scenario_and_rebases_it(tmp_path):
    import shutil

    from simulator.cli import app
    from simulator.profile import shipped_profiles_dir
    from simulator.scenario import load_profile_for, load_scenario
    (tmp_path / "sc").mkdir()
    shutil.copy(shipped_profiles_dir() / "h200.json", tmp_path / "sc" / "mine.json")
    sc = _scenario_file(tmp_path / "sc", {"kind": "vllm"})
    sc.write_text(yaml.safe_dump({**yaml.safe_load(sc.read_text()), "profile": "mine.json"}))
    out = tmp_path / "new" / "out.yaml"
    r = CliRunner().invoke(app, ["calibrate", "moe-kernel-times", str(sc), str(DATA / "moe_bench_vllm.txt"),
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    written = load_scenario(out)
    assert load_profile_for(written, base_dir=out.parent)[1] == tmp_path / "new" / ".." / "sc" / "mine.json"


@pytest.mark.parametrize("command", ["moe-kernel-times", "from-runs"])
def test_an_unwritable_or_file_parent_out_is_refused_before_the_work(tmp_path, monkeypatch, command):
    """--out in a folder this process may not write in, or under a file, is one line naming --out
    before anything is read (it printed the table, then 'output ...: Permission denied').
    os.access is faked: the tests may run as root."""
    import os

    from simulator.cli import app
    sc = _scenario_file(tmp_path, {"kind": "sglang"})
    log = DATA / ("moe_bench_sglang.txt" if command == "moe-kernel-times" else "sglang_server.log")
    (tmp_path / "ro").mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: (not (mode & os.W_OK and Path(p).name == "ro")
                                                            and real_access(p, mode, **kw)))
    for out, what in ((tmp_path / "ro" / "o.yaml", "ro (permission denied)"),
                      (tmp_path / "sc.yaml" / "o.yaml", "sc.yaml is a file, not a folder")):
        r = CliRunner().invoke(app, ["calibrate", command, str(sc), str(log), "--out", str(out)])
        assert r.exit_code == 2 and f"--out {out}" in r.output and what in r.output, r.output
        assert "measured us" not in r.output
    assert list((tmp_path / "ro").iterdir()) == []


def test_a_fifo_input_is_not_a_regular_file_not_missing(tmp_path):
    import os

    from simulator.cli import app
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    sc = _scenario_file(tmp_path, {"kind": "sglang"})
    os.mkfifo(tmp_path / "log")
    r = CliRunner().invoke(app, ["calibrate", "moe-kernel-times", str(sc), str(tmp_path / "log"), "--out",
                                 str(tmp_path / "o.yaml")])
    assert r.exit_code == 2 and "log: not a regular file" in r.output


def test_the_live_loop_names_the_engine_kinds():
    """It said 'serving_engine.moe_layer_latency_us: Extra inputs are not permitted'."""
    with pytest.raises(Exception, match="moe_layer_latency_us is a field of the engine kinds"):
        make_scenario(target=MOE_TARGET, serving_engine={"kind": "live_loop", "moe_layer_latency_us": {1: 5.0}})


def test_a_dense_target_gets_a_note_not_a_silent_no_op():
    dense = CostModel(make_scenario(serving_engine={"kind": "sglang", "moe_layer_latency_us": {1: 40.0}}),
                      flat_profile())
    dense.verify_forward()
    assert any("no MoE layers; the engine's moe_layer_latency_us has no effect" in n for n in dense.notes)


def test_a_whole_forward_table_of_the_moe_target_says_the_table_is_not_applied():
    """engine kernels live_loop with costs.source whole_forward: a measured forward table of the MoE
    target prices it whole, so the engine's MoE time cannot enter; a note says so."""
    from simulator.profile import ForwardTable
    from tests.conftest import ASSUMED
    table = ForwardTable(model="tiny-moe", tp_size=1, mode="graph", num_tokens=[1, 8], context_len=[256, 1024],
                         latency_us=[[100.0, 200.0], [400.0, 800.0]], provenance=ASSUMED)
    sc = make_scenario(target=MOE_TARGET, costs=dict(source="whole_forward"),
                       serving_engine={"kind": "sglang", "kernels": "live_loop", "host_cycle_us": 100.0,
                                       "moe_layer_latency_us": {1: 4000.0}})
    cost = CostModel(sc, flat_profile(forwards=[table]))
    assert [k.name for k in cost.verify_forward().kernels].count("forward") == 1
    assert cost.verify_forward().kernels[1].gpu_us < 800.0
    assert any("moe_layer_latency_us not applied" in n for n in cost.notes)


def test_a_scenario_that_would_not_load_is_not_written(tmp_path, monkeypatch):
    """The written scenario is validated before the write: with the reader's bound lifted, 300
    batch sizes (the field takes 256) are refused naming --out, and nothing is written."""
    import simulator.evidence.importers.moe_bench as moe_bench
    from simulator.cli import app
    monkeypatch.setattr(moe_bench, "MOE_TABLE_MAX_ENTRIES", 1000)
    log = tmp_path / "moe.txt"
    log.write_text("".join(f"Batch size: {b}, config: {{}}\nKernel time: {b + 10} us\n" for b in range(1, 301)))
    sc = _scenario_file(tmp_path, {"kind": "sglang"})
    out = tmp_path / "o.yaml"
    r = CliRunner().invoke(app, ["calibrate", "moe-kernel-times", str(sc), str(log), "--out", str(out)])
    assert r.exit_code == 2 and f"--out {out}: serving_engine.moe_layer_latency_us" in " ".join(r.output.split())
    assert not out.exists()


def test_engine_moe_records_must_be_of_the_targets_shape_and_fp8_asks_for_the_weight_format(tmp_path):
    """`calibrate engine-moe` records carry E, K, N, top_k and the weight format: records of another
    shape are refused naming both shapes; fp8 records on a target priced at bf16 get a note naming
    the precision to give."""
    from simulator.cli import app
    rec = ('{"shape": "s", "E": 8, "K": 64, "N": 16, "top_k": 2, "quant": "fp8_block128", "gpu": "G", '
           '"tokens": %d, "routing": "rotating", "kernels_us": %s}')
    log = tmp_path / "moe.jsonl"
    log.write_text(rec % (1, 30) + "\n" + rec % (4, 45) + "\n")
    # MOE_TARGET at tp1: E=8, K=64, N=32 (moe_intermediate_size), top_k=2: N differs
    r = CliRunner().invoke(app, ["calibrate", "moe-kernel-times", str(_scenario_file(tmp_path, {"kind": "sglang"})),
                                 str(log), "--out", str(tmp_path / "o.yaml")])
    assert r.exit_code != 0 and "E=8 K=64 N=16 top_k=2" in r.output and "N=32" in r.output
    assert not (tmp_path / "o.yaml").exists()
    log.write_text((rec % (1, 30)).replace('"N": 16', '"N": 32') + "\n")
    r = CliRunner().invoke(app, ["calibrate", "moe-kernel-times", str(_scenario_file(tmp_path, {"kind": "sglang"})),
                                 str(log), "--out", str(tmp_path / "o.yaml")])
    assert r.exit_code == 0, r.output
    assert "records are fp8" in r.output and "routed_experts: fp8_block128" in r.output


def test_a_scenario_precision_silences_the_quantization_config_note():
    from simulator.scenario import scenario_from_dict
    ds = str(Path(__file__).parents[1] / "data" / "models" / "deepseek-v3.json")
    from tests.conftest import TINY_DRAFT
    base = {"draft": TINY_DRAFT, "spec": {"num_steps": 3, "topk": 1, "num_draft_tokens": 4},
            "acceptance": {"kind": "iid", "acceptance_rate": 0.6}}
    for target, noted in [({"config_path": ds, "name": "v3"}, True),
                          ({"config_path": ds, "name": "v3", "precision": {"routed_experts": "fp8_block128"}}, False)]:
        sc = scenario_from_dict({"name": "x", "profile": "flat", "target": target, **base}, "x", Path("."))
        assert any("quantization_config" in n for n in sc.target.config_notes) is noted
