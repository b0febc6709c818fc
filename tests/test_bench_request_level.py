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
