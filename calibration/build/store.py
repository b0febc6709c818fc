"""Append-only store of measured points, so an interrupted calibration keeps what it measured.

One JSON object per line: {"key": ..., "record": {...}}. Each `add` writes one line and fsyncs,
so a kill loses at most the point being measured. Re-opening the file resumes: `done(key)`
tells the benchmark to skip points already there. A torn last line (killed mid-write) is
ignored on reading and overwritten on the next add.
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

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._records: dict[str, dict] = {}
        good_bytes = 0
        if self.path.exists():
            with open(self.path, "rb") as f:
                for raw in f:
                    try:
                        item = json.loads(raw)
                        key, record = item["key"], item["record"]
                    except (ValueError, KeyError, TypeError):
                        break  # torn or foreign line: keep what came before it
                    if not raw.endswith(b"\n"):
                        break
                    self._records[key] = record
                    good_bytes += len(raw)
            if good_bytes != self.path.stat().st_size:
                with open(self.path, "r+b") as f:
                    f.truncate(good_bytes)

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
