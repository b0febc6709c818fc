"""Read an engine's fused-MoE benchmark output: the kernel time per MoE layer by token count.

Both engines print the same two lines per batch size (tokens in the MoE call):

    Batch size: 1, config: {'BLOCK_SIZE_M': 16, 'BLOCK_SIZE_N': 64, ...}
    Kernel time: 52.65 us

- SGLang: benchmark/kernels/fused_moe_triton/tuning_fused_moe_triton.py (without --tune it
  times the shipped configs; "adapted from vllm's benchmark_moe.py", that folder's README);
- vLLM: benchmarks/kernels/benchmark_moe.py.
Each times the whole fused MoE of one layer on one rank (token alignment, both grouped GEMMs,
the activation, the top-k reduce) replayed in a CUDA graph, at the model, TP/EP and dtype it
was run with. The result feeds `serving_engine.moe_layer_latency_us` (simulator.engines).

Also read: the JSON lines `specdecsim calibrate engine-moe` writes (SGLang's Triton MoE kernels
timed on this project's GPU; data/measurements/h200_sglang_triton_moe.jsonl), one record per
shape, token count and routing, `kernels_us` taken (the two grouped GEMMs, the activation and the
top-k sum; the engine's alignment and activation-quantisation kernels are not in it).

Pure Python (re; JSON lines through simulator.inputs.load_json_line).
"""

from __future__ import annotations

import re
from pathlib import Path

from simulator.engines.models import MOE_TABLE_MAX_ENTRIES
from simulator.inputs import MAX_TRACE_BYTES, UserInputError, load_json_line, quote, read_text

_BATCH = re.compile(r"^\s*Batch size:\s*(\S+?),\s*config:")
_TIME = re.compile(r"^\s*Kernel time:\s*(\S+)\s*us\s*$")
_TUNE = re.compile(r"Completed tuning for batch_size=|Start tuning over \d+ configurations")
EXPECTED = ("'Batch size: N, config: {...}' then 'Kernel time: X us' (SGLang tuning_fused_moe_triton.py or "
            "vLLM benchmarks/kernels/benchmark_moe.py output)")


def _number(text: str, kind, where: str, what: str):
    try:
        value = kind(text)
    except ValueError:
        raise UserInputError(f"{where}: {what} {text!r} is not {'an integer' if kind is int else 'a number'}; "
                             f"expected {EXPECTED}") from None
    if not value > 0 or value != value or value == float("inf"):
        raise UserInputError(f"{where}: {what} {text} is not a positive finite number")
    return value


def load_moe_kernel_times(path: Path, shape: str | None = None, routing: str = "rotating") -> dict[int, float]:
    """{tokens: kernel time in us}: `load_moe_kernel_records(...)[0]`."""
    return load_moe_kernel_records(path, shape, routing)[0]


def load_moe_kernel_records(path: Path, shape: str | None = None,
                            routing: str = "rotating") -> tuple[dict[int, float], dict | None]:
    """({tokens: kernel time in us}, the measured shape) from one benchmark output file (the engines' text output, or the
    JSON lines of `specdecsim calibrate engine-moe`, where `shape` picks the shape when the file holds several
    and `routing` 'rotating' or 'same' picks the records). The measured shape is {E, K, N, top_k,
    quant, gpu} of the records, or None for an engine benchmark's text output, which does not say.

    Lines other than the two above are skipped (progress bars, warnings, the tuner's log). The
    file is read as every user file is (simulator.inputs.read_text: a regular file of UTF-8, here
    up to MAX_TRACE_BYTES).

    Raises:
        UserInputError: the file cannot be read or is not UTF-8 text, has no such pair (a --tune
            run's output is named as such), a 'Batch size' line with no 'Kernel time' before the
            next one, a value that is not a positive number, a batch size above 1,000,000 or a
            time above 1e6 us, a batch size twice (two runs in one file: give one run's output),
            or more than MOE_TABLE_MAX_ENTRIES batch sizes. Each message is one line naming the
            file (and line).
    """
    lines = read_text(path, "MoE benchmark output", MAX_TRACE_BYTES).splitlines()
    first = next((line for line in lines if line.strip()), "")
    if first.lstrip().startswith("{"):
        return _engine_moe_records(path, lines, shape, routing)
    if shape is not None:
        raise UserInputError(f"{path}: --shape picks a shape of `calibrate engine-moe`'s JSON lines; this file is "
                             "an engine benchmark's text output, which holds one shape")
    times: dict[int, float] = {}
    first_line: dict[int, int] = {}
    pending: tuple[int, int] | None = None  # (batch size, line number)
    for i, line in enumerate(lines, 1):
        where = f"{path}:{i}"
        m = _BATCH.match(line)
        if m:
            if pending is not None:
                raise UserInputError(f"{path}:{pending[1]}: 'Batch size: {pending[0]}' has no 'Kernel time' line "
                                     f"before line {i}; expected {EXPECTED}")
            b = _number(m.group(1), int, where, "batch size")
            if b > 1_000_000:
                raise UserInputError(f"{where}: batch size {b} is above 1,000,000 tokens")
            if b in times:
                raise UserInputError(f"{where}: batch size {b} again (first at line {first_line[b]}); the file "
                                     "holds more than one run: give one run's output")
            pending = (b, i)
            continue
        m = _TIME.match(line)
        if m:
            if pending is None:
                raise UserInputError(f"{where}: 'Kernel time' with no 'Batch size' line before it; expected {EXPECTED}")
            t = _number(m.group(1), float, where, "kernel time")
            if t > 1e6:
                raise UserInputError(f"{where}: kernel time {t} us is above 1e6 us (one second per MoE layer)")
            times[pending[0]] = t
            first_line[pending[0]] = pending[1]
            pending = None
    if pending is not None:
        raise UserInputError(f"{path}:{pending[1]}: 'Batch size: {pending[0]}' has no 'Kernel time' line; "
                             f"expected {EXPECTED}")
    if not times and any(_TUNE.search(line) for line in lines):
        raise UserInputError(f"{path}: the output of a --tune run (it saves the best configs and prints no "
                             "'Kernel time' per batch size); run the script again without --tune, which times the "
                             "saved configs, and give that output")
    return _table(path, times, f"no MoE kernel times found; expected {EXPECTED}",
                  "batch sizes", " (give the script --batch-size for the token counts you serve)"), None


def _table(path: Path, times: dict[int, float], empty: str, what: str, hint: str = "") -> dict[int, float]:
    """`times` sorted by tokens; raises UserInputError when it is empty or longer than a scenario's
    moe_layer_latency_us may be (MOE_TABLE_MAX_ENTRIES)."""
    if not times:
        raise UserInputError(f"{path}: {empty}")
    if len(times) > MOE_TABLE_MAX_ENTRIES:
        raise UserInputError(f"{path}: {len(times)} {what}; serving_engine.moe_layer_latency_us takes at most "
                             f"{MOE_TABLE_MAX_ENTRIES}{hint}")
    return dict(sorted(times.items()))


def _engine_moe_records(path: Path, lines: list[str], shape: str | None,
                        routing: str) -> tuple[dict[int, float], dict]:
    """({tokens: kernels_us}, the measured shape) of one shape and routing from `calibrate engine-moe`'s
    JSON lines."""
    if routing not in ("rotating", "same"):
        raise UserInputError(f"routing {routing!r}: one of rotating, same")
    records = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:  # the project's JSON reader: no key twice, finite numbers, bounded depth and digits
            rec = load_json_line(line, f"{path}:{i}")
        except UserInputError as e:
            raise UserInputError(f"{e}; expected `calibrate engine-moe` records") from None
        if not isinstance(rec, dict) or not {"shape", "tokens", "routing", "kernels_us"} <= rec.keys():
            raise UserInputError(f"{path}:{i}: a record without shape, tokens, routing and kernels_us; expected "
                                 "`calibrate engine-moe` records")
        if not isinstance(rec["shape"], str) or not isinstance(rec["routing"], str):
            raise UserInputError(f"{path}:{i}: shape and routing are text (got {quote(rec['shape'])}, "
                                 f"{quote(rec['routing'])}); expected `calibrate engine-moe` records")
        records.append((i, rec))
    shapes = sorted({rec["shape"] for _, rec in records})
    if shape is None and len(shapes) > 1:
        raise UserInputError(f"{path}: holds {len(shapes)} shapes; pick one with --shape ({', '.join(shapes)})")
    want = shape if shape is not None else shapes[0]
    if want not in shapes:
        raise UserInputError(f"{path}: no shape {want!r}; it holds {', '.join(shapes)}")
    times: dict[int, float] = {}
    for i, rec in records:
        if rec["shape"] != want or rec["routing"] != routing:
            continue
        where = f"{path}:{i}"
        t = _number(str(rec["tokens"]), int, where, "tokens")
        us = _number(str(rec["kernels_us"]), float, where, "kernels_us")
        if t in times:
            raise UserInputError(f"{where}: {want} at {t} tokens ({routing}) again; give one run's records")
        times[t] = us
    first = next(rec for _, rec in records if rec["shape"] == want)
    measured = {k: first.get(k) for k in ("E", "K", "N", "top_k", "quant", "gpu")}
    return _table(path, times, f"no {routing!r} records of {want}", f"token counts of {want}"), measured

