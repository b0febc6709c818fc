"""One set of units for what a user reads (issue 49): TTFT, TPOT, ITL, end-to-end latency and queueing in ms,
named `..._ms`, in every table, JSON and CSV (as `vllm bench serve` and SGLang's bench_serving print them:
"Median TPOT (ms)", mean_ttft_ms); the cycle's own times stay us and say so (`cycle_time_us`, `<bucket>_us`)."""

from __future__ import annotations

import csv
import dataclasses
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator.cli import app
from simulator.evidence.validate_serving import ServingComparison, load_serving_records
from simulator.serving.metrics import serving_metrics
from simulator.studies.search import run_search
from simulator.studies.sweep import run_sweep

ROOT = Path(__file__).resolve().parents[1]
LATENCY = re.compile(r"ttft|tpot|itl|e2e|latency|queue")  # a per-token or per-request latency's name
SMALL_SERVING = ["--set", "serving.num_requests=40", "--set", "fidelity.num_cycles=200"]


def latency_keys(obj, path: str = "") -> list[str]:
    """The dotted paths of every key naming a latency, the scenario (the user's input) left out."""
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k in ("scenario", "scenario_json"):
                continue
            if LATENCY.search(k):
                out.append(f"{path}{k}")
            out += latency_keys(v, f"{path}{k}.")
    return out


def _not_ms(keys: list[str]) -> list[str]:
    """The latency keys not in ms (a ratio, `..._error_frac`, has no unit)."""
    return [k for k in keys if not k.endswith(("_ms", "_frac")) and not re.search(r"_ms\.(mean|p50|p90|p99)$", k)]


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    out = tmp_path_factory.mktemp("units") / "r.json"
    res = CliRunner().invoke(app, ["simulate", "serving_poisson", *SMALL_SERVING, "--json", str(out)],
                             env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    return json.loads(out.read_text()), res.output


def test_simulate_json_names_every_latency_in_ms(simulated):
    data, _ = simulated
    keys = latency_keys(data)
    assert {"tpot_ms", "baseline_tpot_ms", "serving.ttft_ms", "serving.tpot_ms", "serving.itl_ms",
            "serving.e2e_latency_ms", "serving.queue_ms"} <= set(keys)
    assert _not_ms(keys) == []
    # the figures are ms: the baseline's TPOT is its decode step (us) / 1000, and a request's TPOT is about a
    # cycle over the tokens a cycle commits
    assert data["baseline_tpot_ms"] == pytest.approx(data["baseline_step_us"] / 1e3, rel=1e-12)
    assert data["tpot_ms"]["mean"] == pytest.approx(data["cycle_time_us"] / data["accept_length"]["mean"] / 1e3,
                                                    rel=0.1)
    s = data["serving"]
    assert s["tpot_ms"]["p50"] <= s["itl_ms"]["p99"] and s["ttft_ms"]["p50"] < s["e2e_latency_ms"]["p50"]
    assert s["tok_per_s_per_user"] == pytest.approx(1e3 / s["tpot_ms"]["mean"], rel=0.2)


def test_simulate_table_prints_tpot_in_ms(simulated):
    data, text = simulated
    row = next(line for line in text.splitlines() if "TPOT p50 / p90 / p99" in line)
    assert "(ms)" in row and "(us)" not in row
    assert f"{data['tpot_ms']['p50']:.2f}" in row
    serving_row = next(line for line in text.splitlines() if "TPOT p50 (ms)" in line)
    assert f"{data['serving']['tpot_ms']['p50']:.2f}" in serving_row


def test_sweep_csv_names_every_latency_in_ms(tmp_path):
    res = run_sweep(ROOT / "scenarios" / "serving_poisson.yaml", ["spec.num_steps=2,3"], des_sample=0,
                    out_dir=tmp_path, progress=False,
                    overrides=["serving.num_requests=40", "fidelity.num_cycles=200"])
    with open(res.csv_path, newline="") as f:
        header = next(csv.reader(f))
    latency = [c for c in header if LATENCY.search(c)]
    assert {"tpot_ms", "serving_ttft_p50_ms", "serving_tpot_p50_ms", "serving_itl_p99_ms",
            "serving_e2e_latency_p50_ms", "serving_baseline_tpot_p50_ms", "serving_queue_p50_ms"} <= set(latency)
    assert _not_ms(latency) == []
    for r in res.rows:
        assert r["tpot_ms"] == pytest.approx(r["cycle_time_us"] / r["accept_length"] / 1e3, rel=0.05)


def test_search_rows_name_tpot_in_ms():
    res = run_search(ROOT / "scenarios" / "tp1_draft.yaml", "tpot_p50_ms", ["spec.num_steps=1..3"],
                     max_tpot_ms=1e6)
    for r in res.rows:
        assert _not_ms(latency_keys(r)) == [] and "tpot_p50_ms" in r
        assert r["tpot_p50_ms"] == pytest.approx(r["cycle_time_us"] / r["accept_length"] / 1e3, rel=0.05)


def test_serving_validation_and_live_records_are_ms():
    names = [f.name for f in dataclasses.fields(ServingComparison) if LATENCY.search(f.name)]
    assert {"measured_tpot_p50_ms", "predicted_ttft_p50_ms", "measured_itl_p50_ms"} <= set(names)
    assert _not_ms(names) == []
    stored = json.loads((ROOT / "data/live/h200_serving_validation.json").read_text())
    assert all(_not_ms(latency_keys(p)) == [] for p in stored["points"])
    for src, rec in load_serving_records([ROOT / "data/live/h200_serving"]):
        cfg = rec.scenario.serving
        again = serving_metrics(rec.serving_records(), cfg.warmup_s, cfg.slo.ttft_ms, cfg.slo.tpot_ms)
        assert rec.result.tpot_ms.p50 == pytest.approx(again.tpot_ms.p50, rel=1e-12), src
        assert rec.result.e2e_latency_ms.mean == pytest.approx(again.e2e_latency_ms.mean, rel=1e-12), src
        assert _not_ms(latency_keys(rec.result.model_dump())) == []
