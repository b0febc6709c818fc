"""The calibration's `specdecsim` commands, mounted on the simulator's app by `register`.

    specdecsim calibrate [--quick] [--out PATH] [--points PATH] [--tp N ...]     measure this machine
                                                                      (calibration/cli/calibrate.py)
    specdecsim calibrate collectives | tp-forwards | forwards-batch | loop-overhead |
                         loop-reps | moe | session                    (calibration/cli/bench.py)
    specdecsim calibrate import-nccl-tests | merge | from-runs | from-traces
                                                                      (calibration/cli/build.py)
    specdecsim live --out DIR [--quick | --noise] [--tp N]                      (calibration/cli/live.py)
    specdecsim diagnose drift | sync | tp-skew | verify                         (calibration/cli/diagnose.py)

Each command parses, checks, runs and writes; no modelled numbers here. torch (and every module
that imports it) is imported only inside the commands, so importing this package, and
`specdecsim --help`, stay light. Bad input ends with one line naming the option and exit code 2.
"""

from __future__ import annotations

import typer

from calibration.cli.calibrate import calibrate_app
from calibration.cli.diagnose import diagnose_app
from calibration.cli.live import live


def register(app: typer.Typer) -> None:
    """Mount the calibration commands on the `specdecsim` app: the `calibrate` and `diagnose`
    groups and the `live` command."""
    app.add_typer(calibrate_app, name="calibrate")
    app.command("live")(live)
    app.add_typer(diagnose_app, name="diagnose")
