"""A points file's text: read plain or gzip-compressed within a bound, and a line cut short by a killed writer told
from a wrong one (calibration.engines.points validates the lines; calibration.engines.worker writes them)."""

from __future__ import annotations

import json
from pathlib import Path

POINTS_SCHEMA = "engine_points/1"

MAX_POINTS_BYTES = 1 << 30  # a points file of a whole campaign is a few MB (raw per-step times included)


def read_raw_text(path: Path) -> str:
    """A points file's text, plain or gzip-compressed (`.gz`, as the shipped ones are), read in
    chunks up to 1 GiB decompressed.

    Raises:
        UserInputError: not a regular file, not gzip where it says so, or over the bound.
    """
    import gzip

    from simulator.inputs import UserInputError

    path = Path(path)
    if path.exists() and not path.is_file():
        raise UserInputError(f"{path}: {'a folder' if path.is_dir() else 'not a regular file'}, not a points file")
    chunks, total = [], 0
    try:
        with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as f:
            while chunk := f.read(1 << 24):
                total += len(chunk)
                if total > MAX_POINTS_BYTES:
                    raise UserInputError(f"{path}: a points file holds at most {MAX_POINTS_BYTES >> 20} MiB")
                chunks.append(chunk)
    except (OSError, EOFError) as e:
        raise UserInputError(f"{path}: not a readable points file ({e})") from None
    raw = b"".join(chunks)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise UserInputError(f"{path}:{line}: not UTF-8 text (byte 0x{raw[e.start]:02x}); a points file is UTF-8 "
                             "JSON lines") from None


def is_cut(line: str, last: bool) -> bool:
    """A JSON line cut short by a killed writer: the file's last, or one begun as worker.append_line begins each."""
    head, start = f'{{"schema":"{POINTS_SCHEMA}"', line.replace(" ", "")[:30]
    try:
        json.loads(line)
    except json.JSONDecodeError:
        return last or start.startswith(head) or head.startswith(start)
    except (ValueError, RecursionError):
        return False
    return False
