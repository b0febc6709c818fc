"""typer's CliRunner builds the whole click command tree again on every `invoke` (about 80-150 ms for
specdecsim's tree, most of it evaluating the commands' annotations): the tests and the fuzz build it once
per app and process. `install()` swaps typer.testing's builder for a cached one; a real `specdecsim`
process builds it once anyway, so nothing the tests check changes."""

from __future__ import annotations

import typer.main
import typer.testing

_BUILT: dict[int, tuple[object, object]] = {}  # id(app) -> (app, its click command); the app is kept alive


def _cached_get_command(app):
    hit = _BUILT.get(id(app))
    if hit is None or hit[0] is not app:
        hit = _BUILT[id(app)] = (app, typer.main.get_command(app))
    return hit[1]


def install() -> None:
    """Build each Typer app's click command once in this process (and in the processes it forks)."""
    typer.testing._get_command = _cached_get_command
