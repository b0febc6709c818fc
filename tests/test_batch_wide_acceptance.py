"""`draw: per_batch_step`: one accept length per verify step for the whole batch (SGLang's forced
acceptance), against the closed form: the draft extend runs at that one draw, not at the longest
of batch_size independent draws."""

from pathlib import Path

import numpy as np
import pytest

from simulator.acceptance import build_acceptance
from simulator.analytic import analyze, analyze_many
from simulator.costs.forward import CostModel
from simulator.scenario import load_profile_for, read_scenario_dict, scenario_from_dict
from simulator.simulate import simulate

ROOT = Path(__file__).resolve().parents[1]
PMF = [0.2, 0.3, 0.2, 0.3]


def _scenario(draw: str, granularity: str = "cycle", batch: int = 8):
    data = read_scenario_dict(ROOT / "scenarios" / "tp1_draft.yaml")
    data["workload"] = {**data.get("workload", {}), "batch_size": batch}
    data["spec"] = {**data.get("spec", {}), "num_steps": 3, "topk": 1, "num_draft_tokens": 4}
    data["acceptance"] = {"kind": "empirical", "accept_length_probs": PMF, "draw": draw}
    data["fidelity"] = {**data.get("fidelity", {}), "num_cycles": 4000, "granularity": granularity}
    return scenario_from_dict(data, "test", ROOT / "scenarios")


def test_a_batch_wide_draw_extends_at_the_one_draw():
    per_req, per_step = _scenario("per_request"), _scenario("per_batch_step")
    prof = load_profile_for(per_req)[0]
    a = analyze(per_req, CostModel(per_req, prof), build_acceptance(per_req.acceptance, per_req.spec))
    b = analyze(per_step, CostModel(per_step, prof), build_acceptance(per_step.acceptance, per_step.spec))
    assert a.mean_accept_length == pytest.approx(b.mean_accept_length) == pytest.approx(np.dot(PMF, [1, 2, 3, 4]))
    # the extend runs at E[L] tokens, not E[max of 8 draws]: a shorter cycle (the extend costs by tokens)
    assert b.cycle_time_us < a.cycle_time_us
    # batch 1: the same either way
    one = [_scenario(d, batch=1) for d in ("per_request", "per_batch_step")]
    r = [analyze(s, CostModel(s, prof), build_acceptance(s.acceptance, s.spec)) for s in one]
    assert r[0].tok_per_s == pytest.approx(r[1].tok_per_s)
    # the grouped sweep's closed form gives the same numbers
    many = analyze_many([per_step], CostModel(per_step, prof), [build_acceptance(per_step.acceptance, per_step.spec)])
    assert many[0].tok_per_s == pytest.approx(b.tok_per_s, rel=1e-12)


@pytest.mark.parametrize("granularity", ["cycle", "forward"])
def test_the_des_draws_one_length_per_step_and_agrees_with_the_closed_form(granularity):
    sc = _scenario("per_batch_step", granularity)
    res, _ = simulate(sc, load_profile_for(sc)[0])
    lo, hi = res.tok_per_s_ci95
    assert lo * 0.995 <= res.analytic_tok_per_s <= hi * 1.005, (res.tok_per_s, res.analytic_tok_per_s, lo, hi)


def test_a_batch_wide_draw_with_per_request_rates_is_refused():
    from simulator.workload_config import IidAcceptance
    with pytest.raises(ValueError, match="per_batch_step"):
        IidAcceptance(acceptance_rate=0.6, rate_concentration=10.0, draw="per_batch_step")


@pytest.mark.parametrize("granularity", ["cycle", "forward"])
def test_every_request_of_a_step_accepts_the_same_length(granularity):
    """The DES's own draws: per_batch_step gives every slot of a cycle one length; per_request does not."""
    from simulator.des.cycle_level import run_cycle_level
    from simulator.des.simulation import DesRun
    for draw, alike in (("per_batch_step", True), ("per_request", False)):
        sc = _scenario(draw, granularity)
        cost = CostModel(sc, load_profile_for(sc)[0])
        acc = build_acceptance(sc.acceptance, sc.spec)
        if granularity == "cycle":
            log, _, _ = run_cycle_level(cost, acc, np.random.default_rng(0), 300, 10)
            lengths = log.accept_lengths
        else:
            sim = DesRun(cost, acc, np.random.default_rng(0), np.random.default_rng(1))
            sim.run(300, 10)
            lengths = np.array([c.accept_lengths for c in sim.cycles])
        same = (lengths == lengths[:, :1]).all(axis=1)
        assert same.all() if alike else not same.all()
        assert abs(lengths.mean() - np.dot(PMF, [1, 2, 3, 4])) < 0.15
