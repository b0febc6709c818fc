"""A model given as its config.json prices as the same shape written field by field: shapes are
compared by their values (not the file they came from) when an engine profile is matched, and an
EAGLE-3 draft's config.json gives the fc layer's three target hidden states."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.acceptance import build_acceptance
from simulator.analytic import analyze
from simulator.costs.engine_native import profile_mismatch
from simulator.costs.forward import CostModel
from simulator.engines.profile import load_engine_profile
from simulator.model_config import shape_fields_from_hf_config
from simulator.profile import load_profile, resolve_profile_path
from simulator.scenario import read_scenario_dict, scenario_from_dict

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "data" / "models" / "engine"


def test_an_eagle3_draft_config_fuses_three_target_hidden_states():
    cfg = json.loads((MODELS / "eagle3-llama-3.1-8b.config.json").read_text())  # LlamaForCausalLMEagle3
    assert shape_fields_from_hf_config(cfg)[0]["num_fc_input_hidden_states"] == 3
    vllm_named = {**cfg, "architectures": ["Eagle3LlamaForCausalLM"], "eagle_config": {
        "eagle_aux_hidden_state_layer_ids": [2, 16]}}  # vLLM's class name; two aux layers listed
    assert shape_fields_from_hf_config(vllm_named)[0]["num_fc_input_hidden_states"] == 2
    target = json.loads((MODELS / "llama-3.1-8b-instruct.config.json").read_text())
    assert "num_fc_input_hidden_states" not in shape_fields_from_hf_config(target)[0]


def _closed_form_tok_per_s(sc) -> float:
    cost = CostModel(sc, load_profile(resolve_profile_path(sc.profile)))
    return analyze(sc, cost, build_acceptance(sc.acceptance, sc.spec)).tok_per_s


def _written_out(shape: dict, name: str) -> dict:
    """A profile's shape as a scenario writes it field by field."""
    return {**{k: v for k, v in shape.items() if v is not None and k not in ("config_path", "config_notes")},
            "name": name}


@pytest.mark.parametrize("engine_profile, target_config, draft_config", [
    ("vllm-0.26.0-h200-llama-3.1-8b-eagle3", "llama-3.1-8b-instruct", "eagle3-llama-3.1-8b"),
    ("vllm-0.26.0-h200-qwen3-30b-a3b-eagle3", "qwen3-30b-a3b", "eagle3-qwen3-30b-a3b"),
])
def test_a_model_given_as_its_config_json_keeps_the_engine_profile(engine_profile, target_config, draft_config):
    prof = load_engine_profile(engine_profile)
    base = read_scenario_dict(ROOT / "scenarios" / "vllm_llama8b_h200.yaml")
    base["serving_engine"] = {"kind": "vllm", "engine_profile": engine_profile}
    by_fields = scenario_from_dict({**base, "target": _written_out(prof.target, "t"),
                                    "draft": _written_out(prof.draft, "d")}, "fields", ROOT / "scenarios")
    by_config = scenario_from_dict({**base, "target": {"config_path": str(MODELS / f"{target_config}.config.json"),
                                                       "name": "t"},
                                    "draft": {"config_path": str(MODELS / f"{draft_config}.config.json"), "name": "d"}},
                                   "configs", ROOT / "scenarios")
    assert profile_mismatch(prof, by_fields) is None
    assert profile_mismatch(prof, by_config) is None
    assert by_config.target.shape_values() == by_fields.target.shape_values()
    assert _closed_form_tok_per_s(by_config) == pytest.approx(_closed_form_tok_per_s(by_fields), rel=1e-12)
