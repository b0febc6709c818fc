"""The wheel carries the shipped data: built from this checkout and installed outside it, it runs the
README's main job by the shipped scenario's name, and the catalog, from an empty folder.

`.ci/run` does the same in a fresh venv without torch (and replays `specdecsim cases`); here the wheel
is unpacked with `pip install --no-deps --target` and run with this interpreter's dependencies.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_WHEEL_BYTES = 2 * 2**20  # the data a wheel carries is about 0.9 MB; the raw points and records stay out


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from this checkout (`pip wheel . --no-deps`; the installed setuptools when it is
    new enough, else an isolated build)."""
    out = tmp_path_factory.mktemp("wheel")
    isolation = [] if int(version("setuptools").split(".")[0]) >= 77 else ["--use-pep517"]
    no_isolation = ["--no-build-isolation"] if not isolation else []
    # pytest-xdist may build this module's fixture in two workers at once: one build at a time in ROOT/build
    key = hashlib.sha256(str(ROOT).encode()).hexdigest()[:16]
    lock_path = Path(tempfile.gettempdir()) / f"specdecsim-wheel-{key}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        shutil.rmtree(ROOT / "build", ignore_errors=True)  # setuptools' staging folder: no stale files in the wheel
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *no_isolation, "-w", str(out),
                        str(ROOT)], check=True, capture_output=True, timeout=300)
        shutil.rmtree(ROOT / "build", ignore_errors=True)
    return next(out.glob("specdecsim-*.whl"))


def test_the_wheel_carries_the_shipped_data_and_leaves_the_raw_records_out(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in ("specdecsim_data/__init__.py",
                 "specdecsim_data/engine_profiles/vllm-0.26.0-h200-llama-3.1-8b-eagle3.json",
                 "specdecsim_data/profiles/h200.json", "specdecsim_data/hardware/gpus/h200-sxm.yaml",
                 "specdecsim_data/hardware/boxes/hgx-h200-8gpu.yaml", "specdecsim_data/cases/public.yaml",
                 "specdecsim_data/cases/comm_public.yaml", "specdecsim_data/fits/collectives.json",
                 "specdecsim_data/models/engine/qwen3-30b-a3b.config.json",
                 "specdecsim_data/scenarios/vllm_llama8b_h200.yaml", "calibration/engines/campaigns/vllm-e2e.yaml"):
        assert name in names, name
    shipped_scenarios = {n.rsplit("/", 1)[1] for n in names if n.startswith("specdecsim_data/scenarios/")}
    assert shipped_scenarios == {p.name for p in (ROOT / "scenarios").glob("*.yaml")}
    left_out = [n for n in names if n.split("/")[:2] in (["specdecsim_data", d] for d in
                                                          ("engine_runs", "live", "points", "traces"))]
    assert left_out == []
    assert wheel.stat().st_size < MAX_WHEEL_BYTES


def test_the_wheel_installed_outside_the_checkout_runs_the_main_job_by_name(wheel, tmp_path):
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "SPECDECSIM_DATA"} | {"PYTHONPATH": str(site), "COLUMNS": "80"}

    def specdecsim(*args: str) -> str:
        r = subprocess.run([sys.executable, "-m", "simulator.cli", *args], cwd=work, env=env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return r.stdout

    out = specdecsim("simulate", "vllm_llama8b_h200")
    readme = (ROOT / "README.md").read_text()
    tok_line = next(line for line in out.splitlines() if "tokens/s (system)" in line)
    assert tok_line in readme  # 2,900.9 tok/s, as the README shows
    assert str(site / "specdecsim_data" / "profiles" / "h200.json") in "".join(out.split())  # the wheel's data
    assert "h200-sxm" in specdecsim("hardware")
