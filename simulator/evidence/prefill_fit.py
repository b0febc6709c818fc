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

vLLM runs a step of at most its largest CUDA-graph capture size in a piecewise graph and a larger one
kernel by kernel, launched from the host (`graph_max_tokens`, from the process's engine line). Where the
runs hold steps on both sides of that edge, a step past it is priced per_step_us + max(eager_step_us,
per_token_us n + per_token_pair_us A): the host's launches bound a short eager step, the GPU's work a long
one (vLLM's MoE target on the H100: 32 ms at 512 tokens, about 100 ms flat from 1,024 to 4,096,
docs/engines/requests.md). The five coefficients are then scipy.optimize.least_squares on relative
errors from a grid of eager_step_us, kept only where they take the median |error| of the four alone down
by a quarter (EDGE_GAIN): Llama-3.1-8B's H100 runs, whose one eager run of 1,024 tokens (two prompts of
512) is slower than its neighbours for another reason (one prompt of 1,024 takes 7 ms less), keep the four.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares, nnls

from simulator.engines.profile import PrefillFit, chunk_token_pairs

MIN_RUNS = 4  # runs a fit needs (four coefficients)
EDGE_GAIN = 0.25  # the graph edge is kept where it takes the fit's median |error| down by at least this share


@dataclass(frozen=True)
class PrefillRun:
    """One measured run of the prefill alone."""

    speculative: bool
    batch_size: int
    prompt_len: int
    max_num_batched_tokens: int
    elapsed_us: float
    graph_max_tokens: int = 0  # the most tokens a step of its process ran in a CUDA graph (0: none, no edge)


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


def _steps(run: PrefillRun) -> np.ndarray:
    """(tokens, token pairs) of each of the run's steps."""
    plan = chunk_plan(run.batch_size, run.prompt_len, run.max_num_batched_tokens)
    return np.array([(sum(n for n, _ in s), token_pairs(s)) for s in plan])


def _runs_us(coef, steps: list[np.ndarray], edge: int) -> np.ndarray:
    """Each run's time under (per_run, per_step, per_token, per_token_pair, eager_step) us."""
    per_run, per_step, tok, pair, eager = coef
    out = []
    for st in steps:
        part = tok * st[:, 0] + pair * st[:, 1]
        if edge:
            part = np.where(st[:, 0] > edge, np.maximum(part, eager), part)
        out.append(per_run + len(st) * per_step + part.sum())
    return np.array(out)


def predict_us(fit: PrefillFit, batch_size: int, prompt_len: int) -> float:
    """A closed batch's prefill alone as the fit prices it, us."""
    st = _steps(PrefillRun(fit.speculative, batch_size, prompt_len, fit.max_num_batched_tokens, 0.0))
    return float(fit.per_run_us + sum(fit.per_step_us + fit.step_prefill_us(int(n), a) for n, a in st))


def _with_edge(steps: list[np.ndarray], y: np.ndarray, linear: np.ndarray, edge: int) -> np.ndarray | None:
    """The five coefficients (the four and eager_step_us) that fit the runs (their `_steps`) best on relative
    errors, where they take the median |error| of the four alone (`linear`, eager_step_us 0) down by EDGE_GAIN;
    None where not, or where no run has a step on each side of the edge."""
    past = [bool((st[:, 0] > edge).any()) for st in steps]
    if not (any(past) and not all(past)):
        return None
    scale = np.array([1e3, 1e3, 1.0, 1e-4, 1e3])  # the coefficients' sizes, us

    def resid(c):
        return _runs_us(c * scale, steps, edge) / y - 1.0

    def cost(c):
        return float(np.sum(resid(c) ** 2))
    base = np.append(linear, 0.0) / scale
    best = base
    for eager in np.geomspace(y.min() / 10, y.max(), 24):  # the grid: the max() has no slope at eager 0
        start = base.copy()
        start[4] = eager / scale[4]
        sol = least_squares(resid, start, bounds=(0.0, np.inf), ftol=1e-15, xtol=1e-15, gtol=1e-15, max_nfev=2000)
        if cost(sol.x) < cost(best):
            best = sol.x
    # the edge is a claim about most runs, not one: kept where it takes the median |error| down by a quarter
    med = [float(np.median(np.abs(resid(c)))) for c in (best, base)]
    return best * scale if med[0] <= (1 - EDGE_GAIN) * med[1] else None


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
        steps = [_steps(r) for r in rs]
        x = np.array([(1.0, len(st), *st.sum(axis=0)) for st in steps])  # per run, per step, tokens, token pairs
        y = np.array([r.elapsed_us for r in rs])
        scale = np.array([1.0, 1.0, 1.0, 1e-6])  # A is in the 1e6-1e9s: the columns of one size
        coef, _ = nnls(x * scale / y[:, None], np.ones(len(y)))
        coef = coef * scale
        edges = {r.graph_max_tokens for r in rs}
        edge = edges.pop() if len(edges) == 1 else 0  # processes of other graph sizes: no edge
        five = _with_edge(steps, y, coef, edge) if edge else None
        if five is None:
            five, edge = np.append(coef, 0.0), 0
        err = np.abs(_runs_us(five, steps, edge) - y) / y
        try:
            fit = PrefillFit(
                speculative=spec, per_run_us=float(five[0]), per_step_us=float(five[1]), per_token_us=float(five[2]),
                per_token_pair_us=float(five[3]), graph_max_tokens=edge, eager_step_us=float(five[4]),
                max_num_batched_tokens=budgets.pop(), num_runs=len(rs),
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
