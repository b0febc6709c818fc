"""Plotly figures of serving: a serving sweep under load (`simulator.studies.serving_sweep`: TPOT vs output
tok/s along the swept load with the crossover marked, the best num_steps per load) and the
configuration search's Pareto front (`simulator.studies.search`). Nothing here computes a modelled number:
figures draw, filter and group table rows; `simulator.studies.plots` puts them on a page.
"""

from __future__ import annotations

import plotly.graph_objects as go

from simulator.studies.serving_sweep import LOAD_FIELDS, serving_best_num_steps
from simulator.studies.sweep_plots import MAX_FACETS, Figures, distinct_values, facet_columns, facet_title, split_facets

LOAD_TITLES = {"serving.arrivals.concurrency": ("concurrency (requests in flight, closed loop)", "c={}"),
               "serving.arrivals.rate_per_s": ("arrival rate (requests/s, Poisson)", "{} req/s")}
SERVING_LATENCY_TITLE = "Serving: TPOT vs output throughput across the load"
SERVING_BEST_TITLE = "Serving: best num_steps per load"


# ---- (f) serving under load --------------------------------------------------------------------------
def has_serving_columns(rows: list[dict]) -> bool:
    """Whether the sweep ran serving mode (its rows carry serving_* columns)."""
    return any(r.get("serving_output_tok_per_s") is not None for r in rows)


def serving_load_column(rows: list[dict]) -> str | None:
    """The swept serving load (concurrency or arrival rate) when it takes two values or more."""
    return next((f for f in LOAD_FIELDS if len(distinct_values(rows, f)) > 1), None)


def _crossover_for(group: list[dict], crossover_rows: list[dict], load: str) -> dict | None:
    """The sweep.json `serving_crossover` row whose other grid fields match every row of `group`."""
    skip = {"load_field", "crossover", "last_paying", "speedups"}
    for c in crossover_rows:
        if c.get("load_field") == load and all(r.get(k) == v for k, v in c.items() if k not in skip for r in group):
            return c
    return None


def _latency_trace(points: list[dict], tok_col: str, tpot_col: str, labels: list[str], **kw) -> go.Scatter:
    return go.Scatter(x=[r[tok_col] for r in points], y=[r[tpot_col] for r in points], text=labels,
                      mode="lines+markers+text", textposition="top center",
                      hovertemplate="%{text}<br>%{x:.1f} tok/s<br>TPOT p50 %{y:.2f} ms", **kw)


def serving_latency_figures(rows: list[dict], grid_fields: list[str] = (), crossover_rows: list[dict] = ()) -> Figures:
    """TPOT p50 (ms) vs output tok/s along the swept load, with speculation and without (the
    baseline columns), points labelled by the load; the crossover from sweep.json marked. One
    figure per combination of the other varying columns (num_steps among them)."""
    rows = [r for r in rows if r.get("serving_output_tok_per_s") is not None
            and r.get("serving_tpot_p50_ms") is not None]
    load = serving_load_column(rows)
    if load is None:
        return []
    axis_title, point_label = LOAD_TITLES[load]
    out = []
    for suffix, group in split_facets(rows, facet_columns(rows, (load,), grid_fields))[:MAX_FACETS]:
        line = sorted(group, key=lambda r: r[load])
        labels = [point_label.format(r[load]) for r in line]
        fig = go.Figure(_latency_trace(line, "serving_output_tok_per_s", "serving_tpot_p50_ms", labels,
                                       name="with speculation"))
        base = [(r, t) for r, t in zip(line, labels) if r.get("serving_baseline_output_tok_per_s") is not None
                and r.get("serving_baseline_tpot_p50_ms") is not None]
        if base:
            fig.add_trace(_latency_trace([r for r, _ in base], "serving_baseline_output_tok_per_s",
                                         "serving_baseline_tpot_p50_ms", [t for _, t in base],
                                         name="without speculation", line=dict(dash="dash", color="black")))
        cross = _crossover_for(group, list(crossover_rows), load)
        at = next((r for r in line if cross and r[load] == cross["crossover"]), None)
        if at is not None:
            text = f"crossover at {point_label.format(at[load])}: speculation stops paying"
            fig.add_trace(go.Scatter(x=[at["serving_output_tok_per_s"]], y=[at["serving_tpot_p50_ms"]],
                                     mode="markers", name=text, hoverinfo="name",
                                     marker=dict(symbol="x", size=16, color="red")))
            fig.add_annotation(x=at["serving_output_tok_per_s"], y=at["serving_tpot_p50_ms"], text=text,
                               showarrow=True, arrowhead=2, ax=0, ay=-40)
        elif cross is not None and cross["crossover"] is None:
            suffix = ", ".join(s for s in (suffix, "speculation pays at every swept load") if s)
        fig.update_layout(title=facet_title(SERVING_LATENCY_TITLE, suffix), legend_title=f"points: {axis_title}",
                          xaxis_title="output throughput (tokens/s, measured requests)", yaxis_title="TPOT p50 (ms)")
        out.append((suffix, fig))
    return out


def serving_best_num_steps_figures(rows: list[dict], grid_fields: list[str] = ()) -> Figures:
    """The num_steps with the highest serving output tok/s at each load (or batch size when no load
    is swept), text = its speedup over no speculation. Needs num_steps to vary."""
    rows = [r for r in rows if r.get("serving_output_tok_per_s") is not None]
    x_col = serving_load_column(rows) or ("batch_size" if len(distinct_values(rows, "batch_size")) > 1 else None)
    if x_col is None or len(distinct_values(rows, "num_steps")) < 2:
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
        fig.update_layout(title=facet_title(SERVING_BEST_TITLE + " (text: its speedup over no speculation)", suffix),
                          xaxis_title=x_title, yaxis_title="num_steps with the highest output tok/s")
        fig.update_xaxes(type="category")
        fig.update_yaxes(dtick=1)
        out.append((suffix, fig))
    return out


# ---- the configuration search ----------------------------------------------------------------------------
_AXIS_TITLES = {"tok_per_s_per_user": "tok/s per user", "tok_per_s_per_gpu": "tok/s per GPU",
                "num_gpus": "GPUs used (a dedicated draft GPU included)", "tpot_p50_ms": "TPOT p50 (ms)",
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
