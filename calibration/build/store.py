"""Append-only store of measured points, so an interrupted calibration keeps what it measured.

One JSON object per line: {"key": ..., "record": {...}}. Each `add` writes one line and fsyncs,
so a kill loses at most the point being measured. Re-opening the file resumes: `done(key)`
tells the benchmark to skip points already there. A torn last line (killed mid-write: no
newline at its end) is ignored on reading and overwritten on the next add; any other line that
is not a point is an error naming the file and line, so a file that is not a points file is
never appended to or cut.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


class PointStore:
    """Measured points keyed by a string (e.g. 'coll:allreduce:2:graph:1024').

    Args:
        path: JSONL file; created (with parent folders) if missing.
    """

    def __init__(self, path: Path, writable: bool = True):
        self.path = Path(path)
        self._records: dict[str, dict] = {}
        good_bytes = 0
        if self.path.exists():
            good_bytes = self._read(self._records)
            if writable and good_bytes != self.path.stat().st_size:
                with open(self.path, "r+b") as f:  # drop the torn last line
                    f.truncate(good_bytes)
        elif writable:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def _read(self, records: dict) -> int:
        """Fill `records` from the file; returns the bytes of its whole lines.

        Raises:
            ValueError: a complete line that is not a {key, record} object (file and line named).
        """
        good_bytes = 0
        with open(self.path, "rb") as f:
            for line_no, raw in enumerate(f, 1):
                if not raw.endswith(b"\n"):
                    break  # torn last line
                try:
                    item = json.loads(raw)
                    key, record = item["key"], item["record"]
                    if not isinstance(key, str) or not isinstance(record, dict):
                        raise TypeError
                except (ValueError, KeyError, TypeError, RecursionError):
                    raise ValueError(f"{self.path}:{line_no}: not a points-file line ({{\"key\": ..., "
                                     f"\"record\": {{...}}}}); is this a points file?") from None
                records[key] = record
                good_bytes += len(raw)
        return good_bytes

    @staticmethod
    def check(path: Path) -> None:
        """Raise ValueError (naming the file and line) unless `path` is missing or a points file."""
        path = Path(path)
        if path.exists():
            if not path.is_file():
                raise ValueError(f"{path}: not a regular file")
            PointStore(path, writable=False)

    def done(self, key: str) -> bool:
        return key in self._records

    def add(self, key: str, record: dict) -> None:
        """Append one point durably. A key already present is replaced in memory and on reload."""
        line = json.dumps({"key": key, "record": record}, separators=(",", ":")) + "\n"
        with open(self.path, "a") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        self._records[key] = record

    def records(self) -> dict[str, dict]:
        """All points, key -> record, in insertion order."""
        return dict(self._records)

    def __len__(self) -> int:
        return len(self._records)
