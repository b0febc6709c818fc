"""Bad input, continued: the YAML and JSON reading rules themselves, then what a new user found by trying
the new features (break sessions), each refused in one line naming the value and what it may be.
The generated properties and the examples of the issue: tests/test_bad_input.py.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from tests.fuzz.cases import base_scenario, dump_yaml
from tests.fuzz.running import run, write_scenario


# ---- the reading rules themselves ---------------------------------------------------------------------
def test_yaml_reader_rules():
    from simulator.inputs import UserInputError, load_json, load_yaml
    assert load_yaml("a: 1e-7\nb: 10\nc: 1.5\n", "x") == {"a": 1e-7, "b": 10, "c": 1.5}
    assert load_yaml("base: &b {x: 1}\nc:\n  <<: *b\n  y: 2\n", "x")["c"] == {"x": 1, "y": 2}  # merge keys stay
    for bad, words in (("a: 1\na: 2\n", "written twice"), ("a: .nan\n", "not a finite number"),
                       ("a: &a [*a]\n", "recursive"), ("a: " + "[" * 50 + "]" * 50, "nested deeper"),
                       ("a: " + "1" * 5000, "thousands of digits"), ("\x00", "x: invalid YAML")):
        with pytest.raises(UserInputError, match=words):
            load_yaml(bad, "x")
    for bad, words in (('{"a": NaN}', "not a finite number"), ('{"a": 1, "a": 2}', "written twice"),
                       ("[" * 10_000 + "]" * 10_000, "nested deeper"), ('{"a": ', "x:1:7: not valid JSON")):
        with pytest.raises(UserInputError, match=words):
            load_json(bad, "x")


def test_a_kernel_trace_counts_in_the_estimate():
    # a trace is streamed (simulator.trace): it adds the time to write its events, never memory;
    # tp1_draft, kernel granularity, per rank, 600 cycles traced: about 5.5 million events
    from simulator.costs.forward import CostModel
    from simulator.scenario import load_profile_for, load_scenario
    from simulator.estimate import estimate_run, trace_estimate
    sc = load_scenario("scenarios/tp1_draft.yaml", ["fidelity.granularity=kernel", "fidelity.per_rank=true",
                                                    "fidelity.num_cycles=600"])
    cost = CostModel(sc, load_profile_for(sc)[0])
    bare, traced = estimate_run(sc, cost), estimate_run(sc, cost, trace_cycles=600)
    est = trace_estimate(sc, cost, 600)
    assert 5e6 < est.num_events < 6e6
    assert traced.memory_bytes == bare.memory_bytes
    assert traced.seconds == bare.seconds + est.seconds > bare.seconds + 2

# ---- found by trying the new features as a new user (break session) -----------------------------------
@pytest.mark.parametrize("grid, words", [
    ("workload.batch_size=1..5000", "value 4097 does not fit workload.batch_size (an integer, 1 <= x <= 4,096): "
                                    "Input should be less than or equal to 4096"),
    ("acceptance.acceptance_rate=0.5,abc,0.7", "value 'abc' does not fit acceptance.acceptance_rate "
                                               "(a number, 0 <= x <= 1): Input should be a valid number"),
    ("spec.num_steps=0..3", "(an integer, 1 <= x <= 64): Input should be greater than or equal to 1")])
def test_a_bad_grid_value_names_the_allowed_range_once(tmp_path, grid, words):
    """A grid value out of range names the range; the integer-as-text retry adds no 'or Input
    should be a valid integer', and the value is quoted once."""
    write_scenario(tmp_path)
    code, out = run(tmp_path, "sweep", "s.yaml", "--out", "sw", "--grid", grid)
    assert code == 2 and words in out, out
    assert "or Input should be" not in out and "\"'" not in out
    assert not (tmp_path / "sw").exists()


def test_sweep_html_over_what_the_dashboard_reads_is_refused_before_the_sweep(tmp_path):
    """--html with a grid of more points than plot reads (sweep.csv up to 32 MiB) is refused before
    any point runs (it was a finished sweep, then exit 2 at the plot); plot of such a sweep says
    how many points fit."""
    from simulator.studies.sweep_files import MAX_PLOT_POINTS
    write_scenario(tmp_path)
    code, out = run(tmp_path, "sweep", "s.yaml", "--out", "sw", "--html", "--grid", "spec.num_steps=1..8",
                    "--grid", "acceptance.acceptance_rate=0.01:1.0:0.001")
    assert code == 2 and "--html: the grid has 7,928 points" in out and f"at most {MAX_PLOT_POINTS:,}" in out, out
    assert not (tmp_path / "sw").exists()
    code, out = run(tmp_path, "sweep", "s.yaml", "--out", "sw", "--des-sample", "0", "--grid", "spec.num_steps=1..2")
    assert code == 0, out
    csv_path = tmp_path / "sw" / "sweep.csv"
    header, row = csv_path.read_text().splitlines()[:2]
    with csv_path.open("a") as f:  # a sweep of more rows than 32 MiB holds, as a large sweep writes it
        f.write((row + "\n") * (33 * 2**20 // len(row)))
    code, out = run(tmp_path, "plot", "sw", "--out", "fig", "--no-png")
    assert code == 2 and "sw/sweep.csv:" in out and "plot a sweep of fewer points" in out, out
    assert "about 10," in out or "about 9," in out or "about 8," in out
    assert not (tmp_path / "fig").exists()


@pytest.mark.parametrize("argv", [["sweep", "s.yaml", "--grid", "spec.num_steps=1..2", "--out", "ro/sw"],
                                  ["sweep", "s.yaml", "--grid", "spec.num_steps=1..2", "--out", "ro"],
                                  ["simulate", "s.yaml", "--trace", "ro/t.json"],
                                  ["simulate", "s.yaml", "--json", "ro/new/r.json"],
                                  ["search", "s.yaml", "--out", "ro/se"]])
def test_an_unwritable_output_folder_is_refused_before_the_work(tmp_path, monkeypatch, argv):
    """A folder the user may not write in is one line naming the option, before the run (it was
    found when the outputs were written, after the whole sweep, as '<path>: Permission denied').
    os.access is faked: the tests may run as root, whom permission bits do not stop."""
    write_scenario(tmp_path)
    (tmp_path / "ro").mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: (not (mode & os.W_OK and Path(p).name == "ro")
                                                            and real_access(p, mode, **kw)))
    code, out = run(tmp_path, *argv)
    flag = argv[argv.index("s.yaml") + 1] if argv[0] != "sweep" else "--out"
    assert code == 2 and f"{flag} " in out and "cannot write in" in out and "ro (permission denied)" in out, out
    assert list((tmp_path / "ro").iterdir()) == []


# issue 27: silent acceptances and a traceback, each one line now
def test_numbers_where_strings_belong_and_empty_names_are_refused(tmp_path):
    sc = base_scenario()
    sc["serving_engine"] = {"kind": "vllm", "version": 2026}  # YAML's bare 2026 is a number
    write_scenario(tmp_path, sc)
    code, out = run(tmp_path, "simulate", "s.yaml")
    assert code == 2 and "version: 2026 is a number" in out and "'2026'" in out
    sc = base_scenario()
    sc["hardware"] = {"gpu": ""}
    write_scenario(tmp_path, sc)
    code, out = run(tmp_path, "simulate", "s.yaml")
    assert code == 2 and "hardware.gpu" in out
    write_scenario(tmp_path)
    code, out = run(tmp_path, "simulate", "s.yaml", "--profile", "")
    assert code == 2 and "--profile ''" in out


@pytest.mark.parametrize("folder, field, value", [("gpus", "memory_bandwidth_gb_per_s", "4800"),
                                                   ("boxes", "p2p", "yes")])
def test_catalog_strings_are_not_numbers_or_booleans(tmp_path, folder, field, value):
    import shutil

    from simulator.hardware import hardware_dir, load_catalog
    from simulator.inputs import UserInputError, read_yaml
    root = tmp_path / "hw"
    shutil.copytree(hardware_dir(), root)
    f = sorted((root / folder).glob("*.yaml"))[0]
    data = read_yaml(f, "catalog file")
    assert field in data
    f.write_text(dump_yaml({**data, field: value}))
    with pytest.raises(UserInputError, match=field):
        load_catalog(root)


def test_a_poisson_rate_too_small_for_the_clock_is_refused(tmp_path):
    """1e-30 req/s printed nan batch sizes and 0.00 latencies (the float64 us clock past 1e32);
    the bound is 1e-6 req/s (one request in 11.6 days)."""
    text = (Path(__file__).resolve().parents[1] / "scenarios" / "serving_poisson.yaml").read_text()
    assert "rate_per_s: 4\n" in text
    write_scenario(tmp_path, text=text.replace("rate_per_s: 4\n", "rate_per_s: 1.0e-30\n"))
    code, out = run(tmp_path, "simulate", "s.yaml")
    assert code == 2 and "serving.arrivals.rate_per_s" in out and "1e-30" in out


def test_a_mistyped_key_gets_a_did_you_mean(tmp_path):
    sc = base_scenario()
    sc["workload"] = {**sc["workload"], "batch_sizee": sc["workload"].pop("batch_size", 1)}
    write_scenario(tmp_path, sc)
    code, out = run(tmp_path, "simulate", "s.yaml")
    assert code == 2 and "workload.batch_sizee" in out and "did you mean 'batch_size'?" in out
    sc = base_scenario()
    sc["spec"] = {**sc["spec"], "zzz_unrelated": 1}
    write_scenario(tmp_path, sc)
    code, out = run(tmp_path, "simulate", "s.yaml")
    assert code == 2 and "spec.zzz_unrelated" in out and "did you mean" not in out


@pytest.mark.slow
def test_the_fuzz_as_documented_ends_clean():
    """docs/bad-input.md: `python tests/fuzz/fuzz_cli.py --cases-per-kind 125` (1,625 cases over
    the 13 kinds, engine outputs for `calibrate from-runs` and the engine side's files and options
    among them): 0 tracebacks, hangs, NaN
    or negative outputs, writes outside the outputs, unclear errors; each case as it expects."""
    import subprocess
    import sys
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, str(root / "tests" / "fuzz" / "fuzz_cli.py"), "--cases-per-kind", "125",
                        "--jobs", "2", "--seed", "0"], capture_output=True, text=True, timeout=1200, cwd=root)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "1625 cases" in r.stdout and "0 clean errors where a run was expected, 0 runs where" in r.stdout


def _children(pid: int) -> list[int]:
    from tests.conftest import child_pids
    return child_pids(pid)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads worker processes from /proc")
def test_sigterm_to_a_parallel_sweep_ends_its_workers_and_leaves_no_output(tmp_path):
    """SIGTERM is handled as Ctrl-C: the sweep's worker processes end with it, its temp files go,
    the output folder is not left half-written, and the exit status is 143."""
    import signal
    import subprocess
    import sys
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen([sys.executable, "-m", "simulator.cli", "sweep", str(root / "scenarios" / "llama8b_h200.yaml"),
                             "--out", str(tmp_path / "sw"), "--solver", "des", "--jobs", "2",
                             "--grid", "workload.batch_size=1..32", "--grid", "spec.num_steps=1..6"],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while len(_children(proc.pid)) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        workers = _children(proc.pid)
        assert len(workers) >= 2, "the sweep's workers did not start"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 143, proc.stderr.read()[-2000:]
        assert proc.stderr.read().strip().splitlines()[-1] == "interrupted (SIGTERM)"  # says why it stopped
        time.sleep(0.5)
        assert not [w for w in workers if Path(f"/proc/{w}").exists() and
                    "Z" not in (Path(f"/proc/{w}") / "stat").read_text().rsplit(")", 1)[1].split()[:1]]
        assert not (tmp_path / "sw").exists() or not any((tmp_path / "sw").iterdir())
        assert not list(tmp_path.rglob("*.tmp"))
    finally:
        if proc.poll() is None:
            proc.kill()


def test_two_outputs_that_are_one_file_after_resolving_are_refused(tmp_path):
    write_scenario(tmp_path)
    (tmp_path / "out").mkdir()
    code, out = run(tmp_path, "simulate", "s.yaml", "--json", "out/x.json", "--trace", "out/../out/x.json")
    assert code == 2 and "--json and --trace name the same file" in out
    assert not (tmp_path / "out" / "x.json").exists()
