"""A sweep's estimate covers the disk it writes, and a sweep that would not fit is refused."""

import shutil
from collections import namedtuple
from pathlib import Path

from typer.testing import CliRunner

from simulator.cli import app
from simulator.studies.sweep import run_sweep

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "tp1_draft.yaml"
GRID = ["spec.num_steps=1..4", "acceptance.acceptance_rate=0.5,0.7,0.9", "workload.batch_size=1,4"]


def test_the_disk_estimate_is_near_what_the_sweep_writes(tmp_path):
    seen = []
    run_sweep(SCENARIO, GRID, out_dir=tmp_path / "s", des_sample=0, progress=False,
              confirm=lambda s, m, d: seen.append(d))
    written = sum(f.stat().st_size for f in (tmp_path / "s").iterdir())
    assert seen and 0.8 * written <= seen[0] <= 2.0 * written + 128 * 1024


def test_a_sweep_larger_than_the_free_disk_is_refused(tmp_path, monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**9, 10**9 - 1000, 1000))
    r = CliRunner().invoke(app, ["sweep", str(SCENARIO), *sum((["--grid", g] for g in GRID), []),
                                 "--out", str(tmp_path / "s")])
    assert r.exit_code != 0
    assert "writes" in r.output and "free at" in r.output and "--force" in r.output
    assert not (tmp_path / "s" / "sweep.csv").exists()
