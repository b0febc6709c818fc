"""An observed run's acceptance, as the `acceptance:` model a scenario takes.

Two conversions, the most detailed one the run allows:
- per-position acceptance (vLLM) -> `{"kind": "positional", "acceptance_rates": [a_1..a_k]}`.
  vLLM's rates are unconditional, p_i = P(draft position i accepted) = accepted at i / drafts.
  Chain drafting accepts position i only if 1..i-1 were, so p_i = a_1 * ... * a_i and the
  conditional rate is a_i = p_i / p_{i-1} (a_1 = p_1; a_i = 0 once p_{i-1} = 0).
- a mean accept_length and num_steps -> `{"kind": "iid", "acceptance_rate": alpha}`, alpha solving
  E[accept_length] = (1 - alpha**(n + 1)) / (1 - alpha) = 1 + alpha + ... + alpha**n, n = num_steps
  (i.i.d. acceptance, chain drafting; Leviathan et al. 2023, arXiv 2211.17192, eq. 1), found with
  scipy.optimize.brentq on [0, 1] (the sum is increasing in alpha).
"""

from __future__ import annotations


from simulator.workload_config import IidAcceptance, PositionalAcceptance
from simulator.evidence.importers.observed import ObservedRun
from simulator.inputs import UserInputError


def conditional_rates(per_position: list[float]) -> list[float]:
    """Unconditional per-position acceptance p_1..p_k -> conditional a_1..a_k (a_i = p_i / p_{i-1}).

    A ratio above 1 (sampling noise where p_i ~ p_{i-1}) is clipped to 1.
    """
    rates, prev = [], 1.0
    for p in per_position:
        rates.append(min(p / prev, 1.0) if prev > 0 else 0.0)
        prev = p
    return rates


def iid_rate(accept_length: float, num_steps: int) -> float:
    """alpha with 1 + alpha + ... + alpha**num_steps == accept_length.

    Raises:
        ValueError: accept_length outside [1, num_steps + 1] or num_steps < 1.
    """
    if num_steps < 1 or not 1.0 <= accept_length <= num_steps + 1:
        raise ValueError(f"accept_length {accept_length:g} is outside [1, num_steps + 1 = {num_steps + 1}]")
    if accept_length == 1.0:
        return 0.0
    if accept_length == num_steps + 1:
        return 1.0
    from scipy.optimize import brentq  # here: scipy.optimize is slow to import
    return brentq(lambda a: sum(a ** k for k in range(num_steps + 1)) - accept_length, 0.0, 1.0, xtol=1e-12)


def acceptance_from_run(run: ObservedRun, num_steps: int | None = None) -> dict:
    """The acceptance model of a scenario (`acceptance:`) that reproduces what the run observed.

    Args:
        run: an ObservedRun with per_position_acceptance, or accept_length (and num_steps).
        num_steps: the draft depth, when the run does not state it (SGLang logs, trtllm-bench).

    Returns:
        {"kind": "positional", "acceptance_rates": [a_1, ..., a_k]} (conditional rates) from
        per-position acceptance, else {"kind": "iid", "acceptance_rate": alpha}; either validates
        as simulator.config's PositionalAcceptance / IidAcceptance.

    Raises:
        UserInputError: the run has neither, lacks num_steps for the iid solve, or its accept_length
            is outside [1, num_steps + 1]; the message names the run's file and line.
    """
    where = f"{run.source_file}:{run.source_line}" if run.source_line else run.source_file
    if run.per_position_acceptance:
        rates = conditional_rates(run.per_position_acceptance)
        return PositionalAcceptance(acceptance_rates=rates).model_dump(mode="json")
    steps = num_steps if num_steps is not None else run.num_steps
    if run.accept_length is None:
        raise UserInputError(f"{where}: the run states no per-position acceptance and no accept_length; "
                             "expected a speculative run")
    if steps is None:
        raise UserInputError(f"{where}: accept_length {run.accept_length:g} without num_steps; pass num_steps "
                             "(the server's --speculative-num-steps)")
    try:
        alpha = iid_rate(run.accept_length, steps)
    except ValueError as e:
        raise UserInputError(f"{where}: {e}") from None
    return IidAcceptance(acceptance_rate=alpha).model_dump(mode="json", exclude_none=True)


# ---- acceptance as the engines print it -> the scenario's `acceptance:` (with the conversion said) ----------
def from_vllm_acceptance_rate(rate_frac: float, num_steps: int) -> tuple[dict, str]:
    """vLLM's acceptance rate ("Acceptance rate (%)" of `vllm bench serve`, "Avg Draft acceptance rate" of its
    spec-decode log: accepted / draft tokens) -> iid acceptance and the note.

    accepted / drafted = E[num_accepted_drafts] / num_steps, so E[accept_length] = 1 + rate * num_steps, and
    alpha solves 1 + alpha + ... + alpha**num_steps = that (i.i.d., chain; Leviathan et al. 2023, eq. 1).
    Source: vLLM `vllm/v1/spec_decode/metrics.py` (SpecDecodingLogging: draft acceptance rate =
    num_accepted_tokens / num_draft_tokens), `vllm/benchmarks/serve.py` (Acceptance rate (%)).

    Raises:
        UserInputError: a rate outside [0, 1].
    """
    if not 0.0 <= rate_frac <= 1.0:
        raise UserInputError(f"vLLM acceptance rate {rate_frac * 100:g}%: expected 0..100%")
    length = 1.0 + rate_frac * num_steps
    alpha = iid_rate(length, num_steps)
    return (IidAcceptance(acceptance_rate=alpha).model_dump(mode="json", exclude_none=True),
            f"vLLM acceptance rate {rate_frac * 100:.2f}% (accepted / draft tokens) at num_steps {num_steps} -> "
            f"accept_length 1 + {rate_frac:.4f} x {num_steps} = {length:.4f} (with the bonus token) -> "
            f"acceptance_rate (alpha per position, i.i.d.) {alpha:.4f}")


def from_vllm_per_position_counts(accepted: list[int], num_drafts: int, num_steps: int) -> tuple[dict, str]:
    """vLLM's per-position acceptance counts (`vllm:spec_decode_num_accepted_tokens_per_pos`, and
    `vllm:spec_decode_num_drafts`) -> positional acceptance (conditional rates) and the note.

    p_i = accepted_i / num_drafts is unconditional; a chain accepts position i only after 1..i-1, so
    a_i = p_i / p_{i-1} (conditional_rates). Source: vLLM `vllm/v1/spec_decode/metrics.py`.

    Raises:
        UserInputError: num_drafts < 1, a count outside 0..num_drafts, or not num_steps counts.
    """
    if num_drafts < 1 or any(not 0 <= c <= num_drafts for c in accepted):
        raise UserInputError(f"vLLM per-position acceptance: counts {accepted} must be 0..num_drafts {num_drafts}")
    if len(accepted) != num_steps:
        raise UserInputError(f"vLLM per-position acceptance: {len(accepted)} positions, the scenario drafts "
                             f"num_steps {num_steps}; give one count per position")
    per_position = [c / num_drafts for c in accepted]
    rates = conditional_rates(per_position)
    return (PositionalAcceptance(acceptance_rates=rates).model_dump(mode="json", exclude_none=True),
            f"vLLM per-position acceptance {accepted} of {num_drafts} drafts -> unconditional "
            f"[{', '.join(f'{p:.4f}' for p in per_position)}] -> acceptance_rates (conditional, a_i = p_i / p_i-1) "
            f"[{', '.join(f'{a:.4f}' for a in rates)}]")


def from_sglang_accept_length(accept_length: float, num_steps: int) -> tuple[dict, str]:
    """SGLang's accept length ("accept len" of its decode log, `spec_accept_length`: tokens a request commits
    a verify step, the bonus token included) -> iid acceptance and the note (iid_rate).
    Source: SGLang `python/sglang/srt/managers/scheduler_metrics_mixin.py` (log_decode_stats: accept len = committed
    tokens / verify steps; scheduler.py in older releases).

    Raises:
        UserInputError: an accept length outside [1, num_steps + 1].
    """
    try:
        alpha = iid_rate(accept_length, num_steps)
    except ValueError as e:
        raise UserInputError(f"SGLang accept length: {e}") from None
    return (IidAcceptance(acceptance_rate=alpha).model_dump(mode="json", exclude_none=True),
            f"SGLang accept length {accept_length:g} (with the bonus token) at num_steps {num_steps} -> "
            f"acceptance_rate (alpha per position, i.i.d.: 1 + a + ... + a^{num_steps} = {accept_length:g}) {alpha:.4f}")
