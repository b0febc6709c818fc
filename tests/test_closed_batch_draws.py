"""A closed batch is one draw of the acceptance; the serving DES predicts the mean of several
(simulator.serving.run.num_draws, run_serving_draws; simulator.serving.metrics.mean_results)."""

import numpy as np
import pytest

from simulator.serving.metrics import mean_results, serving_metrics
from simulator.serving.run import num_draws, run_serving, run_serving_draws, simulate_serving
from tests.test_serving import serving_scenario


def _cycle_count_pmf(remaining: int, rate: float, k: int) -> np.ndarray:
    """P(a request needs c decode cycles to emit `remaining` tokens), c = 0..remaining: each cycle emits
    its accept length L, P(L = j) = rate^(j-1) (1 - rate) for j <= k and rate^k for j = k + 1 (i.i.d.
    acceptance per draft position), the last cycle's tokens past `remaining` thrown away."""
    pl = np.array([rate ** (j - 1) * (1 - rate) for j in range(1, k + 1)] + [rate ** k])
    # f[m][c]: P(c cycles | m tokens left)
    f = np.zeros((remaining + 1, remaining + 1))
    f[0, 0] = 1.0
    for m in range(1, remaining + 1):
        for j, p in enumerate(pl, start=1):
            f[m, 1:] += p * f[max(m - j, 0), :-1]
    return f[remaining]


def test_the_draws_rule():
    """Speculating closed batches of B requests take enough draws for about 64 requests, 2-16, closed loops 4-16
    (a loop's TTFT p50 is one of its joins); serving.draws overrides; the baseline, Poisson arrivals and a batch
    of one new token take one."""
    assert num_draws(serving_scenario("serving.num_requests=4", arrivals="closed_batch")[0], True) == 16
    assert num_draws(serving_scenario("serving.num_requests=16", arrivals="closed_batch")[0], True) == 4
    assert num_draws(serving_scenario("serving.num_requests=64", arrivals="closed_batch")[0], True) == 2
    assert num_draws(serving_scenario("serving.num_requests=1000", arrivals="closed_batch")[0], True) == 2
    assert num_draws(serving_scenario("serving.num_requests=4", "serving.draws=3", arrivals="closed_batch")[0],
                     True) == 3
    assert num_draws(serving_scenario("serving.num_requests=4", arrivals="closed_batch")[0], False) == 1
    assert num_draws(serving_scenario("serving.num_requests=4", "serving.output_len.tokens=1",
                                      arrivals="closed_batch")[0], True) == 1
    assert num_draws(serving_scenario("serving.num_requests=40")[0], True) == 4  # a closed loop: at least 4
    assert num_draws(serving_scenario("serving.num_requests=8")[0], True) == 8
    assert num_draws(serving_scenario("serving.duration_s=20")[0], True) == 4  # no num_requests: a loop of a duration
    assert num_draws(serving_scenario("serving.num_requests=40")[0], False) == 1
    assert num_draws(serving_scenario("serving.num_requests=40", "serving.arrivals.rate_per_s=20",
                                      arrivals="poisson")[0], True) == 1


@pytest.mark.parametrize("batch", [1, 4])
def test_the_mean_of_the_draws_is_the_expected_max_of_the_requests_cycle_counts(batch):
    """B requests at t = 0, prefill free: the batch decodes until its last request has its N - 1 tokens, so
    its decode steps are the max of B i.i.d. cycle counts, whose exact distribution is
    P(max <= c) = P(C <= c)^B (`_cycle_count_pmf`). Over 256 draws the steps' mean is within 4 standard
    errors of that expectation and their variance within 30% of its; every draw is its own (one draw
    repeated 256 times fails both)."""
    n, k, rate, draws = 30, 3, 0.6, 256
    sc, prof = serving_scenario(f"serving.num_requests={batch}", "serving.prefill_latency_scale=0",
                                f"serving.output_len.tokens={n}", f"acceptance.acceptance_rate={rate}",
                                f"spec.num_steps={k}", f"serving.draws={draws}", f"workload.batch_size={batch}",
                                arrivals="closed_batch")
    runs = run_serving_draws(sc, prof)
    assert len(runs) == draws
    steps = np.array([int((r.step_batch_size > 0).sum()) for r in runs])
    cdf = np.cumsum(_cycle_count_pmf(n - 1, rate, k)) ** batch
    pmf = np.diff(np.concatenate([[0.0], cdf]))
    c = np.arange(len(pmf))
    mean = float((c * pmf).sum())
    var = float(((c - mean) ** 2 * pmf).sum())
    assert abs(steps.mean() - mean) <= 4 * np.sqrt(var / draws)
    assert steps.var() == pytest.approx(var, rel=0.3)


def test_the_metrics_of_a_closed_batch_are_the_mean_of_its_draws():
    """simulate_serving's speculative metrics: each field the mean of the draws' (counts rounded), with the
    number of draws and the range of their durations; the no-speculation baseline is one run."""
    sc, prof = serving_scenario("serving.num_requests=4", "serving.draws=5", arrivals="closed_batch")
    res = simulate_serving(sc, prof)
    one = [serving_metrics(run_serving(sc, prof, True, draw=d), 0.0, None, None) for d in range(5)]
    assert res.draws == 5
    assert res.duration_s == pytest.approx(np.mean([r.duration_s for r in one]))
    assert res.duration_s_range == (min(r.duration_s for r in one), max(r.duration_s for r in one))
    assert res.duration_s_range[0] < res.duration_s_range[1]  # the draws differ
    assert res.tpot_ms.p50 == pytest.approx(np.mean([r.tpot_ms.p50 for r in one]))
    assert res.output_tok_per_s == pytest.approx(np.mean([r.output_tok_per_s for r in one]))
    assert res.num_engine_steps == round(np.mean([r.num_engine_steps for r in one]))
    assert res.speculative and res.speedup is not None
    assert mean_results([one[0]]) is one[0]


def test_a_run_that_drew_what_the_des_drew_is_held_to_that_draw():
    """check_record: a record whose schedule is the DES's first draw (the live loop replays the seeded
    streams) is compared with that draw alone; a record of another draw (an engine's own), with the mean of
    the scenario's draws."""
    from simulator.evidence.live_records import LiveServingRun, serving_record_fields
    from simulator.evidence.validate_serving import check_record
    sc, prof = serving_scenario("serving.num_requests=4", "serving.draws=6", arrivals="closed_batch")

    def record(draw):
        r = run_serving(sc, prof, True, draw=draw)
        return LiveServingRun(scenario=sc, warmup_cycles=0, **serving_record_fields(r),
                              result=serving_metrics(r, 0.0, None, None))
    first = check_record("draw0", record(0), prof)
    assert first.same_schedule and first.tok_per_s_error_frac == pytest.approx(0.0, abs=1e-12)
    other = check_record("draw3", record(3), prof)
    mean = simulate_serving(sc, prof, baseline=False)
    assert not other.same_schedule and mean.draws == 6
    assert other.predicted_tok_per_s == pytest.approx(mean.output_tok_per_s)
