"""SGLang engine-native pieces that run without SGLang or a GPU: the forced acceptance's pmf, the
batch-size CUDA-graph padding, the CLI's SGLang-only options, the committed SGLang records."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from calibration.engines.records import _acceptance
from calibration.engines.sglang_backend import iid_accept_length
from simulator.acceptance import iid_mean_accept_length
from simulator.cli import app
from simulator.engines.native import load_engine_profile

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
