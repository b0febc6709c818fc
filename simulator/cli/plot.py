"""`specdecsim plot`: a sweep's tables (and validate records) as one offline dashboard page."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from simulator.cli.common import FORCE_HELP, console, fail
from simulator.inputs import UserInputError


def plot_command(
    results: Annotated[Path, typer.Argument(help="A sweep folder (with sweep.csv) or a sweep CSV.")],
    out: Annotated[Path, typer.Option(help="Folder for the dashboard (index.html) and PNGs.")] = Path("plots"),
    profile: Annotated[Optional[str], typer.Option(help="Profile for calibration curves (default: sweep's).")] = None,
    validate_json: Annotated[Optional[Path], typer.Option(help="`specdecsim validate --json` output: predicted "
                                                               "vs measured.")] = None,
    png: Annotated[bool, typer.Option("--png/--no-png", help="Also write a PNG per chart (needs kaleido >= 1 and "
                                                              "Chrome or Chromium; BROWSER_PATH names one).")] = True,
    force: Annotated[bool, typer.Option("--force", help=FORCE_HELP)] = False,
    plotlyjs: Annotated[str, typer.Option(help="plotly.js: inline (one self-contained offline page, about 4.7 MB), "
                                               "file (plotly.min.js once beside the page: small pages, offline) or "
                                               "cdn (plotly's CDN: small pages, needs network).")] = "inline",
) -> None:
    """Draw a sweep's tables as one offline dashboard page, index.html (plotly.js inlined once)."""
    from simulator.files import SWEEP_OUTPUT, check_output_folder, is_own_html, is_own_output
    from simulator.studies.plots import plot_sweep  # plotly: only here, so the other commands run without it

    def ours(index: Path) -> bool:  # figures written before, or a sweep folder of ours
        return is_own_html(index) or is_own_output(index.parent / "sweep.json", SWEEP_OUTPUT)

    from simulator.studies.plots import PLOTLYJS_MODES
    if plotlyjs not in PLOTLYJS_MODES:
        fail(f"--plotlyjs {plotlyjs!r}: one of {', '.join(PLOTLYJS_MODES)}")
    try:
        check_output_folder(out, "--out", "index.html", ours, force)
        index = plot_sweep(results, out, profile, validate_json, png, console, plotlyjs=plotlyjs)
    except UserInputError as e:
        fail(str(e))
    console.print(f"wrote {escape(str(index))}", highlight=False)
