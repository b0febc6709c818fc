"""Importers of real serving-engine outputs: what SGLang, vLLM and TensorRT-LLM print, as ObservedRuns.

Public API:
- `load_runs(path, format="auto") -> list[ObservedRun]`: one file, its format detected from the
  text (or named). Raises `simulator.inputs.UserInputError` with one line
  '<file>:<line>: <what was found>; expected <what the engine prints>' for a file in no known
  format or a malformed line of a known one (a missing field, a value that is not a number).
- `iter_runs(path, format="auto")`: the same runs one at a time; an SGLang server log streams
  line by line (no size bound, never held whole, a progress bar on long files).
- `operating_points(runs) -> list[ObservedRun]`: the runs of one file that share a set-up
  (batch, speculation, num_steps, ...) folded into one, their figures averaged, `num_intervals`
  counting them (what `calibrate from-runs` fits on).
- `ObservedRun`: one observation (a log interval, a benchmark result, a trace) in the field's
  terms and units: batch_size (running requests), accept_length (mean, bonus token included),
  acceptance_rate, per_position_acceptance (unconditional, shape (num_steps,)), accepted_tokens,
  drafted_tokens, num_drafts, output_tok_per_s (all requests), tpot_ms, step_ms, e2e_latency_ms,
  cuda_graph; for traces phase_gpu_us / phase_span_us (us per cycle by phase), host_gap_us,
  num_cycles. None = the source does not state it.
- `acceptance_from_run(run, num_steps=None) -> dict`: the scenario `acceptance:` model
  ({"kind": "positional", "acceptance_rates": [...]} with conditional rates, or {"kind": "iid",
  "acceptance_rate": alpha} solved from the mean accept_length). Raises UserInputError.

Formats (`ObservedRun.source_format`) and the file of each engine that prints them:
- sglang_server_log: python/sglang/srt/managers/scheduler_metrics_mixin.py (`log_decode_stats`;
  python/sglang/srt/managers/scheduler.py in older versions)
- sglang_bench_serving, sglang_bench_serving_jsonl: python/sglang/bench_serving.py
- sglang_bench_one_batch: python/sglang/bench_one_batch.py
- sglang_bench_one_batch_server: python/sglang/bench_one_batch_server.py (printed or JSONL)
- sglang_bench_speculative: scripts/playground/bench_speculative.py (JSONL)
- vllm_spec_decode_log, vllm_prometheus: vllm/v1/spec_decode/metrics.py
- vllm_bench_serve, vllm_bench_serve_json: vllm/benchmarks/serve.py
- vllm_bench_latency: vllm/benchmarks/latency.py (printed 'Avg latency' or --output-json)
- trtllm_bench: tensorrt_llm/bench/dataclasses/reporting.py
- torch_profiler_trace: torch.profiler export_chrome_trace (Kineto JSON), see traces.py

Apart from runs: `simulator.evidence.importers.moe_bench.load_moe_kernel_times(path) -> {tokens: us}` reads
an engine's fused-MoE benchmark output (SGLang tuning_fused_moe_triton.py, vLLM benchmark_moe.py)
for `serving_engine.moe_layer_latency_us`.

Pure Python (json, re, prometheus_client's text parser, scipy for the iid solve); no torch.
"""

from simulator.evidence.importers.acceptance import acceptance_from_run
from simulator.evidence.importers.load import FORMATS, detect_format, iter_runs, load_runs
from simulator.evidence.importers.points import operating_points
from simulator.evidence.importers.observed import ObservedRun

__all__ = ["FORMATS", "ObservedRun", "acceptance_from_run", "detect_format", "iter_runs", "load_runs",
           "operating_points"]
