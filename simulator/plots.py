"""Plotly figures from sweep tables (`simulator.sweep`, with the serving columns and crossover of
`simulator.serving.sweep`), calibration-curve tables (`simulator.calibration_curves`) and validate
records. Nothing here computes a modelled number: figures draw, filter and group table rows.

`specdecsim plot` writes one dashboard page per sweep (index.html: every chart as a section, a
table of contents, notes), self-contained and offline: plotly.js is inlined once (no CDN, no
external URL). PNG export needs kaleido (>= 1) and a Chrome or Chromium browser it can find (or
BROWSER_PATH); without them it is skipped with a one-line note.
"""

from __future__ import annotations

import html
import json
from pathlib import Path


import plotly.graph_objects as go
from rich.console import Console
from rich.markup import escape

from pydantic import ValidationError

from simulator.files import HTML_GENERATOR, write_bytes_atomic, write_text_atomic
from simulator.inputs import UserInputError, format_validation_error
from simulator.serving.sweep import LOAD_FIELDS, serving_best_num_steps
from simulator.sweep import (DESCRIPTIVE_COLUMNS, best_num_steps, cycle_breakdown_table, read_sweep_meta,
                             read_sweep_table, row_scenario)
from simulator.units import US_PER_MS

TOK_PER_S_TITLE = "throughput (tokens/s, system)"
ACCEPTANCE_TITLE = "acceptance rate (per draft token, 0..1)"
BREAKDOWN_GROUPS = (("draft_compute_us", "draft compute"), ("draft_comm_us", "draft comm"),
                    ("verify_compute_us", "verify compute"), ("verify_comm_us", "verify comm"),
                    ("draft_extend_us", "draft extend"), ("host_sync_us", "host / sync"))
LOAD_TITLES = {"serving.arrivals.concurrency": ("concurrency (requests in flight, closed loop)", "c={}"),
               "serving.arrivals.rate_per_s": ("arrival rate (requests/s, Poisson)", "{} req/s")}
SERVING_LATENCY_TITLE = "Serving: TPOT vs output throughput across the load"
SERVING_BEST_TITLE = "Serving: best num_steps per load"
MAX_FACETS = 12
MAX_BARS = 60
Figures = list[tuple[str, go.Figure]]


# ---- grouping helpers (no numbers computed) ---------------------------------------------------------
def _distinct(rows: list[dict], col: str) -> list:
    seen = []
    for r in rows:
        v = r.get(col)
        if v is not None and v not in seen:
            seen.append(v)
    return sorted(seen, key=lambda v: (isinstance(v, str), v)) if seen else []


def facet_columns(rows: list[dict], used: tuple[str, ...], grid_fields: list[str] = ()) -> list[str]:
    """Columns that vary across rows and are not drawn on an axis or as lines (each value: a figure)."""
    leaves = set(DESCRIPTIVE_COLUMNS)
    cands = list(DESCRIPTIVE_COLUMNS) + [g for g in grid_fields if g not in leaves and g.split(".")[-1] not in leaves]
    return [c for c in cands if c not in used and len(_distinct(rows, c)) > 1]


def split_facets(rows: list[dict], cols: list[str]) -> list[tuple[str, list[dict]]]:
    """(title suffix, rows) per combination of `cols`, in first-seen order."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(json.dumps(r.get(c)) for c in cols), []).append(r)
    return [(", ".join(f"{c}={json.loads(k)}" for c, k in zip(cols, key)), g) for key, g in groups.items()]


def _title(base: str, suffix: str) -> str:
    return f"{base} ({suffix})" if suffix else base


# ---- (a) tok/s vs acceptance rate ---------------------------------------------------------------------
def tok_per_s_figures(rows: list[dict], grid_fields: list[str] = ()) -> Figures:
    """tok/s vs acceptance rate, one line per placement x num_steps, the baseline dashed; one figure
    per combination of the other varying columns."""
    rows = [r for r in rows if r.get("acceptance_rate") is not None]
    if len(_distinct(rows, "acceptance_rate")) < 2:
        return []
    out = []
    facets = facet_columns(rows, ("acceptance_rate", "placement", "num_steps", "num_draft_tokens"), grid_fields)
    for suffix, group in split_facets(rows, facets)[:MAX_FACETS]:
        fig = go.Figure()
        for placement in _distinct(group, "placement"):
            for s in _distinct(group, "num_steps"):
                line = sorted((r for r in group if r["placement"] == placement and r["num_steps"] == s),
                              key=lambda r: r["acceptance_rate"])
                fig.add_trace(go.Scatter(x=[r["acceptance_rate"] for r in line], y=[r["tok_per_s"] for r in line],
                                         mode="lines+markers", name=f"{placement}, num_steps={s}"))
        base = sorted({r["acceptance_rate"]: r for r in group}.values(), key=lambda r: r["acceptance_rate"])
        fig.add_trace(go.Scatter(x=[r["acceptance_rate"] for r in base], y=[r["baseline_tok_per_s"] for r in base],
                                 mode="lines", name="baseline (no speculation)",
                                 line=dict(dash="dash", color="black")))
        fig.update_layout(title=_title("Throughput vs acceptance rate", suffix),
                          xaxis_title=ACCEPTANCE_TITLE, yaxis_title=TOK_PER_S_TITLE, legend_title="configuration")
        out.append((suffix, fig))
    return out


# ---- (b) best num_steps heatmap ---------------------------------------------------------------------------
def best_num_steps_figures(rows: list[dict], grid_fields: list[str] = ()) -> Figures:
    """Heatmap over acceptance rate x batch size (or context length): colour = best num_steps,
    cell text = its speedup. Needs num_steps and acceptance rate to vary."""
    rows = [r for r in rows if r.get("acceptance_rate") is not None]
    if len(_distinct(rows, "num_steps")) < 2 or len(_distinct(rows, "acceptance_rate")) < 2:
        return []
    y_col = "context_len" if (len(_distinct(rows, "batch_size")) < 2 and len(_distinct(rows, "context_len")) > 1) \
        else "batch_size"
    y_title = {"batch_size": "batch size (requests)", "context_len": "context length (tokens)"}[y_col]
    facets = facet_columns(rows, ("acceptance_rate", y_col, "num_steps", "num_draft_tokens"), grid_fields)
    out = []
    for suffix, group in split_facets(rows, facets)[:MAX_FACETS]:
        best = {(b["acceptance_rate"], b[y_col]): b for b in best_num_steps(group, ["acceptance_rate", y_col])}
        xs, ys = _distinct(group, "acceptance_rate"), _distinct(group, y_col)
        z = [[best[(x, y)]["best_num_steps"] if (x, y) in best else None for x in xs] for y in ys]
        text = [[f"{best[(x, y)]['speedup']:.2f}x" if (x, y) in best else "" for x in xs] for y in ys]
        fig = go.Figure(go.Heatmap(x=xs, y=[str(y) for y in ys], z=z, text=text, texttemplate="%{text}",
                                   colorscale="Viridis", colorbar=dict(title="best num_steps"),
                                   hovertemplate="acceptance rate %{x}<br>" + y_col +
                                                 " %{y}<br>best num_steps %{z}<br>speedup %{text}<extra></extra>"))
        fig.update_layout(title=_title("Best num_steps (colour) and its speedup over no speculation (text)", suffix),
                          xaxis_title=ACCEPTANCE_TITLE, yaxis_title=y_title)
        fig.update_yaxes(type="category")
        out.append((suffix, fig))
    return out


# ---- (c) cycle-time breakdown --------------------------------------------------------------------------
def _pin_other_columns(rows: list[dict], keep: tuple[str, ...], grid_fields: list[str]) -> tuple[list[dict], str]:
    """Rows where every other varying column sits at its middle value (so bars compare like with like)."""
    pinned = []
    for c in facet_columns(rows, keep, grid_fields):
        values = _distinct(rows, c)
        v = values[(len(values) - 1) // 2]
        rows = [r for r in rows if r.get(c) == v]
        pinned.append(f"{c}={v}")
    return rows, ", ".join(pinned)


def breakdown_figure(rows: list[dict], grid_fields: list[str] = ()) -> Figures:
    """Stacked bars of the cycle time per configuration (placement x num_steps), other columns pinned."""
    rows, pinned = _pin_other_columns(rows, ("placement", "num_steps", "num_draft_tokens"), grid_fields)
    table = sorted(cycle_breakdown_table(rows), key=lambda r: (str(r["placement"]), r["num_steps"]))[:MAX_BARS]
    labels = [f"{r['placement']}, num_steps={r['num_steps']}" for r in table]
    fig = go.Figure([go.Bar(x=labels, y=[r[col] for r in table], name=name) for col, name in BREAKDOWN_GROUPS])
    fig.update_layout(barmode="stack", title=_title("Where the cycle time goes", pinned),
                      xaxis_title="configuration (draft placement, num_steps)",
                      yaxis_title="time per cycle (us)", legend_title="bucket")
    return [(pinned, fig)]


# ---- (d) calibration curves ------------------------------------------------------------------------------
def collective_figure(curve_rows: list[dict]) -> go.Figure:
    """Collective latency vs message size, one line per world size (log-log); table points as markers."""
    fig = go.Figure()
    op = curve_rows[0]["op"] if curve_rows else "allreduce"
    for w in _distinct(curve_rows, "world_size"):
        model = sorted((r for r in curve_rows if r["world_size"] == w and r["source"] == "model"),
                       key=lambda r: r["size_bytes"])
        fig.add_trace(go.Scatter(x=[r["size_bytes"] for r in model], y=[r["latency_us"] for r in model],
                                 mode="lines", name=f"world size {w} (model)"))
        pts = [r for r in curve_rows if r["world_size"] == w and r["source"] != "model"]
        if pts:
            fig.add_trace(go.Scatter(x=[r["size_bytes"] for r in pts], y=[r["latency_us"] for r in pts],
                                     mode="markers", name=f"world size {w} ({pts[0]['source']})"))
    fig.update_layout(title=f"{op} latency vs message size", xaxis_title="message size per rank (bytes)",
                      yaxis_title="latency (us)")
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return fig


def verify_figure(curve_rows: list[dict]) -> go.Figure:
    """Verify-forward GPU time vs tokens per request, one line per batch size."""
    fig = go.Figure()
    for b in _distinct(curve_rows, "batch_size"):
        line = sorted((r for r in curve_rows if r["batch_size"] == b), key=lambda r: r["num_tokens_per_request"])
        fig.add_trace(go.Scatter(x=[r["num_tokens_per_request"] for r in line], y=[r["verify_us"] for r in line],
                                 mode="lines+markers", name=f"batch size {b}"))
    fig.update_layout(title="Target verify forward cost vs tokens verified",
                      xaxis_title="tokens per request in the forward (1 = decode)",
                      yaxis_title="verify forward GPU time (us)")
    return fig


# ---- (e) predicted vs measured ------------------------------------------------------------------------------
def _record_label(r: dict) -> str:
    if r.get("label") is not None:
        return str(r["label"])
    return ", ".join(f"{k}={v}" for k, v in r.items() if k not in ("predicted_tok_per_s", "measured_tok_per_s")
                     and isinstance(v, (str, int, bool)))


def validation_figure(records: list[dict]) -> go.Figure:
    """Predicted vs measured tok/s scatter with the y = x line (records from `specdecsim validate`)."""
    pred = [r["predicted_tok_per_s"] for r in records]
    meas = [r["measured_tok_per_s"] for r in records]
    lo, hi = min(pred + meas), max(pred + meas)
    fig = go.Figure([
        go.Scatter(x=pred, y=meas, mode="markers", name="runs", text=[_record_label(r) for r in records],
                   hovertemplate="%{text}<br>predicted %{x:.1f}<br>measured %{y:.1f}<extra></extra>"),
        go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="y = x", line=dict(dash="dash", color="black")),
    ])
    fig.update_layout(title="Predicted vs measured throughput", xaxis_title="predicted throughput (tokens/s)",
                      yaxis_title="measured throughput (tokens/s)")
    return fig


_AXIS_TITLES = {"tok_per_s_per_user": "tok/s per user", "tok_per_s_per_gpu": "tok/s per GPU",
                "num_gpus": "GPUs used (a dedicated draft GPU included)", "tpot_p50_us": "TPOT p50 (us)",
                "serving_goodput_tok_per_s": "goodput (tok/s)"}


def _config_label(r: dict) -> str:
    return (f"{r['placement']} tp{r['tp_size']} steps {r['num_steps']} topk {r['topk']} "
            f"ndt {r['num_draft_tokens']} batch {r['batch_size']}")


def search_figure(rows: list[dict], pareto: list[int], axes: tuple, best_idx: int | None, objective: str) -> go.Figure:
    """Feasible points, the Pareto front over `axes` ((column, maximise) x 2) and the best point."""
    (xc, _), (yc, _) = axes
    feasible = [r for r in rows if r["feasible"] and r.get(xc) is not None and r.get(yc) is not None]
    front = [rows[i] for i in pareto]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[r[xc] for r in feasible], y=[r[yc] for r in feasible], mode="markers",
                             name="configurations", marker=dict(color="lightgray", size=6),
                             text=[_config_label(r) for r in feasible], hoverinfo="text+x+y"))
    fig.add_trace(go.Scatter(x=[r[xc] for r in front], y=[r[yc] for r in front], mode="lines+markers",
                             name="Pareto front", line=dict(shape="hv" if xc != "num_gpus" else "linear"),
                             text=[_config_label(r) for r in front], hoverinfo="text+x+y"))
    if best_idx is not None:
        b = rows[best_idx]
        fig.add_trace(go.Scatter(x=[b[xc]], y=[b[yc]], mode="markers", name=f"best {objective}",
                                 marker=dict(symbol="star", size=16), text=[_config_label(b)], hoverinfo="text+x+y"))
    fig.update_layout(title=f"Pareto front ({len(front)} of {len(feasible)} feasible configurations)",
                      xaxis_title=_AXIS_TITLES.get(xc, xc), yaxis_title=_AXIS_TITLES.get(yc, yc))
    return fig


def search_html(rows: list[dict], pareto: list[int], axes: tuple, best_idx: int | None, objective: str) -> str:
    """The search's index.html: one chart, plotly.js inlined once."""
    return dashboard_html([("pareto_front", "Pareto front", [search_figure(rows, pareto, axes, best_idx, objective)])],
                          f"specdecsim search: {objective}", toc=False)


# ---- (f) serving under load --------------------------------------------------------------------------
def has_serving_columns(rows: list[dict]) -> bool:
    """Whether the sweep ran serving mode (its rows carry serving_* columns)."""
    return any(r.get("serving_output_tok_per_s") is not None for r in rows)


def serving_load_column(rows: list[dict]) -> str | None:
    """The swept serving load (concurrency or arrival rate) when it takes two values or more."""
    return next((f for f in LOAD_FIELDS if len(_distinct(rows, f)) > 1), None)


def _crossover_for(group: list[dict], crossover_rows: list[dict], load: str) -> dict | None:
    """The sweep.json `serving_crossover` row whose other grid fields match every row of `group`."""
    skip = {"load_field", "crossover", "last_paying", "speedups"}
    for c in crossover_rows:
        if c.get("load_field") == load and all(r.get(k) == v for k, v in c.items() if k not in skip for r in group):
            return c
    return None


def _latency_trace(points: list[dict], tok_col: str, tpot_col: str, labels: list[str], **kw) -> go.Scatter:
    return go.Scatter(x=[r[tok_col] for r in points], y=[r[tpot_col] / US_PER_MS for r in points], text=labels,
                      mode="lines+markers+text", textposition="top center",
                      hovertemplate="%{text}<br>%{x:.1f} tok/s<br>TPOT p50 %{y:.2f} ms", **kw)


def serving_latency_figures(rows: list[dict], grid_fields: list[str] = (), crossover_rows: list[dict] = ()) -> Figures:
    """TPOT p50 (ms) vs output tok/s along the swept load, with speculation and without (the
    baseline columns), points labelled by the load; the crossover from sweep.json marked. One
    figure per combination of the other varying columns (num_steps among them)."""
    rows = [r for r in rows if r.get("serving_output_tok_per_s") is not None
            and r.get("serving_tpot_p50_us") is not None]
    load = serving_load_column(rows)
    if load is None:
        return []
    axis_title, point_label = LOAD_TITLES[load]
    out = []
    for suffix, group in split_facets(rows, facet_columns(rows, (load,), grid_fields))[:MAX_FACETS]:
        line = sorted(group, key=lambda r: r[load])
        labels = [point_label.format(r[load]) for r in line]
        fig = go.Figure(_latency_trace(line, "serving_output_tok_per_s", "serving_tpot_p50_us", labels,
                                       name="with speculation"))
        base = [(r, t) for r, t in zip(line, labels) if r.get("serving_baseline_output_tok_per_s") is not None
                and r.get("serving_baseline_tpot_p50_us") is not None]
        if base:
            fig.add_trace(_latency_trace([r for r, _ in base], "serving_baseline_output_tok_per_s",
                                         "serving_baseline_tpot_p50_us", [t for _, t in base],
                                         name="without speculation", line=dict(dash="dash", color="black")))
        cross = _crossover_for(group, list(crossover_rows), load)
        at = next((r for r in line if cross and r[load] == cross["crossover"]), None)
        if at is not None:
            text = f"crossover at {point_label.format(at[load])}: speculation stops paying"
            fig.add_trace(go.Scatter(x=[at["serving_output_tok_per_s"]], y=[at["serving_tpot_p50_us"] / US_PER_MS],
                                     mode="markers", name=text, hoverinfo="name",
                                     marker=dict(symbol="x", size=16, color="red")))
            fig.add_annotation(x=at["serving_output_tok_per_s"], y=at["serving_tpot_p50_us"] / US_PER_MS, text=text,
                               showarrow=True, arrowhead=2, ax=0, ay=-40)
        elif cross is not None and cross["crossover"] is None:
            suffix = ", ".join(s for s in (suffix, "speculation pays at every swept load") if s)
        fig.update_layout(title=_title(SERVING_LATENCY_TITLE, suffix), legend_title=f"points: {axis_title}",
                          xaxis_title="output throughput (tokens/s, measured requests)", yaxis_title="TPOT p50 (ms)")
        out.append((suffix, fig))
    return out


def serving_best_num_steps_figures(rows: list[dict], grid_fields: list[str] = ()) -> Figures:
    """The num_steps with the highest serving output tok/s at each load (or batch size when no load
    is swept), text = its speedup over no speculation. Needs num_steps to vary."""
    rows = [r for r in rows if r.get("serving_output_tok_per_s") is not None]
    x_col = serving_load_column(rows) or ("batch_size" if len(_distinct(rows, "batch_size")) > 1 else None)
    if x_col is None or len(_distinct(rows, "num_steps")) < 2:
        return []
    x_title = LOAD_TITLES[x_col][0] if x_col in LOAD_TITLES else "batch size (requests)"
    out = []
    facets = facet_columns(rows, (x_col, "num_steps", "num_draft_tokens"), grid_fields)
    for suffix, group in split_facets(rows, facets)[:MAX_FACETS]:
        best = sorted(serving_best_num_steps(group, [x_col]), key=lambda b: b[x_col])
        fig = go.Figure(go.Scatter(
            x=[str(b[x_col]) for b in best], y=[b["best_num_steps"] for b in best], mode="lines+markers+text",
            line=dict(shape="hv"), textposition="top center", name="best num_steps",
            text=[f"{b['serving_speedup']:.2f}x" if b["serving_speedup"] is not None else "" for b in best],
            customdata=[b["serving_output_tok_per_s"] for b in best],
            hovertemplate=x_col + " %{x}<br>best num_steps %{y}<br>%{customdata:.1f} tok/s, %{text}<extra></extra>"))
        fig.update_layout(title=_title(SERVING_BEST_TITLE + " (text: its speedup over no speculation)", suffix),
                          xaxis_title=x_title, yaxis_title="num_steps with the highest output tok/s")
        fig.update_xaxes(type="category")
        fig.update_yaxes(dtick=1)
        out.append((suffix, fig))
    return out


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


def dashboard_html(sections: list[tuple[str, str, list[go.Figure]]], title: str, notes: list[str] = (),
                   summary: str = "", generator: bool = True, toc: bool = True) -> str:
    """One self-contained page: a table of contents, one section per (anchor, title, figures)
    with its `SECTION_NOTES` line, then `notes`; plotly.js inlined once in the head, no external
    URL (works offline). Sections without figures are left out (say why in `notes`).

    Args:
        summary: a line under the title (what the figures come from).
        generator: mark the page as specdecsim's (`HTML_GENERATOR`: an output folder it may replace).
        toc: list the sections (and notes) at the top.
    """
    from plotly.offline import get_plotlyjs
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
        body += [fig.to_html(full_html=False, include_plotlyjs=False, include_mathjax=False,
                             config={"displaylogo": False}) for fig in figs]
        body.append("</section>")
    if notes:
        body.append('<section id="notes"><h2>notes</h2><ul>' + "".join(f"<li>{esc(n)}</li>" for n in notes)
                    + "</ul></section>")
    script = f'<script type="text/javascript">{get_plotlyjs()}</script>' if sections else ""
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">" + (HTML_GENERATOR if generator else "")
            + f"<title>{esc(title)}</title><style>{_CSS}</style>\n{script}\n</head>\n<body><h1>{esc(title)}</h1>\n"
            + (f"<p>{esc(summary)}</p>\n" if summary else "")
            + (f"<nav><strong>contents</strong><ul>{contents}</ul></nav>\n" if toc and contents else "")
            + "\n".join(body) + "\n</body></html>\n")


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
        return "PNGs skipped: kaleido is not installed (pip install kaleido; needs Chrome)"
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


def write_plots(rows: list[dict], out_dir: Path, grid_fields: list[str] = (), collective_rows: list[dict] = (),
                verify_rows: list[dict] = (), validate_records: list[dict] = (), png: bool = True,
                console: Console | None = None, crossover_rows: list[dict] = (), summary: str = "") -> Path:
    """Write the dashboard, index.html: every figure kind as a section of one self-contained page
    (plotly.js inlined once, a table of contents, notes), plus `{kind}_{i}.png` per figure when
    `png` and kaleido finds a browser. A sweep with serving columns also gets the serving charts
    (`crossover_rows`: sweep.json's `serving_crossover`). Returns the index.html path.

    Args:
        summary: a line under the page title (what the figures come from).
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
    notes = [f"{title}: not drawn (the table lacks the varying columns it needs)" for _, title, figs in kinds
             if not figs]
    if png:
        why = export_pngs([(f, out_dir / f"{name}_{i}.png") for name, _, figs in kinds for i, f in enumerate(figs)])
        if why:
            notes.append(why)
    index = out_dir / "index.html"
    write_text_atomic(index, dashboard_html(kinds, "specdecsim figures", notes, summary))
    if console is not None:
        for n in notes:
            console.print(f"[yellow]note:[/] {escape(n)}", highlight=False)
    return index


def load_validate_records(path: Path) -> list[dict]:
    """The points of a `specdecsim validate --json` file (`simulator.validate.ValidationReport`),
    as dicts with label, predicted_tok_per_s and measured_tok_per_s among their keys.

    Raises:
        UserInputError: naming the file and what is wrong.
    """
    from dataclasses import asdict

    from simulator.validate import load_validation_report
    return [asdict(p) for p in load_validation_report(Path(path)).points]


def _sweep_inputs(results: Path) -> tuple[list[dict], list[str], dict]:
    """(rows, grid fields, sweep.json as a dict or {}) from a sweep folder or CSV."""
    csv_path = results / "sweep.csv" if results.is_dir() else results
    meta_path = csv_path.parent / "sweep.json"
    if not csv_path.exists():
        raise UserInputError(f"{results}: no sweep CSV (expected a sweep folder with sweep.csv, or a CSV file)")
    rows = read_sweep_table(csv_path)
    meta = read_sweep_meta(meta_path).model_dump() if meta_path.exists() else {}
    if meta.get("grids"):
        fields = [g["field"] for g in meta["grids"]]
    else:
        header = list(rows[0]) if rows else []
        fields = [c for c in header[:header.index("solver")] if c != "point_idx" and c not in DESCRIPTIVE_COLUMNS] \
            if "solver" in header else []
    return rows, fields, meta


def _curve_inputs(rows: list[dict], meta: dict, profile: str | None, csv_path: Path) -> tuple[list[dict], list[dict]]:
    """Calibration-curve tables for the sweep's scenario on its (or the given) profile."""
    from simulator.calibration_curves import collective_curve_table, verify_curve_table
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
    mode = "graph" if sc is None else sc.serving_engine.collective_mode(sc.workload.batch_size)
    coll = collective_curve_table(prof, "allreduce", mode)
    verify = [] if sc is None else verify_curve_table(sc, prof, batch_sizes=tuple(_distinct(rows, "batch_size")))
    return coll, verify


def plot_sweep(results: Path, out: Path, profile: str | None = None, validate_json: Path | None = None,
               png: bool = True, console: Console | None = None) -> Path:
    """All figures of a sweep folder/CSV (+ calibration curves, + validate records); returns index.html.

    Raises:
        UserInputError: unreadable results, profile or records, naming the file and field.
    """
    rows, fields, meta = _sweep_inputs(Path(results))
    csv_path = Path(results) / "sweep.csv" if Path(results).is_dir() else Path(results)
    coll, verify = _curve_inputs(rows, meta, profile, csv_path)
    records = load_validate_records(validate_json) if validate_json is not None else []
    summary = (f"{csv_path}: {len(rows):,} points"
               + (f" of {meta['scenario_path']}" if meta.get("scenario_path") else "")
               + (f", solver {meta['solver']}" if meta.get("solver") else "")
               + (f"; swept: {', '.join(fields)}" if fields else "")
               + (f"; validate records: {validate_json}" if validate_json is not None else ""))
    return write_plots(rows, out, fields, coll, verify, records, png=png, console=console,
                       crossover_rows=meta.get("serving_crossover") or [], summary=summary)
