"""Outputs under bad paths and damaged files (a new user's break test, 2026-12-04): each refused in one
line naming what the user gave, before anything is printed or lost."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from simulator.cli import app

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = str(ROOT / "scenarios" / "llama8b_h200.yaml")


def _cli(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_hardware_prints_no_table_before_an_output_it_cannot_write(tmp_path):
    """`hardware --json` where no file can be made (Linux's /proc): one error naming the path given, and
    no table printed before it (the JSON is written first)."""
    import subprocess
    import sys
    target = Path("/proc") / "specdecsim-test.json"  # passes the checks made beforehand, cannot be created
    r = subprocess.run([sys.executable, "-m", "simulator.cli", "hardware", "--json", str(target)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    out = " ".join((r.stdout + r.stderr).split())
    assert r.returncode == 2 and "GPUs (dense" not in out and f"error: {target}: " in out, out
    assert ".tmp" not in out and "Traceback" not in out


def test_a_temp_file_that_cannot_be_made_names_the_output(tmp_path, monkeypatch):
    """mkstemp failing (a folder that refuses new files) is reported under the output's own name."""
    import tempfile

    import pytest

    from simulator.files import write_json_atomic

    def refuse(*a, **k):
        raise PermissionError(13, "Permission denied", str(tmp_path / ".x.json.abc.tmp"))
    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(OSError) as e:
        write_json_atomic(tmp_path / "x.json", {"a": 1})
    assert e.value.filename == str(tmp_path / "x.json") and e.value.strerror == "Permission denied"


def test_plot_refuses_a_sweep_csv_cut_short(tmp_path):
    """A sweep.csv cut inside a quoted cell still parses; plot holds its rows to sweep.json's point count."""
    out = tmp_path / "sw"
    assert _cli("sweep", SCENARIO, "--out", out, "--grid", "spec.num_steps=1..4").exit_code == 0
    data = (out / "sweep.csv").read_bytes()
    (out / "sweep.csv").write_bytes(data[: len(data) // 2])
    r = _cli("plot", out, "--out", tmp_path / "p", "--no-png")
    assert r.exit_code == 2 and "where sweep.json says the sweep has 4 points" in " ".join(r.output.split()), r.output


def test_a_sweep_written_over_an_earlier_one_drops_its_dashboard(tmp_path):
    """The earlier sweep's plots/index.html answered its grid: gone when a sweep without --html replaces
    it, drawn anew with --html."""
    out = tmp_path / "sw"
    assert _cli("sweep", SCENARIO, "--out", out, "--html", "--grid", "spec.num_steps=1..3").exit_code == 0
    assert (out / "plots" / "index.html").is_file()
    assert _cli("sweep", SCENARIO, "--out", out, "--grid", "seed=1,2").exit_code == 0
    assert not (out / "plots" / "index.html").exists()
    assert _cli("sweep", SCENARIO, "--out", out, "--html", "--grid", "spec.num_steps=1..2").exit_code == 0
    assert (out / "plots" / "index.html").is_file()


def test_a_published_figure_of_next_to_nothing_is_refused(tmp_path):
    """A case's tok/s of 1e-300 (an error of 1e302 %) is refused where the file is read."""
    text = (ROOT / "data" / "cases" / "public.yaml").read_text()
    text = text.replace("baseline: {tok_s: 158.34, role: fit}", "baseline: {tok_s: 1e-300, role: fit}")
    text = text.replace("config_path: ../models/", f"config_path: {ROOT / 'data' / 'models'}/")
    f = tmp_path / "pub.yaml"
    f.write_text(text)
    r = _cli("cases", f)
    assert r.exit_code == 2 and "cases.0.baseline.tok_s: Input should be greater than or equal to 0.001" in \
        " ".join(r.output.split()), r.output
