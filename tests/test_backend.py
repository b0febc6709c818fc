"""Backends (simulator.studies.backend): Ray writes the local backend's files byte for byte; bad backend
options are one-line errors (exit 2).

The Ray tests share one Ray instance started through `RayBackend(num_cpus=2)` (module scope: its
start-up is most of their time) and skip, saying why, where ray is not installed; CI installs the
`ray` extra (.ci/run), so there they run. Local references run with jobs 1: forking a process
pool beside a live Ray session's threads is not something to rely on.
"""

from __future__ import annotations

import json
import operator
import os
import socket
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from simulator.studies.backend import LocalBackend, RayBackend, make_backend
from simulator.cli.search import search_command
from simulator.cli.sweep import sweep_command
from simulator.studies.grid import parse_grid
from simulator.inputs import UserInputError
from simulator.studies.search import run_search, write_search
from simulator.studies.sweep import run_sweep

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "tp1_draft.yaml"
GRID = ["spec.num_steps=1..4", "acceptance.acceptance_rate=0.6,0.8", "placement=shared_tp,tp1_colocated"]
NO_RAY = "ray is not installed (pip install 'specdecsim[ray]'); CI installs it"
RUN_FIELDS = ("elapsed_s", "backend", "jobs")  # sweep.json fields that say how, not what, was run


@pytest.fixture(scope="module")
def ray_backend():
    pytest.importorskip("ray", reason=NO_RAY)
    with RayBackend(num_cpus=2) as backend:
        yield backend


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command("sweep")(sweep_command)
    app.command("search")(search_command)
    return app


def _sweep_files(out: Path) -> dict[str, object]:
    """The bytes of the CSVs and sweep.json without the fields that say how the sweep ran."""
    meta = json.loads((out / "sweep.json").read_text())
    return {"sweep.csv": (out / "sweep.csv").read_bytes(),
            "best_num_steps.csv": (out / "best_num_steps.csv").read_bytes(),
            "sweep.json": {k: v for k, v in meta.items() if k not in RUN_FIELDS}}


# ---- local (first in the file: jobs 2 forks before the Ray instance starts) ---------------------
def test_local_backend_gives_every_chunk_once():
    for jobs in (1, 2):
        with LocalBackend(jobs) as backend, backend.submit(sorted, [[3, 1], [2], [5, 4]]) as done:
            assert sorted(done) == [(0, [1, 3]), (1, [2]), (2, [4, 5])]


# ---- Ray gives the local results ------------------------------------------------------------------
def test_ray_closed_form_sweep_writes_the_local_files(ray_backend, tmp_path):
    local = run_sweep(SCENARIO, GRID, out_dir=tmp_path / "local", des_sample=2, progress=False)
    ray = run_sweep(SCENARIO, GRID, out_dir=tmp_path / "ray", des_sample=2, backend=ray_backend)
    assert (local.backend, ray.backend, ray.jobs) == ("local", "ray", 2)
    assert _sweep_files(tmp_path / "ray") == _sweep_files(tmp_path / "local")
    assert ray.des_check["num_points"] == 2
    assert json.loads((tmp_path / "ray" / "sweep.json").read_text())["backend"] == "ray"


def test_ray_des_sweep_writes_the_local_csv(ray_backend, tmp_path):
    grid, over = ["spec.num_steps=2,3", "acceptance.acceptance_rate=0.6,0.8"], ["fidelity.num_cycles=200"]
    run_sweep(SCENARIO, grid, solver="des", out_dir=tmp_path / "local", overrides=over, progress=False)
    run_sweep(SCENARIO, grid, solver="des", out_dir=tmp_path / "ray", overrides=over, backend=ray_backend)
    csv = (tmp_path / "ray" / "sweep.csv").read_bytes()
    assert csv == (tmp_path / "local" / "sweep.csv").read_bytes()
    assert csv.count(b",des,") == 4


def test_ray_search_writes_the_local_csv(ray_backend, tmp_path):
    space = ["tp_size=4,8", "placement=shared_tp,tp1_colocated", "spec.num_steps=1..4"]
    for name, backend in (("local", None), ("ray", ray_backend)):
        res = run_search(SCENARIO, "tok_per_s_per_user", space, progress=name == "ray", backend=backend)
        write_search(res, tmp_path / name, SCENARIO, None, {}, top=5)
    csv = (tmp_path / "ray" / "search.csv").read_bytes()
    assert csv == (tmp_path / "local" / "search.csv").read_bytes()
    assert len(csv.splitlines()) == 1 + 16


def test_sweep_command_on_a_ray_address_writes_the_local_csv(ray_backend, tmp_path):
    """The whole command in a new process, joining the module's Ray instance by its address."""
    import ray
    address = ray.get_runtime_context().gcs_address
    args = ["sweep", str(SCENARIO), *(a for g in GRID[:2] for a in ("--grid", g)), "--des-sample", "0"]
    r = CliRunner().invoke(_app(), [*args, "--out", str(tmp_path / "local")])
    assert r.exit_code == 0, r.output
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-m", "simulator.cli", *args, "--out", str(tmp_path / "ray"),
                        "--backend", "ray", "--address", address], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert "ray on 2 CPU(s)" in " ".join(p.stdout.split())
    assert (tmp_path / "ray" / "sweep.csv").read_bytes() == (tmp_path / "local" / "sweep.csv").read_bytes()


def test_ray_backend_runs_chunks_in_ray_workers(ray_backend):
    with ray_backend.submit(operator.call, [os.getpid] * 4) as done:
        pids = {pid for _, pid in done}
    assert pids and os.getpid() not in pids


def test_ray_task_raising_bad_input_gives_that_error_without_a_traceback(ray_backend):
    with ray_backend.submit(partial(parse_grid), ["spec.num_steps=1..2", "spec.num_steps=3..1"]) as done:
        with pytest.raises(UserInputError, match="empty range") as e:
            list(done)
    assert "Traceback" not in str(e.value)


# ---- bad backend options --------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _one_line_error(r) -> str:
    assert r.exit_code == 2, r.output
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), r.output
    return lines[0]


@pytest.mark.parametrize("command", ["sweep", "search"])
@pytest.mark.parametrize("args, words", [
    (["--backend", "dask"], "--backend 'dask': expected one of local, ray"),
    (["--address", "127.0.0.1:6379"], "--address: only with --backend ray"),
    (["--jobs", "0"], "--jobs 0: expected 1.."),
])
def test_bad_backend_option_is_a_one_line_error(tmp_path, command, args, words):
    extra = ["--grid", "spec.num_steps=1..2"] if command == "sweep" else []
    r = CliRunner().invoke(_app(), [command, str(SCENARIO), *extra, "--out", str(tmp_path / "o"), *args])
    assert words in _one_line_error(r)
    assert not (tmp_path / "o" / f"{command}.csv").exists()


@pytest.mark.parametrize("command", ["sweep", "search"])
def test_ray_backend_without_ray_installed_is_a_one_line_error(tmp_path, monkeypatch, command):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    extra = ["--grid", "spec.num_steps=1..2"] if command == "sweep" else []
    r = CliRunner().invoke(_app(), [command, str(SCENARIO), *extra, "--out", str(tmp_path / "o"), "--backend", "ray"])
    assert "ray is not installed here; pip install 'specdecsim[ray]'" in _one_line_error(r)


@pytest.mark.parametrize("address, words", [
    ("127.0.0.1:{port}", "cannot reach 127.0.0.1:{port} (Connection refused)"),
    ("ray://127.0.0.1:{port}", "cannot reach 127.0.0.1:{port}"),
    ("localhost", "expected host:port, ray://host:port or auto"),
    ("http://localhost:6379", "expected host:port, ray://host:port or auto"),
])
def test_ray_address_that_cannot_be_reached_is_a_one_line_error(tmp_path, address, words):
    pytest.importorskip("ray", reason=NO_RAY)
    port = _free_port()
    r = CliRunner().invoke(_app(), ["sweep", str(SCENARIO), "--grid", "spec.num_steps=1..2", "--out",
                                    str(tmp_path / "o"), "--backend", "ray", "--address", address.format(port=port)])
    assert words.format(port=port) in _one_line_error(r)
    assert not (tmp_path / "o" / "sweep.csv").exists()


def test_jobs_with_a_ray_address_is_an_error():
    pytest.importorskip("ray", reason=NO_RAY)
    with pytest.raises(UserInputError, match="--jobs: sets the CPUs of a Ray instance started here"):
        make_backend("ray", jobs=2, address="127.0.0.1:6379")


@pytest.mark.parametrize("env, args, words", [
    ("127.0.0.1:{port}", [], "RAY_ADDRESS '127.0.0.1:{port}': cannot reach 127.0.0.1:{port} (Connection refused)"),
    ("garbage", [], "RAY_ADDRESS 'garbage': expected host:port, ray://host:port or auto"),
    ("127.0.0.1:{port}", ["--jobs", "2"], "with RAY_ADDRESS the cluster's CPUs are used"),
])
def test_ray_address_from_the_environment_is_checked_as_address_is(tmp_path, monkeypatch, env, args, words):
    """RAY_ADDRESS naming no Ray (a stale cluster) is one error line; Ray itself retried such an
    address without end, deaf to Ctrl-C and SIGTERM. --backend local ignores it."""
    pytest.importorskip("ray", reason=NO_RAY)
    port = _free_port()
    monkeypatch.setenv("RAY_ADDRESS", env.format(port=port))
    r = CliRunner().invoke(_app(), ["sweep", str(SCENARIO), "--grid", "spec.num_steps=1..2", "--out",
                                    str(tmp_path / "o"), "--backend", "ray", *args])
    assert words.format(port=port) in _one_line_error(r)
    assert not (tmp_path / "o" / "sweep.csv").exists()
    local = CliRunner().invoke(_app(), ["sweep", str(SCENARIO), "--grid", "spec.num_steps=1..2", "--des-sample", "0",
                                        "--out", str(tmp_path / "o")])
    assert local.exit_code == 0, local.output


@pytest.mark.parametrize("reply", [b"HTTP/1.0 400 Bad Request\r\n\r\n", b""])
def test_an_address_that_answers_but_not_as_ray_is_a_one_line_error(tmp_path, reply):
    """A port that accepts connections but is not Ray's (a web server; one that says nothing): Ray
    retried it without end, deaf to Ctrl-C and SIGTERM; now the HTTP/2 preface gets no SETTINGS
    frame back and the command stops with one line."""
    pytest.importorskip("ray", reason=NO_RAY)
    import threading
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(64)
            if reply:
                conn.sendall(reply)
            else:
                threading.Event().wait(0.5)  # silent, then closes
    threading.Thread(target=serve, daemon=True).start()
    try:
        r = CliRunner().invoke(_app(), ["sweep", str(SCENARIO), "--grid", "spec.num_steps=1..2", "--out",
                                        str(tmp_path / "o"), "--backend", "ray", "--address", f"127.0.0.1:{port}"])
    finally:
        server.close()
    assert f"127.0.0.1:{port} answers, but not as Ray does" in _one_line_error(r)
    assert not (tmp_path / "o").exists()
