"""The dashboard of `specdecsim plot` as a person sees it (issue 49): headless Chromium opens the page,
every chart draws, nothing goes to the console as an error, nothing is fetched from outside, and a
screenshot is kept; PNG export through kaleido with the same Chromium.

Needs Chromium (Debian: `apt-get install chromium`) and the `browser` extra (playwright, kaleido);
each test skips, saying which is missing, where one is not there. .ci/run installs both and sets
SPECDECSIM_REQUIRE_BROWSER=1, which turns those skips into failures: CI runs these tests.
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from simulator.cli.plot import plot_command
from simulator.studies.sweep import run_sweep
from tests.browser import find_chromium, look_at_page, png_size

ROOT = Path(__file__).resolve().parents[1]


def _missing(why: str):
    if os.environ.get("SPECDECSIM_REQUIRE_BROWSER") == "1":
        pytest.fail(f"SPECDECSIM_REQUIRE_BROWSER=1 and {why}")
    pytest.skip(why)


@pytest.fixture(scope="module")
def chromium() -> str:
    path = find_chromium()
    if path is None:
        _missing("no Chromium or Chrome on PATH (Debian: apt-get install chromium; BROWSER_PATH names one)")
    if importlib.util.find_spec("playwright") is None:
        _missing("playwright is not installed (pip install -e '.[browser]')")
    return path


@pytest.fixture
def kaleido() -> None:
    if importlib.util.find_spec("kaleido") is None:
        _missing("kaleido is not installed (pip install -e '.[browser]')")


def _plot(sweep: Path, out: Path, *args: str) -> str:
    app = typer.Typer()
    app.command("plot")(plot_command)
    app.command("noop")(lambda: None)  # a second command keeps typer from flattening the app
    r = CliRunner().invoke(app, ["plot", str(sweep), "--out", str(out), *args])
    assert r.exit_code == 0, r.output
    return r.output


# (scenario, grids, overrides) -> the charts the page should hold, by section, in page order
SERVING_SHORT = ["serving.duration_s=1", "serving.warmup_s=0", "serving.output_len.tokens=32",
                 "serving.input_len.tokens=256"]
PAGES = {
    "tp8 draft placements": ("tp1_draft", ["spec.num_steps=1..3", "acceptance.acceptance_rate=0.5,0.7,0.9",
                                           "placement=shared_tp,tp1_colocated", "workload.batch_size=1,4"], [],
                             {"tok_per_s_vs_acceptance": 2, "best_num_steps": 2, "cycle_breakdown": 1,
                              "allreduce_latency": 1, "verify_latency": 1}),
    # the page: TP1 priced from vLLM's engine profile, no collective chart
    "tp1 vllm engine profile": ("vllm_llama8b_h200", ["spec.num_steps=1,2"], [],
                                {"cycle_breakdown": 1, "verify_latency": 1}),
    "serving": ("serving_concurrency", ["serving.arrivals.concurrency=1,4", "spec.num_steps=1,3"], SERVING_SHORT,
                {"cycle_breakdown": 1, "serving_latency_vs_throughput": 2, "serving_best_num_steps": 1,
                 "verify_latency": 1}),  # TPOT vs tok/s: one chart per num_steps; tp 1: no collective chart
}


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory) -> dict[str, Path]:
    done: dict[str, Path] = {}

    def sweep(name: str) -> Path:
        if name not in done:
            scenario, grids, sets, _ = PAGES[name]
            out = tmp_path_factory.mktemp("sweep")
            run_sweep(ROOT / "scenarios" / f"{scenario}.yaml", grids, out_dir=out, des_sample=0, overrides=sets,
                      progress=False)
            done[name] = out
        return done[name]
    return sweep


@pytest.mark.parametrize("name", list(PAGES))
def test_every_chart_draws_in_chromium_with_no_console_error(tmp_path, chromium, sweeps, name):
    _plot(sweeps(name), tmp_path / "figs", "--no-png")
    page = tmp_path / "figs" / "index.html"
    shot = tmp_path / "dashboard.png"
    look = look_at_page(page, chromium, screenshot=shot)
    expected = PAGES[name][3]
    ids = [c["id"] for c in look.charts]
    assert ids == [f"{kind}-{i}" for kind, n in expected.items() for i in range(n)]  # every chart, none more
    assert len(ids) == page.read_text().count('class="plotly-graph-div"')
    assert not look.timed_out and look.undrawn() == [] and look.errors == []
    assert look.requests == [page.resolve().as_uri()]  # offline: the page alone, nothing fetched
    assert look.title == "specdecsim figures"
    width, height = png_size(shot)  # the whole page: every chart is 450 px high
    assert width == 1200 and height > 450 * len(ids)


def test_the_check_sees_a_page_whose_charts_do_not_draw(tmp_path, chromium, sweeps):
    """The same page without its plotly.js: an uncaught error, and no chart laid out."""
    _plot(sweeps("tp1 vllm engine profile"), tmp_path / "figs", "--no-png")
    text = (tmp_path / "figs" / "index.html").read_text()
    broken = tmp_path / "broken.html"
    broken.write_text(re.sub(r'<script type="text/javascript">.*?</script>', "", text, count=1, flags=re.S))
    look = look_at_page(broken, chromium, timeout_s=3)
    assert look.timed_out and len(look.charts) == 2
    assert look.undrawn() == [f"{c['id']}: not laid out" for c in look.charts]
    assert any("Plotly is not defined" in e for e in look.errors), look.errors


def test_plot_writes_a_png_per_chart_with_the_system_chromium(tmp_path, chromium, kaleido, sweeps, monkeypatch):
    monkeypatch.setenv("BROWSER_PATH", chromium)  # kaleido (choreographer) drives this browser
    out = _plot(sweeps("tp1 vllm engine profile"), tmp_path / "figs")
    assert "PNG" not in out
    pngs = sorted(p.name for p in (tmp_path / "figs").glob("*.png"))
    assert pngs == ["cycle_breakdown_0.png", "verify_latency_0.png"]  # one per chart on the page
    for p in pngs:
        assert png_size(tmp_path / "figs" / p) == (1100, 600)
        assert (tmp_path / "figs" / p).stat().st_size > 10_000  # a drawn chart, not a blank image
    assert [p.name for p in (tmp_path / "figs").iterdir() if p.name.startswith(".")] == []


def test_plot_says_in_one_line_when_kaleido_finds_no_browser(tmp_path, kaleido, sweeps, monkeypatch):
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-chromium-here"))
    out = _plot(sweeps("tp1 vllm engine profile"), tmp_path / "figs")
    notes = [line for line in out.splitlines() if "PNG" in line]
    assert notes == ["note: PNGs skipped: kaleido found no Chrome/Chromium (BROWSER_PATH names one)"]
    assert not list((tmp_path / "figs").glob("*.png")) and (tmp_path / "figs" / "index.html").is_file()
