"""Figures from sweep tables, calibration curves and validate records; offline HTML output."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from simulator.studies.calibration_curves import collective_curve_table, verify_curve_table
from simulator.files import HTML_GENERATOR
from simulator.studies.plots import SECTION_NOTES, write_plots
from simulator.studies.sweep_plots import (BREAKDOWN_GROUPS, best_num_steps_figures, breakdown_figure, collective_figure,
                                   tok_per_s_figures, validation_figure, verify_figure)
from simulator.cli.plot import plot_command
from simulator.studies.sweep import best_num_steps, run_sweep
from tests.conftest import flat_profile, make_scenario

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "tp1_draft.yaml"
GRIDS = ["spec.num_steps=1..3", "acceptance.acceptance_rate=0.5,0.7,0.9", "placement=shared_tp,tp1_colocated",
         "workload.batch_size=1,4"]


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sweep")
    run_sweep(SCENARIO, GRIDS, out_dir=out, des_sample=0, progress=False)
    return out


@pytest.fixture(scope="module")
def rows(sweep_dir):
    from simulator.studies.sweep import read_sweep_table
    return read_sweep_table(sweep_dir / "sweep.csv")


def test_tok_per_s_figure_has_a_line_per_placement_and_num_steps_and_a_dashed_baseline(rows):
    figs = tok_per_s_figures(rows, [g.split("=")[0] for g in GRIDS])
    assert len(figs) == 2  # one per batch size
    suffix, fig = figs[0]
    assert "batch_size=1" in suffix
    names = [t.name for t in fig.data]
    assert {f"{p}, num_steps={s}" for p in ("shared_tp", "tp1_colocated") for s in (1, 2, 3)} <= set(names)
    base = next(t for t in fig.data if t.name.startswith("baseline"))
    assert base.line.dash == "dash"
    assert list(base.x) == [0.5, 0.7, 0.9]
    assert "tokens/s" in fig.layout.yaxis.title.text and "acceptance rate" in fig.layout.xaxis.title.text


def test_best_num_steps_heatmap_cells(rows):
    figs = best_num_steps_figures(rows, [g.split("=")[0] for g in GRIDS])
    assert len(figs) == 2  # one per placement
    suffix, fig = figs[0]
    hm = fig.data[0]
    assert list(hm.x) == [0.5, 0.7, 0.9] and list(hm.y) == ["1", "4"]
    group = [r for r in rows if f"placement={r['placement']}" == suffix]
    best = {(b["acceptance_rate"], b["batch_size"]): b
            for b in best_num_steps(group, ["acceptance_rate", "batch_size"])}
    assert hm.z[1][2] == best[(0.9, 4)]["best_num_steps"]
    assert hm.text[1][2] == f"{best[(0.9, 4)]['speedup']:.2f}x"
    assert fig.layout.yaxis.title.text == "batch size (requests)"


def test_breakdown_figure_stacks_the_six_buckets(rows):
    [(pinned, fig)] = breakdown_figure(rows, [g.split("=")[0] for g in GRIDS])
    assert fig.layout.barmode == "stack"
    assert [t.name for t in fig.data] == [name for _, name in BREAKDOWN_GROUPS]
    assert len(fig.data[0].x) == 6  # 2 placements x 3 num_steps, other columns pinned
    assert "acceptance_rate=0.7" in pinned and "batch_size=1" in pinned
    assert fig.layout.yaxis.title.text == "time per cycle (us)"


def test_calibration_curves_are_log_log_per_world_size():
    prof = flat_profile(coll_us=5.0)
    fig = collective_figure(collective_curve_table(prof, world_sizes=(2, 8)))
    assert [t.name for t in fig.data] == ["world size 2 (model)", "world size 8 (model)"]
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert "(bytes)" in fig.layout.xaxis.title.text and "(us)" in fig.layout.yaxis.title.text
    vfig = verify_figure(verify_curve_table(make_scenario(), prof, (1, 2, 4), batch_sizes=(1, 8)))
    assert [t.name for t in vfig.data] == ["batch size 1", "batch size 8"]
    assert list(vfig.data[0].x) == [1, 2, 4]
    assert "(us)" in vfig.layout.yaxis.title.text


def test_verify_curve_grows_with_tokens():
    from simulator.scenario import load_profile_for, load_scenario
    sc = load_scenario(SCENARIO)  # Llama-3.1-70B TP8 on the h200 datasheet roofline: compute-bound at 64 x 65
    prof, _ = load_profile_for(sc, base_dir=SCENARIO.parent)
    table = verify_curve_table(sc, prof, (1, 2, 8, 64, 65), batch_sizes=(64,))
    costs = [r["verify_us"] for r in table]
    assert costs == sorted(costs) and costs[-1] > costs[0]


def test_validation_scatter_has_the_identity_line():
    recs = [dict(label="a", predicted_tok_per_s=100.0, measured_tok_per_s=110.0),
            dict(label="b", predicted_tok_per_s=200.0, measured_tok_per_s=190.0)]
    fig = validation_figure(recs)
    pts, ident = fig.data
    assert list(pts.x) == [100.0, 200.0] and list(pts.text) == ["a", "b"]
    assert list(ident.x) == list(ident.y) == [100.0, 200.0]
    assert "predicted" in fig.layout.xaxis.title.text and "tokens/s" in fig.layout.yaxis.title.text


class _ExternalRefs(HTMLParser):
    """Attributes of HTML tags that would fetch or link something (script bodies are not tags)."""

    def __init__(self):
        super().__init__()
        self.refs: list[tuple[str, str, str]] = []
        self.script_srcs: list[str] = []

    def handle_starttag(self, tag, attrs):
        for k, v in attrs:
            if k in ("src", "href") and v:
                self.refs.append((tag, k, v))
            if tag == "script" and k == "src":
                self.script_srcs.append(v or "")


def test_one_offline_dashboard_with_plotly_inlined_once_and_a_table_of_contents(tmp_path, rows):
    recs = [dict(label="x", predicted_tok_per_s=1.0, measured_tok_per_s=1.2)]
    index = write_plots(rows, tmp_path, [g.split("=")[0] for g in GRIDS],
                        collective_rows=collective_curve_table(flat_profile(), world_sizes=(2,)),
                        validate_records=recs, png=False, summary="a sweep of tp1_draft")
    assert index == tmp_path / "index.html"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.html"]  # one page, nothing else
    text = index.read_text()
    p = _ExternalRefs()
    p.feed(text)
    assert p.script_srcs == []
    assert [r for r in p.refs if not r[2].startswith("#")] == []  # no external URL, no other file
    sections = ["tok_per_s_vs_acceptance", "best_num_steps", "cycle_breakdown", "allreduce_latency",
                "predicted_vs_measured"]
    assert [v for _, _, v in p.refs] == [f"#{s}" for s in sections]  # the contents, in page order
    for s in sections:
        assert f'<section id="{s}">' in text and SECTION_NOTES[s] in text
    assert text.count("plotly.js v") == 1 and "cdn.plot.ly/plotly" not in text  # inlined once, not fetched
    assert text.count('class="plotly-graph-div"') == 2 + 2 + 1 + 1 + 1  # every figure of every kind
    assert "a sweep of tp1_draft" in text and HTML_GENERATOR in text


def test_dashboard_is_about_the_size_of_plotly_js_alone(tmp_path, rows):
    from plotly.offline import get_plotlyjs
    index = write_plots(rows, tmp_path, [g.split("=")[0] for g in GRIDS], png=False)
    assert len(get_plotlyjs()) < index.stat().st_size < len(get_plotlyjs()) + 500_000


def test_kinds_that_cannot_be_drawn_are_noted_not_listed(tmp_path, rows):
    one = [r for r in rows if r["acceptance_rate"] == 0.7]  # acceptance does not vary: two kinds not drawn
    text = write_plots(one, tmp_path, [g.split("=")[0] for g in GRIDS], png=False).read_text()
    assert '<section id="tok_per_s_vs_acceptance">' not in text and '<section id="cycle_breakdown">' in text
    assert "Throughput vs acceptance rate: not drawn" in text and '<a href="#notes">notes</a>' in text
    assert "it needs at least two acceptance rates: sweep them too, e.g. --grid acceptance.acceptance_rate=" in text


def test_png_note_is_one_line_when_kaleido_finds_no_browser(tmp_path, rows, monkeypatch):
    import types

    import plotly.io as pio

    from simulator.studies import plots

    def no_browser(*a, **k):  # what kaleido 1.5 raises without Chrome (its message, verbatim)
        raise RuntimeError("\n\nKaleido requires Google Chrome to be installed.\n\nEither download and install "
                           "Chrome yourself following Google's instructions for your operating system,\nor install "
                           "it from your terminal by running:\n\n    $ plotly_get_chrome\n\n")
    monkeypatch.setattr(plots, "have_kaleido", lambda: True)
    monkeypatch.setattr(pio, "write_images", no_browser)
    lines = []
    console = types.SimpleNamespace(print=lambda text, **k: lines.append(text))
    write_plots(rows, tmp_path, [g.split("=")[0] for g in GRIDS], console=console)
    png_notes = [n for n in lines if "PNG" in n]
    assert len(png_notes) == 1 and "\n" not in png_notes[0] and "no Chrome/Chromium" in png_notes[0]
    assert len("note: " + png_notes[0].removeprefix("[yellow]note:[/] ")) <= 80  # one line on a terminal
    assert not list(tmp_path.glob("*.png")) and not list(tmp_path.glob(".png.*"))


def test_pngs_are_written_beside_the_dashboard_when_kaleido_works(tmp_path, rows, monkeypatch):
    import plotly.io as pio

    from simulator.studies import plots

    def fake_write_images(figs, paths, **k):  # stands in for kaleido: a file per figure
        assert len(figs) == len(paths)
        for p in paths:
            Path(p).write_bytes(b"\x89PNG fake")
    monkeypatch.setattr(plots, "have_kaleido", lambda: True)
    monkeypatch.setattr(pio, "write_images", fake_write_images)
    write_plots(rows, tmp_path, [g.split("=")[0] for g in GRIDS])
    assert sorted(p.name for p in tmp_path.glob("*.png")) == [
        "best_num_steps_0.png", "best_num_steps_1.png", "cycle_breakdown_0.png", "tok_per_s_vs_acceptance_0.png",
        "tok_per_s_vs_acceptance_1.png"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # the temp folder is gone


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command("plot")(plot_command)

    @app.command("noop")
    def _noop() -> None:
        pass
    return app


def test_plot_command_from_a_sweep_folder(tmp_path, sweep_dir, rows):
    r = CliRunner().invoke(_app(), ["plot", str(sweep_dir), "--out", str(tmp_path / "figs"), "--no-png"])
    assert r.exit_code == 0, r.output
    text = (tmp_path / "figs" / "index.html").read_text()
    assert '<section id="verify_latency">' in text  # curves from the sweep's scenario and profile
    assert f"sweep.csv: {len(rows)} points of" in text and "swept: spec.num_steps" in text  # said at the top


def test_plot_command_bad_inputs_exit_2(tmp_path, sweep_dir):
    r = CliRunner().invoke(_app(), ["plot", str(tmp_path / "nothing"), "--out", str(tmp_path / "figs")])
    assert r.exit_code == 2 and "no sweep CSV" in r.output
    bad = tmp_path / "v.json"
    bad.write_text('[{"predicted_tok_per_s": 1.0}]')
    r = CliRunner().invoke(_app(), ["plot", str(sweep_dir), "--out", str(tmp_path / "figs"),
                                    "--validate-json", str(bad)])
    assert r.exit_code == 2 and "not a `specdecsim validate --json` file" in r.output
    bad.write_text('{"specdecsim_output": "validation/1", "profile": "p", "summaries": [], '
                   '"points": [{"predicted_tok_per_s": 1.0}]}')
    r = CliRunner().invoke(_app(), ["plot", str(sweep_dir), "--out", str(tmp_path / "figs"),
                                    "--validate-json", str(bad)])
    assert r.exit_code == 2 and "measured_tok_per_s" in r.output


def test_the_same_sweep_gives_the_same_page_byte_for_byte(tmp_path, sweep_dir):
    for name in ("a", "b"):
        r = CliRunner().invoke(_app(), ["plot", str(sweep_dir), "--out", str(tmp_path / name), "--no-png"])
        assert r.exit_code == 0, r.output
    a, b = ((tmp_path / n / "index.html").read_bytes() for n in ("a", "b"))
    assert a == b and b'id="tok_per_s_vs_acceptance-0"' in a


def test_a_tp8_dashboard_says_its_collective_line_is_not_measured(tmp_path):
    out = tmp_path / "sweep"
    run_sweep(ROOT / "scenarios" / "tp8_draft.yaml", ["spec.num_steps=1,2"], out_dir=out, des_sample=0,
              progress=False)
    r = CliRunner().invoke(_app(), ["plot", str(out), "--out", str(tmp_path / "figs"), "--no-png"])
    assert r.exit_code == 0, r.output
    text = (tmp_path / "figs" / "index.html").read_text()
    assert "no measured allreduce table at world size 8" in text and "world size 8 (model)" in text


def test_plotlyjs_beside_the_page_or_from_the_cdn_makes_small_pages(tmp_path, sweep_dir):
    r = CliRunner().invoke(_app(), ["plot", str(sweep_dir), "--out", str(tmp_path / "f"), "--no-png",
                                    "--plotlyjs", "file"])
    assert r.exit_code == 0, r.output
    page = (tmp_path / "f" / "index.html").read_text()
    assert len(page) < 500_000 and 'src="plotly.min.js"' in page
    assert (tmp_path / "f" / "plotly.min.js").stat().st_size > 1_000_000
    r = CliRunner().invoke(_app(), ["plot", str(sweep_dir), "--out", str(tmp_path / "f"), "--no-png",
                                    "--plotlyjs", "file"])  # again: plotly.js kept, the page replaced
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(_app(), ["plot", str(sweep_dir), "--out", str(tmp_path / "c"), "--no-png",
                                    "--plotlyjs", "cdn"])
    assert r.exit_code == 0 and "https://cdn.plot.ly/plotly-" in (tmp_path / "c" / "index.html").read_text()
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "plotly.min.js").write_text("my own script")
    r = CliRunner().invoke(_app(), ["plot", str(sweep_dir), "--out", str(tmp_path / "x"), "--no-png",
                                    "--plotlyjs", "file"])
    assert r.exit_code != 0 and "--force" in r.output  # a folder of someone else's files
    r = CliRunner().invoke(_app(), ["plot", str(sweep_dir), "--out", str(tmp_path / "x"), "--no-png",
                                    "--plotlyjs", "file", "--force"])
    assert r.exit_code != 0 and "not plotly.js" in r.output  # --force writes the page, never over that file
    assert (tmp_path / "x" / "plotly.min.js").read_text() == "my own script"
    r = CliRunner().invoke(_app(), ["plot", str(sweep_dir), "--out", str(tmp_path / "y"), "--plotlyjs", "web"])
    assert r.exit_code != 0 and "--plotlyjs" in r.output


def _plot_sections(tmp_path, scenario: Path, grids: list[str]) -> tuple[list[str], str]:
    out = tmp_path / "sweep"
    run_sweep(scenario, grids, out_dir=out, des_sample=0, progress=False)
    r = CliRunner().invoke(_app(), ["plot", str(out), "--out", str(tmp_path / "figs"), "--no-png"])
    assert r.exit_code == 0, r.output
    text = (tmp_path / "figs" / "index.html").read_text()
    return re.findall(r'<section id="([a-z_]+)">', text), text


def test_a_tp1_dashboard_has_no_collective_chart(tmp_path):
    """Issue 49: a TP1 scenario priced from an engine profile drew allreduce latency at world size 2."""
    sections, text = _plot_sections(tmp_path, ROOT / "scenarios" / "vllm_llama8b_h200.yaml", ["spec.num_steps=1,2"])
    assert sections == ["cycle_breakdown", "verify_latency", "notes"]
    assert "Collective latency: not drawn (every point runs tp 1" in text and 'id="allreduce_latency' not in text


@pytest.mark.parametrize("measured_inside", [True, False])
def test_collective_chart_only_where_the_step_prices_collectives_apart(tmp_path, measured_inside):
    """A TP2 scenario priced from an engine profile measured at TP2: with the collectives inside its
    measured step (collectives_measured) the chart does not apply; a per-rank shard's profile (the
    collectives priced from the box's links) keeps it."""
    prof = json.loads((ROOT / "data" / "engine_profiles" / "vllm-0.26.0-h200-llama-3.1-8b-eagle3.json").read_text())
    prof.update(name="vllm-tp2-test", tp_size=2, collectives_measured=measured_inside)
    (tmp_path / "tp2.json").write_text(json.dumps(prof))
    sc = yaml.safe_load((ROOT / "scenarios" / "vllm_llama8b_h200.yaml").read_text())
    sc.update(tp_size=2)
    sc["serving_engine"]["engine_profile"] = "tp2.json"
    (tmp_path / "tp2.yaml").write_text(yaml.safe_dump(sc))
    sections, text = _plot_sections(tmp_path, tmp_path / "tp2.yaml", ["spec.num_steps=1,2"])
    header = (tmp_path / "sweep" / "sweep.csv").read_text().split("\n", 1)[0].split(",")
    assert ("verify_comm_us" in header) is not measured_inside  # the profile prices the points (no comm apart)
    if measured_inside:
        assert "allreduce_latency" not in sections
        assert "the engine profile tp2 measured them inside the step" in text
    else:
        assert "allreduce_latency" in sections and "Collective latency: not drawn" not in text


def test_png_note_names_the_extra_when_kaleido_is_not_installed(tmp_path, rows, monkeypatch):
    from simulator.studies import plots
    monkeypatch.setattr(plots, "have_kaleido", lambda: False)
    index = write_plots(rows, tmp_path, [g.split("=")[0] for g in GRIDS])
    assert "PNGs skipped: kaleido is not installed (pip install &#x27;specdecsim[browser]&#x27;)" in index.read_text()
    assert not list(tmp_path.glob("*.png"))


def test_the_sweep_knows_every_chart_kind_of_the_dashboard():  # it removes an earlier dashboard's PNGs by kind
    from simulator.studies.sweep_files import CHART_KINDS
    assert sorted(CHART_KINDS) == sorted(SECTION_NOTES)
