"""The scenario's workload room: what is speculated and how it is accepted, and the decode batch.

`spec` (SpecConfig: method, num_steps, topk, num_draft_tokens), `acceptance` (a discriminated union on
`kind`: iid, positional, empirical, tree) and `workload` (WorkloadConfig: the steady batch, with the
MoE tokens' expert routing). The Scenario model that holds them is simulator.config's; the acceptance
models that sample from these settings are simulator.acceptance's.
"""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from simulator.schema_base import StrictModel


class SpecConfig(StrictModel):
    """Speculative decoding settings (SGLang's `speculative_*` flags; vLLM's `speculative_config`)."""

    method: Literal["eagle3", "eagle", "mtp", "draft_model", "ngram"] = Field(
        "eagle3", description="What proposes the draft tokens (vLLM's `method` names): eagle3 | eagle (EAGLE-1/2) | "
                              "mtp (the model's own MTP / NextN layer, applied autoregressively) | draft_model (a "
                              "standalone small model with its own KV cache) | ngram (prompt lookup, no GPU draft).")
    num_steps: int = Field(3, ge=1, le=64, description="Draft steps per cycle (depth).")
    topk: int = Field(1, ge=1, le=64, description="Draft branching factor per step; 1 = chain.")
    num_draft_tokens: int = Field(
        4, ge=2, le=4096, description="Tokens per request verified per cycle, including the last verified token.")

    @model_validator(mode="after")
    def _check_tree(self) -> Self:
        if self.topk == 1 and self.num_draft_tokens != self.num_steps + 1:
            raise ValueError(f"topk=1 needs num_draft_tokens == num_steps + 1 == "
                             f"{self.num_steps + 1}, got {self.num_draft_tokens}")
        max_nodes = 1 + self.topk + (self.num_steps - 1) * self.topk * self.topk
        if self.num_draft_tokens > max_nodes:
            raise ValueError(f"num_draft_tokens={self.num_draft_tokens} exceeds the {max_nodes} tree "
                             f"nodes that topk={self.topk}, num_steps={self.num_steps} can propose")
        return self


MIN_BETA_PARAM = 1e-9  # smallest Beta(a c, (1 - a) c) parameter: numpy and scipy need them > 0


AcceptanceDraw = Annotated[Literal["per_request", "per_batch_step"], Field(
    description="per_request: each request's accept length drawn on its own (real drafts; vLLM's synthetic "
                "acceptance); per_batch_step: one accept length drawn per verify step for the whole batch (SGLang's "
                "SGLANG_SIMULATE_ACC_LEN).")]


class IidAcceptance(StrictModel):
    """Each draft token accepted with the same probability, given the earlier ones were."""

    kind: Literal["iid"] = "iid"
    acceptance_rate: float = Field(ge=0.0, le=1.0, description="alpha, per draft position.")
    rate_concentration: float | None = Field(
        None, ge=0.01, le=1e6, description="Per-request heterogeneity, 0.01..1e6: each request draws its rate "
                                           "from Beta(alpha*c, (1-alpha)*c); left out = every request has alpha. "
                                           "Below 0.01 the Beta's quantiles underflow; above 1e6 requests are alike.")
    draw: AcceptanceDraw = "per_request"

    @model_validator(mode="after")
    def _check_beta(self) -> Self:
        a, c = self.acceptance_rate, self.rate_concentration
        if c is not None and self.draw == "per_batch_step":
            raise ValueError("rate_concentration draws a rate per request; draw per_batch_step draws one accept "
                             "length for the whole batch: give one of them")
        if c is not None and 0.0 < a < 1.0 and min(a, 1.0 - a) * c < MIN_BETA_PARAM:
            raise ValueError(f"rate_concentration={c:g} with acceptance_rate={a:g} gives Beta({a * c:.3g}, "
                             f"{(1 - a) * c:.3g}); both must be >= {MIN_BETA_PARAM:g} (write acceptance_rate 0 or 1, "
                             "or leave rate_concentration out, for requests that are alike)")
        return self


class PositionalAcceptance(StrictModel):
    """Conditional acceptance per draft depth (drafts degrade with depth)."""

    kind: Literal["positional"] = "positional"
    acceptance_rates: list[Annotated[float, Field(ge=0.0, le=1.0)]] = Field(
        min_length=1, max_length=64, description="a_d for depth d = 1..num_steps.")
    draw: AcceptanceDraw = "per_request"


class EmpiricalAcceptance(StrictModel):
    """An accept_length distribution taken from a live run or a server log."""

    kind: Literal["empirical"] = "empirical"
    accept_length_probs: list[Annotated[float, Field(ge=0.0, le=1.0)]] = Field(
        min_length=2, max_length=65, description="P(accept_length = 1), P(= 2), ..., P(= num_steps + 1).")
    draw: AcceptanceDraw = "per_request"

    @model_validator(mode="after")
    def _check_sum(self) -> Self:
        total = sum(self.accept_length_probs)
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"accept_length_probs must sum to 1, got {total:.6g}")
        return self


class TreeAcceptance(StrictModel):
    """topk > 1: several candidates per depth, each accepted with `acceptance_rate` independently."""

    kind: Literal["tree"] = "tree"
    acceptance_rate: float = Field(ge=0.0, le=1.0, description="Per candidate token.")


AcceptanceConfig = Annotated[
    IidAcceptance | PositionalAcceptance | EmpiricalAcceptance | TreeAcceptance,
    Field(discriminator="kind")]


class UniformRouting(StrictModel):
    """Every token picks its k experts uniformly at random (the default)."""

    kind: Literal["uniform"] = "uniform"


class ZipfRouting(StrictModel):
    """Expert e (0-based id) takes a load share proportional to 1 / (e + 1)^s: expert 0 the hottest."""

    kind: Literal["zipf"] = "zipf"
    s: float = Field(ge=0.0, le=4.0, description="Zipf exponent, 0..4: 0 is uniform; 1 gives expert 0 about "
                                                  "ln(E) times the mean load.")


class HistogramRouting(StrictModel):
    """Measured expert load: one non-negative weight per routed expert, in expert-id order."""

    kind: Literal["histogram"] = "histogram"
    expert_load: list[Annotated[float, Field(ge=0.0, le=1e18)]] = Field(
        min_length=1, max_length=65_536,
        description="Tokens (or any proportional weight) routed to each expert, in expert-id order; as many "
                    "entries as the target's n_routed_experts; normalised to load shares, so the sum must be > 0.")

    @model_validator(mode="after")
    def _check_total(self) -> Self:
        if not sum(self.expert_load) > 0:
            raise ValueError("expert_load must have a positive sum (at least one expert with load)")
        return self


ExpertRouting = Annotated[UniformRouting | ZipfRouting | HistogramRouting, Field(discriminator="kind")]


class WorkloadConfig(StrictModel):
    """A steady decode batch: finished requests are replaced at once, so batch_size holds."""

    batch_size: int = Field(1, ge=1, le=4096, description="Requests decoded together.")
    context_len: int = Field(1024, ge=1, le=2_097_152, description="KV-cache tokens attention reads.")
    max_new_tokens: int = Field(256, ge=1, le=1_000_000, description="Tokens each request generates.")
    expert_routing: ExpertRouting = Field(
        UniformRouting(), description="How MoE tokens spread over the routed experts (simulator.costs.routing): "
                                      "{kind: uniform} | {kind: zipf, s: 0..4} | {kind: histogram, expert_load: "
                                      "[one weight per expert]}. Sets how many distinct experts' weights a forward "
                                      "reads.")



def policy_spec(base: SpecConfig, entry) -> SpecConfig:
    """The SpecConfig of a `serving.num_steps_by_batch` entry (the method from `base`).

    Raises:
        pydantic.ValidationError (a ValueError): the entry's settings are not a valid spec.
    """
    ndt = entry.num_draft_tokens if entry.num_draft_tokens is not None else entry.num_steps + 1
    return SpecConfig(method=base.method, num_steps=entry.num_steps, topk=entry.topk, num_draft_tokens=ndt)
