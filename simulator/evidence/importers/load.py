"""load_runs: one file of engine output -> ObservedRuns, its format detected or named.

Detection looks at the text once (read with simulator.inputs.read_text: a bounded UTF-8 file):
- JSON documents: a trace ('traceEvents', or a list of events with 'ph'), vLLM's latency result
  ('avg_latency'), vLLM's serve result ('output_throughput' with 'date', 'model_id' or a
  'spec_decode_' key), an SGLang record otherwise;
- JSON Lines: each record by its keys: bench_speculative ('acc_length' and 'step_time'),
  bench_one_batch_server ('run_name' and 'last_gen_throughput'), bench_serving ('output_throughput');
- text, by marker, first match wins: 'SpecDecoding metrics:' (vLLM log), 'Decode batch' with
  '#running-req:' (SGLang log), a line starting 'vllm:spec_decode_' (Prometheus), 'PERFORMANCE
  OVERVIEW' (trtllm-bench), 'Serving Benchmark Result' (SGLang or vLLM by its labels),
  'median latency' after 'Decode.' (bench_one_batch), 'last generation throughput:'
  (bench_one_batch_server), 'Avg latency:' (vLLM latency).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable, get_args

from simulator.evidence.importers import serving_bench, sglang, trtllm, vllm
from simulator.evidence.importers.observed import ObservedRun, SourceFormat
from simulator.evidence.importers.report_text import json_numbers, line_error
from simulator.evidence.importers.traces import parse_trace
from simulator.inputs import MAX_TRACE_BYTES, UserInputError, load_json, quote, read_text

FORMATS: tuple[str, ...] = get_args(SourceFormat)
KNOWN = ("an SGLang server log ('Decode batch' lines), bench_serving / bench_one_batch(_server) output or JSONL, "
         "bench_speculative JSONL; a vLLM log ('SpecDecoding metrics:'), /metrics scrape, bench serve or latency "
         "output or JSON; a trtllm-bench report; a torch.profiler Chrome trace")
SPECULATIVE_EXPECTED = ("a bench_speculative record {batch_size, steps, topk, num_draft_tokens, acc_length, "
                        "step_time, speed} (scripts/playground/bench_speculative.py)")
ONE_BATCH_SERVER_EXPECTED = ("a bench_one_batch_server record {run_name, batch_size, latency, output_throughput, "
                             "last_gen_throughput, [acc_length]} (python/sglang/bench_one_batch_server.py)")

_TEXT_PARSERS: dict[str, Callable[[str, str], list[ObservedRun]]] = {
    "vllm_spec_decode_log": vllm.parse_spec_decode_log,
    "sglang_server_log": sglang.parse_server_log,
    "vllm_prometheus": vllm.parse_prometheus,
    "trtllm_bench": trtllm.parse_report,
    "sglang_bench_serving": serving_bench.parse_block_text,
    "vllm_bench_serve": serving_bench.parse_block_text,
    "sglang_bench_one_batch": sglang.parse_bench_one_batch,
    "sglang_bench_one_batch_server": sglang.parse_bench_one_batch_server,
    "vllm_bench_latency": vllm.parse_latency_text,
}


def load_runs(path: Path | str, format: str = "auto") -> list[ObservedRun]:
    """Read one engine output file into ObservedRuns.

    Args:
        path: the file (at most simulator.inputs.MAX_TRACE_BYTES of UTF-8).
        format: 'auto' (detect), or one of FORMATS (the ObservedRun.source_format values).

    Returns:
        The runs in file order (one per log line, result block, record or trace).

    Raises:
        UserInputError: one line: a file in no known format ('<path>:1: ...; expected ...'), a
            malformed line of a known format ('<path>:<line>: ...; expected ...'), a file
            that states no run, or an unknown `format`.
    """
    if format != "auto" and format not in FORMATS:
        raise UserInputError(f"format {quote(format)}: expected 'auto' or one of {', '.join(FORMATS)}")
    text = read_text(path, "engine output file", MAX_TRACE_BYTES)
    name = str(path)
    fmt = detect_format(text, name) if format == "auto" else format
    runs = _parse(fmt, text, name)
    if not runs:
        raise UserInputError(f"{name}:1: no run found in this {fmt} file; expected {KNOWN}")
    return runs


HEAD_BYTES = 1 << 20  # what format detection of a streamed file reads
MAX_LINE_BYTES = 1 << 20  # one log line, at most
PROGRESS_MIN_BYTES = 32 << 20  # a progress bar on stderr from this size


STREAMED = {"sglang_server_log": sglang.iter_server_log, "vllm_spec_decode_log": vllm.iter_spec_decode_log}


def iter_runs(path: Path | str, format: str = "auto", progress: bool = True):
    """The ObservedRuns of one file, one at a time: a server log (SGLang's or vLLM's, STREAMED;
    detected from its first MiB, or named) is read line by line, without a bound on its size and
    without holding it (a progress bar on stderr from 32 MiB); every other format (result files
    and traces of bounded size) as load_runs reads it.

    Raises:
        UserInputError: as load_runs; a line over 1 MiB; text that is not UTF-8 ('<path>:<line>: ...').
    """
    from simulator.inputs import check_regular_file
    if format != "auto" and format not in FORMATS:
        raise UserInputError(f"format {quote(format)}: expected 'auto' or one of {', '.join(FORMATS)}")
    p = check_regular_file(path, "engine output file", None)
    name = str(path)
    fmt = format
    if fmt == "auto":
        with open(p, "rb") as f:
            head = f.read(HEAD_BYTES)
        try:
            head_text = head.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            head_text = head[:e.start].decode("utf-8-sig", errors="ignore")
        if len(head) == HEAD_BYTES and "\n" in head_text:
            head_text = head_text[:head_text.rindex("\n")]
        try:
            fmt = detect_format(head_text, name) if head_text.strip() else "auto"
        except UserInputError:
            fmt = "auto"
    if fmt not in STREAMED:
        yield from load_runs(p, format)
        return
    n = 0
    for run in STREAMED[fmt](_lines(p, name, progress), name):
        n += 1
        yield run
    if not n:
        raise UserInputError(f"{name}:1: no run found in this {fmt} file; expected {KNOWN}")


def _lines(p: Path, name: str, progress: bool):
    """The file's lines as text, each bounded, UTF-8 checked, with a progress bar on long files."""
    size = p.stat().st_size
    bar = None
    if progress and size >= PROGRESS_MIN_BYTES:
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn
        bar = Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                       TimeRemainingColumn(), console=Console(stderr=True), transient=True)
        task = bar.add_task(f"reading {p.name}", total=size)
        bar.start()
    try:
        with open(p, "rb") as f:
            done = 0
            for line_no, raw in enumerate(iter(lambda: f.readline(MAX_LINE_BYTES + 1), b""), 1):
                if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                    raise UserInputError(f"{name}:{line_no}: a line of over {MAX_LINE_BYTES:,} bytes; a log line "
                                         "is shorter")
                try:
                    text = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
                except UnicodeDecodeError as e:
                    raise UserInputError(f"{name}:{line_no}: not UTF-8 text (byte 0x{raw[e.start]:02x}); an "
                                         "engine output file is UTF-8") from None
                done += len(raw)
                if bar is not None and line_no % 20000 == 0:
                    bar.update(task, completed=done)
                yield text
    finally:
        if bar is not None:
            bar.stop()


def detect_format(text: str, path: str) -> str:
    """The source format of an engine output's text (see the module docstring): one of FORMATS, or
    'jsonl' for SGLang JSON records, whose format each record's keys decide.

    Raises:
        UserInputError: '<path>:1: ...; expected <the known formats>' when no format matches.
    """
    if looks_like_json(text):
        return _detect_json(text, path)
    lines = text.splitlines()
    markers = (
        ("vllm_spec_decode_log", lambda ln: vllm.SPEC_MARKER in ln),
        ("sglang_server_log", sglang.is_server_log_line),
        ("vllm_prometheus", lambda ln: ln.lstrip().startswith(vllm.PROM_PREFIX)),
        ("trtllm_bench", lambda ln: trtllm.MARKER in ln),
        ("serving_bench", lambda ln: serving_bench.HEADER in ln),
        ("sglang_bench_one_batch", lambda ln: ln.lstrip().startswith("Decode.") and "median latency" in ln),
        ("sglang_bench_one_batch_server", lambda ln: ln.startswith("last generation throughput:")),
        ("vllm_bench_latency", lambda ln: ln.startswith(vllm.LATENCY_MARKER)),
    )
    for fmt, found in markers:
        if any(found(ln) for ln in lines):
            if fmt == "serving_bench":  # engine told apart per block; report the first block's
                return serving_bench.parse_block_text(text, path)[0].source_format
            return fmt
    first = quote(lines[0].strip() if lines else "", 50)
    raise UserInputError(f"{path}:1: not a known engine output (starts {first}); expected {KNOWN}")


def looks_like_json(text: str) -> bool:
    """An object, or a list of objects; a log line such as '[2026-05-27 20:14:38 TP0] ...' is not."""
    return re.match(r"\s*(\{|\[\s*[{\]])", text) is not None


def _try_json(text: str) -> Any:
    """json.loads, or None where it fails (broken JSON, integers past Python's digit limit, nesting
    past the recursion limit): simulator.inputs.load_json then names the problem."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
        return None


def _detect_json(text: str, path: str) -> str:
    first_line = text.lstrip().split("\n", 1)[0]
    data = _try_json(text)
    if data is None:  # JSON Lines, or broken JSON
        first = _try_json(first_line)
        if not isinstance(first, dict):
            hint = "; expected a torch.profiler Chrome trace" if "traceEvents" in text[:4096] else f"; expected {KNOWN}"
            try:
                load_json(text, path)
            except UserInputError as e:
                raise UserInputError(f"{e}{hint}") from None
        return "jsonl"
    if isinstance(data, list):
        if data and isinstance(data[0], dict) and "ph" in data[0]:
            return "torch_profiler_trace"
    elif isinstance(data, dict):
        if "traceEvents" in data:
            return "torch_profiler_trace"
        if "avg_latency" in data:
            return "vllm_bench_latency"
        if "output_throughput" in data and ("date" in data or "model_id" in data
                                            or any(k.startswith("spec_decode_") for k in data)):
            return "vllm_bench_serve_json"
        return "jsonl"  # one SGLang record
    raise UserInputError(f"{path}:1: JSON that is no known engine output; expected {KNOWN}")


def _parse(fmt: str, text: str, path: str) -> list[ObservedRun]:
    if fmt == "torch_profiler_trace":
        return parse_trace(load_json(text, path), path)
    if not looks_like_json(text):
        if fmt not in _TEXT_PARSERS:
            raise line_error(path, 1, "text, not JSON", f"the JSON that {fmt} is")
        return _TEXT_PARSERS[fmt](text, path)
    return _parse_json_records(text, path, fmt)


def _parse_json_records(text: str, path: str, fmt: str) -> list[ObservedRun]:
    """One JSON object (pretty-printed or not), or JSON Lines of records: one run per record."""
    data = _try_json(text)
    if data is not None:
        load_json(text, path)  # the bounds and duplicate-key rules
        if not isinstance(data, dict):
            raise line_error(path, 1, "a JSON value that is not an object", KNOWN)
        return [_record_run(data, path, 1, fmt)]
    runs = []
    for line_no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = load_json(line, path)
        except UserInputError as e:  # name the line of the file, not of the one-line document
            raise UserInputError(str(e).replace(f"{path}:1:", f"{path}:{line_no}:", 1)) from None
        if not isinstance(rec, dict):
            raise line_error(path, line_no, "a line that is not a JSON object", "JSON Lines of benchmark records")
        runs.append(_record_run(rec, path, line_no, fmt))
    return runs


def _record_run(rec: dict[str, Any], path: str, line_no: int, fmt: str) -> ObservedRun:
    if fmt == "vllm_bench_latency" or (fmt == "jsonl" and "avg_latency" in rec):
        return vllm.latency_json_run(rec, path)
    if fmt == "vllm_bench_serve_json":
        return serving_bench.vllm_record_run(rec, path)
    if fmt == "sglang_bench_speculative" or (fmt == "jsonl" and "acc_length" in rec and "step_time" in rec):
        n = json_numbers(rec, ("batch_size", "steps", "acc_length", "step_time", "speed"), ("topk", "num_draft_tokens"),
                         path, line_no, "bench_speculative record", SPECULATIVE_EXPECTED)
        return sglang.bench_speculative_run(n, path, line_no)
    if fmt == "sglang_bench_one_batch_server" or (fmt == "jsonl" and "last_gen_throughput" in rec):
        n = json_numbers(rec, ("batch_size", "output_throughput"), ("latency", "acc_length"),
                         path, line_no, "bench_one_batch_server record", ONE_BATCH_SERVER_EXPECTED)
        return sglang.one_batch_server_run(n, path, line_no)
    if fmt in ("sglang_bench_serving_jsonl", "jsonl") and "output_throughput" in rec:
        return serving_bench.sglang_record_run(rec, path, line_no)
    raise line_error(path, line_no, f"a JSON record with keys {quote(sorted(rec)[:6])}", KNOWN)
