"""The serving benchmark result, as SGLang's `bench_serving` and vLLM's `vllm bench serve` print and save it.

Both print a block opened by '==== Serving Benchmark Result ====' of '{label:<40} {value:<10}'
lines, with '---title---' section rules and a closing '=====' rule. SGLang's block names the
'Backend:' and may end with 'Accept length:'; vLLM's has 'Maximum request concurrency:' and a
'Speculative Decoding' section ('Acceptance rate (%):', 'Acceptance length:', 'Drafts:', 'Draft
tokens:', 'Accepted tokens:', 'Per-position acceptance (%):' then '  Position i:' lines).

Sources: python/sglang/bench_serving.py (`benchmark`, printed block and --output-file JSONL);
vllm/benchmarks/serve.py (`benchmark`, printed block and --save-result JSON, spec_decode_* keys).
"""

from __future__ import annotations

from typing import Any

from simulator.evidence.importers.observed import ObservedRun, observed_run
from simulator.evidence.importers.report_text import LABEL_VALUE, json_numbers, line_error, to_float, to_int

HEADER = "Serving Benchmark Result"
BLOCK_EXPECTED = ("'Output token throughput (tok/s):  F' inside the '=== Serving Benchmark Result ===' block "
                  "(python/sglang/bench_serving.py, vllm/benchmarks/serve.py)")
_PERCENT = 100.0


def _blocks(text: str) -> list[tuple[int, list[tuple[int, str]]]]:
    """(header line number, [(line number, line), ...]) per result block, up to its closing '====' rule."""
    blocks: list[tuple[int, list[tuple[int, str]]]] = []
    current: list[tuple[int, str]] | None = None
    for line_no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip().lstrip("# ")  # results pasted into shell comments keep their '# '
        if HEADER in line and line.startswith("="):
            current = []
            blocks.append((line_no, current))
        elif current is not None:
            if line.startswith("=") and set(line) == {"="}:
                current = None
            else:
                current.append((line_no, line))
    return blocks


def parse_block_text(text: str, path: str) -> list[ObservedRun]:
    """One ObservedRun per printed 'Serving Benchmark Result' block (SGLang or vLLM, told apart by the
    block's own labels).

    batch_size: SGLang's measured 'Concurrency:' (mean requests in flight), else the 'Max(imum)
    request concurrency:' cap. tpot_ms: 'Mean TPOT (ms):'. SGLang's 'Accept length:' and vLLM's
    'Acceptance length:' include the bonus token; vLLM's 'Acceptance rate (%)' and per-position
    percentages become fractions.

    Raises:
        UserInputError: a block without 'Output token throughput (tok/s):', or a value that is not a
            number: '<path>:<line>: ...; expected ...'.
    """
    runs = []
    for header_no, lines in _blocks(text):
        values: dict[str, tuple[int, str]] = {}
        per_position: list[float] = []
        for line_no, line in lines:
            m = LABEL_VALUE.match(line)
            if m is None:
                continue
            label, value = m.group("label").strip(), m.group("value")
            if label.startswith("Position "):
                per_position.append(to_float(value, path, line_no, repr(label), BLOCK_EXPECTED) / _PERCENT)
            else:
                values[label] = (line_no, value)
        if "Output token throughput (tok/s)" not in values:
            raise line_error(path, header_no, "serving benchmark block without 'Output token throughput (tok/s)'",
                             BLOCK_EXPECTED)

        def num(label: str) -> float | None:
            if label not in values:
                return None
            line_no, value = values[label]
            return to_float(value, path, line_no, repr(label), BLOCK_EXPECTED)

        def whole(label: str) -> int | None:
            if label not in values:
                return None
            line_no, value = values[label]
            return to_int(value, path, line_no, repr(label), BLOCK_EXPECTED)

        is_sglang = "Backend" in values or "Accept length" in values or "Max request concurrency" in values
        if is_sglang:
            accept_length = num("Accept length")
            batch = num("Concurrency") if "Concurrency" in values else num("Max request concurrency")
            rate = None
        else:
            accept_length = num("Acceptance length")
            batch = num("Maximum request concurrency")
            rate = num("Acceptance rate (%)")
        spec = accept_length is not None or "Drafts" in values
        runs.append(observed_run(
            engine="sglang" if is_sglang else "vllm", source_file=path,
            source_format="sglang_bench_serving" if is_sglang else "vllm_bench_serve", source_line=header_no,
            speculative=True if spec else None, batch_size=batch, accept_length=accept_length,
            acceptance_rate=rate / _PERCENT if rate is not None else None,
            per_position_acceptance=per_position or None,
            num_steps=len(per_position) or None, num_drafts=whole("Drafts"), drafted_tokens=whole("Draft tokens"),
            accepted_tokens=whole("Accepted tokens"), output_tok_per_s=num("Output token throughput (tok/s)"),
            tpot_ms=num("Mean TPOT (ms)")))
    return runs


SGLANG_JSON_EXPECTED = ("a bench_serving record with 'output_throughput' and 'mean_tpot_ms' "
                        "(python/sglang/bench_serving.py --output-file)")
VLLM_JSON_EXPECTED = ("a --save-result object with 'output_throughput' and 'mean_tpot_ms' "
                      "(vllm/benchmarks/serve.py)")


def sglang_record_run(rec: dict[str, Any], path: str, line_no: int) -> ObservedRun:
    """One SGLang bench_serving JSONL record: output_throughput (tok/s), mean_tpot_ms, concurrency
    (mean in flight), max_concurrency, accept_length (null without speculation)."""
    n = json_numbers(rec, ("output_throughput",), ("mean_tpot_ms", "concurrency", "max_concurrency", "accept_length"),
                     path, line_no, "SGLang bench_serving record", SGLANG_JSON_EXPECTED)
    return observed_run(
        engine="sglang", source_file=path, source_format="sglang_bench_serving_jsonl", source_line=line_no,
        speculative=True if "accept_length" in n else None,
        batch_size=n.get("concurrency", n.get("max_concurrency")), accept_length=n.get("accept_length"),
        output_tok_per_s=n["output_throughput"], tpot_ms=n.get("mean_tpot_ms"))


def vllm_record_run(rec: dict[str, Any], path: str) -> ObservedRun:
    """vLLM's --save-result JSON: output_throughput (tok/s), mean_tpot_ms, max_concurrency and, with
    speculation, spec_decode_acceptance_rate (%), spec_decode_acceptance_length, spec_decode_num_drafts,
    spec_decode_draft_tokens, spec_decode_accepted_tokens, spec_decode_per_position_acceptance_rates
    (fractions)."""
    what = "vLLM bench serve result"
    n = json_numbers(rec, ("output_throughput",),
                     ("mean_tpot_ms", "max_concurrency", "spec_decode_acceptance_rate", "spec_decode_acceptance_length",
                      "spec_decode_num_drafts", "spec_decode_draft_tokens", "spec_decode_accepted_tokens"),
                     path, 1, what, VLLM_JSON_EXPECTED)
    per_pos = rec.get("spec_decode_per_position_acceptance_rates")
    if per_pos is not None:
        if not isinstance(per_pos, list):
            raise line_error(path, 1, f"{what}: 'spec_decode_per_position_acceptance_rates' is not a list",
                             VLLM_JSON_EXPECTED)
        per_pos = [json_numbers({"rate": p}, ("rate",), (), path, 1, what, VLLM_JSON_EXPECTED)["rate"] for p in per_pos]
    rate = n.get("spec_decode_acceptance_rate")
    spec = "spec_decode_acceptance_length" in n

    def count(key: str) -> int | None:
        return int(n[key]) if key in n else None

    return observed_run(
        engine="vllm", source_file=path, source_format="vllm_bench_serve_json", source_line=1,
        speculative=True if spec else None, batch_size=n.get("max_concurrency"),
        accept_length=n.get("spec_decode_acceptance_length"),
        acceptance_rate=rate / _PERCENT if rate is not None else None,
        per_position_acceptance=per_pos or None, num_steps=len(per_pos) if per_pos else None,
        num_drafts=count("spec_decode_num_drafts"), drafted_tokens=count("spec_decode_draft_tokens"),
        accepted_tokens=count("spec_decode_accepted_tokens"),
        output_tok_per_s=n["output_throughput"], tpot_ms=n.get("mean_tpot_ms"))
