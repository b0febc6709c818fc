"""Running serving mode: records of one run, and the metrics with the no-speculation baseline beside them."""

from __future__ import annotations

from simulator.config import Scenario
from simulator.profile import CalibrationProfile
from simulator.serving.costs import StepCosts
from simulator.serving.engine import ServingRecords, ServingRun, serving_rngs
from simulator.serving.metrics import ServingResult, serving_metrics




def run_serving(scenario: Scenario, profile: CalibrationProfile, speculative: bool = True,
                costs: StepCosts | None = None) -> ServingRecords:
    """Records of one serving run (speculative=False: the no-speculation baseline, same workload seeds)."""
    costs = costs or StepCosts(scenario, profile)
    return ServingRun(scenario, costs, speculative, serving_rngs(scenario.seed)).run()


def simulate_serving(scenario: Scenario, profile: CalibrationProfile, baseline: bool = True) -> ServingResult:
    """The serving metrics of a scenario, with the no-speculation baseline beside them (baseline=True).

    Raises:
        ArithmeticError: nothing finished after the warm-up.
        UserInputError: a trace or length file is bad, or a request cannot fit the KV cache.
    """
    cfg = scenario.serving
    costs = StepCosts(scenario, profile)
    res = serving_metrics(run_serving(scenario, profile, True, costs), cfg.warmup_s, cfg.slo.ttft_ms, cfg.slo.tpot_ms)
    if not baseline:
        return res
    base = serving_metrics(run_serving(scenario, profile, False, costs), cfg.warmup_s, cfg.slo.ttft_ms,
                           cfg.slo.tpot_ms)
    return res.model_copy(update={"baseline_output_tok_per_s": base.output_tok_per_s,
                                  "speedup": res.output_tok_per_s / base.output_tok_per_s})
