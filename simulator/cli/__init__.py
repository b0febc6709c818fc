"""`specdecsim` command line: one typer app; each command parses, loads, runs and writes.

No modelled numbers here. Commands: `simulate`, `sweep`, `search`, `plot`, `validate`, `validate-serving`, `hardware`, `cases` (this package) and,
where the `calibration` package is installed, its GPU-side commands (`calibrate`, `live`, ...),
mounted by `calibration.cli.register`; those import torch only inside their commands.

The CLI imports only what the command it runs needs: `main` builds the app with that one
command of COMMANDS when the command line names one, and the whole app (every command, the
calibration's mounted) otherwise, as for `specdecsim --help`. A command's module imports the model
inside the command, so building the whole app imports no numpy, scipy, SimPy, plotly or Ray.
`app` is the whole app (tests invoke it), built when first asked for.
"""

from __future__ import annotations

import importlib
import sys
from typing import Annotated

import typer

from simulator import __version__

# name -> (module, function): this package's commands, in the order `specdecsim --help` lists them
COMMANDS = {
    "simulate": ("simulator.cli.simulate", "simulate"),
    "sweep": ("simulator.cli.sweep", "sweep_command"),
    "search": ("simulator.cli.search", "search_command"),
    "plot": ("simulator.cli.plot", "plot_command"),
    "validate": ("simulator.cli.validate", "validate"),
    "validate-serving": ("simulator.cli.validate_serving", "validate_serving"),
    "hardware": ("simulator.cli.hardware", "hardware"),
    "cases": ("simulator.cli.cases", "cases_command"),
}
HELP = "Discrete-event performance simulator for speculative decoding on TP GPU boxes."


def _root(ctx: typer.Context,
          version: Annotated[bool, typer.Option("--version", help="Print the version.")] = False) -> None:
    from simulator.cli.common import console
    console.stderr = False  # `--json -` routes it to standard error for one command
    if version:
        console.print(__version__)
        raise typer.Exit(0)
    if ctx.invoked_subcommand is None:
        console.print(ctx.get_help())
        raise typer.Exit(2)


def build_app(command: str | None = None) -> typer.Typer:
    """The `specdecsim` app: with `command` (a key of COMMANDS) that command alone, else every
    command, the calibration's mounted where that package is installed."""
    app = typer.Typer(add_completion=False, no_args_is_help=True, help=HELP)
    app.callback(invoke_without_command=True)(_root)
    for name, (module, function) in COMMANDS.items():
        if command is None or command == name:
            app.command(name)(getattr(importlib.import_module(module), function))
    if command is None:
        try:
            from calibration.cli import register as _register_calibration
        except ImportError:  # the calibration package is not installed
            pass
        else:
            _register_calibration(app)
    return app


def _command_named(argv: list[str]) -> str | None:
    """The command of a command line (its first word that is not an option) when it is one of
    COMMANDS, else None (no command, a calibration command, or a word that is none)."""
    word = next((a for a in argv if not a.startswith("-")), None)
    return word if word in COMMANDS else None


def __getattr__(name: str):
    if name == "app":  # the whole app, built once
        globals()["app"] = build_app()
        return globals()["app"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


SIGTERM_EXIT = 143  # 128 + SIGTERM, as a shell reports a process ended by it


def _terminated(signum, frame) -> None:
    """SIGTERM handled as Ctrl-C: the command's interrupt paths run (temp files removed, worker
    processes ended, a folder left as the old run or the new one), then exit 143."""
    global _GOT_SIGTERM
    _GOT_SIGTERM = True
    raise KeyboardInterrupt


_GOT_SIGTERM = False


def _interrupted() -> None:
    """One line saying why the run stopped, then exit 143 (SIGTERM) or 130 (Ctrl-C)."""
    sys.stderr.write(f"interrupted ({'SIGTERM' if _GOT_SIGTERM else 'Ctrl-C'})\n")
    sys.exit(SIGTERM_EXIT if _GOT_SIGTERM else 130)


def main() -> None:
    """Console-script entry point."""
    import signal
    signal.signal(signal.SIGTERM, _terminated)
    try:
        app = build_app(_command_named(sys.argv[1:]))  # an interrupt while it imports is an interrupt too
        app()
    except SystemExit as e:  # typer turns an interrupt inside a command into exit 130
        if _GOT_SIGTERM or e.code == 130:
            _interrupted()
        raise
    except KeyboardInterrupt:  # an interrupt outside a command (while the CLI imports)
        _interrupted()
    except Exception as e:
        from rich.markup import escape

        from simulator.cli.common import err_console
        from simulator.inputs import UserInputError
        if isinstance(e, UserInputError):  # raised outside a command's own handling
            err_console.print(f"[bold red]error:[/] {escape(str(e))}")
            sys.exit(2)
        if isinstance(e, OSError):  # an output path that is a folder, unwritable, ...
            where = str(e.filename) if e.filename else "writing output"  # no file named (standard output, say)
            err_console.print(f"[bold red]error:[/] {escape(where)}: {escape(str(e.strerror or e))}")
            sys.exit(2)
        raise
