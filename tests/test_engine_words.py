"""The engines' own words for the speculative settings: vLLM's --speculative-config JSON, SGLang's
--speculative-* flags, a chain's num_draft_tokens following --set spec.num_steps, and an engine's key
in a scenario's spec refused with the field it is here (simulator.engines.spec_words)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator.cli import build_app
from simulator.scenario import apply_overrides, load_scenario

ROOT = Path(__file__).resolve().parents[1]
VLLM = ROOT / "scenarios" / "vllm_llama8b_h200.yaml"
SGLANG = ROOT / "scenarios" / "sglang_llama8b_h200.yaml"
FAST = ["--set", "fidelity.num_cycles=200", "--set", "fidelity.warmup_cycles=20"]


def _run(*args: str):
    return CliRunner().invoke(build_app(), list(args), env={"COLUMNS": "200"})


def _json(tmp_path: Path, name: str, *args: str) -> dict:
    out = tmp_path / f"{name}.json"
    r = _run("simulate", *args, *FAST, "--json", str(out))
    assert r.exit_code == 0, r.output
    return json.loads(out.read_text())


def test_an_engines_spec_key_is_refused_with_the_field_it_is_here():
    r = _run("simulate", str(VLLM), "--set", "spec.num_speculative_tokens=3")
    assert r.exit_code == 2
    assert "spec.num_speculative_tokens" in r.output and "num_steps" in r.output and "--speculative-config" in r.output


def test_set_num_steps_alone_gives_a_chain_its_num_draft_tokens():
    sc = load_scenario(VLLM, ["spec.num_steps=6"])
    assert (sc.spec.num_steps, sc.spec.topk, sc.spec.num_draft_tokens) == (6, 1, 7)
    tree = apply_overrides({"spec": {"topk": 4, "num_steps": 3, "num_draft_tokens": 8}}, ["spec.num_steps=2"], "t")
    assert tree["spec"]["num_draft_tokens"] == 8  # a tree keeps what was given
    r = _run("simulate", str(VLLM), "--set", "spec.num_steps=6", *FAST)
    assert r.exit_code == 0, r.output
    assert "num_steps=6" in r.output


def test_vllm_speculative_config_sets_the_spec_and_says_how(tmp_path):
    pasted = _json(tmp_path, "pasted", str(VLLM), "--speculative-config",
                   '{"method": "eagle3", "num_speculative_tokens": 6, "draft_tensor_parallel_size": 1, '
                   '"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}')
    written = _json(tmp_path, "written", str(VLLM), "--set", "spec.num_steps=6", "--set", "spec.num_draft_tokens=7")
    assert pasted["scenario"]["spec"] == written["scenario"]["spec"]
    assert pasted["tok_per_s"] == written["tok_per_s"]
    r = _run("simulate", str(VLLM), *FAST, "--speculative-config", '{"method": "eagle3", "num_speculative_tokens": 3}')
    text = " ".join(r.output.split())
    assert "vLLM --speculative-config" in text and "num_speculative_tokens 3 -> spec.num_steps 3" in text
    bad = _run("simulate", str(VLLM), "--speculative-config", '{"method": "medusa", "num_speculative_tokens": 3}')
    assert bad.exit_code == 2 and "medusa" in bad.output


def test_sglang_flags_set_the_spec_and_say_how(tmp_path):
    flags = _json(tmp_path, "flags", str(SGLANG), "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "2",
                  "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3")
    written = _json(tmp_path, "written", str(SGLANG), "--set", "spec.num_steps=2", "--set", "spec.num_draft_tokens=3")
    assert flags["scenario"]["spec"] == written["scenario"]["spec"] and flags["tok_per_s"] == written["tok_per_s"]
    both = _run("simulate", str(SGLANG), "--speculative-num-steps", "2", "--speculative-config",
                '{"num_speculative_tokens": 2}')
    assert both.exit_code == 2 and "one engine's" in both.output


def test_sweep_and_search_take_the_engines_words(tmp_path):
    r = _run("sweep", str(VLLM), "--grid", "acceptance.acceptance_rate=0.6,0.8", "--des-sample", "0",
             "--speculative-config", '{"method": "eagle3", "num_speculative_tokens": 5}', "--out", str(tmp_path / "s"))
    assert r.exit_code == 0, r.output
    with open(tmp_path / "s" / "sweep.csv") as f:
        assert {row["num_steps"] for row in csv.DictReader(f)} == {"5"}
    assert "num_speculative_tokens 5" in " ".join(r.output.split())
    r = _run("search", str(VLLM), "--space", "spec.num_steps=2,3", "--speculative-num-steps", "4")
    assert r.exit_code == 0, r.output
    assert "SGLang flags: --speculative-num-steps 4 -> spec.num_steps 4" in " ".join(r.output.split())


def test_acceptance_as_the_engines_print_it_is_converted_with_the_conversion_shown(tmp_path):
    # alpha 0.7 at num_steps 3: accept_length 1 + .7 + .49 + .343 = 2.533; accepted / drafted = 1.533 / 3
    rate = _json(tmp_path, "rate", str(VLLM), "--vllm-acceptance-rate", f"{1.533 / 3 * 100}")
    length = _json(tmp_path, "length", str(VLLM), "--sglang-accept-length", "2.533")
    counts = _json(tmp_path, "counts", str(VLLM), "--vllm-per-position-accepted", "7000,4900,3430",
                   "--vllm-num-drafts", "10000")
    for res in (rate, length):
        assert res["scenario"]["acceptance"]["kind"] == "iid"
        assert res["scenario"]["acceptance"]["acceptance_rate"] == pytest.approx(0.7, abs=1e-9)
    assert counts["scenario"]["acceptance"]["kind"] == "positional"
    assert counts["scenario"]["acceptance"]["acceptance_rates"] == pytest.approx([0.7, 0.7, 0.7])
    r = _run("simulate", str(VLLM), *FAST, "--vllm-acceptance-rate", "51")
    text = " ".join(r.output.split())
    assert r.exit_code == 0 and "vLLM acceptance rate 51.00% (accepted / draft tokens) at num_steps 3" in text
    assert "accept_length 1 + 0.5100 x 3 = 2.5300" in text
    r = _run("simulate", str(VLLM), "--vllm-per-position-accepted", "5,4", "--vllm-num-drafts", "10")
    assert r.exit_code == 2 and "2 positions" in r.output


@pytest.mark.parametrize("text", ["3,", "1_0,2", "\uff13,2", "+3,2", "3,,2", ""])
def test_per_position_counts_are_read_as_written(text):
    """Counts in ASCII digits, one per position: '1_0', another script's digits, a sign or an empty item
    are refused, not read (issue 47's option family)."""
    from simulator.cli.common import acceptance_words
    from simulator.inputs import UserInputError
    scen = Path(__file__).resolve().parents[1] / "scenarios" / "vllm_llama8b_h200.yaml"
    with pytest.raises(UserInputError, match="digits 0-9"):
        acceptance_words(scen, [], None, text, 100, None)
