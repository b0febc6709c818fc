"""The `serving:` section of a scenario: arrivals, request lengths, the scheduler's limits, the
speculation policy per batch size and the SLOs goodput is counted against.

Strict pydantic, like the rest of the schema (simulator.config); every number is bounded and its
range named in its description. Files it names (a trace, a length file) are read when the run
starts (simulator.serving.workload), not here: validators only validate.
"""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from simulator.schema_base import StrictModel

MAX_TOKENS = 2_097_152  # the longest context the schema takes (WorkloadConfig.context_len)


class PoissonArrivals(StrictModel):
    """Open loop: requests arrive as a Poisson process (bench_serving --request-rate)."""

    kind: Literal["poisson"] = "poisson"
    # below 1e-6 req/s (one request in 11.6 days) the simulated clock (us, float64) of a few
    # hundred arrivals grows past where a decode step (~1e3-1e4 us) still registers
    rate_per_s: float = Field(ge=1e-6, le=1e6, description="Mean arrivals per second, 1e-6..1e6.")


class ClosedLoopArrivals(StrictModel):
    """Closed loop: `concurrency` clients, each sends its next request when the last one finished
    (bench_serving --max-concurrency with every request ready at once)."""

    kind: Literal["closed_loop"] = "closed_loop"
    concurrency: int = Field(ge=1, le=65_536, description="Requests in flight, 1..65536.")


class ClosedBatchArrivals(StrictModel):
    """A closed batch: `num_requests` requests all at t = 0, none sent after (an offline
    `LLM.generate` of that many prompts, `vllm bench throughput`, SGLang's bench_offline_throughput):
    the batch prefills, decodes and drains as its requests finish."""

    kind: Literal["closed_batch"] = "closed_batch"


MAX_INLINE_ARRIVALS = 100_000  # arrivals a scenario may list inline (a longer trace belongs in a file)


class TraceArrivals(StrictModel):
    """Arrivals replayed from a file: CSV with a header, or JSONL, with arrival_s, input_tokens,
    output_tokens per request (relative to the scenario file); or listed inline as `arrival_s`, each
    request's lengths then drawn from input_len / output_len (the arrivals a live Poisson run made)."""

    kind: Literal["trace"] = "trace"
    path: str | None = Field(None, min_length=1, max_length=4096, description="CSV or JSONL trace file.")
    arrival_s: list[Annotated[float, Field(ge=0.0, le=1e7, allow_inf_nan=False)]] | None = Field(
        None, min_length=1, max_length=MAX_INLINE_ARRIVALS,
        description="Inline arrivals instead of a file: each request's arrival, s from the start (0..1e7), "
                    f"at most {MAX_INLINE_ARRIVALS:,}.")

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if (self.path is None) == (self.arrival_s is None):
            raise ValueError("a trace gives either path (a file) or arrival_s (inline), exactly one")
        return self


Arrivals = Annotated[PoissonArrivals | ClosedLoopArrivals | ClosedBatchArrivals | TraceArrivals,
                     Field(discriminator="kind")]


class FixedLength(StrictModel):
    kind: Literal["fixed"] = "fixed"
    tokens: int = Field(ge=1, le=MAX_TOKENS, description="Tokens of every request, 1..2097152.")


class UniformLength(StrictModel):
    kind: Literal["uniform"] = "uniform"
    min_tokens: int = Field(ge=1, le=MAX_TOKENS, description="1..2097152.")
    max_tokens: int = Field(ge=1, le=MAX_TOKENS, description="1..2097152, >= min_tokens.")

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.max_tokens < self.min_tokens:
            raise ValueError(f"max_tokens={self.max_tokens} is below min_tokens={self.min_tokens}")
        return self


class LognormalLength(StrictModel):
    """Lognormal lengths with the given mean, clipped to [min_tokens, max_tokens] and rounded."""

    kind: Literal["lognormal"] = "lognormal"
    mean_tokens: float = Field(ge=1, le=MAX_TOKENS, description="Mean before clipping, 1..2097152.")
    sigma: float = Field(ge=0, le=4, description="Sigma of the underlying normal, 0..4.")
    min_tokens: int = Field(1, ge=1, le=MAX_TOKENS, description="1..2097152.")
    max_tokens: int = Field(MAX_TOKENS, ge=1, le=MAX_TOKENS, description="1..2097152, >= min_tokens.")

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.max_tokens < self.min_tokens:
            raise ValueError(f"max_tokens={self.max_tokens} is below min_tokens={self.min_tokens}")
        return self


class FileLength(StrictModel):
    """Lengths drawn (with replacement) from a file the user gives: one integer per line."""

    kind: Literal["file"] = "file"
    path: str = Field(min_length=1, max_length=4096, description="Text file, one length (1..2097152) a line.")


LengthDistribution = Annotated[FixedLength | UniformLength | LognormalLength | FileLength,
                               Field(discriminator="kind")]


class SpecByBatch(StrictModel):
    """From `batch_size` decode requests up (to the next entry's), speculate with these settings."""

    batch_size: int = Field(ge=1, le=65_536, description="Smallest decode batch this entry applies to, 1..65536.")
    num_steps: int = Field(ge=1, le=64, description="Draft steps per cycle, 1..64.")
    topk: int = Field(1, ge=1, le=64, description="Draft branching factor, 1..64; 1 = chain.")
    num_draft_tokens: int | None = Field(None, ge=2, le=4096, description="Verified tokens per request, 2..4096; "
                                                                          "left out: num_steps + 1 (chain).")


class Slo(StrictModel):
    """Service-level objectives: a request counts toward goodput when it meets every one given."""

    ttft_ms: float | None = Field(None, gt=0, le=1e7, description="Time to first token, ms, >0..1e7.")
    tpot_ms: float | None = Field(None, gt=0, le=1e6, description="Time per output token, ms, >0..1e6.")


class ServingConfig(StrictModel):
    """Serving mode: requests arrive, queue, prefill in chunks and decode in a changing batch.

    Left out of a scenario, the steady batch (`workload`) is simulated alone, as before.
    """

    arrivals: Arrivals
    input_len: LengthDistribution = Field(FixedLength(tokens=1024), description="Prompt tokens (poisson, "
                                                                                "closed_loop).")
    output_len: LengthDistribution = Field(FixedLength(tokens=256), description="Output tokens (poisson, "
                                                                                 "closed_loop).")
    num_requests: int | None = Field(None, ge=1, le=10_000_000, description="Requests sent, 1..1e7 (trace: the "
                                                                            "first ones); left out with no "
                                                                            "duration_s: 1000.")
    duration_s: float | None = Field(None, gt=0, le=1e6, description="Stop sending after this many simulated "
                                                                     "seconds, >0..1e6; sent requests finish.")
    warmup_s: float = Field(0.0, ge=0, le=1e6, description="Requests arriving before this (s) are left out of "
                                                           "the metrics, 0..1e6.")
    max_running_requests: int = Field(256, ge=1, le=65_536, description="Requests admitted (prefilling or "
                                                                        "decoding) at once, 1..65536.")
    kv_cache_tokens: int | None = Field(None, ge=1, le=10**10, description="KV-cache capacity in tokens, "
                                                                          "1..1e10; left out: unlimited.")
    chunked_prefill_tokens: int = Field(8192, ge=1, le=1_048_576, description="Prefill tokens per engine step, "
                                          "1..1048576; left out where the engine profile measured the prefill: the "
                                          "engine's own max_num_batched_tokens.")
    prefill_latency_scale: float = Field(1.0, ge=0, le=100, description="Multiply prefill time, 0..100 "
                                                                         "(0: free prefill, a what-if).")
    decode_context_len: int | None = Field(None, ge=1, le=MAX_TOKENS, description="Price every decode step "
                                           "at this attention context, 1..2097152, instead of the batch's mean "
                                           "(an engine whose attention reads a static window, as the live loop "
                                           "does); left out: the mean.")
    spec_off_above_batch: int | None = Field(None, ge=0, le=65_536, description="Decode batches larger than "
                                                                                "this run without speculation, "
                                                                                "0..65536 (0: never speculate).")
    num_steps_by_batch: list[SpecByBatch] = Field(default_factory=list, max_length=256,
                                                  description="Speculation settings by decode batch size; below "
                                                              "the first entry: the scenario's `spec`.")
    draws: int | None = Field(None, ge=1, le=256, description="A closed batch or loop with speculation: independent "
                              "draws of the acceptance its prediction averages, 1..256 (one generate's wall time "
                              "is itself a draw: it ends with the request that drew the fewest accepted tokens; a "
                              "loop's TTFT p50 is one of its joins); left out: enough for about 64 requests, 2-16 "
                              "(a loop 4-16).")
    slo: Slo = Slo()

    def policy_at(self, batch_size: int) -> SpecByBatch | None | Literal[False]:
        """The speculation policy at a decode batch of `batch_size`: False where speculation is off
        (`spec_off_above_batch`), the `num_steps_by_batch` entry that applies, or None (the scenario's `spec`)."""
        if self.spec_off_above_batch is not None and batch_size > self.spec_off_above_batch:
            return False
        return next((e for e in reversed(self.num_steps_by_batch) if e.batch_size <= batch_size), None)

    @model_validator(mode="after")
    def _check(self) -> Self:
        sizes = [e.batch_size for e in self.num_steps_by_batch]
        if sizes != sorted(set(sizes)):
            raise ValueError(f"num_steps_by_batch batch sizes must increase, got {sizes}")
        if self.arrivals.kind == "trace" and self.duration_s is not None and self.num_requests is not None:
            raise ValueError("give num_requests or duration_s for a trace, not both")
        if self.arrivals.kind == "closed_batch" and (self.num_requests is None or self.duration_s is not None):
            raise ValueError("a closed_batch is num_requests requests at t = 0: give num_requests (the batch), "
                             "not duration_s")
        return self

    @property
    def request_limit(self) -> int | None:
        """Requests to send: num_requests, or 1000 when neither it nor duration_s is given (not for traces)."""
        if self.num_requests is None and self.duration_s is None and self.arrivals.kind != "trace":
            return 1000
        return self.num_requests
