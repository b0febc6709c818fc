import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.acceptance import (build_acceptance, iid_mean_accept_length, pmf_from_conditional,
                                  tree_candidates_per_depth)
from simulator.workload_config import (EmpiricalAcceptance, IidAcceptance, PositionalAcceptance, SpecConfig,
                                       TreeAcceptance)


def chain(s):
    return SpecConfig(num_steps=s, topk=1, num_draft_tokens=s + 1)


@pytest.mark.parametrize("a,s", [(0.3, 1), (0.5, 3), (0.7, 5), (0.9, 8), (0.0, 4), (1.0, 4)])
def test_iid_pmf_mean_matches_leviathan_formula(a, s):
    m = build_acceptance(IidAcceptance(acceptance_rate=a), chain(s))
    assert m.pmf().sum() == pytest.approx(1.0)
    assert m.mean_accept_length() == pytest.approx(iid_mean_accept_length(a, s), rel=1e-12)


@pytest.mark.parametrize("a,s", [(0.5, 3), (0.7, 5), (0.9, 8)])
def test_iid_sample_mean_within_4_standard_errors(a, s, rng):
    m = build_acceptance(IidAcceptance(acceptance_rate=a), chain(s))
    x = m.sample(rng, 200_000)
    se = x.std() / np.sqrt(len(x))
    assert abs(x.mean() - (1 - a ** (s + 1)) / (1 - a)) < 4 * se


def test_heterogeneous_rates_sample_matches_mixture(rng):
    m = build_acceptance(IidAcceptance(acceptance_rate=0.7, rate_concentration=4.0), chain(5))
    rates = m.draw_request_rates(rng, 100_000)
    x = m.sample(rng, 100_000, rates)
    assert abs(x.mean() - m.mean_accept_length()) < 4 * x.std() / np.sqrt(len(x))
    # E[accept_length | a] = 1 + a + ... + a^s is convex in a, so spread raises the mean (Jensen)
    assert m.mean_accept_length() > iid_mean_accept_length(0.7, 5)


def test_positional_pmf_by_hand():
    m = build_acceptance(PositionalAcceptance(acceptance_rates=[0.8, 0.5]), chain(2))
    np.testing.assert_allclose(m.pmf(), [0.2, 0.8 * 0.5, 0.8 * 0.5])


def test_empirical_is_taken_as_given(rng):
    p = [0.1, 0.2, 0.3, 0.4]
    m = build_acceptance(EmpiricalAcceptance(accept_length_probs=p), chain(3))
    np.testing.assert_allclose(m.pmf(), p)
    counts = np.bincount(m.sample(rng, 100_000), minlength=5)[1:] / 100_000
    np.testing.assert_allclose(counts, p, atol=0.01)


def test_tree_spreads_budget_and_beats_chain():
    spec = SpecConfig(num_steps=3, topk=4, num_draft_tokens=8)
    assert list(tree_candidates_per_depth(spec)) == [4, 3, 0]
    tree = build_acceptance(TreeAcceptance(acceptance_rate=0.5), spec)
    assert tree.pmf()[-1] == 0.0  # depth 3 got no candidates: accept_length <= 3
    chain_m = build_acceptance(IidAcceptance(acceptance_rate=0.5), chain(3))
    assert tree.mean_accept_length() > chain_m.mean_accept_length()


@settings(max_examples=60, deadline=None)
@given(s=st.integers(1, 12), a=st.floats(0, 1), seed=st.integers(0, 2**32 - 1))
def test_samples_stay_in_support(s, a, seed):
    m = build_acceptance(IidAcceptance(acceptance_rate=a), chain(s))
    x = m.sample(np.random.default_rng(seed), 64)
    assert x.min() >= 1 and x.max() <= s + 1


def test_pmf_from_conditional_sums_to_one():
    assert pmf_from_conditional(np.array([0.3, 0.9, 0.1])).sum() == pytest.approx(1.0)
