"""Engine-side options parsed as written or refused, outputs that are never an input, and the
engine outputs whose reading raised (issue 47): each one line naming the option or file.

The generated cases of the same families are kind 13 of the fuzz (tests/fuzz/gen_engine.py).
"""

from __future__ import annotations

import builtins
import json
import re

import pytest
from tests.fuzz.cases import ENGINE_RUNS, ROOT, base_scenario
from tests.fuzz.gen_engine import FIVE_K
from tests.fuzz.running import run, write_scenario


# ---- lists of integers -------------------------------------------------------------------------------
@pytest.mark.parametrize("option, value", [
    ("--num-steps", "3,"), ("--num-steps", "\uff13"), ("--num-steps", "\u0663"), ("--num-steps", "1_0"),
    ("--batches", ""), ("--context-lens", ""), ("--batches", "1,,2"), ("--batches", " "),
    ("--batches", "2048"), ("--context-lens", "+1024")])
def test_calibrate_engine_lists_are_read_as_written_or_refused(tmp_path, option, value):
    code, out = run(tmp_path, "calibrate", "engine", "--engine", "fake", "--few", "--out", "p.json", option, value)
    assert code == 2 and f"error: {option}" in out and "comma-separated integers" in out, out
    assert list(tmp_path.iterdir()) == []


def test_batches_above_the_engines_max_num_seqs_are_refused_before_a_plan_is_made(tmp_path):
    code, out = run(tmp_path, "calibrate", "engine", "--engine", "fake", "--out", "p.json", "--batches", "2048",
                    "--num-steps", "1", "--context-lens", "1024")
    assert code == 2 and "--batches '2048': comma-separated integers 1..64" in out, out


@pytest.mark.parametrize("option", ["--catalog-gpu", "--name"])
def test_empty_names_are_refused(tmp_path, option):
    code, out = run(tmp_path, "calibrate", "engine", "--engine", "fake", "--few", "--out", "p.json", option, "")
    assert code == 2 and f"error: {option} ''" in out and list(tmp_path.iterdir()) == []


def test_trace_cycles_of_5000_digits_or_other_scripts_are_refused(tmp_path):
    write_scenario(tmp_path)
    for value in (f"0:{FIVE_K}", "0:\u0663"):
        code, out = run(tmp_path, "simulate", "s.yaml", "--set", "fidelity.granularity=forward", "--trace", "t.json",
                        "--trace-cycles", value)
        assert code == 2 and "--trace-cycles" in out and "digits 0-9" in out and len(out) < 400, out
        assert not (tmp_path / "t.json").exists()


# ---- outputs -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("out_arg, words", [("out/", "names a folder"), ("", "give a file path"),
                                            ("-", "give --points")])
def test_calibrate_engine_out_is_a_file_it_writes_and_nothing_else(tmp_path, out_arg, words):
    code, out = run(tmp_path, "calibrate", "engine", "--engine", "fake", "--few", "--out", out_arg)
    assert code == 2 and "--out" in out and words in out, out
    assert list(tmp_path.iterdir()) == []


def test_the_points_file_is_never_the_profile(tmp_path):
    code, out = run(tmp_path, "calibrate", "engine", "--engine", "fake", "--few", "--out", "p.json", "--points",
                    "./p.json")
    assert code == 2 and "is --out too" in out and list(tmp_path.iterdir()) == []


def test_live_out_empty_is_refused_not_the_working_folder(tmp_path):
    code, out = run(tmp_path, "live", "--engine", "fake", "--out", "")
    assert code == 2 and "--out '': give a folder path" in out and list(tmp_path.iterdir()) == []


def test_tp_on_the_fake_engine_without_torch_is_one_line(tmp_path, monkeypatch):
    real = builtins.__import__

    def no_torch(name, *a, **k):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("no torch")
        return real(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", no_torch)
    code, out = run(tmp_path, "calibrate", "engine", "--engine", "fake", "--few", "--out", "p.json", "--tp", "2")
    assert code == 2 and "--tp 2 needs torch" in out and list(tmp_path.iterdir()) == []


# ---- engine outputs ----------------------------------------------------------------------------------
def _from_runs(tmp_path, name: str, text: str) -> tuple[int, str]:
    sc = base_scenario()
    sc["serving_engine"] = {"kind": "vllm"}
    write_scenario(tmp_path, sc)
    (tmp_path / name).write_text(text)
    return run(tmp_path, "calibrate", "from-runs", "s.yaml", name, "--out", "f.yaml")


def test_a_trace_whose_correlation_is_a_list_names_the_event(tmp_path):
    data = json.loads((ENGINE_RUNS / "eagle3_trace.json").read_text())
    for ev in data["traceEvents"]:
        if isinstance(ev.get("args"), dict) and "correlation" in ev["args"]:
            ev["args"]["correlation"] = [1, 2]
    code, out = _from_runs(tmp_path, "run.json", json.dumps(data))
    assert code == 2 and "run.json: traceEvents[" in out and "args.correlation is [1, 2]" in out, out


def test_a_vllm_log_of_70_per_position_rates_is_refused_in_a_line(tmp_path):
    text = re.sub(r"Per-position acceptance rate: [0-9., ]+?, Avg",
                  "Per-position acceptance rate: " + ", ".join(["0.500"] * 70) + ", Avg",
                  (ENGINE_RUNS / "vllm_server.log").read_text())
    code, out = _from_runs(tmp_path, "run.log", text)
    assert code == 2 and "run.log:" in out and "per_position_acceptance" in out and "at most 64" in out, out


@pytest.mark.parametrize("line, words", [
    ('{"shape": ' + "[" * 5000 + "]" * 5000 + ', "tokens": 8, "routing": "rotating", "kernels_us": 1}',
     "nested deeper than"),
    (json.dumps(dict(shape="x", tokens=8, routing="rotating", kernels_us=1)).replace(": 1}", f": {FIVE_K}}}"),
     "thousands of digits"),
    (json.dumps(dict(shape=["x"], tokens=8, routing="rotating", kernels_us=1.0)), "shape and routing are text")])
def test_engine_moe_records_nested_deep_or_of_5000_digits_name_the_line(tmp_path, line, words):
    import yaml
    sc = yaml.safe_load((ROOT / "scenarios" / "kimi_k2_tp8_draft_live_loop.yaml").read_text())  # a MoE target
    sc["serving_engine"] = {"kind": "sglang"}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(sc))
    (tmp_path / "moe.jsonl").write_text(line + "\n")
    code, out = run(tmp_path, "calibrate", "moe-kernel-times", "s.yaml", "moe.jsonl", "--out", "m.yaml")
    assert code == 2 and "moe.jsonl:1" in out and words in out, out


def test_search_for_goodput_with_a_warm_up_past_the_run_is_one_line(tmp_path):
    sc = base_scenario()
    sc["serving_engine"] = {"kind": "live_loop"}
    sc["serving"] = dict(arrivals=dict(kind="poisson", rate_per_s=50), num_requests=8, warmup_s=1000,
                         input_len=dict(kind="fixed", tokens=64), output_len=dict(kind="fixed", tokens=8),
                         slo=dict(ttft_ms=500, tpot_ms=50))
    write_scenario(tmp_path, sc)
    code, out = run(tmp_path, "search", "s.yaml", "--objective", "goodput")
    assert code == 2 and "s.yaml: no request arriving after warmup_s=1000 finished" in out, out


def test_engine_points_of_the_bench_store_nested_deep_are_one_line(tmp_path):
    from calibration.build.store import PointStore
    f = tmp_path / "b.jsonl"
    f.write_text("[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ValueError, match=r"b\.jsonl:1: not a points-file line"):
        PointStore.check(f)


