"""SGLang outputs: the server's decode-batch log lines and the bench_one_batch* / bench_speculative results.

What each format states (and so what the ObservedRun holds) is in the parser's docstring, with the
SGLang file that prints it. The serving benchmark block (`bench_serving`) is shared with vLLM and
lives in `serving_bench.py`.
"""

from __future__ import annotations

import re
from typing import Any

from simulator.evidence.importers.observed import ObservedRun, observed_run
from simulator.evidence.importers.report_text import comma_fields, line_error, to_bool, to_float, to_int
from simulator.units import MS_PER_S

_DECODE = re.compile(r"Decode batch(?: \[\d+\])?[.,] (?P<body>#running-req: .*)$")
DECODE_EXPECTED = ("'Decode batch. #running-req: N, #token: N, token usage: F, [accept len: F, [accept rate: F,]] "
                   "cuda graph: B, gen throughput (token/s): F, #queue-req: N' "
                   "(python/sglang/srt/managers/scheduler_metrics_mixin.py)")


def is_server_log_line(line: str) -> bool:
    """A scheduler 'Decode batch' line (any SGLang version)."""
    return "Decode batch" in line and "#running-req:" in line


def parse_server_log(text: str, path: str) -> list[ObservedRun]:
    """One ObservedRun per 'Decode batch' line of an SGLang server log.

    The scheduler logs, every `--decode-log-interval` decode steps:
    `[time TP0] Decode batch[ [iter]][.,] #running-req: N, #token: N, token usage: F, accept len: F,
    accept rate: F, cuda graph: B, gen throughput (token/s): F, #queue-req: N,`. Older versions write
    'Decode batch.' and lack 'accept rate' and 'cuda graph'; a hybrid-memory model writes
    '#full token' instead of '#token'; PD-disaggregated decode adds queue fields; non-speculative
    servers omit 'accept len'. Fields other than those below are ignored.

    Source: python/sglang/srt/managers/scheduler_metrics_mixin.py (`log_decode_stats`); before it,
    python/sglang/srt/managers/scheduler.py. 'accept len' = (accepted drafts + cycles) / cycles over
    the interval (bonus included); 'accept rate' = accepted tokens incl. bonus / (cycles *
    num_draft_tokens).

    Raises:
        UserInputError: a decode line without '#running-req' or 'gen throughput (token/s)', or a
            field that is not a number: '<path>:<line>: ...; expected ...'.
    """
    return list(iter_server_log(text.splitlines(), path))


def iter_server_log(lines, path: str):
    """The ObservedRuns of an SGLang server log's lines (any iterable of str, e.g. an open file),
    one at a time: a log of a day streams through without being held (parse_server_log).

    Raises:
        UserInputError: as parse_server_log.
    """
    for line_no, line in enumerate(lines, 1):
        if is_server_log_line(line):
            yield server_log_run(line.rstrip("\n"), path, line_no)


def server_log_run(line: str, path: str, line_no: int) -> ObservedRun:
    """The ObservedRun of one 'Decode batch' line (parse_server_log)."""
    m = _DECODE.search(line)
    if m is None:
        raise line_error(path, line_no, "SGLang 'Decode batch' line without '#running-req: N' after it",
                         DECODE_EXPECTED)
    fields = comma_fields(m.group("body"))
    for need in ("#running-req", "gen throughput (token/s)"):
        if need not in fields:
            raise line_error(path, line_no, f"SGLang decode line without {need!r}", DECODE_EXPECTED)

    def num(key: str) -> float:
        return to_float(fields[key], path, line_no, repr(key), DECODE_EXPECTED)

    graph = fields.get("cuda graph")
    accept_length = num("accept len") if "accept len" in fields else None
    return observed_run(
        DECODE_EXPECTED, engine="sglang", source_file=path, source_format="sglang_server_log", source_line=line_no,
        speculative=True if accept_length is not None else None,
        batch_size=to_int(fields["#running-req"], path, line_no, "'#running-req'", DECODE_EXPECTED),
        accept_length=accept_length,
        acceptance_rate=num("accept rate") if "accept rate" in fields else None,
        output_tok_per_s=num("gen throughput (token/s)"),
        cuda_graph=to_bool(graph, path, line_no, "'cuda graph'", DECODE_EXPECTED) if graph is not None else None)


_ONE_BATCH_DECODE = re.compile(r"^Decode \d+\. Batch size: (?P<bs>\S+), latency:")
_ONE_BATCH_MEDIAN = re.compile(r"^Decode\.\s+median latency: (?P<lat>\S+) s, median throughput:\s+(?P<tput>\S+) token/s")
ONE_BATCH_EXPECTED = ("'Decode.  median latency: F s, median throughput: F token/s' after 'Benchmark ...' "
                      "(python/sglang/bench_one_batch.py)")


def parse_bench_one_batch(text: str, path: str) -> list[ObservedRun]:
    """One ObservedRun per benchmark (not warm-up) run of `python -m sglang.bench_one_batch`.

    The script prints, per batch size, 'Warmup ...' then 'Benchmark ...', each followed by
    'Prefill. latency: F s, throughput: F token/s', 'Decode i. Batch size: N, latency: F s,
    throughput: F token/s' per step (older versions: 'Decode.  latency: ...' without the batch
    size), 'Decode.  median latency: F s, median throughput: F token/s' and 'Total. latency: F s, ...'.
    bench_one_batch runs the model without speculation, one token per request per step, so
    tpot_ms = step_ms = the median decode latency.

    Source: python/sglang/bench_one_batch.py (`latency_test_run_once`).

    Raises:
        UserInputError: a median line whose numbers do not parse.
    """
    runs, in_benchmark, batch_size = [], False, None
    for line_no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line.startswith("Warmup ..."):
            in_benchmark, batch_size = False, None
        elif line.startswith("Benchmark ..."):
            in_benchmark, batch_size = True, None
        elif (m := _ONE_BATCH_DECODE.match(line)) is not None:
            batch_size = to_int(m.group("bs"), path, line_no, "'Batch size'", ONE_BATCH_EXPECTED)
        elif line.startswith("Decode.") and "median latency" in line:
            m = _ONE_BATCH_MEDIAN.match(line)
            if m is None:
                raise line_error(path, line_no, "SGLang bench_one_batch median line in another form",
                                 ONE_BATCH_EXPECTED)
            if not in_benchmark:
                continue
            step_ms = to_float(m.group("lat"), path, line_no, "'median latency'", ONE_BATCH_EXPECTED) * MS_PER_S
            runs.append(observed_run(
                engine="sglang", source_file=path, source_format="sglang_bench_one_batch", source_line=line_no,
                speculative=False, batch_size=batch_size, step_ms=step_ms, tpot_ms=step_ms,
                output_tok_per_s=to_float(m.group("tput"), path, line_no, "'median throughput'", ONE_BATCH_EXPECTED)))
    return runs


ONE_BATCH_SERVER_EXPECTED = ("'batch size: N', 'latency: F s', 'output throughput: F tok/s', "
                             "['acc_length: F'] (python/sglang/bench_one_batch_server.py)")
_SERVER_KEYS = {"latency": "latency", "output throughput": "output_throughput",
                "last generation throughput": "last_gen_throughput", "acc_length": "acc_length"}


def parse_bench_one_batch_server(text: str, path: str) -> list[ObservedRun]:
    """One ObservedRun per 'batch size: N' block printed by `python -m sglang.bench_one_batch_server`.

    Each case prints 'batch size: N', 'input_len: N', 'output_len: N', 'latency: F s', 'input
    throughput: F tok/s', 'output throughput: F tok/s', 'last_ttft: F s', 'last generation
    throughput: F tok/s' and, with speculation, 'acc_length: F'. output_tok_per_s is the output
    throughput over the decode part (batch_size * output_len / (latency - ttft)).

    Source: python/sglang/bench_one_batch_server.py (`run_one_case`).
    """
    records: list[tuple[int, dict[str, Any]]] = []
    for line_no, raw in enumerate(text.splitlines(), 1):
        label, sep, value = raw.strip().partition(": ")
        if not sep:
            continue
        if label == "batch size":
            records.append((line_no, {"batch_size": to_int(value, path, line_no, "'batch size'",
                                                           ONE_BATCH_SERVER_EXPECTED)}))
        elif label in _SERVER_KEYS and records:
            number = value.split()[0] if value.split() else ""
            records[-1][1][_SERVER_KEYS[label]] = to_float(number, path, line_no, repr(label),
                                                           ONE_BATCH_SERVER_EXPECTED)
    runs = []
    for line_no, rec in records:
        if "output_throughput" not in rec:
            raise line_error(path, line_no, "SGLang bench_one_batch_server case without 'output throughput'",
                             ONE_BATCH_SERVER_EXPECTED)
        runs.append(one_batch_server_run(rec, path, line_no))
    return runs


def one_batch_server_run(rec: dict[str, Any], path: str, line_no: int) -> ObservedRun:
    """An ObservedRun from one bench_one_batch_server result (printed or a JSONL record: `batch_size`,
    `latency` s, `output_throughput` tok/s, `acc_length` (-1 or absent = no speculation))."""
    acc = rec.get("acc_length")
    accept_length = acc if isinstance(acc, (int, float)) and acc > 0 else None
    latency_s = rec.get("latency")
    return observed_run(
        engine="sglang", source_file=path, source_format="sglang_bench_one_batch_server", source_line=line_no,
        speculative=True if accept_length is not None else None, batch_size=rec.get("batch_size"),
        accept_length=accept_length, output_tok_per_s=rec.get("output_throughput"),
        e2e_latency_ms=latency_s * MS_PER_S if isinstance(latency_s, (int, float)) else None)


def bench_speculative_run(rec: dict[str, Any], path: str, line_no: int) -> ObservedRun:
    """An ObservedRun from one `scripts/playground/bench_speculative.py` JSONL record.

    Record: {batch_size, steps, topk, num_draft_tokens, acc_length, step_time (s, the 20th
    percentile of the server's per-step time at this batch size), speed (tok/s of one request =
    acc_length / step_time), completion_tokens}. steps = 0 is the non-speculative baseline.
    tpot_ms = step_time / acc_length; output_tok_per_s = speed * batch_size (every request steps
    together).

    Source: scripts/playground/bench_speculative.py (`main`, `send_one_batch`).
    """
    steps, batch_size = rec["steps"], rec["batch_size"]
    step_ms = rec["step_time"] * MS_PER_S
    spec = steps > 0
    return observed_run(
        engine="sglang", source_file=path, source_format="sglang_bench_speculative", source_line=line_no,
        speculative=spec, batch_size=batch_size, num_steps=steps if spec else None,
        topk=rec.get("topk") if spec else None, num_draft_tokens=rec.get("num_draft_tokens") if spec else None,
        accept_length=rec["acc_length"], step_ms=step_ms,
        tpot_ms=step_ms / rec["acc_length"] if rec["acc_length"] > 0 else None,
        output_tok_per_s=rec["speed"] * batch_size)
