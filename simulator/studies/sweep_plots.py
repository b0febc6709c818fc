"""Plotly figures of a sweep table (`simulator.studies.sweep`): throughput vs acceptance rate, the best
num_steps, the cycle-time breakdown; of the profile's calibration curves
(`simulator.studies.calibration_curves`: collective latency, verify cost) and of `specdecsim validate`
records; and the faceting every chart shares (one figure per combination of the columns it does
not draw). Nothing here computes a modelled number: figures draw, filter and group table rows.
`simulator.studies.plots` puts them on the dashboard page.
"""

from __future__ import annotations

import json

import plotly.graph_objects as go

from simulator.studies.sweep import best_num_steps, cycle_breakdown_table
from simulator.studies.sweep_files import DESCRIPTIVE_COLUMNS

TOK_PER_S_TITLE = "throughput (tokens/s, system)"
ACCEPTANCE_TITLE = "acceptance rate (per draft token, 0..1)"
BREAKDOWN_GROUPS = (("draft_compute_us", "draft compute"), ("draft_comm_us", "draft comm"),
                    ("verify_compute_us", "verify compute"), ("verify_comm_us", "verify comm"),
                    ("draft_extend_us", "draft extend"), ("host_sync_us", "host / sync"))
MAX_FACETS = 12
MAX_BARS = 60
Figures = list[tuple[str, go.Figure]]


# ---- grouping helpers (no numbers computed) ---------------------------------------------------------
def distinct_values(rows: list[dict], col: str) -> list:
    """The values `col` takes in `rows` (None left out), sorted: numbers first, then strings."""
    import json
    seen: dict = {}  # keyed by the value (a list or dict by its JSON): one pass, not a list search a row
    for r in rows:
        v = r.get(col)
        if v is not None:
            seen.setdefault(json.dumps(v, sort_keys=True) if isinstance(v, (list, dict)) else v, v)
    vals = list(seen.values())
    return sorted(vals, key=lambda v: (isinstance(v, str), v)) if vals else []


def facet_columns(rows: list[dict], used: tuple[str, ...], grid_fields: list[str] = ()) -> list[str]:
    """Columns that vary across rows and are not drawn on an axis or as lines (each value: a figure)."""
    leaves = set(DESCRIPTIVE_COLUMNS)
    cands = list(DESCRIPTIVE_COLUMNS) + [g for g in grid_fields if g not in leaves and g.split(".")[-1] not in leaves]
    return [c for c in cands if c not in used and len(distinct_values(rows, c)) > 1]


def split_facets(rows: list[dict], cols: list[str]) -> list[tuple[str, list[dict]]]:
    """(title suffix, rows) per combination of `cols`, in first-seen order."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(json.dumps(r.get(c)) for c in cols), []).append(r)
    return [(", ".join(f"{c}={json.loads(k)}" for c, k in zip(cols, key)), g) for key, g in groups.items()]


def facet_title(base: str, suffix: str) -> str:
    """A chart title with its facet (`split_facets` suffix) in brackets, if any."""
    return f"{base} ({suffix})" if suffix else base


# ---- (a) tok/s vs acceptance rate ---------------------------------------------------------------------
def tok_per_s_figures(rows: list[dict], grid_fields: list[str] = ()) -> Figures:
    """tok/s vs acceptance rate, one line per placement x num_steps, the baseline dashed; one figure
    per combination of the other varying columns."""
    rows = [r for r in rows if r.get("acceptance_rate") is not None]
    if len(distinct_values(rows, "acceptance_rate")) < 2:
        return []
    out = []
    facets = facet_columns(rows, ("acceptance_rate", "placement", "num_steps", "num_draft_tokens"), grid_fields)
    for suffix, group in split_facets(rows, facets)[:MAX_FACETS]:
        fig = go.Figure()
        for placement in distinct_values(group, "placement"):
            for s in distinct_values(group, "num_steps"):
                line = sorted((r for r in group if r["placement"] == placement and r["num_steps"] == s),
                              key=lambda r: r["acceptance_rate"])
                fig.add_trace(go.Scatter(x=[r["acceptance_rate"] for r in line], y=[r["tok_per_s"] for r in line],
                                         mode="lines+markers", name=f"{placement}, num_steps={s}"))
        base = sorted({r["acceptance_rate"]: r for r in group}.values(), key=lambda r: r["acceptance_rate"])
        fig.add_trace(go.Scatter(x=[r["acceptance_rate"] for r in base], y=[r["baseline_tok_per_s"] for r in base],
                                 mode="lines", name="baseline (no speculation)",
                                 line=dict(dash="dash", color="black")))
        fig.update_layout(title=facet_title("Throughput vs acceptance rate", suffix),
                          xaxis_title=ACCEPTANCE_TITLE, yaxis_title=TOK_PER_S_TITLE, legend_title="configuration")
        out.append((suffix, fig))
    return out


# ---- (b) best num_steps heatmap ---------------------------------------------------------------------------
def best_num_steps_figures(rows: list[dict], grid_fields: list[str] = ()) -> Figures:
    """Heatmap over acceptance rate x batch size (or context length): colour = best num_steps,
    cell text = its speedup. Needs num_steps and acceptance rate to vary."""
    rows = [r for r in rows if r.get("acceptance_rate") is not None]
    if len(distinct_values(rows, "num_steps")) < 2 or len(distinct_values(rows, "acceptance_rate")) < 2:
        return []
    y_col = "context_len" if (len(distinct_values(rows, "batch_size")) < 2
                              and len(distinct_values(rows, "context_len")) > 1) else "batch_size"
    y_title = {"batch_size": "batch size (requests)", "context_len": "context length (tokens)"}[y_col]
    facets = facet_columns(rows, ("acceptance_rate", y_col, "num_steps", "num_draft_tokens"), grid_fields)
    out = []
    for suffix, group in split_facets(rows, facets)[:MAX_FACETS]:
        best = {(b["acceptance_rate"], b[y_col]): b for b in best_num_steps(group, ["acceptance_rate", y_col])}
        xs, ys = distinct_values(group, "acceptance_rate"), distinct_values(group, y_col)
        z = [[best[(x, y)]["best_num_steps"] if (x, y) in best else None for x in xs] for y in ys]
        text = [[f"{best[(x, y)]['speedup']:.2f}x" if (x, y) in best else "" for x in xs] for y in ys]
        fig = go.Figure(go.Heatmap(x=xs, y=[str(y) for y in ys], z=z, text=text, texttemplate="%{text}",
                                   colorscale="Viridis", colorbar=dict(title="best num_steps"),
                                   hovertemplate="acceptance rate %{x}<br>" + y_col +
                                                 " %{y}<br>best num_steps %{z}<br>speedup %{text}<extra></extra>"))
        fig.update_layout(title=facet_title("Best num_steps (colour) and its speedup over no speculation (text)",
                                            suffix),
                          xaxis_title=ACCEPTANCE_TITLE, yaxis_title=y_title)
        fig.update_yaxes(type="category")
        out.append((suffix, fig))
    return out


# ---- (c) cycle-time breakdown --------------------------------------------------------------------------
def _pin_other_columns(rows: list[dict], keep: tuple[str, ...], grid_fields: list[str]) -> tuple[list[dict], str]:
    """Rows where every other varying column sits at its middle value (so bars compare like with like)."""
    pinned = []
    for c in facet_columns(rows, keep, grid_fields):
        values = distinct_values(rows, c)
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
    fig.update_layout(barmode="stack", title=facet_title("Where the cycle time goes", pinned),
                      xaxis_title="configuration (draft placement, num_steps)",
                      yaxis_title="time per cycle (us)", legend_title="bucket")
    return [(pinned, fig)]


# ---- (d) calibration curves ------------------------------------------------------------------------------
def collective_figure(curve_rows: list[dict]) -> go.Figure:
    """Collective latency vs message size, one line per world size (log-log); table points as markers."""
    fig = go.Figure()
    op = curve_rows[0]["op"] if curve_rows else "allreduce"
    for w in distinct_values(curve_rows, "world_size"):
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
    for b in distinct_values(curve_rows, "batch_size"):
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
