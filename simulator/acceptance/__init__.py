"""Acceptance models: how many tokens a request commits per speculative cycle.

Every model reduces to a distribution of accept_length over 1..num_steps+1 (accepted drafts
plus the token the target samples), given as a pmf. Sampling uses an injected, seeded
`numpy.random.Generator`; nothing here holds global state.

- iid: Leviathan et al. 2023 (arXiv 2211.17192), chain drafting with per-token acceptance a:
  P(accept_length = j) = a^(j-1) (1 - a) for j <= s, P(= s+1) = a^s;
  E[accept_length] = (1 - a^(s+1)) / (1 - a).
  Optional per-request heterogeneity: each request draws a ~ Beta(a c, (1 - a) c).
- positional: conditional acceptance a_d at depth d (drafts degrade with depth).
- empirical: a measured accept_length histogram.
- tree (topk > 1): depth d offers c_d candidates (the tree budget num_draft_tokens - 1 spread
  greedily, at most topk per depth); depth d is passed when any candidate is accepted,
  p_d = 1 - (1 - a)^c_d, candidates independent. An approximation of SGLang's score-ranked tree
  (sglang `python/sglang/srt/speculative/eagle_utils.py`), which spends more of the budget
  near the root; it is exact for a chain.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.workload_config import (AcceptanceConfig, EmpiricalAcceptance, IidAcceptance,
                                       PositionalAcceptance, SpecConfig, TreeAcceptance)


def pmf_from_conditional(rates: np.ndarray) -> np.ndarray:
    """accept_length pmf from conditional acceptance per depth.

    Args:
        rates: (num_steps,) a_d = P(draft d accepted | drafts 1..d-1 accepted), in [0, 1].

    Returns:
        (num_steps + 1,) P(accept_length = 1..num_steps+1); sums to 1.
    """
    rates = np.asarray(rates, dtype=float)
    survive = np.concatenate([[1.0], np.cumprod(rates)])  # P(accept_length >= j), j = 1..s+1
    stop = np.concatenate([1.0 - rates, [1.0]])
    return survive * stop


def iid_mean_accept_length(acceptance_rate: float, num_steps: int) -> float:
    """(1 - a^(s+1)) / (1 - a); s + 1 at a = 1. Source: Leviathan et al. 2023, arXiv 2211.17192."""
    a = float(acceptance_rate)
    if a >= 1.0:
        return float(num_steps + 1)
    return (1.0 - a ** (num_steps + 1)) / (1.0 - a)


def tree_candidates_per_depth(spec: SpecConfig) -> np.ndarray:
    """(num_steps,) candidates verified at each depth: num_draft_tokens - 1 spread greedily, <= topk each."""
    left = spec.num_draft_tokens - 1
    out = np.zeros(spec.num_steps, dtype=int)
    for d in range(spec.num_steps):
        out[d] = min(spec.topk, left)
        left -= out[d]
    return out


@dataclass(frozen=True)
class AcceptanceModel:
    """A sampled accept_length distribution, optionally heterogeneous across requests.

    Attributes:
        base_pmf: (num_steps + 1,) P(accept_length = 1..num_steps+1) of a typical request.
        beta_ab: (alpha, beta) of the per-request iid acceptance-rate distribution, or None.
        batch_wide: one accept length per verify step for the whole batch (`draw: per_batch_step`).
    """

    base_pmf: np.ndarray
    beta_ab: tuple[float, float] | None = None
    batch_wide: bool = False

    @property
    def num_steps(self) -> int:
        return len(self.base_pmf) - 1

    def pmf(self) -> np.ndarray:
        """(num_steps + 1,) accept_length pmf averaged over requests (not occupancy-weighted)."""
        if self.beta_ab is None:
            return self.base_pmf.copy()
        rates, weights = self._rate_quadrature()
        rows = np.stack([pmf_from_conditional(np.full(self.num_steps, r)) for r in rates])
        return weights @ rows

    def mean_accept_length(self) -> float:
        return float(np.arange(1, self.num_steps + 2) @ self.pmf())

    def draw_request_rates(self, rng: np.random.Generator, size: int) -> np.ndarray | None:
        """(size,) per-request acceptance rates, or None when requests are alike."""
        if self.beta_ab is None:
            return None
        return rng.beta(self.beta_ab[0], self.beta_ab[1], size=size)

    def sample(self, rng: np.random.Generator, size: int, request_rates: np.ndarray | None = None) -> np.ndarray:
        """(size,) int accept lengths in 1..num_steps+1.

        Args:
            rng: seeded generator. size: number of requests this cycle.
            request_rates: (size,) per-request iid rates from `draw_request_rates`, or None.
        """
        s = self.num_steps
        if request_rates is None:
            return rng.choice(s + 1, size=size, p=self.base_pmf) + 1
        u = rng.random((size, s))
        accepted = u < np.asarray(request_rates)[:, None]
        # accepted drafts = length of the leading run of successes
        return np.argmin(np.concatenate([accepted, np.zeros((size, 1), bool)], axis=1), axis=1) + 1

    def sample_cycles(self, rng: np.random.Generator, num_cycles: int, batch_size: int) -> np.ndarray:
        """(num_cycles, batch_size) accept lengths of alike requests: independent per request, or
        with `batch_wide` one draw per cycle shared by the whole batch."""
        if self.batch_wide:
            return np.repeat(self.sample(rng, num_cycles)[:, None], batch_size, axis=1)
        return self.sample(rng, num_cycles * batch_size).reshape(num_cycles, batch_size)

    def _rate_quadrature(self, num_points: int = 256) -> tuple[np.ndarray, np.ndarray]:
        """Equal-probability nodes of the Beta rate distribution (midpoint quantiles).

        scipy.special.betaincinv is the Beta quantile scipy.stats.beta.ppf evaluates (the same
        numbers; tests/test_speed.py checks); imported here, as scipy.stats costs seconds to import.
        """
        from scipy.special import betaincinv
        q = (np.arange(num_points) + 0.5) / num_points
        return betaincinv(*self.beta_ab, q), np.full(num_points, 1.0 / num_points)

    def rate_classes(self) -> tuple[np.ndarray, np.ndarray]:
        """Request classes for closed-form averages.

        Returns:
            (rows, weights): (num_classes, num_steps+1) accept_length pmfs and (num_classes,)
            request probabilities summing to 1; one class when requests are alike.
        """
        if self.beta_ab is None:
            return self.base_pmf[None, :], np.ones(1)
        rates, w = self._rate_quadrature()
        rows = np.stack([pmf_from_conditional(np.full(self.num_steps, r)) for r in rates])
        return rows, w


def build_acceptance(config: AcceptanceConfig, spec: SpecConfig) -> AcceptanceModel:
    """Acceptance model for a scenario's `acceptance` section and `spec`.

    Raises:
        ValueError: a list's length does not match num_steps (the scenario validator checks this first).
    """
    s = spec.num_steps
    if isinstance(config, IidAcceptance):
        a = config.acceptance_rate
        base = pmf_from_conditional(np.full(s, a))
        beta_ab = None
        if config.rate_concentration is not None and 0.0 < a < 1.0:
            beta_ab = (a * config.rate_concentration, (1.0 - a) * config.rate_concentration)
        return AcceptanceModel(base, beta_ab, batch_wide=config.draw == "per_batch_step")
    if isinstance(config, PositionalAcceptance):
        if len(config.acceptance_rates) != s:
            raise ValueError(f"acceptance_rates has {len(config.acceptance_rates)} entries, num_steps={s}")
        return AcceptanceModel(pmf_from_conditional(np.asarray(config.acceptance_rates)),
                               batch_wide=config.draw == "per_batch_step")
    if isinstance(config, EmpiricalAcceptance):
        p = np.asarray(config.accept_length_probs, dtype=float)
        if len(p) != s + 1:
            raise ValueError(f"accept_length_probs has {len(p)} entries, num_steps + 1 = {s + 1}")
        return AcceptanceModel(p / p.sum(), batch_wide=config.draw == "per_batch_step")
    if isinstance(config, TreeAcceptance):
        c = tree_candidates_per_depth(spec)
        rates = 1.0 - (1.0 - config.acceptance_rate) ** c
        return AcceptanceModel(pmf_from_conditional(rates))
    raise TypeError(f"unknown acceptance config {type(config).__name__}")
