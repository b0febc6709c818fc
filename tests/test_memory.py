"""simulator.memory: weights and KV cache per GPU, against what vLLM itself loaded on the H200, and
the refusals (simulate) and infeasible points (search) of what does not fit."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from simulator.cli import app
from simulator.memory import check_memory, memory_fit
from simulator.scenario import load_profile_for, load_scenario, scenario_from_dict

ROOT = Path(__file__).resolve().parents[1]
GIB = 2 ** 30


def _loaded_gib(run: str, label: str) -> float:
    """vLLM's 'Model loading took N GiB' of one engine process of a committed campaign log."""
    text = gzip.decompress((ROOT / "data" / "engine_runs" / run / "campaign.log.gz").read_bytes()).decode()
    part = text.split(f"{label}: starting", 1)[1]
    return float(re.search(r"Model loading took ([\d.]+) GiB", part).group(1))


def _engine_scenario(target: str, draft: str, with_draft: bool):
    from calibration.cli.engine import _configs
    _, _, t, d = _configs(target, draft)
    data = yaml.safe_load((ROOT / "scenarios" / "vllm_llama8b_h200.yaml").read_text())
    data["target"], data["draft"] = ({k: v for k, v in x.items() if v is not None and k != "config_notes"} for x in (t, d))
    data["spec"] = {"method": "eagle3" if with_draft else "ngram", "num_steps": 3, "topk": 1, "num_draft_tokens": 4}
    data["serving_engine"] = {"kind": "vllm"}
    return scenario_from_dict(data, "test", ROOT / "scenarios")


@pytest.mark.parametrize("run, target, draft", [
    ("h200_vllm_0.26.0", "llama-3.1-8b-instruct", "eagle3-llama-3.1-8b"),
    ("h200_vllm_0.26.0_qwen3-30b-a3b", "qwen3-30b-a3b", "eagle3-qwen3-30b-a3b")])
def test_weights_are_what_vllm_loaded(run, target, draft):
    alone = memory_fit(_engine_scenario(target, draft, False), 141, "h200-sxm")
    assert alone.target_weights_bytes == pytest.approx(_loaded_gib(run, "calibrate_s0") * GIB, rel=0.02)
    both = memory_fit(_engine_scenario(target, draft, True), 141, "h200-sxm")
    assert both.target_weights_bytes + both.draft_weights_bytes == pytest.approx(
        _loaded_gib(run, "calibrate_s3") * GIB, rel=0.02)


def test_kv_cache_and_tp_sharding():
    sc = load_scenario(ROOT / "scenarios" / "tp8_draft.yaml")
    fit = memory_fit(sc, 141, "h200-sxm")
    assert fit.target_weights_bytes == pytest.approx(70.55e9 * 2 / 8, rel=0.02)  # Llama-3.1-70B, bf16, TP8
    w = sc.workload
    per_token = 2 * 80 * (8 // 8) * 128 * 2  # K and V, 80 layers, one KV head per rank, head_dim 128, bf16
    tokens = w.batch_size * (w.context_len + w.max_new_tokens + sc.spec.num_draft_tokens)
    assert fit.target_kv_bytes == pytest.approx(per_token * tokens, rel=1e-9)


def test_a_70b_on_one_h200_is_refused_and_infeasible_in_search(tmp_path):
    data = yaml.safe_load((ROOT / "scenarios" / "tp8_draft.yaml").read_text())
    data["tp_size"] = 1
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    r = CliRunner().invoke(app, ["simulate", str(tmp_path / "s.yaml")])
    out = " ".join(r.output.split())
    assert r.exit_code == 2 and "does not fit in GPU memory" in out and "144.1 GB per GPU, over the 141 GB of h200-sxm by 3.1 GB" in out  # docs/hardware.md
    assert len([ln for ln in r.output.splitlines() if ln.strip()]) <= 4
    r = CliRunner().invoke(app, ["search", str(ROOT / "scenarios" / "tp8_draft.yaml"), "--space", "tp_size=1,8",
                                 "--out", str(tmp_path / "se")])
    assert r.exit_code == 0, r.output
    rows = list(__import__("csv").DictReader(open(tmp_path / "se" / "search.csv")))
    tp1 = [x for x in rows if x["tp_size"] == "1"]
    assert tp1 and all(x["fits_memory"] == "False" and x["feasible"] == "False" and x["pareto"] == "False" for x in tp1)
    assert any(x["feasible"] == "True" for x in rows if x["tp_size"] == "8")


def test_a_tight_fit_is_a_note_not_a_refusal():
    """The seed case (Kimi-K2 fp8 on 8 x H200 NVL) leaves under 10% of the GPU free: noted, run."""
    sc = load_scenario(ROOT / "scenarios" / "kimi_k2_seed_a1.yaml")
    fit, too_big, tight = check_memory(sc, load_profile_for(sc)[0])
    assert too_big is None and tight is not None and "less than vLLM's default reserve" in tight
    assert round(fit.total_bytes / 1e9, 1) == 130.0  # docs/hardware.md
