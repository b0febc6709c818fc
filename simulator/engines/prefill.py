"""An engine profile's prefill: the engine's own runs of the prefill alone, fitted (`PrefillFit`; the fit is
simulator.evidence.prefill_fit's), and how a prompt is chunked into engine steps."""

from __future__ import annotations

from typing import Annotated, Self

from pydantic import Field, model_validator

from simulator.engines.forms import experts_touched_frac, roofline
from simulator.schema_base import StrictModel


def chunk_token_pairs(tokens: float, cached: float) -> float:
    """The token pairs a prefill chunk's causal attention computes: each of its `tokens` new tokens attends
    the `cached` ones and those of the chunk up to itself (PrefillFit's A, per request)."""
    return tokens * (cached + (tokens + 1) / 2)


def prefill_chunk_tokens(serving, fit: "PrefillFit | None") -> int:
    """The prefill tokens an engine step takes: the scenario's `serving.chunked_prefill_tokens` where it
    sets one, else the engine's own `max_num_batched_tokens` where its profile measured the prefill (`fit`),
    else the default."""
    if fit is not None and "chunked_prefill_tokens" not in serving.model_fields_set:
        return fit.max_num_batched_tokens
    return serving.chunked_prefill_tokens


class PrefillFit(StrictModel):
    """The engine's prefill, fitted on its own runs of the prefill alone (simulator.evidence.prefill_fit):
    a run of prompts chunked into engine steps of at most `max_num_batched_tokens` tokens takes
    per_run_us + sum over its steps of (per_step_us + per_token_us n + per_token_pair_us A), n the step's
    prompt tokens and A its attention's token pairs (each token attends the cached ones and those before it);
    a step of more than `graph_max_tokens` tokens (where set) runs without a CUDA graph and its prefill part
    is at least `eager_step_us`: per_step_us + max(eager_step_us, per_token_us n + per_token_pair_us A)."""

    speculative: bool = Field(description="Measured with the draft (its prefill over the prompt included) or not.")
    per_run_us: float = Field(ge=0.0, le=1e7, allow_inf_nan=False)
    per_step_us: float = Field(ge=0.0, le=1e7, allow_inf_nan=False)
    per_token_us: float = Field(ge=1e-3, le=1e5, allow_inf_nan=False, description=(
        "us a prompt token, 1e-3..1e5 (a token's prefill takes at least a nanosecond)."))
    per_token_pair_us: float = Field(ge=0.0, le=1.0, allow_inf_nan=False)
    graph_max_tokens: int = Field(0, ge=0, le=1 << 24, description=(
        "The most tokens a step runs in a CUDA graph (vLLM's piecewise graphs: its largest capture size), "
        "0..2^24; a step of more runs without one. 0: no edge (every step priced alike)."))
    eager_step_us: float = Field(0.0, ge=0.0, le=1e7, allow_inf_nan=False, description=(
        "A step past graph_max_tokens: its prefill takes at least this long, us, 0..1e7 (the host launching "
        "the forward kernel by kernel: the step is the larger of this and per_token_us n + per_token_pair_us A)."))
    max_num_batched_tokens: int = Field(ge=1, le=1 << 24)
    num_runs: int = Field(ge=1, le=1_000_000)
    batch_sizes: list[Annotated[int, Field(ge=1, le=1_000_000)]] = Field(
        min_length=1, max_length=4096, description="The batches the runs measured, each 1..1e6.")
    prompt_lens: list[Annotated[int, Field(ge=1, le=2**27)]] = Field(
        min_length=1, max_length=4096, description="The prompt lengths they measured, each 1..2^27.")
    median_abs_error_frac: float = Field(ge=0.0, le=1e6)
    max_abs_error_frac: float = Field(ge=0.0, le=1e6)

    def step_prefill_us(self, tokens: int, pairs: float, step_tokens: int | None = None,
                        alongside_us: float = 0.0, decode_forward_us: float = 0.0) -> float:
        """A step's prefill part, us: per_token_us tokens + per_token_pair_us pairs; where the step's tokens
        (step_tokens: with the decode tokens it carries; None: these) pass graph_max_tokens, at least
        eager_step_us less `alongside_us`, the decode step it rides on (the host launching the whole forward
        kernel by kernel hides the decode's own work up to that time).

        `decode_forward_us` > 0 (serving_engine.mixed_forward 'one'): the prefill and the decode tokens of the
        step it rides on run as one forward, per_token_us (tokens + decode tokens) + per_token_pair_us pairs,
        of which the decode step already holds its own forward, decode_forward_us: the prefill part is what
        that adds, at least 0."""
        t = self.per_token_us * tokens + self.per_token_pair_us * pairs
        n = tokens if step_tokens is None else step_tokens
        if decode_forward_us > 0.0:
            t = max(0.0, t + self.per_token_us * max(0, n - tokens) - decode_forward_us)
        if self.graph_max_tokens and n > self.graph_max_tokens:
            return max(t, self.eager_step_us - alongside_us)
        return t

    @model_validator(mode="after")
    def _median_within_max(self) -> Self:
        if self.median_abs_error_frac > self.max_abs_error_frac:
            raise ValueError(f"median_abs_error_frac {self.median_abs_error_frac:g} above max_abs_error_frac "
                             f"{self.max_abs_error_frac:g}: the median is at most the max")
        return self


# a prefill step of the smallest measured prompt costs at least this share of a decode step of batch 1 (every shipped
# profile's: 1.8-7.2x; the fake engine's 0.15x)
MIN_PREFILL_OF_DECODE = 0.1


def check_prefill(profile) -> None:
    """Refuse prefill fits at odds with the profile's own decode: a prompt token priced above a whole decode step
    of batch 1 (a token added to a forward costs less than the forward), or a step of the smallest prompt the fit
    measured priced below MIN_PREFILL_OF_DECODE of that decode step (a prefill step reads the weights too).

    Raises:
        ValueError: naming the fit, its price and the decode step's.
    """
    fit = profile.fits.get("target_forward_us")
    if fit is None or fit.form != "roofline" or "decode_us" not in fit.params or not profile.prefill:
        return
    for i, f in enumerate(profile.prefill):
        n = min(f.prompt_lens)
        touched = experts_touched_frac(profile.target, 1) if "experts_us" in fit.params else None
        decode = float(roofline(fit.params, profile.padded_tokens(1, 1), 1, n, "decode_us", touched=touched))
        if f.per_token_us > decode:
            raise ValueError(f"prefill[{i}].per_token_us {f.per_token_us:.6g}: above a whole decode step of batch 1 "
                             f"({decode:.6g} us, fits.target_forward_us): a token added to a forward costs less "
                             "than the forward")
        small = f.per_step_us + f.step_prefill_us(n, n * (n + 1) / 2)
        if small < MIN_PREFILL_OF_DECODE * decode:
            raise ValueError(f"prefill[{i}]: a step of its smallest prompt ({n} tokens) priced at {small:.6g} us, "
                             f"below {MIN_PREFILL_OF_DECODE:g}x a decode step of batch 1 ({decode:.6g} us): a prefill "
                             "step reads the weights too")
