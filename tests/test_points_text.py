"""A points file's text (calibration.engines.points_text): a file resumed after a killed writer reads past the
torn line; a broken line the writer did not begin is still refused."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from calibration.engines.worker import append_line
from simulator.inputs import UserInputError

SHIPPED_POINTS = Path(__file__).resolve().parents[1] / "data" / "engine_runs" / "h200_vllm_0.26.0" / "points.jsonl.gz"


def test_a_resumed_points_file_reads_past_its_torn_line(tmp_path):
    """A process killed mid-line, then resumed (worker.append_line starts a line of its own): the file reads, the
    torn line said and skipped; a broken line the writer did not begin is still refused."""
    from calibration.engines.points import read_points_files
    lines = [json.loads(x) for x in gzip.decompress(SHIPPED_POINTS.read_bytes()).decode().splitlines()[:4]]
    out = tmp_path / "resumed.jsonl"
    for rec in lines[:2]:
        append_line(out, {k: v for k, v in rec.items() if k != "schema"})
    with open(out, "a") as f:
        f.write(json.dumps(lines[2], separators=(",", ":"))[:60])  # killed mid-write
    for rec in lines[2:]:
        append_line(out, {k: v for k, v in rec.items() if k != "schema"})
    notes: list[str] = []
    assert len(read_points_files([out], notes)) == 4 and "resumed.jsonl:3: a torn line" in notes[0]
    bad = tmp_path / "bad.jsonl"
    text = out.read_text().splitlines()
    text[2] = '{"kind": "point", "schema": "engi'  # cut, but not as the writer begins a line
    bad.write_text("\n".join(text) + "\n")
    with pytest.raises(UserInputError, match=r"bad\.jsonl:3: not a JSON line"):
        read_points_files([bad])
