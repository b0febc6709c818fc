"""Expert-load skew (simulator.costs.routing) and expert parallelism in the op list."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from simulator.costs import forward_ops as FO
from simulator.costs import moe_ops as MO
from simulator.costs import routing as R
from simulator.costs.collectives_model import collective_us
from simulator.costs.forward import CostModel
from simulator.costs.lookup import roofline_collective_us
from simulator.workload_config import HistogramRouting, UniformRouting, ZipfRouting
from tests.conftest import TINY_TARGET, flat_profile, make_scenario

MOE_TARGET = {**TINY_TARGET, "name": "tiny-moe", "n_routed_experts": 8, "num_experts_per_tok": 2,
              "moe_intermediate_size": 32, "first_k_dense_replace": 1}


def _moe_shape(**over):
    return make_scenario(target={**MOE_TARGET, **over}).target


@pytest.mark.parametrize("e, k, t", [(384, 8, 1), (384, 8, 9), (16, 4, 3), (256, 8, 64)])
def test_uniform_routing_equals_the_occupancy_formula(e, k, t):
    old = MO.expected_distinct_experts(e, k, t)
    assert R.expected_distinct_experts_routed(UniformRouting(), e, k, t) == pytest.approx(old, rel=1e-12)
    flat = HistogramRouting(expert_load=[3.0] * e)
    assert R.expected_distinct_experts_routed(flat, e, k, t) == pytest.approx(old, rel=1e-12)
    assert R.expected_distinct_experts_routed(ZipfRouting(s=0.0), e, k, t) == pytest.approx(old, rel=1e-12)


def test_uniform_routing_keeps_the_op_key_and_bytes_exactly():
    m = _moe_shape()
    for t in (1, 4, 9):
        base = MO.moe_experts(m, 1, t)
        same = MO.moe_experts(m, 1, t, UniformRouting())
        assert same.key == base.key == "moe_experts:e=8,k=2,h=64,i=32,w=2"
        assert same.bytes_fixed == base.bytes_fixed == MO.expected_distinct_experts(8, 2, t) * 3 * 64 * 32 * 2
        assert same.flops_per_token == base.flops_per_token


def test_zipf_tends_to_uniform_as_s_goes_to_zero():
    old = MO.expected_distinct_experts(384, 8, 9)
    assert R.expected_distinct_experts_routed(ZipfRouting(s=1e-9), 384, 8, 9) == pytest.approx(old, rel=1e-6)
    vals = [R.expected_distinct_experts_routed(ZipfRouting(s=s), 384, 8, 9) for s in (0.0, 0.5, 1.0, 2.0, 4.0)]
    assert all(a > b for a, b in zip(vals, vals[1:]))  # steeper skew, fewer distinct experts
    assert vals[-1] >= 8  # never fewer than k


def test_a_hot_expert_means_fewer_distinct_experts():
    uniform = R.expected_distinct_experts_routed(UniformRouting(), 16, 4, 6)
    hot = R.expected_distinct_experts_routed(HistogramRouting(expert_load=[50.0] + [1.0] * 15), 16, 4, 6)
    assert 4 <= hot < uniform


def test_inclusion_probabilities_sum_to_k_and_cap_at_one():
    for s in (0.0, 0.7, 1.5, 4.0):
        q = R.inclusion_probabilities(R.load_shares(ZipfRouting(s=s), 32), 6)
        assert q.sum() == pytest.approx(6.0) and q.max() <= 1.0 + 1e-12 and q.min() >= 0.0
    q = R.inclusion_probabilities(R.load_shares(ZipfRouting(s=4.0), 32), 6)
    assert q[0] == 1.0 and np.all(np.diff(q) <= 1e-12)


def _systematic_pps(q: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """k distinct experts with inclusion probabilities exactly q (Madow's systematic sampling)."""
    edges = np.concatenate([[0.0], np.cumsum(q)])
    points = rng.uniform() + np.arange(int(round(q.sum())))
    return np.searchsorted(edges, points, side="right") - 1


@pytest.mark.parametrize("s", [0.8, 1.5, 3.0])
def test_monte_carlo_distinct_experts_within_3_sigma(s, rng):
    """Tokens drawn by a sampler whose marginals are the model's q: the formula is then exact."""
    e, k, t, reps = 64, 8, 12, 4000
    q = R.inclusion_probabilities(R.load_shares(ZipfRouting(s=s), e), k)
    counts = np.array([len(np.unique(np.concatenate([_systematic_pps(q, rng) for _ in range(t)])))
                       for _ in range(reps)])
    predicted = R.expected_distinct_experts_routed(ZipfRouting(s=s), e, k, t)
    assert abs(counts.mean() - predicted) < 3 * counts.std(ddof=1) / np.sqrt(reps)


def _successive_weighted_draws(p: np.ndarray, k: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """(n, k) experts, each row k distinct experts drawn one after another with probability
    proportional to p among those not drawn yet (what rng.choice(e, k, replace=False, p=p) draws),
    for all n rows at once: the k largest of log p + Gumbel noise have exactly that distribution
    (the Gumbel-top-k trick: Vieira 2014; Kool, van Hoof and Welling, ICML 2019, eq. 3)."""
    keys = np.log(p) + rng.gumbel(size=(n, len(p)))
    return np.argpartition(-keys, k - 1, axis=1)[:, :k]


def test_monte_carlo_from_a_measured_histogram_within_3_sigma(rng):
    """A router that picks k experts by successive weighted draws: the load histogram it produces,
    fed back as `histogram`, predicts the distinct experts of fresh batches (k p_e is exact there)."""
    e, k, t, reps = 32, 4, 10, 4000
    logits = rng.normal(0.0, 1.0, e)
    p = np.exp(logits) / np.exp(logits).sum()
    load = np.bincount(_successive_weighted_draws(p, k, 200_000, rng).ravel(), minlength=e)
    predicted = R.expected_distinct_experts_routed(HistogramRouting(expert_load=load.tolist()), e, k, t)
    batches = _successive_weighted_draws(p, k, reps * t, rng).reshape(reps, t * k)
    hit = np.zeros((reps, e), dtype=bool)
    hit[np.arange(reps)[:, None], batches] = True
    counts = hit.sum(axis=1)
    assert abs(counts.mean() - predicted) < 3 * counts.std(ddof=1) / np.sqrt(reps)


def test_gumbel_top_k_draws_are_successive_weighted_draws(rng):
    """The vectorised router above draws what rng.choice(replace=False, p=p) draws: the frequency
    of each ordered-irrelevant pair {i, j} (k = 2 of 4 experts) against its exact probability
    p_i p_j / (1 - p_i) + p_j p_i / (1 - p_j), within 4 sigma of a binomial count."""
    p, n = np.array([0.5, 0.25, 0.15, 0.1]), 200_000
    rows = np.sort(_successive_weighted_draws(p, 2, n, rng), axis=1)
    for i in range(4):
        for j in range(i + 1, 4):
            want = p[i] * p[j] / (1 - p[i]) + p[j] * p[i] / (1 - p[j])
            got = np.mean((rows[:, 0] == i) & (rows[:, 1] == j))
            assert abs(got - want) < 4 * np.sqrt(want * (1 - want) / n), (i, j, got, want)


def test_routing_is_threaded_into_the_op_with_its_own_key():
    m = _moe_shape()
    skewed = MO.moe_experts(m, 1, 6, ZipfRouting(s=2.0))
    assert skewed.key.endswith(",r=zipf2") and skewed.bytes_fixed < MO.moe_experts(m, 1, 6).bytes_fixed
    hist = MO.moe_experts(m, 1, 6, HistogramRouting(expert_load=[5, 1, 1, 1, 1, 1, 1, 1]))
    assert ",r=hist" in hist.key


# ---- bad input ----------------------------------------------------------------------------------
@pytest.mark.parametrize("s", [-0.1, 4.5])
def test_zipf_exponent_out_of_range_is_refused(s):
    with pytest.raises(ValidationError, match="expert_routing.zipf.s"):
        make_scenario(target=MOE_TARGET, workload=dict(expert_routing=dict(kind="zipf", s=s)))


def test_histogram_of_the_wrong_length_names_the_field():
    with pytest.raises(ValidationError) as e:
        make_scenario(target=MOE_TARGET, workload=dict(expert_routing=dict(kind="histogram", expert_load=[1.0] * 7)))
    assert len(e.value.errors()) == 1
    assert "workload.expert_routing.expert_load has 7 entries" in str(e.value)
    assert "n_routed_experts=8" in str(e.value)


def test_histogram_needs_k_loaded_experts_and_a_positive_sum():
    with pytest.raises(ValidationError, match="1 experts with load"):
        make_scenario(target=MOE_TARGET, workload=dict(expert_routing=dict(kind="histogram",
                                                                           expert_load=[1.0] + [0.0] * 7)))
    with pytest.raises(ValidationError, match="positive sum"):
        make_scenario(target=MOE_TARGET, workload=dict(expert_routing=dict(kind="histogram", expert_load=[0.0] * 8)))


@pytest.mark.parametrize("over, fragment", [
    (dict(tp_size=4, expert_parallel_size=3), "must divide tp_size=4"),
    (dict(tp_size=2, expert_parallel_size=2, target=TINY_TARGET), "needs an MoE target"),
    (dict(tp_size=8, expert_parallel_size=8, target={**MOE_TARGET, "n_routed_experts": 12}),
     "must divide target.n_routed_experts=12"),
    (dict(tp_size=4, expert_dispatch="all_to_all"), "expert_dispatch=all_to_all needs expert_parallel_size 2..64"),
    (dict(tp_size=4, expert_dispatch="all_to_all", target=TINY_TARGET), "needs expert_parallel_size 2..64"),
])
def test_expert_parallel_size_is_checked(over, fragment):
    with pytest.raises(ValidationError, match=fragment):
        make_scenario(**{"target": MOE_TARGET, **over})


# ---- expert parallelism ----------------------------------------------------------------------------
def test_ep_with_allreduce_dispatch_adds_no_collective():
    """Default dispatch: tokens replicated by TP attention, the layer's allreduce combines the experts."""
    sc = make_scenario(target=MOE_TARGET, tp_size=4, expert_parallel_size=2)
    assert sc.expert_dispatch == "allreduce"
    plain = FO.target_forward_ops(sc.target, 4, 2, 3, 64)
    ep = FO.target_forward_ops(sc.target, 4, 2, 3, 64, ep=2)
    assert [op.collective for op in ep] == [op.collective for op in plain]
    assert [op.key for op in ep if op.name == "moe_experts"][0].endswith(",ep=2")


def test_ep_adds_two_all_to_all_per_moe_layer_and_no_extra_allreduce():
    sc = make_scenario(target=MOE_TARGET, tp_size=4, expert_parallel_size=2)
    m = sc.target
    plain = FO.target_forward_ops(m, 4, 2, 3, 64)
    ep = FO.target_forward_ops(m, 4, 2, 3, 64, ep=2, dispatch="all_to_all")
    a2a = [op for op in ep if op.collective == "all_to_all"]
    assert len(a2a) == 2 * m.num_moe_layers
    assert all(op.world_size == 2 and op.size_bytes == 6 * 2 * 64 * 2 / 2 for op in a2a)
    count = lambda ops: sum(op.collective == "allreduce" for op in ops)  # noqa: E731
    assert count(ep) == count(plain)
    assert not any(op.collective == "all_to_all" for op in plain)
    # dispatch, experts, combine, in that order, inside each MoE layer
    names = [op.name for op in ep]
    i = names.index("moe_experts")
    assert names[i - 1] == "all_to_all" and names[i + 1] == "all_to_all"


def test_ep_rank_holds_whole_experts():
    m = _moe_shape()
    tp_only = MO.moe_experts(m, 4, 5)
    ep = MO.moe_experts(m, 4, 5, ep=4)  # 2 whole experts per rank, each of full width 32
    assert ep.key == "moe_experts:e=8,k=2,h=64,i=32,w=2,ep=4"
    per_expert = 3 * 64 * 32 * 2
    pi = 1 - (1 - 2 / 8) ** 5  # each expert touched by 5 tokens with probability pi
    # the busiest of 4 ranks of 2 experts: P(max <= m) = P(Binomial(2, pi) <= m)^4
    cdf = np.cumsum([(1 - pi) ** 2, 2 * pi * (1 - pi), pi ** 2]) ** 4
    assert ep.bytes_fixed == pytest.approx(float(np.sum(1 - cdf[:-1])) * per_expert)
    assert ep.bytes_fixed > 2 * pi * per_expert  # above the mean rank's
    assert tp_only.bytes_fixed == pytest.approx(MO.expected_distinct_experts(8, 2, 5) * 3 * 64 * 8 * 2)
    assert ep.flops_per_token == pytest.approx(tp_only.flops_per_token)  # k/ep pairs x full width


def test_ep_prices_the_busiest_rank_under_skew():
    m = _moe_shape()
    hot_first = MO.moe_experts(m, 2, 4, HistogramRouting(expert_load=[8, 8, 1, 1, 1, 1, 1, 1]), ep=2)
    d, pairs = R.busiest_rank(HistogramRouting(expert_load=[8, 8, 1, 1, 1, 1, 1, 1]), 8, 2, 4, 2)
    assert hot_first.bytes_fixed == pytest.approx(d * 3 * 64 * 32 * 2)
    assert pairs > 1.0  # the hot rank gets more than k/ep of each token's picks


def test_all_to_all_is_priced_by_the_roofline_and_the_box_model():
    rf = flat_profile(coll_us=5.0).roofline
    assert roofline_collective_us("all_to_all", 1e6, 4, rf) == pytest.approx(5.0 + 1e6 * 0.75 / (1e15 * 1e-3))
    from simulator.hardware import box_links, default_catalog
    cat = default_catalog()
    box = box_links(cat.box("hgx-h100-8gpu"), cat.box_gpu("hgx-h100-8gpu"))
    small, big = (collective_us("all_to_all", s, 8, box).latency_us for s in (4096, 64 << 20))
    assert 0 < small < big
    assert collective_us("all_to_all", 4096, 1, box).latency_us == 0.0
    assert "LL128" not in collective_us("all_to_all", 1 << 20, 8, box).detail


def test_an_ep_scenario_simulates():
    from simulator.simulate import simulate
    sc = make_scenario(target=MOE_TARGET, tp_size=2, expert_parallel_size=2, expert_dispatch="all_to_all",
                       workload=dict(batch_size=2, context_len=256, max_new_tokens=32,
                                     expert_routing=dict(kind="zipf", s=1.0)))
    cm = CostModel(sc, flat_profile())
    kinds = [k.name for k in cm.verify_forward().kernels]
    assert kinds.count("all_to_all") == 2 * sc.target.num_moe_layers
    plain = CostModel(sc.model_copy(update={"expert_dispatch": "allreduce"}), flat_profile())
    assert "all_to_all" not in [k.name for k in plain.verify_forward().kernels]
    result, _ = simulate(sc, flat_profile())
    assert result.tok_per_s > 0


def _exact_topk_busiest(e: int, k: int, t: int, ep: int, reps: int, seed: int) -> np.ndarray:
    """Monte Carlo of exact top-k routing: each token touches k distinct experts, uniformly; per
    repetition, the most distinct experts any EP rank (contiguous ids) gets."""
    rng = np.random.default_rng(seed)
    picks = np.argpartition(rng.random((reps, t, e)), k, axis=2)[:, :, :k].reshape(reps, -1)
    hit = np.zeros((reps, e), dtype=bool)
    hit[np.arange(reps)[:, None], picks] = True
    return hit.reshape(reps, ep, e // ep).sum(axis=2).max(axis=1)


@pytest.mark.parametrize("e,k,ep", [(256, 8, 4), (384, 8, 8), (64, 8, 4)])
@pytest.mark.parametrize("t", [1, 4, 16])
def test_busiest_rank_matches_a_monte_carlo_of_exact_topk_routing(e, k, ep, t):
    """The Poisson-binomial expected maximum (routing module docstring) against exact top-k routing:
    within 2% (its approximation) plus three standard errors of the simulation."""
    counts = _exact_topk_busiest(e, k, t, ep, reps=3000, seed=e + t + ep)
    d, pairs = R.busiest_rank(UniformRouting(), e, k, t, ep)
    se = counts.std(ddof=1) / np.sqrt(len(counts))
    assert abs(d - counts.mean()) <= 0.02 * counts.mean() + 3 * se
    assert pairs == pytest.approx(k / ep)
    assert d > MO.expected_distinct_experts(e, k, t) / ep  # the spread: above the mean rank


def test_busiest_rank_is_exact_under_independent_inclusion():
    """With every expert included independently (Poisson sampling, probability q_e per token) the
    touch indicators are independent, so the Poisson-binomial maximum is exact: the simulated mean
    must fall inside its 99.7% interval, skewed loads included."""
    load = [8, 8, 4, 4, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]
    q = R.inclusion_probabilities(R.load_shares(HistogramRouting(expert_load=load), 16), 3)
    rng = np.random.default_rng(7)
    t, ep, reps = 3, 4, 20000
    touched = (rng.random((reps, t, 16)) < q).any(axis=1)
    counts = touched.reshape(reps, ep, -1).sum(axis=2).max(axis=1)
    d = R.expected_busiest_distinct(q.reshape(ep, -1), t)
    assert abs(d - counts.mean()) < 3 * counts.std(ddof=1) / np.sqrt(reps)


def test_poisson_binomial_pmf_is_the_binomial_for_equal_probabilities():
    from scipy.stats import binom
    pmf = R.poisson_binomial_pmf(np.full(12, 0.3))
    assert pmf == pytest.approx(binom.pmf(np.arange(13), 12, 0.3), abs=1e-12)
    assert R.expected_busiest_distinct(np.full((1, 12), 0.3), 2) == pytest.approx(12 * (1 - 0.7 ** 2))
