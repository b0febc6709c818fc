"""`specdecsim cases`: the shipped case file replays; scoring can pass and fail; bad files are one line."""

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from simulator.evidence.cases import (SPEEDUP_TOL, TOK_S_TOL, build_case_scenario, load_case_file, predict, replay_cases,
                             summary)
from simulator.cli import app
from simulator.inputs import UserInputError

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "data" / "cases" / "public.yaml"
COMM_CASES = ROOT / "data" / "cases" / "comm_public.yaml"


@pytest.fixture(scope="module")
def shipped(shipped_replay):
    """The shipped cases with the shipped communication cases (what `specdecsim cases` replays),
    replayed once per session (conftest.replay_shipped_cases)."""
    return shipped_replay(CASES, comm_path=COMM_CASES)


def test_every_shipped_case_replays_and_keeps_its_source(shipped):
    cf = load_case_file(CASES)
    assert {r.id for r in shipped} >= {c.id for c in cf.cases}
    for r in shipped:
        assert r.source
        for f in r.figures:
            if f.role == "not_replayable":
                assert f.why and f.predicted is None
            else:
                assert f.predicted is not None and f.predicted > 0 and f.error_frac == pytest.approx(
                    f.predicted / f.published - 1)
    s = summary(shipped)
    assert s["scored_cases"] == sum(r.passed is not None for r in shipped)


def test_sweeps_report_the_leave_out_protocol(shipped):
    sweeps = [c for c in load_case_file(CASES).cases if c.sweep]
    assert sweeps
    for case in sweeps:
        rows = [f for r in shipped if r.id == case.id for f in r.figures if f.role == "leave_out"]
        middle = [r for r in case.runs if r.replayable][1:-1]
        assert len(rows) == len(middle)


def _own_prediction_file(tmp_path, scale: float) -> Path:
    """A case file whose published figures are the model's own predictions times `scale`."""
    data = yaml.safe_load(CASES.read_text())
    for model in data["models"].values():  # the copy lives elsewhere: absolute config paths
        if "config_path" in model:
            model["config_path"] = str((CASES.parent / model["config_path"]).resolve())
    case = next(c for c in data["cases"] if c["id"].startswith("vllm-issue20780"))
    case = {**case, "id": "own", "sweep": False, "baseline": {"tok_s": 1.0},
            "runs": [{k: v for k, v in r.items() if k not in ("tpot_ms", "role")} | {"tok_s": 1.0}
                     for r in case["runs"][:2]]}
    path = tmp_path / f"own_{scale}.yaml"
    path.write_text(yaml.safe_dump({**data, "cases": [case]}))
    own = load_case_file(path)
    c = own.cases[0]
    _, base = predict(build_case_scenario(own, c, None, tmp_path))
    case["baseline"] = {"tok_s": base * scale}
    for r, run in zip(case["runs"], c.runs):
        r["tok_s"] = predict(build_case_scenario(own, c, run, tmp_path))[0] * scale
    path.write_text(yaml.safe_dump({**data, "cases": [case]}))
    return path


def test_a_case_passes_on_its_own_predictions_and_fails_twenty_percent_off(tmp_path):
    ok = replay_cases(_own_prediction_file(tmp_path, 1.0))
    assert [r.passed for r in ok] == [True]
    off = replay_cases(_own_prediction_file(tmp_path, 1.2))
    assert [r.passed for r in off] == [False]
    worst = max(abs(f.error_frac) for f in off[0].figures if f.role == "scored")
    assert worst > TOK_S_TOL and SPEEDUP_TOL == 0.10


def test_bad_case_file_is_one_line_naming_the_file_and_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"cases": [{"id": "x", "source": "s", "runs": [{"num_steps": 3, "tok_s": -1}]}]}))
    with pytest.raises(UserInputError, match="bad.yaml") as e:
        replay_cases(bad)
    assert "tok_s" in str(e.value)
    r = CliRunner().invoke(app, ["cases", str(bad)])
    assert r.exit_code == 2 and "Traceback" not in r.output and "bad.yaml" in r.output


@pytest.mark.parametrize("value, words", [(0, "greater than or equal to 1 (got 0)"),
                                          ("10000", "valid integer (got '10000')"),
                                          (True, "valid integer (got True)"), (2.5, "valid integer"),
                                          (None, "is null (empty)"), (3_000_000, "less than or equal to 2097152")])
def test_a_run_context_len_that_is_not_a_context_is_one_line(tmp_path, value, words):
    """A run's context_len is read as a scenario field is: strictly (no text, no bool for a
    number), no explicit null, within 1..2,097,152."""
    data = yaml.safe_load(CASES.read_text())
    case = next(c for c in data["cases"] if any("context_len" in r for r in c.get("runs", [])))
    run = next(r for r in case["runs"] if "context_len" in r)
    run["context_len"] = value
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**data, "cases": [case]}))
    r = CliRunner().invoke(app, ["cases", str(bad)])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "bad.yaml: cases.0.runs." in lines[0] and "context_len" in lines[0], r.output
    assert words in lines[0], r.output


def test_cli_writes_json_with_the_fields_each_case_needs(tmp_path, memo_shipped_cases):
    # the default file with its collective cases (the full replay, the session's one:
    # conftest.replay_shipped_cases), then a one-case file for the output-file rules (a user's
    # file is replayed alone)
    out = tmp_path / "cases.json"
    r = CliRunner().invoke(app, ["cases", "--json", str(out)])
    assert r.exit_code == 0, r.output
    # labels are printed whole: runs that differ only at the end of a long label stay apart
    labels = [run["label"] for c in yaml.safe_load(CASES.read_text())["cases"] for run in c.get("runs", [])
              if run.get("label") and run.get("replayable", True)]
    assert any(len(label) > 27 for label in labels)
    assert all(label in r.output for label in labels)
    data = json.loads(out.read_text())
    assert data["summary"]["scored_cases"] >= 1 and any(c["id"].startswith("comm-") for c in data["cases"])
    for case in data["cases"]:
        assert {"id", "passed", "metric", "predicted", "published", "error_frac"} <= set(case)
    one = tmp_path / "one.yaml"
    full = yaml.safe_load(CASES.read_text())
    for model in full["models"].values():
        if "config_path" in model:
            model["config_path"] = str((CASES.parent / model["config_path"]).resolve())
    one.write_text(yaml.safe_dump({**full, "cases": [c for c in full["cases"] if c["id"].startswith("sglang-llama2")]}))
    again = CliRunner().invoke(app, ["cases", str(one), "--json", str(out)])  # its own earlier output: replaced
    assert again.exit_code == 0
    other = tmp_path / "notes.json"
    other.write_text('{"mine": 1}')
    refused = CliRunner().invoke(app, ["cases", str(one), "--json", str(other)])
    assert refused.exit_code == 2 and json.loads(other.read_text()) == {"mine": 1}


def test_the_comm_case_file_given_as_file_is_replayed_as_comm_cases(tmp_path):
    """`specdecsim cases data/cases/comm_public.yaml` replays the collective curves (it was five
    lines of 'Extra inputs are not permitted'); a typo in a copy is one line naming the field."""
    comm = ROOT / "data" / "cases" / "comm_public.yaml"
    r = CliRunner().invoke(app, ["cases", str(comm)])
    assert r.exit_code == 0, r.output
    ids = [c["id"] for c in yaml.safe_load(comm.read_text())["cases"]]
    assert all(i in r.output for i in ids)
    bad = tmp_path / "comm.yaml"
    bad.write_text(comm.read_text().replace("launch: eager_stream", "launch: eager_strem", 1))
    r = CliRunner().invoke(app, ["cases", str(bad)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "comm.yaml: cases." in lines[0] and ".launch: Input should be 'graph'" in lines[0]
