"""Files the tools write: atomic text, JSON and CSV outputs.

Every output is written to a temporary file in the target's folder and moved over the target
with `os.replace`, so a reader (or an interrupted run) never sees half a file.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` via a temp file in the same folder and os.replace.

    Raises:
        IsADirectoryError: `path` is a folder.
        OSError: the folder cannot be made or written.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(21, "is a folder, expected a file path", str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a plain open() would respect the umask
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data: Any) -> None:
    """JSON (indent 1, newline at the end) written atomically."""
    write_text_atomic(Path(path), json.dumps(data, indent=1) + "\n")


def _cell(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, (list, dict)):
        return json.dumps(v)
    return v


def write_csv_atomic(path: Path, rows: list[dict], columns: list[str]) -> None:
    """CSV (csv module; lists and dicts as JSON, None as empty) written atomically."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({c: _cell(r.get(c)) for c in columns})
    write_text_atomic(Path(path), buf.getvalue())
