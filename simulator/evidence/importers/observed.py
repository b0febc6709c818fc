"""ObservedRun: what one serving-engine output says about a run, in the simulator's terms.

Every parser in `simulator.evidence.importers` returns these. A field is None when the source does not
state it; nothing is guessed. Quantities keep the unit the engines print them in (tokens per
second, milliseconds), named in the field; trace timings are microseconds like the simulator's
clock.

Conventions, converted on the way in:
- `accept_length` includes the token the target samples (the bonus token), as in the style guide.
  vLLM logs `1 + accepted / drafts` (bonus included); SGLang logs `(accepted drafts + cycles) /
  cycles` (bonus included); trtllm-bench's [AL] is output tokens per decode iteration (included).
- `acceptance_rate` is the fraction of drafted tokens accepted *as the engine defines it*; it is
  not the conditional alpha of `IidAcceptance` (use `acceptance_from_run` for that).
- `per_position_acceptance[i]` is the unconditional probability that draft position i + 1 is
  accepted (vLLM: accepted at position i / drafts).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from simulator.engines.models import EngineKind

Engine = EngineKind  # the serving engine that produced the output (simulator.engines.models.ENGINE_CLASSES)

SourceFormat = Literal[
    "sglang_server_log",         # python/sglang/srt/managers/scheduler_metrics_mixin.py: 'Decode batch' lines
    "sglang_bench_serving",      # python/sglang/bench_serving.py: printed result block
    "sglang_bench_serving_jsonl",  # python/sglang/bench_serving.py: --output-file records
    "sglang_bench_one_batch",    # python/sglang/bench_one_batch.py: 'Decode.  median latency' lines
    "sglang_bench_one_batch_server",  # python/sglang/bench_one_batch_server.py: printed or JSONL
    "sglang_bench_speculative",  # scripts/playground/bench_speculative.py: JSONL records
    "vllm_spec_decode_log",      # vllm/v1/spec_decode/metrics.py: 'SpecDecoding metrics' lines
    "vllm_prometheus",           # vllm/v1/spec_decode/metrics.py: /metrics counters
    "vllm_bench_serve",          # vllm/benchmarks/serve.py: printed result block
    "vllm_bench_serve_json",     # vllm/benchmarks/serve.py: --save-result JSON
    "vllm_bench_latency",        # vllm/benchmarks/latency.py: printed 'Avg latency' or --output-json
    "trtllm_bench",              # tensorrt_llm/bench/dataclasses/reporting.py: report_statistics
    "torch_profiler_trace",      # torch.profiler export_chrome_trace JSON
]

Fraction = Annotated[float, Field(ge=0.0, le=1.0)]


class ObservedRun(BaseModel):
    """One observation of a serving engine: a log interval, a benchmark result or a trace."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    engine: Engine
    source_file: str = Field(description="The file the run was read from.")
    source_format: SourceFormat
    source_line: int | None = Field(None, ge=1, description="Line of the file the record starts on.")
    num_intervals: int = Field(1, ge=1, description="Log lines / records this run averages (an operating "
                                                    "point of simulator.evidence.importers.points: 1 = one as read).")
    speculative: bool | None = Field(None, description="Speculative decoding on; None = not stated.")
    batch_size: float | None = Field(
        None, ge=0.0, description="Running requests (an integer where the engine prints one; a mean "
                                  "concurrency for benchmark reports, the concurrency cap where only that is printed).")
    num_steps: int | None = Field(None, ge=0, description="Draft steps per cycle, where stated.")
    topk: int | None = Field(None, ge=0, description="Draft branching factor, where stated.")
    num_draft_tokens: int | None = Field(None, ge=0, description="Tokens verified per request per cycle, where stated.")
    accept_length: float | None = Field(None, ge=0.0, description="Mean tokens committed per cycle, bonus included.")
    acceptance_rate: Fraction | None = Field(
        None, description="Accepted / drafted tokens as the engine defines it (not the conditional alpha).")
    per_position_acceptance: list[Fraction] | None = Field(
        None, min_length=1, max_length=64, description="Unconditional P(draft position i accepted), i = 1..num_steps "
                                                       "(at most 64, as a scenario's spec.num_steps).")
    accepted_tokens: int | None = Field(None, ge=0, description="Accepted draft tokens in the interval.")
    drafted_tokens: int | None = Field(None, ge=0, description="Draft tokens proposed in the interval.")
    num_drafts: int | None = Field(None, ge=0, description="Drafts (request-cycles) in the interval.")
    output_tok_per_s: float | None = Field(None, ge=0.0, description="Output tokens per second, all requests together.")
    tpot_ms: float | None = Field(None, ge=0.0, description="Time per output token of one request, ms.")
    step_ms: float | None = Field(
        None, ge=0.0, description="One engine step (a decode forward, or one speculative cycle), ms.")
    e2e_latency_ms: float | None = Field(None, ge=0.0, description="Wall time of the whole batch or request, ms.")
    cuda_graph: bool | None = Field(None, description="The step ran as a CUDA graph, where logged.")
    phase_gpu_us: dict[str, float] | None = Field(
        None, description="Trace: GPU kernel time per cycle by phase (draft, verify, draft_extend, decode), us.")
    phase_span_us: dict[str, float] | None = Field(
        None, description="Trace: first kernel start to last kernel end per cycle, by phase, us.")
    host_gap_us: float | None = Field(None, ge=0.0, description="Trace: GPU idle time inside a cycle, mean, us.")
    num_cycles: int | None = Field(None, ge=0, description="Trace: cycles the per-cycle means are taken over.")
    cycle_us: float | None = Field(
        None, ge=0.0, description="Trace with 'cycle' ranges: host wall time of one cycle range, mean, us.")
    cycle_phase_span_us: list[dict[str, float]] | None = Field(
        None, description="Trace with 'cycle' ranges: each cycle's span by phase, in cycle order, us.")
    graph_launch_us: float | None = Field(
        None, ge=0.0, description="Trace: host time of one cudaGraphLaunch call, mean, us.")
    sync_tail_us: float | None = Field(
        None, ge=0.0, description="Trace with 'sync' ranges: end of the cycle's last kernel to the end of "
                                  "the host's sync range (the device->host wake-up), mean, us.")


def observed_run(expected: str = "", **fields) -> ObservedRun:
    """An ObservedRun from an importer's fields, a value its schema refuses (a tok/s below 0, an
    acceptance rate over 1) reported as '<source_file>:<source_line>: <field>: <allowed range>
    (got <value>)[; expected ...]' instead of a validation traceback.

    Raises:
        UserInputError: naming the file, the line and the field.
    """
    from pydantic import ValidationError

    from simulator.inputs import UserInputError
    try:
        return ObservedRun(**fields)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err.get("loc", ())) or "value"
        got = str(err.get("input"))[:40]
        raise UserInputError(f"{fields.get('source_file', '?')}:{fields.get('source_line') or 1}: {where}: "
                             f"{err.get('msg', 'out of range')} (got {got})"
                             + (f"; expected {expected}" if expected else "")) from None
