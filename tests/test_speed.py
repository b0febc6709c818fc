"""The speed-ups change no number: scipy's functions replaced or imported late give the same floats."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import special, stats
from scipy.interpolate import PchipInterpolator, RegularGridInterpolator

from simulator.acceptance import AcceptanceModel
from simulator.costs.interp import Multilinear, Pchip
from simulator.metrics import NUM_BATCHES, t975

ROOT = Path(__file__).resolve().parents[1]


def test_t_table_is_scipy_t_ppf_bit_for_bit():
    for df in range(1, NUM_BATCHES + 5):
        assert t975(df) == float(stats.t.ppf(0.975, df))


@pytest.mark.parametrize("a", [1e-6, 0.05, 0.3, 0.7, 0.95, 1 - 1e-6])
@pytest.mark.parametrize("concentration", [1e-3, 0.5, 2.0, 20.0, 1e4])
def test_beta_quadrature_is_scipy_beta_ppf(a, concentration):
    ab = (max(a * concentration, 1e-9), max((1 - a) * concentration, 1e-9))
    rates, _ = AcceptanceModel(np.full(4, 0.25), ab)._rate_quadrature()
    q = (np.arange(256) + 0.5) / 256
    np.testing.assert_array_equal(rates, stats.beta.ppf(q, *ab))
    np.testing.assert_array_equal(rates, special.betaincinv(*ab, q))


def test_pchip_is_scipy_pchip_bit_for_bit():
    rng = np.random.default_rng(1)
    for trial in range(300):
        k = int(rng.integers(2, 12))
        x = np.sort(rng.choice(np.log(np.arange(1, 5000)), size=k, replace=False))
        y = [np.cumsum(rng.random(k)), rng.random(k) * 5, np.round(rng.random(k), 1)][trial % 3]
        ours, theirs = Pchip(x, y), PchipInterpolator(x, y, extrapolate=False)
        for p in [*rng.uniform(x[0], x[-1], 20), *x]:
            assert ours(p) == float(theirs(p))
        assert np.isnan(ours(x[0] - 1)) and np.isnan(ours(x[-1] + 1))


@pytest.mark.parametrize("num_axes", [2, 3])
def test_multilinear_is_scipy_regular_grid_bit_for_bit(num_axes):
    rng = np.random.default_rng(num_axes)
    for _ in range(200):
        grid = [np.sort(rng.choice(np.log(np.arange(1, 5000)), size=int(rng.integers(2, 7)), replace=False))
                for _ in range(num_axes)]
        values = rng.random([len(g) for g in grid]) * 10
        ours, theirs = Multilinear(grid, values), RegularGridInterpolator(grid, values, method="linear")
        for _ in range(20):
            p = [float(rng.uniform(g[0], g[-1]) if rng.random() < 0.8 else rng.choice(g)) for g in grid]
            assert ours(p) == float(theirs(np.array([p]))[0])


def test_simulate_imports_no_scipy_plotly_or_torch():
    code = ("import sys; from simulator.cli import app; import simulator.simulate, simulator.studies.sweep; "
            "bad = [m for m in ('scipy', 'plotly', 'torch') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def _modules_after(argv: list[str]) -> set[str]:
    """The modules `specdecsim ARGV` (simulator.cli.main) has imported when it exits."""
    code = ("import atexit, json, sys; atexit.register(lambda: print(json.dumps(sorted(sys.modules)), "
            f"file=sys.stderr)); sys.argv = ['specdecsim', *{argv!r}]; from simulator.cli import main; main()")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    return set(json.loads(r.stderr.strip().splitlines()[-1]))


def test_the_cli_imports_only_what_the_command_it_runs_needs():
    """`--help` builds every command and imports none of the model's libraries; `simulate` imports
    the model but no study, no calibration command and no scipy, plotly or Ray."""
    heavy = ("numpy", "scipy", "simpy", "plotly", "ray", "torch", "pydantic")
    helped = _modules_after(["--help"])
    assert not [m for m in heavy if m in helped]
    assert "calibration.cli" in helped and "simulator.cli.search" in helped
    simulated = _modules_after(["simulate", "scenarios/tp1_draft.yaml"])
    assert {"numpy", "simpy", "simulator.simulate"} <= simulated
    assert not [m for m in simulated if m.split(".")[0] in ("scipy", "plotly", "ray", "torch", "calibration")
                or m.startswith("simulator.studies") or m in ("simulator.cli.search", "simulator.cli.sweep")]


def test_sweep_closed_form_matches_single_point_closed_form(tmp_path):
    """The grouped numpy closed form and the path-copied grid points give, row by row, what one
    scenario loaded with --set and solved alone by `analyze` gives (1e-9 relative; in fact equal)."""
    from pathlib import Path

    from simulator.acceptance import build_acceptance
    from simulator.analytic import analyze
    from simulator.costs.forward import CostModel
    from simulator.scenario import load_profile_for, load_scenario
    from simulator.studies.sweep import read_sweep_table, run_sweep

    path = Path(__file__).resolve().parents[1] / "scenarios" / "tp1_draft.yaml"
    res = run_sweep(path, ["spec.num_steps=1..4", "acceptance.acceptance_rate=0.3:0.9:0.15",
                           "workload.batch_size=1,4"], out_dir=tmp_path, des_sample=0, progress=False)
    rows = read_sweep_table(res.csv_path)
    assert len(rows) == 4 * 5 * 2
    for row in rows:
        s, a, b = row["spec.num_steps"], row["acceptance.acceptance_rate"], row["workload.batch_size"]
        sc = load_scenario(path, [f"spec.num_steps={s}", f"spec.num_draft_tokens={s + 1}",
                                  f"acceptance.acceptance_rate={a}", f"workload.batch_size={b}"])
        assert json.loads(row["scenario_json"]) == sc.model_dump(mode="json")
        prof, _ = load_profile_for(sc, None, base_dir=path.parent, source=str(path))
        r = analyze(sc, CostModel(sc, prof), build_acceptance(sc.acceptance, sc.spec))
        want = dict(tok_per_s=r.tok_per_s, baseline_tok_per_s=r.baseline_tok_per_s, speedup=r.speedup,
                    accept_length=r.mean_accept_length, cycle_time_us=r.cycle_time_us, tpot_ms=r.tpot_us / 1e3,
                    **{f"{k}_us": v for k, v in r.breakdown_us.items()})
        for key, value in want.items():
            assert row[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
