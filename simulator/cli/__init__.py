"""`specdecsim` command line: one typer app; each command parses, loads, runs and writes.

No modelled numbers here. Commands: `simulate`, `sweep`, `search`, `plot`, `validate`, `validate-serving`, `hardware`, `cases` (this package) and,
where the `calibration` package is installed, its GPU-side commands (`calibrate`, `live`, ...),
mounted by `calibration.cli.register`; those import torch only inside their commands, so
`specdecsim --help` stays light.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.markup import escape

from simulator import __version__
from simulator.cli.cases import cases_command
from simulator.cli.common import console, err_console
from simulator.cli.hardware import hardware
from simulator.cli.plot import plot_command
from simulator.cli.search import search_command
from simulator.cli.simulate import simulate
from simulator.cli.sweep import sweep_command
from simulator.cli.validate import validate
from simulator.cli.validate_serving import validate_serving
from simulator.scenario import UserInputError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Discrete-event performance simulator for speculative decoding on TP GPU boxes.")


@app.callback(invoke_without_command=True)
def _root(ctx: typer.Context,
          version: Annotated[bool, typer.Option("--version", help="Print the version.")] = False) -> None:
    if version:
        console.print(__version__)
        raise typer.Exit(0)
    if ctx.invoked_subcommand is None:
        console.print(ctx.get_help())
        raise typer.Exit(2)


app.command("simulate")(simulate)
app.command("sweep")(sweep_command)
app.command("search")(search_command)
app.command("plot")(plot_command)
app.command("validate")(validate)
app.command("validate-serving")(validate_serving)
app.command("hardware")(hardware)
app.command("cases")(cases_command)
try:
    from calibration.cli import register as _register_calibration
except ImportError:  # the calibration package is not installed
    pass
else:
    _register_calibration(app)


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except UserInputError as e:  # raised outside a command's own handling
        err_console.print(f"[bold red]error:[/] {escape(str(e))}")
        sys.exit(2)
    except OSError as e:  # an output path that is a folder, unwritable, ...
        err_console.print(f"[bold red]error:[/] {escape(str(e.filename or ''))}: {escape(str(e.strerror or e))}")
        sys.exit(2)
