"""Expert routing skew: how many distinct routed experts a forward's tokens touch, per EP rank.

Each of T tokens picks k distinct experts out of E. Expert e takes a load share p_e (sum 1):
uniform p_e = 1/E; zipf p_e proportional to (e + 1)^-s (expert id 0 the hottest); histogram p_e =
expert_load[e] / sum(expert_load).

Per-token inclusion probability. A token includes expert e with probability q_e, sum_e q_e = k
(it picks exactly k). Taken proportional to the load and capped at one:
    q_e = min(1, c p_e),  c chosen so that sum_e q_e = k
(the inclusion probabilities of probability-proportional-to-size sampling of k out of E without
replacement, where units with c p_e >= 1 are taken with certainty and the rest rescaled: Sarndal,
Swensson & Wretman, "Model Assisted Survey Sampling", 1992, section 3.6). c is found by water-filling
(`inclusion_probabilities`). With no cap binding, q_e = k p_e, which is exact for a measured load
histogram (p_e = tokens routed to e / (T k), so k p_e = fraction of tokens that include e <= 1); the
cap is the approximation, and it binds only for synthetic loads (a steep Zipf) that no top-k router
can produce as they stand.

Expected distinct experts. With tokens routed independently, expert e is untouched by all T tokens
with probability (1 - q_e)^T, so
    E[distinct] = sum_e 1 - (1 - q_e)^T,
exact given the marginals q_e (the joint law of a token's k picks does not enter: linearity of
expectation). Uniform p gives q_e = k/E and E (1 - (1 - k/E)^T), the occupancy formula of
`simulator.costs.moe_ops.expected_distinct_experts`.

Expert parallelism. With EP over `ep` ranks, rank r holds experts [r E/ep, (r+1) E/ep) (contiguous
ids, SGLang's and vLLM's default placement without a load balancer); its weight reads are the
distinct experts among its own, D_r = sum over its experts of the indicator that a token touched
it (mean sum of 1 - (1 - q_e)^T). The layer waits for the slowest rank (the combine all-to-all, or
the allreduce after the MoE, is a barrier; "token placement is data-dependent, distributing
workloads unevenly across GPUs and revealing overhead in the AllReduce step after the MoE module",
TensorRT-LLM docs/source/blogs/tech_blog/blog1_...B200_GPUs.md), so the op is priced at the
expected busiest rank, E[max_r D_r], not at the largest mean: at one token, k = 8 of E = 256
experts over ep = 4 ranks, the busiest rank holds 3.5 of the token's experts on average where the
mean is 2 (`expected_busiest_distinct`).

E[max_r D_r] is computed with the touch indicators taken as independent Bernoulli(pi_e), pi_e = 1 -
(1 - q_e)^T: each D_r is then Poisson-binomial (its pmf by the standard convolution recursion),
the ranks independent, P(max <= m) = prod_r P(D_r <= m) and E[max] = sum_m 1 - P(max <= m). This
is exact when every expert is included independently (Poisson sampling); for a real top-k router
(exactly k distinct picks per token) the picks are negatively dependent within a rank, which
narrows each D_r, and across ranks, which widens the max: the two nearly cancel, and
tests/test_routing.py checks the result against a Monte Carlo of exact top-k routing (within 2%
from 1 to 16 tokens, E 64..384, ep 4 and 8). With ep = 1 it is the mean, E[D] = sum pi_e, exactly.

Left out: correlation between tokens (a batch of similar prompts routes alike), expert load
balancers (EPLB) that move hot experts, and the grouped GEMM's time set by the most loaded expert's
token count at large batches (bytes = distinct experts' weights, as for uniform routing).
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

import numpy as np

from simulator.workload_config import ExpertRouting, HistogramRouting, UniformRouting, ZipfRouting


def load_shares(routing: ExpertRouting, num_experts: int) -> np.ndarray:
    """Load share p_e of each expert (sum 1), shape (num_experts,).

    Raises:
        ValueError: a histogram whose length is not num_experts.
    """
    if routing.kind == "uniform":
        return np.full(num_experts, 1.0 / num_experts)
    if routing.kind == "zipf":
        w = np.arange(1, num_experts + 1, dtype=float) ** -routing.s
    else:
        w = np.asarray(routing.expert_load, dtype=float)
        if len(w) != num_experts:
            raise ValueError(f"workload.expert_routing.expert_load has {len(w)} entries; n_routed_experts="
                             f"{num_experts} needs one per expert")
    return w / w.sum()


def inclusion_probabilities(p: np.ndarray, experts_per_token: int) -> np.ndarray:
    """q_e = min(1, c p_e) with sum_e q_e = k (module docstring), by water-filling.

    The largest shares are capped at 1 one at a time: with m experts capped, the rest get
    (k - m) p_e / (sum of their shares), until no uncapped q_e exceeds 1.

    Args:
        p: load shares, shape (E,), non-negative, sum 1.
        experts_per_token: k, 1..E.
    """
    p = np.asarray(p, dtype=float)
    k = experts_per_token
    order = np.argsort(-p, kind="stable")
    q = np.zeros_like(p)
    capped = 0
    rest = float(p.sum())
    for m, e in enumerate(order):
        if rest <= 0:
            break
        if (k - m) * p[e] / rest < 1.0:
            capped = m
            break
        q[e] = 1.0
        rest -= p[e]
        capped = m + 1
    free = order[capped:]
    if capped < k and rest > 0:
        q[free] = (k - capped) * p[free] / rest
    return q


def expected_distinct(q: np.ndarray, num_tokens: int) -> float:
    """sum_e 1 - (1 - q_e)^T over the experts of `q` (module docstring)."""
    return float(np.sum(1.0 - (1.0 - np.asarray(q, dtype=float)) ** num_tokens))


def expected_distinct_experts_routed(routing: ExpertRouting, num_experts: int, experts_per_token: int,
                                     num_tokens: int) -> float:
    """Expected distinct experts T tokens touch under `routing` (all experts, no EP)."""
    q = inclusion_probabilities(load_shares(routing, num_experts), experts_per_token)
    return expected_distinct(q, num_tokens)


def poisson_binomial_pmf(p: np.ndarray) -> np.ndarray:
    """pmf of the number of successes of independent Bernoulli(p_i) trials, shape (len(p) + 1,).

    The convolution recursion: adding trial i maps pmf[j] to pmf[j] (1 - p_i) + pmf[j - 1] p_i
    (e.g. Chen & Liu, "Statistical applications of the Poisson-binomial and conditional Bernoulli
    distributions", Statistica Sinica 7, 1997). O(n^2), exact up to float rounding.
    """
    p = np.asarray(p, dtype=float)
    pmf = np.zeros(len(p) + 1)
    pmf[0] = 1.0
    for i, pi in enumerate(p):
        pmf[1:i + 2] = pmf[1:i + 2] * (1.0 - pi) + pmf[:i + 1] * pi
        pmf[0] *= 1.0 - pi
    return pmf


def expected_busiest_distinct(q: np.ndarray, num_tokens: int) -> float:
    """E[max over ranks of the distinct experts a rank's experts get from T tokens] (module docstring).

    Args:
        q: per-token inclusion probabilities, shape (ep, experts per rank), values in [0, 1].
        num_tokens: T >= 0.
    Returns:
        The expected maximum, in experts (the mean count for ep = 1).
    """
    pi = 1.0 - (1.0 - np.asarray(q, dtype=float)) ** num_tokens
    if pi.shape[0] == 1:
        return float(pi.sum())
    cdf = np.ones(pi.shape[1] + 1)
    for row in pi:
        cdf *= np.minimum(np.cumsum(poisson_binomial_pmf(row)), 1.0)
    return float(np.sum(1.0 - cdf[:-1]))


def busiest_rank(routing: ExpertRouting, num_experts: int, experts_per_token: int, num_tokens: int,
                 ep: int) -> tuple[float, float]:
    """(expected distinct experts of the busiest EP rank, expected token-expert pairs per token of the
    rank with the most expected distinct experts); ep = 1 gives the whole layer (distinct, k).

    Rank r holds experts [r E/ep, (r+1) E/ep) (module docstring). The distinct experts are the
    expected maximum over ranks (`expected_busiest_distinct`); pairs per token = sum of q_e over
    that rank's experts (k / ep for uniform routing), which only prices the grouped GEMM's flops.

    Raises:
        ValueError: ep does not divide num_experts.
    """
    if num_experts % ep != 0:
        raise ValueError(f"expert_parallel_size={ep} must divide n_routed_experts={num_experts}")
    loads = tuple(routing.expert_load) if routing.kind == "histogram" else ()
    return _busiest_rank(routing.kind, float(getattr(routing, "s", 0.0)), loads, num_experts, experts_per_token,
                         num_tokens, ep)


@lru_cache(maxsize=4096)
def _busiest_rank(kind: str, s: float, loads: tuple, num_experts: int, experts_per_token: int, num_tokens: int,
                  ep: int) -> tuple[float, float]:
    """busiest_rank on hashable arguments (every MoE layer of a forward asks the same question)."""
    if kind == "uniform":
        routing = UniformRouting()
    elif kind == "zipf":
        routing = ZipfRouting(s=s)
    else:
        routing = HistogramRouting(expert_load=list(loads))
    q = inclusion_probabilities(load_shares(routing, num_experts), experts_per_token).reshape(ep, -1)
    mean = np.sum(1.0 - (1.0 - q) ** num_tokens, axis=1)
    r = int(np.argmax(mean))
    return expected_busiest_distinct(q, num_tokens), float(q[r].sum())


def routing_key(routing: ExpertRouting) -> str:
    """A suffix for an op key naming non-uniform routing ('' for uniform, so tables keep matching):
    ',r=zipf<s>' or ',r=hist<first 8 hex of sha256 of the normalised loads>'."""
    if isinstance(routing, UniformRouting) or routing.kind == "uniform":
        return ""
    if routing.kind == "zipf":
        return f",r=zipf{routing.s:g}"
    w = np.asarray(routing.expert_load, dtype=float)
    digest = hashlib.sha256(np.round(w / w.sum(), 12).tobytes()).hexdigest()[:8]
    return f",r=hist{digest}"
