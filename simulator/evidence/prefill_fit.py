"""The engine's own prefill, fitted on its runs of the prefill alone (issue 45).

A calibration process measures closed batches of B fresh prompts of P tokens that generate one token
each (calibration.engines.plans.prefill_points): the engine chunks their B x P prompt tokens into
steps of at most `max_num_batched_tokens` (vLLM's chunked prefill, first come first served: a step
takes the waiting prompts in order, the last one cut where the budget ends, its rest first in the
next step). `chunk_plan` is that schedule, the serving DES's (simulator.serving.scheduler). A run
is fitted as

    elapsed_us = per_run_us + sum over steps (per_step_us + per_token_us n + per_token_pair_us A)

with n the step's prompt tokens and A = sum over its requests of n_i (c_i + (n_i + 1) / 2) the token
pairs its causal attention computes (c_i the request's tokens cached before the step). The four
coefficients are non-negative least squares (scipy.optimize.nnls) on relative errors; a process with
the draft is fitted apart from the baseline's (its draft prefills the prompt too).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

from simulator.engines.profile import PrefillFit, chunk_token_pairs

MIN_RUNS = 4  # runs a fit needs (four coefficients)


@dataclass(frozen=True)
class PrefillRun:
    """One measured run of the prefill alone."""

    speculative: bool
    batch_size: int
    prompt_len: int
    max_num_batched_tokens: int
    elapsed_us: float


def chunk_plan(batch_size: int, prompt_len: int, budget: int) -> list[list[tuple[int, int]]]:
    """The engine steps of a closed batch's prefill: per step, (tokens, tokens cached before) of each
    request it holds, first come first served within `budget` tokens a step."""
    if batch_size < 1 or prompt_len < 1 or budget < 1:
        raise ValueError(f"batch_size {batch_size}, prompt_len {prompt_len}, budget {budget}: each at least 1")
    done = [0] * batch_size
    steps, first = [], 0
    while first < batch_size:
        left, step = budget, []
        i = first
        while left > 0 and i < batch_size:
            n = min(left, prompt_len - done[i])
            step.append((n, done[i]))
            done[i] += n
            left -= n
            i += 1
        while first < batch_size and done[first] == prompt_len:
            first += 1
        steps.append(step)
    return steps


def token_pairs(chunks) -> float:
    """The causal attention's token pairs of a step's (tokens, cached) chunks."""
    return float(sum(chunk_token_pairs(n, c) for n, c in chunks))


def _features(run: PrefillRun) -> np.ndarray:
    steps = chunk_plan(run.batch_size, run.prompt_len, run.max_num_batched_tokens)
    return np.array([1.0, len(steps), run.batch_size * run.prompt_len, sum(token_pairs(s) for s in steps)])


def predict_us(fit: PrefillFit, batch_size: int, prompt_len: int) -> float:
    """A closed batch's prefill alone as the fit prices it, us."""
    x = _features(PrefillRun(fit.speculative, batch_size, prompt_len, fit.max_num_batched_tokens, 0.0))
    return float(x @ [fit.per_run_us, fit.per_step_us, fit.per_token_us, fit.per_token_pair_us])


def fit_prefill(runs: list[PrefillRun], notes: list[str] | None = None) -> list[PrefillFit]:
    """One PrefillFit per kind of process the runs hold (without and with the draft), each of at least
    MIN_RUNS runs at two or more token counts; kinds with fewer, or whose fit is no PrefillFit (a
    coefficient out of its range), are left out, a line in `notes` saying why."""
    from pydantic import ValidationError
    out = []
    for spec in (False, True):
        rs = [r for r in runs if r.speculative == spec]
        if len(rs) < MIN_RUNS or len({r.batch_size * r.prompt_len for r in rs}) < 2:
            continue
        budgets = {r.max_num_batched_tokens for r in rs}
        if len(budgets) > 1:
            raise ValueError(f"prefill runs {'with' if spec else 'without'} the draft at info.max_num_batched_tokens "
                             f"{sorted(budgets)}: one engine setting a fit")
        x = np.array([_features(r) for r in rs])
        y = np.array([r.elapsed_us for r in rs])
        scale = np.array([1.0, 1.0, 1.0, 1e-6])  # A is in the 1e6-1e9s: the columns of one size
        coef, _ = nnls(x * scale / y[:, None], np.ones(len(y)))
        coef = coef * scale
        err = np.abs(x @ coef - y) / y
        try:
            fit = PrefillFit(
                speculative=spec, per_run_us=float(coef[0]), per_step_us=float(coef[1]), per_token_us=float(coef[2]),
                per_token_pair_us=float(coef[3]), max_num_batched_tokens=budgets.pop(), num_runs=len(rs),
                batch_sizes=sorted({r.batch_size for r in rs}), prompt_lens=sorted({r.prompt_len for r in rs}),
                median_abs_error_frac=float(np.median(err)), max_abs_error_frac=float(err.max()))
        except ValidationError as e:
            if notes is not None:
                first = e.errors()[0]
                notes.append(f"prefill {'with' if spec else 'without'} the draft not fitted: its {len(rs)} runs give "
                             f"{first['loc'][0]} {first.get('input')!r} ({first['msg']})")
            continue
        out.append(fit)
    return out
