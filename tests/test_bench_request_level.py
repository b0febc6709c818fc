"""benchmarks/bench_request_level.py's refusals: one line naming the option, never a traceback."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks" / "bench_request_level.py"
RUNS = ROOT / "data" / "engine_runs" / "h100_sglang_0.5.15_requests"


def _exit_message(monkeypatch, *args: str) -> str:
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", [str(BENCH), *args])
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(SystemExit) as e:
        runpy.run_path(str(BENCH), run_name="__main__")
    return str(e.value.code)


def test_runs_of_other_models_than_given_are_refused_naming_the_benchs_option(monkeypatch):
    msg = _exit_message(monkeypatch, str(RUNS / "qwen3_8b_e2e_2026-12-07.jsonl.gz"), "--engine-profile",
                        "sglang-0.5.15-h100-llama-3.1-8b-eagle3")
    assert msg.startswith("--models llama-3.1-8b-instruct eagle3-llama-3.1-8b: not the models these runs ran")
    assert "num_hidden_layers 36 (given 32)" in msg and "--target" not in msg and "\n" not in msg


def test_a_profile_of_another_family_of_layers_is_refused(monkeypatch):
    msg = _exit_message(monkeypatch, str(RUNS / "moe_e2e_2026-12-07.jsonl.gz"), "--engine-profile",
                        "sglang-0.5.15-h100-llama-3.1-8b-eagle3", "--models", "qwen3-30b-a3b", "eagle3-qwen3-30b-a3b")
    assert "does not price these runs" in msg and "another family of layers" in msg and "\n" not in msg


def test_the_runs_own_host_probes_price_them(monkeypatch, capsys, tmp_path):
    """--host-of-runs takes the median of the probes the runs recorded (RequestRun.host_probe_us): a copy of
    Qwen3-8B's runs with a probe of 2,428 us after each run is priced as --host-probe-us 2428 prices it; runs
    that recorded none, and two ways of giving the host at once, are refused in one line."""
    import gzip
    import json
    src = RUNS / "qwen3_8b_e2e_2026-12-07.jsonl.gz"
    lines = [json.loads(ln) for ln in gzip.open(src, "rt")]
    for ln in lines:
        for r in (ln.get("point") or {}).get("repeats", []):
            r["host_probe_us"] = 2428.0
    probed = tmp_path / "probed.jsonl"
    probed.write_text("".join(json.dumps(ln) + "\n" for ln in lines))
    common = ["--engine-profile", "sglang-0.5.15-h100-qwen3-8b-eagle3", "--models", "qwen3-8b", "eagle3-qwen3-8b"]

    def run(*args):
        monkeypatch.chdir(ROOT)
        monkeypatch.setattr(sys, "argv", [str(BENCH), *args])
        monkeypatch.setattr(sys, "path", list(sys.path))
        capsys.readouterr()
        runpy.run_path(str(BENCH), run_name="__main__")
        return capsys.readouterr().out
    own = run(str(probed), *common, "--host-of-runs")
    given = run(str(probed), *common, "--host-probe-us", "2428")
    assert "host probe 2,428 us against the profile's 5,647 us" in own.splitlines()[0]
    assert [ln for ln in own.splitlines() if ln.startswith("|")] == [ln for ln in given.splitlines() if ln.startswith("|")]
    assert "recorded a host probe" in _exit_message(monkeypatch, str(src), *common, "--host-of-runs")
    assert "give one" in _exit_message(monkeypatch, str(probed), *common, "--host-of-runs", "--host-probe-us", "9")


def test_gpu_minutes_count_every_process_of_a_label(tmp_path, monkeypatch):
    """A queue resumes a process whose points failed in a new one of the same label: each of them ran on the GPU."""
    import gzip
    monkeypatch.setattr(sys, "path", list(sys.path))
    bench = runpy.run_path(str(BENCH), run_name="bench")
    log = tmp_path / "campaign_x.log.gz"
    with gzip.open(log, "wt") as f:
        f.write("e2e_s3: starting (4 points, 900 s left)\ne2e_s3: points failed (error lines) after 100 s\n"
                "e2e_s0: done after 30 s\ne2e_s3: done after 20 s\ne2e_s1: timeout after 5 s\n")
    assert bench["gpu_minutes"]([log]) == {f"{tmp_path.name}/e2e_s3": 120.0, f"{tmp_path.name}/e2e_s0": 30.0,
                                           f"{tmp_path.name}/e2e_s1": 5.0}
