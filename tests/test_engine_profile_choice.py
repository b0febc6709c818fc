"""Engine profiles found by what was asked (issue 49): a scenario whose named engine profile cannot price it
(a tree asked of a chain's profile) is priced by the shipped profile measured on its engine, GPU, model
shapes (by value) and draft topology, and says so; one that names none is told which shipped profile
would price it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from simulator.costs.forward import CostModel
from simulator.scenario import load_profile_for, load_scenario, read_scenario_dict
from simulator.simulate import simulate

ROOT = Path(__file__).resolve().parents[1]
SGLANG = ROOT / "scenarios" / "sglang_llama8b_h200.yaml"
CHAIN = "sglang-0.5.15-h200-llama-3.1-8b-eagle3"
TREE = "sglang-0.5.15-h200-llama-3.1-8b-eagle3-tree-t4-n8"
TREE_SETS = ["acceptance={kind: tree, acceptance_rate: 0.7}", "spec.topk=4", "spec.num_draft_tokens=8",
             "fidelity.num_cycles=300"]


def _cost(path: Path, overrides: list[str]) -> CostModel:
    sc = load_scenario(path, overrides)
    prof, _ = load_profile_for(sc, None, base_dir=path.parent, source=str(path))
    return CostModel(sc, prof)


def _run(path: Path, overrides: list[str]):
    sc = load_scenario(path, overrides)
    prof, _ = load_profile_for(sc, None, base_dir=path.parent, source=str(path))
    return simulate(sc, prof)[0]


def test_a_tree_asked_of_the_chain_profile_is_priced_by_the_shipped_tree_profile():
    asked = _run(SGLANG, TREE_SETS)  # names the chain's profile
    named = _run(SGLANG, TREE_SETS + [f"serving_engine.engine_profile={TREE}"])
    assert asked.priced_by_engine_profile
    assert asked.cycle_time_us == named.cycle_time_us and asked.tok_per_s == named.tok_per_s
    assert asked.speedup == named.speedup
    assert asked.scenario["serving_engine"]["engine_profile"] == TREE  # the JSON reruns as it ran
    note = next(n for n in asked.notes if "not used" in n)
    assert CHAIN in note and TREE in note and "topk 4, 8 draft tokens" in note
    assert f"serving_engine.engine_profile={TREE}" in note


def test_a_scenario_naming_no_profile_is_told_the_shipped_one_that_prices_it(tmp_path):
    data = read_scenario_dict(SGLANG)
    del data["serving_engine"]["engine_profile"]
    path = tmp_path / "no_profile.yaml"
    path.write_text(yaml.safe_dump(data))
    cost = _cost(path, TREE_SETS)
    assert cost.native is None  # priced as asked: the op tables
    note = next(n for n in cost.notes if TREE in n)
    assert f"--set serving_engine.engine_profile={TREE}" in note
    chain = _cost(path, [])
    assert any(f"engine_profile={CHAIN}" in n for n in chain.notes)


@pytest.mark.parametrize("overrides, why", [
    (["spec.num_draft_tokens=6"], "another tree: no shipped profile measured topk 4 with 6 draft tokens"),
    (["target.intermediate_size=14208"], "another target shape"),
    (["serving_engine.overlap_scheduler=false"], "the overlap scheduler off: the tree was measured with it on"),
])
def test_no_shipped_profile_is_taken_for_what_it_did_not_measure(overrides, why):
    cost = _cost(SGLANG, TREE_SETS + overrides)
    assert cost.native is None, why
    assert any(n.startswith(f"sglang: engine profile {CHAIN} not used") and "op tables" in n for n in cost.notes)


def test_shapes_are_compared_by_value_and_the_gpu_must_be_the_profiles():
    from simulator.costs.engine_native import scenario_gpu, shipped_match
    sc = load_scenario(SGLANG, TREE_SETS + ["target.name=my-llama", "draft.name=my-eagle"])
    prof, _ = load_profile_for(sc, None, base_dir=SGLANG.parent, source=str(SGLANG))
    assert scenario_gpu(sc, prof) == "h200-sxm"
    name, _ = shipped_match(sc, "h200-sxm")
    assert name == TREE
    assert shipped_match(sc, "h100-sxm") is None and shipped_match(sc, None) is None
    assert CostModel(sc, prof).native.chosen == TREE
