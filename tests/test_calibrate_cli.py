"""calibration/cli/calibrate.py (`specdecsim calibrate ...`) through typer's CliRunner."""

from pathlib import Path

import os

import pytest
from typer.testing import CliRunner

from calibration.cli.calibrate import calibrate_app
from calibration.cli.common import TORCH_MISSING
from simulator.profile import load_profile, save_profile
from tests.conftest import flat_profile

DATA = Path(__file__).parent / "data" / "nccl_tests"
runner = CliRunner()


def test_import_nccl_tests_writes_a_profile_that_validates(tmp_path):
    save_profile(flat_profile(), tmp_path / "in.json")
    result = runner.invoke(calibrate_app, ["import-nccl-tests", str(DATA / "all_reduce_perf_8gpu_pcie.log"),
                                           str(DATA / "all_gather_perf_4gpu_graph.log"),
                                           "--profile", str(tmp_path / "in.json"), "--out", str(tmp_path / "o.json")])
    assert result.exit_code == 0, result.output
    prof = load_profile(tmp_path / "o.json")
    assert {(t.op, t.world_size, t.mode) for t in prof.collectives} == {("allreduce", 8, "eager"),
                                                                        ("all_gather", 4, "graph")}
    assert next(t for t in prof.collectives if t.op == "allreduce").latency_us[1] == 56.42


def test_in_place_flag_reaches_the_importer(tmp_path):
    save_profile(flat_profile(), tmp_path / "in.json")
    result = runner.invoke(calibrate_app, ["import-nccl-tests", str(DATA / "all_reduce_perf_8gpu_pcie.log"),
                                           "--in-place", "--profile", str(tmp_path / "in.json"),
                                           "--out", str(tmp_path / "o.json")])
    assert result.exit_code == 0, result.output
    assert load_profile(tmp_path / "o.json").collectives[0].latency_us[1] == 55.96


def _one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in result.output
    return lines[0]


def test_a_missing_log_is_one_line_and_exit_code_2(tmp_path):
    save_profile(flat_profile(), tmp_path / "in.json")
    result = runner.invoke(calibrate_app, ["import-nccl-tests", str(tmp_path / "nope.log"),
                                           "--profile", str(tmp_path / "in.json"), "--out", str(tmp_path / "o.json")])
    assert "nccl-tests log not found" in _one_line_error(result) and "nope.log" in result.stderr
    assert not (tmp_path / "o.json").exists()


def test_a_garbled_log_is_one_line_naming_the_line(tmp_path):
    save_profile(flat_profile(), tmp_path / "in.json")
    bad = tmp_path / "all_reduce_bad.log"
    bad.write_text((DATA / "all_reduce_perf_8gpu_pcie.log").read_text().replace("   56.42 ", "   5x.42 "))
    result = runner.invoke(calibrate_app, ["import-nccl-tests", str(bad), "--profile", str(tmp_path / "in.json"),
                                           "--out", str(tmp_path / "o.json")])
    line = _one_line_error(result)
    assert f"{bad}:21:" in line  # the 14336-byte row is line 21 of the sample log and "5x.42" in line


def test_a_missing_profile_is_one_line(tmp_path):
    result = runner.invoke(calibrate_app, ["import-nccl-tests", str(DATA / "broadcast_perf_8gpu.log"),
                                           "--profile", str(tmp_path / "none.json"), "--out", str(tmp_path / "o.json")])
    msg = _one_line_error(result)
    assert "none.json' not found" in msg and "shipped profiles" in msg


def test_a_shipped_profile_name_is_accepted(tmp_path):
    out = tmp_path / "o.json"
    result = runner.invoke(calibrate_app, ["import-nccl-tests", str(DATA / "broadcast_perf_8gpu.log"),
                                           "--profile", "h200", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert out.is_file()


def test_calibrate_without_torch_says_how_to_install(monkeypatch, tmp_path):
    import builtins
    real_import = builtins.__import__

    def no_torch(name, *args, **kwargs):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("No module named 'torch'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    result = runner.invoke(calibrate_app, ["--quick", "--out", str(tmp_path / "p.json")])
    assert TORCH_MISSING in _one_line_error(result)


def test_calibrate_help_lists_the_subcommand():
    result = runner.invoke(calibrate_app, ["--help"])
    assert result.exit_code == 0 and "import-nccl-tests" in result.output and "--quick" in result.output


def test_calibrate_passes_its_options_to_run_calibration(monkeypatch, tmp_path):
    pytest.importorskip("torch")
    import calibration.calibrate
    calls = []

    def fake_run(out, points, **kwargs):
        calls.append((out, points, kwargs))
        return flat_profile()

    monkeypatch.setattr(calibration.calibrate, "run_calibration", fake_run)
    result = runner.invoke(calibrate_app, ["--quick", "--no-resume", "--out", str(tmp_path / "p.json"),
                                           "--points", str(tmp_path / "p.jsonl"), "--tp", "1", "--tp", "4"])
    assert result.exit_code == 0, result.output
    (out, points, kwargs), = calls
    assert (out, points) == (tmp_path / "p.json", tmp_path / "p.jsonl")
    assert kwargs["quick"] is True and kwargs["resume"] is False and kwargs["tp_sizes"] == [1, 4]

    calls.clear()
    result = runner.invoke(calibrate_app, ["--quick", "--out", str(tmp_path / "mine.json")])
    assert result.exit_code == 0, result.output
    assert calls[0][1] == tmp_path / "mine.points.jsonl"  # never a shipped machine's points file

    def broken_run(out, points, **kwargs):
        raise ValueError("op attention: 3 grid point(s) missing\nre-run")

    monkeypatch.setattr(calibration.calibrate, "run_calibration", broken_run)
    result = runner.invoke(calibrate_app, ["--out", str(tmp_path / "p.json")])
    assert "grid point(s) missing re-run" in _one_line_error(result)


WORKFLOWS = {"calibrate": ("import-nccl-tests", "merge", "collectives", "tp-forwards", "loop-overhead", "loop-reps",
                           "moe", "session"),
             "diagnose": ("drift", "sync", "tp-skew", "verify", "host-cores")}


def test_every_workflow_is_a_specdecsim_subcommand():
    from simulator.cli import app
    for group, commands in WORKFLOWS.items():
        result = runner.invoke(app, [group, "--help"])
        assert result.exit_code == 0, result.output
        for command in commands:
            assert command in result.output, (group, command)
            assert runner.invoke(app, [group, command, "--help"]).exit_code == 0, (group, command)
    result = runner.invoke(app, ["live", "--help"])
    assert result.exit_code == 0 and all(o in result.output for o in ("--tp", "--noise", "--quick", "--cycles"))


def test_python_dash_m_simulator_cli_is_the_same_command():
    """calibration/h200_run.sh calls `python3 -m simulator.cli ...` (no console script there)."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "simulator.cli", "--help"], capture_output=True, text=True,
                         cwd=Path(__file__).parent.parent, check=True).stdout
    assert all(c in out for c in ("calibrate", "live", "diagnose", "validate"))


def test_calibration_has_no_script_entry_points():
    """One CLI: no module of calibration/ parses its own argv or runs as `python -m calibration.x`."""
    root = Path(__file__).parent.parent / "calibration"
    for path in root.rglob("*.py"):
        text = path.read_text()
        assert "import argparse" not in text and 'if __name__ == "__main__"' not in text, path
        assert "def main(" not in text, path


@pytest.mark.parametrize("argv, says", [
    (["calibrate", "collectives", "--points", "p.jsonl", "--world-size", "1", "--device", "cpu"], "--world-size"),
    (["calibrate", "collectives", "--points", "p.jsonl", "--device", "tpu"], "--device must be one of cuda, cpu"),
    # eager_stream on cpu: a size gloo cannot hold, or one that
    # is not whole float32 elements, was an exit-1 'sizes must be ...' (or an allocation of 100 TB)
    (["calibrate", "collectives", "--points", "p.jsonl", "--device", "cpu", "--mode", "eager_stream", "--op",
      "allreduce", "--size-bytes", "3", "--world-size", "2"], "--size-bytes 3: expected a multiple of 4 bytes"),
    (["calibrate", "collectives", "--points", "p.jsonl", "--device", "cpu", "--mode", "eager_stream",
      "--size-bytes", "99999999999996"], "--size-bytes 99999999999996: expected a multiple of 4 bytes (float32 "
                                         "elements on --device cpu) in 4..268,435,456"),
    (["calibrate", "collectives", "--points", "p.jsonl", "--device", "cpu", "--size-bytes", "0"], "in 4.."),
    (["calibrate", "collectives", "--points", "p.jsonl", "--device", "cpu", "--world-size", "100000"],
     "--world-size 100000: expected 2.."),
    (["calibrate", "loop-overhead", "--points", "p.jsonl", "--passes", "0"], "--passes must be >= 1, got 0"),
    (["calibrate", "loop-overhead", "--points", "p.jsonl", "--device", "nosuch"], "--device 'nosuch'"),
    (["calibrate", "merge", "--points", "p.jsonl", "--out", "o.json", "--gpu-count", "0"], "--gpu-count must be >= 1"),
    (["calibrate", "merge", "--points", "none.jsonl", "--out", "o.json"], "no such points file"),
    (["calibrate", "--tp", "0", "--out", "o.json"], "--tp sizes must be >= 1"),
    (["calibrate", "--device", "nosuch", "--out", "o.json"], "--device 'nosuch'"),
    (["diagnose", "sync", "--passes", "0"], "--passes must be >= 1, got 0"),
    (["diagnose", "tp-skew", "--tp", "1", "--out", "s.json", "--device", "cpu"], "--tp must be >= 2, got 1"),
    (["diagnose", "host-cores", "--out", "o.json", "--seconds", "0"], "--seconds 0.0: must be 0.1-3600"),
    (["diagnose", "host-cores", "--out", "o.json", "--interval-s", "-1"], "--interval-s -1.0: must be 0-600"),
])
def test_bad_options_are_one_line_and_exit_code_2(tmp_path, monkeypatch, argv, says):
    pytest.importorskip("torch")
    from simulator.cli import app
    monkeypatch.chdir(tmp_path)
    assert says in _one_line_error(runner.invoke(app, argv))
    assert not (tmp_path / "p.jsonl").exists() and not (tmp_path / "o.json").exists()


def test_merge_rebuilds_the_shipped_profile_from_its_points(tmp_path):
    """docs/calibration.md's merge command gives data/profiles/h200.json back (names included) but
    for when and by what command it was built, the order of its forward tables, and two notes
    whose prose names the modules that measured (calibration/ was reorganised since)."""
    import json
    from simulator.cli import app
    root = Path(__file__).parent.parent
    pts = [root / "data" / "points" / f"{n}.jsonl" for n in ("h200", "h200_collectives", "h200_tp_forwards",
                                                              "h200_session_forwards")]
    result = runner.invoke(app, ["calibrate", "merge", *[a for p in pts for a in ("--points", str(p))],
                                 "--out", str(tmp_path / "h200.json"), "--name", "h200", "--gpu-count", "2",
                                 "--interconnect", "NVLink (NV18) between 2 GPUs (collectives, tp-2 forwards); op, "
                                 "tp-1 forward and host tables on one GPU",
                                 "--topology", "GPU0-GPU1 NV18 (nvidia-smi topo -m on the lent 2x H200 machine)",
                                 "--catalog-gpu", "h200-sxm", "--catalog-box", "2x-h200-nvlink"])
    assert result.exit_code == 0, result.output
    built, shipped = (json.loads(p.read_text()) for p in (tmp_path / "h200.json", root / "data/profiles/h200.json"))
    for d in (built, shipped):
        for k in ("created_utc", "git_commit", "command_line"):
            d.pop(k)
        d["forwards"].sort(key=lambda f: (f["model"], f["tp_size"], f["mode"], f["phase"]))
        d["host"]["provenance"].pop("note")
        d["notes"].pop("not_measured")
    assert built == shipped


# ---- outputs and points files the calibration commands may write (bad input, kind 8) ------------------
def _merge_args(points, out, *extra):
    return ["calibrate", "merge", "--points", str(points), "--out", str(out), *extra]


def test_merge_refuses_an_unrelated_out_file_and_its_own_points_file(tmp_path):
    from simulator.cli import app
    src = Path(__file__).parent.parent / "data" / "points" / "h200.jsonl"
    pts = tmp_path / "pts.jsonl"
    pts.write_bytes(src.read_bytes())
    keep = tmp_path / "keep.txt"
    keep.write_text("precious")
    res = runner.invoke(app, _merge_args(pts, keep))
    assert res.exit_code == 2 and "--force" in res.output and keep.read_text() == "precious"
    res = runner.invoke(app, _merge_args(pts, pts))
    assert res.exit_code == 2 and "one of the --points files" in res.output
    assert pts.read_bytes() == src.read_bytes()
    assert runner.invoke(app, _merge_args(pts, keep, "--force")).exit_code == 0  # --force: the user insists
    assert runner.invoke(app, _merge_args(pts, keep)).exit_code == 0  # now our own profile: replaced


def test_a_file_that_is_not_a_points_file_is_refused_and_left_whole(tmp_path):
    from calibration.build.store import PointStore
    from simulator.cli import app
    foreign = tmp_path / "notes.jsonl"
    foreign.write_text("my notes\nmore notes\n")
    with pytest.raises(ValueError, match="notes.jsonl:1: not a points-file line"):
        PointStore(foreign)
    assert foreign.read_text() == "my notes\nmore notes\n"
    res = runner.invoke(app, _merge_args(foreign, tmp_path / "p.json"))
    assert res.exit_code == 2 and "notes.jsonl:1" in res.output
    torn = tmp_path / "torn.jsonl"
    torn.write_text('{"key": "a", "record": {"x": 1}}\n{"key": "b", "rec')  # killed mid-write
    assert len(PointStore(torn)) == 1 and torn.read_text().endswith("}\n")  # the torn line goes


def test_live_refuses_to_replace_a_file_that_is_not_a_record(tmp_path):
    from calibration.live import grid as live_grid
    from simulator.cli import app
    out = tmp_path / "lv"
    out.mkdir()
    point = live_grid.grid(True)[0]
    (out / f"{point.name}.json").write_text("precious")
    res = runner.invoke(app, ["live", "--out", str(out), "--device", "cpu", "--quick", "--cycles", "1"])
    assert res.exit_code == 2 and "not LiveRun records" in res.output
    assert (out / f"{point.name}.json").read_text() == "precious"


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="pins a thread (Linux)")
def test_diagnose_host_cores_probes_every_cpu_each_round_and_keeps_what_it_measured(tmp_path):
    import json

    from calibration.diagnostics.host_cores import summarize
    from simulator.cli import app
    out = tmp_path / "cores.json"
    res = runner.invoke(app, ["diagnose", "host-cores", "--out", str(out), "--seconds", "0.3", "--interval-s", "0.1"])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    cpus = sorted(os.sched_getaffinity(0))
    assert data["cpus"] == cpus and len(data["rounds"]) >= 2
    assert all(sorted(map(int, r["probe_us"])) == cpus and min(r["probe_us"].values()) > 0 for r in data["rounds"])
    s = summarize(data)
    assert s["rounds"] == len(data["rounds"])
    assert s["floor_us"] == min(min(r["probe_us"].values()) for r in data["rounds"])
    assert "rounds with at least one fast CPU" in res.output
    assert os.sched_getaffinity(0) == set(cpus)  # the caller's mask given back
    res = runner.invoke(app, ["diagnose", "host-cores", "--out", str(out), "--seconds", "0.1"])  # its own: replaced
    assert res.exit_code == 0
    (tmp_path / "mine.json").write_text("{}")
    res = runner.invoke(app, ["diagnose", "host-cores", "--out", str(tmp_path / "mine.json"), "--seconds", "0.1"])
    assert res.exit_code == 2 and (tmp_path / "mine.json").read_text() == "{}"
    other = tmp_path / "drift.json"  # another diagnostic's output: kept unless --force
    other.write_text(json.dumps({"specdecsim_output": "diagnostic/1", "rows": [1]}))
    res = runner.invoke(app, ["diagnose", "host-cores", "--out", str(other), "--seconds", "0.1"])
    assert res.exit_code == 2 and "another diagnostic's output" in res.output and '"rows"' in other.read_text()
    res = runner.invoke(app, ["diagnose", "host-cores", "--out", str(other), "--seconds", "0.1", "--force"])
    assert res.exit_code == 0 and json.loads(other.read_text())["diagnostic"] == "host_cores"
    res = runner.invoke(app, ["diagnose", "host-cores", "--out", "-", "--seconds", "0.1"])
    assert res.exit_code == 2 and "give a file" in res.output


def test_diagnose_checks_tp_before_starting_ranks(tmp_path):
    from simulator.cli import app
    res = runner.invoke(app, ["diagnose", "tp-skew", "--device", "cpu", "--tp", "3", "--out", str(tmp_path / "x.json")])
    assert res.exit_code == 2 and "not divisible by tp_size=3" in res.output
