"""What every `specdecsim` command shares: the consoles, the one-line error, short paths.

Bad input ends with one line naming the file and field, and exit code 2; user text is printed
escaped, so brackets in a path or a value are never read as terminal markup.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

console = Console()
err_console = Console(stderr=True)


def fail(message: str, code: int = 2) -> None:
    """Print a user-facing error (markup in it escaped) and exit with `code` (no traceback)."""
    err_console.print(f"[bold red]error:[/] {escape(str(message))}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def short_path(path: str | Path) -> str:
    """`path` relative to the working folder when it lies below it, else unchanged."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(path)


def refuse_folder(flag: str, path: Path | None) -> None:
    """Exit 2 when an output option names a folder."""
    if path is not None and path.is_dir():
        fail(f"{flag} {path} is a folder; give a file to write")
