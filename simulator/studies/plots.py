"""The dashboard of `specdecsim plot` and the page of `specdecsim search`: figures put on one
self-contained HTML page, PNG export, and the sweep folder's inputs read for them.

`specdecsim plot` writes one dashboard page per sweep (index.html: every chart as a section, a
table of contents, notes), self-contained and offline: plotly.js is inlined once (no CDN, no
external URL). PNG export needs kaleido (>= 1, the `browser` extra) and a Chrome or Chromium browser it
can find on PATH (Debian's chromium) or at BROWSER_PATH; without them it is skipped with a one-line note.

The figures come from `simulator.studies.sweep_plots` (sweep tables (`simulator.studies.sweep`), calibration-curve
tables (`simulator.studies.calibration_curves`), validate records) and `simulator.studies.serving_plots` (the
serving columns and crossover of `simulator.studies.serving_sweep`; the search's Pareto front). Nothing
here computes a modelled number.
"""

from __future__ import annotations

import html
from pathlib import Path

import plotly.graph_objects as go
from rich.console import Console
from rich.markup import escape

from pydantic import ValidationError

from simulator.files import HTML_GENERATOR, write_bytes_atomic, write_text_atomic
from simulator.inputs import UserInputError, format_validation_error
from simulator.studies.serving_plots import (SERVING_BEST_TITLE, SERVING_LATENCY_TITLE, has_serving_columns, search_figure,
                                     serving_best_num_steps_figures, serving_latency_figures)
from simulator.studies.sweep_files import DESCRIPTIVE_COLUMNS, read_sweep_meta, read_sweep_table, row_scenario
from simulator.studies.sweep_plots import (best_num_steps_figures, breakdown_figure, collective_figure, distinct_values,
                                   tok_per_s_figures, validation_figure, verify_figure)


# ---- files ----------------------------------------------------------------------------------------------
# What each chart shows, one line under its heading on the dashboard (text only).
SECTION_NOTES = {
    "tok_per_s_vs_acceptance": "System tokens/s against the acceptance rate, one line per placement and num_steps; "
                               "dashed: no speculation. One chart per combination of the other swept fields.",
    "best_num_steps": "Colour: the num_steps with the highest tokens/s in each cell; text: its speedup over no "
                      "speculation. One chart per combination of the other swept fields.",
    "cycle_breakdown": "Mean time per cycle by bucket for each placement and num_steps, the other swept fields "
                       "pinned at their middle value (in the title).",
    "serving_latency_vs_throughput": "Serving mode: TPOT p50 against output tokens/s as the load grows, with "
                                     "and without speculation; the crossover (speculation stops paying) marked.",
    "serving_best_num_steps": "Serving mode: the num_steps with the highest output tokens/s at each load; text: "
                              "its speedup over no speculation.",
    "allreduce_latency": "From the profile: allreduce latency against message size per world size (lines: the "
                         "model; markers: measured table points).",
    "verify_latency": "From the profile: the target verify forward's GPU time against tokens per request.",
    "predicted_vs_measured": "Each `specdecsim validate` record: predicted against measured tokens/s; on the "
                             "dashed line they agree.",
}
_CSS = ("body{font-family:system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:0 1em;color:#222}"
        "nav{background:#f4f4f4;padding:.5em 1em;border-radius:4px}nav li{margin:.2em 0}"
        "section{border-top:1px solid #ddd;margin-top:1.5em}p.what{color:#555}.plotly-graph-div{margin:1em 0}")


PLOTLYJS_MODES = ("inline", "file", "cdn")
PLOTLYJS_FILE = "plotly.min.js"


def _plotlyjs_script(mode: str) -> str:
    """The page's plotly.js: inlined (offline, about 4.7 MB a page), a file beside the page
    (offline, PLOTLYJS_FILE written once per folder), or plotly's CDN (small pages; needs network)."""
    from plotly.offline import get_plotlyjs
    if mode == "inline":
        return f'<script type="text/javascript">{get_plotlyjs()}</script>'
    if mode == "file":
        return f'<script type="text/javascript" src="{PLOTLYJS_FILE}"></script>'
    if mode == "cdn":
        from plotly.offline.offline import get_plotlyjs_version
        return f'<script type="text/javascript" src="https://cdn.plot.ly/plotly-{get_plotlyjs_version()}.min.js"></script>'
    raise ValueError(f"plotly.js mode {mode!r}: one of {', '.join(PLOTLYJS_MODES)}")


def write_plotlyjs(out_dir: Path) -> None:
    """plotly.js beside the pages of `out_dir` (mode 'file'): written once; an existing file that is
    not this plotly.js bundle is not replaced.

    Raises:
        UserInputError: a foreign file holds the name.
    """
    from plotly.offline import get_plotlyjs
    path = Path(out_dir) / PLOTLYJS_FILE
    js = get_plotlyjs()
    if path.is_file():
        with open(path, encoding="utf-8", errors="replace") as f:
            head = f.read(200)
        if head == js[:200] and path.stat().st_size == len(js.encode("utf-8")):
            return
        if "plotly.js" not in head:
            raise UserInputError(f"{path}: exists and is not plotly.js; move it, or give another --out")
    write_text_atomic(path, js)


def dashboard_html(sections: list[tuple[str, str, list[go.Figure]]], title: str, notes: list[str] = (),
                   summary: str = "", generator: bool = True, toc: bool = True, plotlyjs: str = "inline") -> str:
    """One self-contained page: a table of contents, one section per (anchor, title, figures)
    with its `SECTION_NOTES` line, then `notes`; plotly.js inlined once in the head, no external
    URL (works offline). Sections without figures are left out (say why in `notes`).

    Args:
        summary: a line under the title (what the figures come from).
        generator: mark the page as specdecsim's (`HTML_GENERATOR`: an output folder it may replace).
        toc: list the sections (and notes) at the top.
        plotlyjs: 'inline' (the default: one self-contained page), 'file' (PLOTLYJS_FILE beside the
            page, `write_plotlyjs`) or 'cdn' (`_plotlyjs_script`).
    """
    sections = [(a, t, figs) for a, t, figs in sections if figs]
    esc = html.escape
    contents = "".join(f'<li><a href="#{esc(a)}">{esc(t)}</a> ({len(figs)} figure{"s" * (len(figs) > 1)})</li>'
                  for a, t, figs in sections)
    if notes:
        contents += '<li><a href="#notes">notes</a></li>'
    body = []
    for anchor, sec_title, figs in sections:
        body.append(f'<section id="{esc(anchor)}"><h2>{esc(sec_title)}</h2>')
        if anchor in SECTION_NOTES:
            body.append(f'<p class="what">{esc(SECTION_NOTES[anchor])}</p>')
        # ids from the section and the figure's place: the same sweep gives the same page, byte for byte
        body += [fig.to_html(full_html=False, include_plotlyjs=False, include_mathjax=False,
                             config={"displaylogo": False}, div_id=f"{anchor}-{i}") for i, fig in enumerate(figs)]
        body.append("</section>")
    if notes:
        body.append('<section id="notes"><h2>notes</h2><ul>' + "".join(f"<li>{esc(n)}</li>" for n in notes)
                    + "</ul></section>")
    script = _plotlyjs_script(plotlyjs) if sections else ""
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">" + (HTML_GENERATOR if generator else "")
            + f"<title>{esc(title)}</title><style>{_CSS}</style>\n{script}\n</head>\n<body><h1>{esc(title)}</h1>\n"
            + (f"<p>{esc(summary)}</p>\n" if summary else "")
            + (f"<nav><strong>contents</strong><ul>{contents}</ul></nav>\n" if toc and contents else "")
            + "\n".join(body) + "\n</body></html>\n")


def search_html(rows: list[dict], pareto: list[int], axes: tuple, best_idx: int | None, objective: str) -> str:
    """The search's index.html: one chart, plotly.js inlined once."""
    return dashboard_html([("pareto_front", "Pareto front", [search_figure(rows, pareto, axes, best_idx, objective)])],
                          f"specdecsim search: {objective}", toc=False)


def _png_note(e: Exception) -> str:
    """One line saying why PNG export failed (kaleido's messages run over several lines)."""
    text = " ".join(str(e).split())
    if "Chrome" in text or "browser" in text.lower():
        return "PNGs skipped: kaleido found no Chrome/Chromium (BROWSER_PATH names one)"
    return f"PNGs skipped: {type(e).__name__}: {text[:160]}"


def have_kaleido() -> bool:
    """Whether kaleido (what plotly.io.write_images runs) is installed."""
    import importlib.util
    return importlib.util.find_spec("kaleido") is not None


def export_pngs(figs: list[tuple[go.Figure, Path]]) -> str | None:
    """Write each figure as a PNG (one kaleido browser for all: plotly.io.write_images) if kaleido
    (>= 1) and a Chrome/Chromium browser are there; else return one line saying why not. Each
    file is written atomically (through a temp folder beside it)."""
    if not figs:
        return None
    if not have_kaleido():
        return "PNGs skipped: kaleido is not installed (pip install 'specdecsim[browser]')"
    import tempfile

    import plotly.io as pio
    out_dir = figs[0][1].parent
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".png.", dir=out_dir) as tmp:
        tmp_paths = [Path(tmp) / f"{i}.png" for i in range(len(figs))]
        try:
            pio.write_images([f for f, _ in figs], tmp_paths, format="png", width=1100, height=600)
        except Exception as e:  # kaleido raises several types when no browser is found
            return _png_note(e)
        for t, (_, path) in zip(tmp_paths, figs):
            write_bytes_atomic(path, t.read_bytes())  # like every output: a regular file, never through a link
    return None


def export_png(fig: go.Figure, path: Path) -> str | None:
    """Write one figure as a PNG (`export_pngs`); returns why not, or None."""
    return export_pngs([(fig, Path(path))])


# what a chart needs to vary, said where it is not drawn
NEEDS = {
    "tok_per_s_vs_acceptance": "it needs at least two acceptance rates: sweep them too, e.g. "
                               "--grid acceptance.acceptance_rate=0.3:0.95:0.05",
    "best_num_steps": "it needs at least two num_steps and two acceptance rates: e.g. --grid spec.num_steps=1..6 "
                      "--grid acceptance.acceptance_rate=0.3:0.95:0.05",
}


def write_plots(rows: list[dict], out_dir: Path, grid_fields: list[str] = (), collective_rows: list[dict] = (),
                verify_rows: list[dict] = (), validate_records: list[dict] = (), png: bool = True,
                console: Console | None = None, crossover_rows: list[dict] = (), summary: str = "",
                extra_notes: list[str] = (), plotlyjs: str = "inline") -> Path:
    """Write the dashboard, index.html: every figure kind as a section of one self-contained page
    (plotly.js inlined once, a table of contents, notes), plus `{kind}_{i}.png` per figure when
    `png` and kaleido finds a browser. A sweep with serving columns also gets the serving charts
    (`crossover_rows`: sweep.json's `serving_crossover`). Returns the index.html path.

    Args:
        summary: a line under the page title (what the figures come from).
        extra_notes: lines for the page's notes (what a chart is drawn from, where it is not measured).
    """
    out_dir = Path(out_dir)
    kinds: list[tuple[str, str, list[go.Figure]]] = []
    if rows:
        kinds += [("tok_per_s_vs_acceptance", "Throughput vs acceptance rate",
                   [f for _, f in tok_per_s_figures(rows, grid_fields)]),
                  ("best_num_steps", "Best num_steps", [f for _, f in best_num_steps_figures(rows, grid_fields)]),
                  ("cycle_breakdown", "Cycle-time breakdown", [f for _, f in breakdown_figure(rows, grid_fields)])]
    if has_serving_columns(rows):
        kinds += [("serving_latency_vs_throughput", SERVING_LATENCY_TITLE,
                   [f for _, f in serving_latency_figures(rows, grid_fields, crossover_rows)]),
                  ("serving_best_num_steps", SERVING_BEST_TITLE,
                   [f for _, f in serving_best_num_steps_figures(rows, grid_fields)])]
    if collective_rows:
        kinds.append(("allreduce_latency", "Collective latency vs message size", [collective_figure(collective_rows)]))
    if verify_rows:
        kinds.append(("verify_latency", "Verify cost vs tokens", [verify_figure(verify_rows)]))
    if validate_records:
        kinds.append(("predicted_vs_measured", "Predicted vs measured", [validation_figure(validate_records)]))
    notes = [f"{title}: not drawn ({NEEDS.get(name, 'the table lacks the varying columns it needs')})"
             for name, title, figs in kinds if not figs] + list(extra_notes)
    if png:
        why = export_pngs([(f, out_dir / f"{name}_{i}.png") for name, _, figs in kinds for i, f in enumerate(figs)])
        if why:
            notes.append(why)
    index = out_dir / "index.html"
    if plotlyjs == "file" and any(figs for _, _, figs in kinds):
        write_plotlyjs(out_dir)
    write_text_atomic(index, dashboard_html(kinds, "specdecsim figures", notes, summary, plotlyjs=plotlyjs))
    if console is not None:
        for n in notes:
            console.print(f"[yellow]note:[/] {escape(n)}", highlight=False)
    return index


def load_validate_records(path: Path) -> list[dict]:
    """The points of a `specdecsim validate --json` file (`simulator.evidence.validate.ValidationReport`),
    as dicts with label, predicted_tok_per_s and measured_tok_per_s among their keys.

    Raises:
        UserInputError: naming the file and what is wrong.
    """
    from dataclasses import asdict

    from simulator.evidence.validate import load_validation_report
    return [asdict(p) for p in load_validation_report(Path(path)).points]


def _sweep_inputs(results: Path) -> tuple[list[dict], list[str], dict]:
    """(rows, grid fields, sweep.json as a dict or {}) from a sweep folder or CSV."""
    csv_path = results / "sweep.csv" if results.is_dir() else results
    meta_path = csv_path.parent / "sweep.json"
    if not csv_path.exists():
        raise UserInputError(f"{results}: no sweep CSV (expected a sweep folder with sweep.csv, or a CSV file)")
    rows = read_sweep_table(csv_path)
    meta = read_sweep_meta(meta_path).model_dump() if meta_path.exists() else {}
    if meta.get("num_points") and len(rows) != meta["num_points"]:  # a CSV cut inside a quoted cell still parses
        raise UserInputError(f"{csv_path}: {len(rows):,} rows where {meta_path.name} says the sweep has "
                             f"{meta['num_points']:,} points: the CSV is cut short or not this sweep's (run the "
                             "sweep again)")
    if meta.get("grids"):
        fields = [g["field"] for g in meta["grids"]]
    else:
        header = list(rows[0]) if rows else []
        fields = [c for c in header[:header.index("solver")] if c != "point_idx" and c not in DESCRIPTIVE_COLUMNS] \
            if "solver" in header else []
    return rows, fields, meta


MAX_VERIFY_CURVES = 12  # batch sizes the verify-cost chart draws a line of


def _tp_size(row: dict) -> int:
    v = str(row.get("tp_size", ""))
    return int(v) if v.isdigit() else 1


def collectives_left_out(rows: list[dict], engine_profile: str | None = None) -> str | None:
    """Why the collective-latency chart does not apply to a sweep (None: it does): no point runs a
    TP group (tp 1 throughout), or none prices a collective apart (its comm buckets are all 0 or
    absent: an engine profile measured the collectives inside its step)."""
    tp = [r for r in rows if _tp_size(r) > 1]
    if not tp:
        return "Collective latency: not drawn (every point runs tp 1: no TP group, no collective in the step)"
    if any(float(v or 0.0) > 0.0 for r in tp for k, v in r.items() if k.endswith("_comm_us")):
        return None
    how = (f"the engine profile {Path(engine_profile).name.removesuffix('.json')} measured them inside the step"
           if engine_profile else "its breakdown has no comm time")
    return f"Collective latency: not drawn (no point prices a collective apart: {how})"


def _curve_inputs(rows: list[dict], meta: dict, profile: str | None, csv_path: Path,
                  notes: list[str] | None = None) -> tuple[list[dict], list[dict]]:
    """Calibration-curve tables for the sweep's scenario on its (or the given) profile; the
    collective chart also draws the model's line at each TP size the sweep runs, and `notes` says
    where that size has no measured table (the line is then the collective model's alone). No
    collective table where the chart does not apply (`collectives_left_out`, said in `notes`)."""
    from simulator.studies.calibration_curves import collective_curve_table, verify_curve_table
    from simulator.scenario import load_profile_for
    if not rows and profile is None:
        return [], []
    sc = row_scenario(rows[0], f"{csv_path}: line 2") if rows else None
    ref = profile or next(iter((meta.get("profiles") or {}).values()), None) or sc.profile
    from simulator.profile import load_profile, resolve_profile_path
    try:
        prof = load_profile(resolve_profile_path(ref)) if sc is None else load_profile_for(sc, ref)[0]
    except FileNotFoundError as e:
        raise UserInputError(str(e)) from None
    except ValidationError as e:
        raise UserInputError(format_validation_error(str(ref), e)) from None
    coll_why = None if sc is None else collectives_left_out(rows, getattr(sc.serving_engine, "engine_profile", None))
    if coll_why and notes is not None:
        notes.append(coll_why)
    mode = "graph" if sc is None else sc.serving_engine.collective_mode(sc.workload.batch_size)
    measured = sorted({t.world_size for t in prof.collectives if t.op == "allreduce"})
    tps = sorted({_tp_size(r) for r in rows if _tp_size(r) > 1}
                 | ({sc.tp_size} if sc is not None and sc.tp_size > 1 else set()))
    coll = [] if coll_why else collective_curve_table(
        prof, "allreduce", mode, world_sizes=tuple(sorted(set(measured) | set(tps))) if measured else None)
    unmeasured = [w for w in tps if w not in measured]
    if unmeasured and coll and notes is not None:
        notes.append(f"Collective latency: profile {prof.name} has no measured allreduce table at world size "
                     f"{', '.join(map(str, unmeasured))} (measured: {', '.join(map(str, measured)) or 'none'}); "
                     "that line is the collective model's, from the box's links")
    batches = sorted(distinct_values(rows, "batch_size"))
    if len(batches) > MAX_VERIFY_CURVES:  # a line each; past a dozen the chart is unreadable and slow to price
        keep = sorted({round(i * (len(batches) - 1) / (MAX_VERIFY_CURVES - 1)) for i in range(MAX_VERIFY_CURVES)})
        if notes is not None:
            notes.append(f"Verify cost: {len(keep)} of the sweep's {len(batches)} batch sizes drawn, spread from "
                         f"{batches[0]} to {batches[-1]}")
        batches = [batches[i] for i in keep]
    verify = [] if sc is None else verify_curve_table(sc, prof, batch_sizes=tuple(batches))
    return coll, verify


def plot_sweep(results: Path, out: Path, profile: str | None = None, validate_json: Path | None = None,
               png: bool = True, console: Console | None = None, plotlyjs: str = "inline") -> Path:
    """All figures of a sweep folder/CSV (+ calibration curves, + validate records); returns index.html.

    Raises:
        UserInputError: unreadable results, profile or records, naming the file and field.
    """
    rows, fields, meta = _sweep_inputs(Path(results))
    csv_path = Path(results) / "sweep.csv" if Path(results).is_dir() else Path(results)
    curve_notes: list[str] = []
    coll, verify = _curve_inputs(rows, meta, profile, csv_path, curve_notes)
    records = load_validate_records(validate_json) if validate_json is not None else []
    summary = (f"{csv_path}: {len(rows):,} points"
               + (f" of {meta['scenario_path']}" if meta.get("scenario_path") else "")
               + (f", solver {meta['solver']}" if meta.get("solver") else "")
               + (f"; swept: {', '.join(fields)}" if fields else "")
               + (f"; validate records: {validate_json}" if validate_json is not None else ""))
    return write_plots(rows, out, fields, coll, verify, records, png=png, console=console,
                       crossover_rows=meta.get("serving_crossover") or [], summary=summary, extra_notes=curve_notes,
                       plotlyjs=plotlyjs)
