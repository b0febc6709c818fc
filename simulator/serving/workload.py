"""The requests of a serving run: arrival times and lengths, drawn or read from a trace.

- poisson: exponential gaps at `rate_per_s`; closed_loop: arrivals are made by the engine (a
  client sends its next request when its last one finishes); trace: rows of a file.
- lengths: fixed, uniform (integers, both ends included), lognormal (mean given; the normal's mu is
  log(mean) - sigma^2 / 2, then clipped and rounded) or drawn with replacement from a file.

Files are read through `simulator.inputs.read_text`; a bad row is one line naming file:line.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simulator.inputs import UserInputError, load_json, quote, read_text
from simulator.serving.config import (MAX_TOKENS, FileLength, FixedLength, LengthDistribution, LognormalLength,
                                      UniformLength)

TRACE_COLUMNS = ("arrival_s", "input_tokens", "output_tokens")
MAX_TRACE_ROWS = 10_000_000


@dataclass(frozen=True)
class TraceRequests:
    """Requests of a trace, sorted by arrival (stable), as columns."""

    arrival_s: np.ndarray  # shape: (num_requests,)
    input_tokens: np.ndarray  # shape: (num_requests,)
    output_tokens: np.ndarray  # shape: (num_requests,)


_CSV_INT = re.compile(r"\s*[0-9]+\s*")  # a token count as a CSV cell: digits (no '1_000', no '5e1')
_CSV_NUMBER = re.compile(r"\s*(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?\s*")  # seconds: a plain decimal


def _tokens(value, where: str, column: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)) or \
            isinstance(value, str) and not _CSV_INT.fullmatch(value):
        raise UserInputError(f"{where}: {column} must be an integer 1..{MAX_TOKENS}, got {quote(value)}")
    try:
        f = float(value)
    except ValueError:
        raise UserInputError(f"{where}: {column} must be an integer 1..{MAX_TOKENS}, got {quote(value)}") from None
    if not math.isfinite(f) or f != int(f) or not 1 <= f <= MAX_TOKENS:
        raise UserInputError(f"{where}: {column} must be an integer 1..{MAX_TOKENS}, got {quote(value)}")
    return int(f)


def _arrival(value, where: str) -> float:
    try:
        f = float("nan") if isinstance(value, bool) or isinstance(value, str) and not _CSV_NUMBER.fullmatch(value) \
            else float(value)
    except (TypeError, ValueError):
        f = float("nan")
    if not math.isfinite(f) or not 0 <= f <= 1e9:
        raise UserInputError(f"{where}: arrival_s must be a number of seconds 0..1e9, got {quote(value)}")
    return f


def _trace_rows(path: Path, text: str):
    """(line number, {column: raw value}) of a CSV (header first) or JSONL trace."""
    if path.suffix.lower() in (".jsonl", ".json", ".ndjson"):
        for i, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            row = load_json(line, f"{path}:{i}")
            if not isinstance(row, dict):
                raise UserInputError(f"{path}:{i}: expected a JSON object with {', '.join(TRACE_COLUMNS)}")
            yield i, row
        return
    reader = csv.DictReader(io.StringIO(text, newline=""))
    missing = [c for c in TRACE_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise UserInputError(f"{path}:1: a trace CSV needs the columns {', '.join(TRACE_COLUMNS)}; missing "
                             f"{', '.join(missing)}")
    try:
        for row in reader:
            if None in row:
                raise UserInputError(f"{path}:{reader.line_num}: more cells than the header has columns")
            yield reader.line_num, row
    except csv.Error as e:
        raise UserInputError(f"{path}:{reader.line_num}: not CSV: {e}") from None


def read_trace(path: Path | str, limit: int | None = None) -> TraceRequests:
    """The requests of a trace file (CSV with a header, or JSONL), the first `limit` by arrival.

    Raises:
        UserInputError: unreadable file, a missing column, or a bad value, as one line `file:line: ...`.
    """
    path = Path(path)
    text = read_text(path, "trace file")
    arr, inp, out = [], [], []
    json_rows = path.suffix.lower() in (".jsonl", ".json", ".ndjson")
    for line, row in _trace_rows(path, text):
        where = f"{path}:{line}"
        for c in TRACE_COLUMNS:
            if row.get(c) is None or row.get(c) == "":
                raise UserInputError(f"{where}: no {c}")
            if json_rows and isinstance(row[c], str):  # JSON has numbers: "100" is text
                raise UserInputError(f"{where}: {c} must be a JSON number, got the string {quote(row[c])}")
        arr.append(_arrival(row["arrival_s"], where))
        inp.append(_tokens(row["input_tokens"], where, "input_tokens"))
        out.append(_tokens(row["output_tokens"], where, "output_tokens"))
        if len(arr) > MAX_TRACE_ROWS:
            raise UserInputError(f"{where}: more than {MAX_TRACE_ROWS:,} requests; a trace holds at most that")
    if not arr:
        raise UserInputError(f"{path}: no requests; a trace has a row per request ({', '.join(TRACE_COLUMNS)})")
    order = np.argsort(np.asarray(arr), kind="stable")[:limit]
    return TraceRequests(np.asarray(arr)[order], np.asarray(inp, dtype=np.int64)[order],
                         np.asarray(out, dtype=np.int64)[order])


def read_lengths(path: Path | str) -> np.ndarray:
    """Lengths of a length file: one integer 1..2097152 a line (blank lines and # comments skipped).

    Raises:
        UserInputError: unreadable, empty, or a bad line, as `file:line: ...`.
    """
    path = Path(path)
    out = []
    for i, line in enumerate(read_text(path, "length file").splitlines(), start=1):
        s = line.split("#", 1)[0].strip()
        if s:
            out.append(_tokens(s, f"{path}:{i}", "length"))
    if not out:
        raise UserInputError(f"{path}: no lengths; write one integer a line")
    return np.asarray(out, dtype=np.int64)


class LengthSampler:
    """Draws request lengths from a `LengthDistribution` (files read once, here)."""

    def __init__(self, dist: LengthDistribution):
        self.dist = dist
        self.values = read_lengths(dist.path) if isinstance(dist, FileLength) else None

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """(size,) int64 lengths."""
        d = self.dist
        if isinstance(d, FixedLength):
            return np.full(size, d.tokens, dtype=np.int64)
        if isinstance(d, UniformLength):
            return rng.integers(d.min_tokens, d.max_tokens + 1, size=size)
        if isinstance(d, LognormalLength):
            mu = math.log(d.mean_tokens) - d.sigma ** 2 / 2
            x = np.rint(rng.lognormal(mu, d.sigma, size=size))
            return np.clip(x, d.min_tokens, d.max_tokens).astype(np.int64)
        return rng.choice(self.values, size=size)

    @property
    def max_tokens(self) -> int:
        d = self.dist
        if isinstance(d, FixedLength):
            return d.tokens
        if isinstance(d, (UniformLength, LognormalLength)):
            return d.max_tokens
        return int(self.values.max())
