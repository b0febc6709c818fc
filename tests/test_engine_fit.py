"""The engine fit: shipped defaults are the fit on the shipped cases; a fit recovers known host
times from synthetic engine logs through `specdecsim calibrate from-runs`; bad fits are refused."""

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from simulator.evidence.cases import predict
from simulator.cli import app
from simulator.evidence.engine_defaults import fit_from_cases
from simulator.evidence.engine_fit import FIT_PARAMS, Observation, fit_engine
from simulator.engines import ENGINE_HOST_DEFAULTS
from simulator.inputs import UserInputError
from simulator.scenario import load_scenario, scenario_from_dict

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "tests" / "data" / "engine_fit" / "sglang_llama8b_h100.yaml"


@pytest.mark.parametrize("kind", sorted(ENGINE_HOST_DEFAULTS))
def test_shipped_engine_defaults_are_the_fit_on_the_shipped_cases(kind):
    fit = fit_from_cases(ROOT / "data" / "cases" / "public.yaml", kind)
    assert set(fit.params) == set(FIT_PARAMS[kind])
    for name, value in fit.params.items():
        assert ENGINE_HOST_DEFAULTS[kind][name] == pytest.approx(value, abs=0.5), (kind, name)


def _with_engine(sc, **fields):
    data = sc.model_dump(mode="json", exclude_none=True)
    for role in ("target", "draft"):
        data[role].pop("config_path", None)
        data[role].pop("config_notes", None)
    data["serving_engine"] = {**data["serving_engine"], **fields}
    return scenario_from_dict(data, "test", ROOT)


def test_from_runs_recovers_known_host_times(tmp_path):
    sc = load_scenario(SCENARIO)
    truth = {"host_decode_step_us": 250.0, "host_cycle_us": 900.0}
    spec_tok_s, base_tok_s = predict(_with_engine(sc, **truth))
    al = 1 + 0.7 + 0.7 ** 2 + 0.7 ** 3 + 0.7 ** 4  # iid 0.7 at 4 steps
    log = tmp_path / "server.log"
    log.write_text(
        "[2026-01-01 00:00:00 TP0] Decode batch. #running-req: 1, #token: 300, token usage: 0.00, "
        f"cuda graph: True, gen throughput (token/s): {base_tok_s:.4f}, #queue-req: 0,\n"
        "[2026-01-01 00:01:00 TP0] Decode batch. #running-req: 1, #token: 600, token usage: 0.00, "
        f"accept len: {al:.6f}, cuda graph: True, gen throughput (token/s): {spec_tok_s:.4f}, #queue-req: 0,\n")
    out = tmp_path / "fitted.yaml"
    r = CliRunner().invoke(app, ["calibrate", "from-runs", str(SCENARIO), str(log), "--out", str(out)])
    assert r.exit_code == 0, r.output
    fitted = yaml.safe_load(out.read_text())["serving_engine"]
    for name, value in truth.items():
        assert fitted[name] == pytest.approx(value, rel=0.02), name
    # the written scenario loads and predicts the runs it was fitted on
    copy = tmp_path / "copy.yaml"
    data = yaml.safe_load(out.read_text())
    data["target"]["config_path"] = str(ROOT / "data" / "models" / "llama-3.1-8b-instruct.json")
    copy.write_text(yaml.safe_dump(data))
    spec2, base2 = predict(load_scenario(copy))
    assert spec2 == pytest.approx(spec_tok_s, rel=0.01)
    assert base2 == pytest.approx(base_tok_s, rel=0.01)


def test_from_runs_refuses_existing_out_and_bad_logs(tmp_path):
    out = tmp_path / "fitted.yaml"
    out.write_text("keep me\n")
    log = tmp_path / "server.log"
    log.write_text("not an engine log at all\n")
    r = CliRunner().invoke(app, ["calibrate", "from-runs", str(SCENARIO), str(log), "--out", str(out)])
    assert r.exit_code == 2 and "--force" in r.output
    assert out.read_text() == "keep me\n"
    r = CliRunner().invoke(app, ["calibrate", "from-runs", str(SCENARIO), str(log), "--out", str(tmp_path / "o.yaml")])
    assert r.exit_code == 2 and "server.log" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "o.yaml").exists()


def test_fit_needs_as_many_runs_as_parameters_and_known_names():
    sc = load_scenario(SCENARIO)
    one = [Observation("one", lambda f: _with_engine(sc, **f), True, 300.0)]
    with pytest.raises(UserInputError, match="at least as many"):
        fit_engine("sglang", one)
    with pytest.raises(UserInputError, match="cannot fit"):
        fit_engine("sglang", one, ("graph_verify",))


def test_fit_reports_standard_errors_only_when_overdetermined():
    sc = load_scenario(SCENARIO)
    truth = {"host_decode_step_us": 300.0, "host_cycle_us": 500.0}
    spec, base = predict(_with_engine(sc, **truth))
    obs = [Observation("base", lambda f: _with_engine(sc, **f), False, base),
           Observation("spec", lambda f: _with_engine(sc, **f), True, spec)]
    exact = fit_engine("sglang", obs)
    assert all(v is None for v in exact.stderr.values())
    assert exact.params["host_cycle_us"] == pytest.approx(500.0, rel=0.02)
    over = fit_engine("sglang", obs + [Observation("spec again", lambda f: _with_engine(sc, **f), True, spec * 1.01)])
    assert all(v is not None and v > 0 for v in over.stderr.values())
