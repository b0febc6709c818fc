"""A bench output cut to its header (issue 47): `calibrate from-runs` ends in one line, exit 2, and
writes nothing, for every text bench fixture cut to the lines before its first figure (a JSON-lines
output has no header: each line is a whole record)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator.cli import build_app

DATA = Path(__file__).parent / "data" / "engine_runs"
SCENARIO = Path(__file__).parent / "data" / "engine_fit" / "sglang_llama8b_h100.yaml"
BENCH = ["sglang_bench_serving.txt", "sglang_bench_one_batch.txt", "sglang_bench_one_batch_server.txt",
         "vllm_bench_serve.txt", "vllm_latency.txt", "trtllm_bench.txt"]


def header(text: str) -> str:
    """The lines before the first that holds a digit (a bench's banner, its warm-up line)."""
    lines = text.splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if any(c.isdigit() for c in line.strip("=- \n")))
    return "".join(lines[:max(first, 1)])


@pytest.mark.parametrize("name", BENCH)
def test_a_bench_output_with_only_its_header_is_one_line(tmp_path, name):
    head = header((DATA / name).read_text())
    f = tmp_path / name
    f.write_text(head)
    out = tmp_path / "fitted.yaml"
    r = CliRunner().invoke(build_app(), ["calibrate", "from-runs", str(SCENARIO), str(f), "--out", str(out)],
                           env={"COLUMNS": "200"})
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert not out.exists()
