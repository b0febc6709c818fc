"""`specdecsim cases [FILE] [--json OUT]`: replay published figures and score the predictions."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from simulator.cli.common import console, fail, json_to_stdout, output_name
from simulator.files import CASES_OUTPUT, OUTPUT_KEY, check_output_file, write_json_atomic


UNITS = {"tok_s": "tok/s", "tpot_ms": "ms", "latency_us": "us"}


def _pct(x: float | None) -> str:
    return "" if x is None else f"{x:+.1%}"


def cases_command(
    file: Annotated[Optional[Path], typer.Argument(help="Case file (default: the shipped data/cases/public.yaml).")] = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write per-case results as JSON here (\'-\': standard output, the tables then on standard error).")] = None,
    force: Annotated[bool, typer.Option(help="Replace a --json file that is not an earlier cases output.")] = False,
) -> None:
    """Replay each published case (engine, hardware, models, steps, accept length as the source
    states them) and print predicted vs published; a case passes when its speculative tok/s is
    within 10% and its speedup within 0.10, a baseline within 10%, a communication case within 15%."""
    json_to_stdout(json_out)
    from simulator.evidence.cases import (DEFAULT_CASES, DEFAULT_COMM_CASES, comm_results, is_comm_case_file, replay_cases,
                                 summary)
    from simulator.inputs import UserInputError
    from simulator.profile import data_dir
    path = file or data_dir() / DEFAULT_CASES
    if path.is_dir():
        fail(f"case file {path}: is a folder, expected a YAML file")
    if not path.is_file():
        fail(f"case file {path} not found")
    comm = data_dir() / DEFAULT_COMM_CASES if file is None else None  # a user's file is replayed alone
    try:
        check_output_file(json_out, "--json", CASES_OUTPUT, force)
        if file is not None and is_comm_case_file(path):  # data/cases/comm_public.yaml, or a copy of it
            results = comm_results(path)
        else:
            results = replay_cases(path, comm_path=comm if comm is not None and comm.is_file() else None)
    except UserInputError as e:
        fail(str(e))
    s = summary(results)
    if json_out is not None:
        try:
            write_json_atomic(json_out, {OUTPUT_KEY: CASES_OUTPUT, "file": str(path), "summary": s,
                                         "cases": [r.to_json() for r in results]}, allow_nan=False)
        except OSError as e:
            fail(f"--json {json_out}: {e.strerror or e}")
    console.print(f"published cases: {escape(str(path))}", highlight=False)
    console.print(f"  {'figure':27s} {'role':6s} {'published':>13s} {'predicted':>9s} {'error':>7s} {'speedup':>7s} ok",
                  highlight=False)
    console.print(f"  {'':27s} {'':6s} {'':13s} {'':9s} {'':7s} {'error':>7s}", highlight=False)
    console.print("  [dim]role: scored = held to the bar (ok); fit = one of the runs the engine defaults are fitted "
                  "on, not scored; leave = leave-out check (fitted on a sweep's two end runs, predicting the rest); "
                  "n/r = not replayable (the source leaves out what a replay needs)[/]", highlight=False)
    for r in results:
        verdict = {True: "[green]passes[/]", False: "[red]fails[/]", None: "nothing scored"}[r.passed]
        console.print(f"[bold]{escape(r.id)}[/]: {verdict}", highlight=False)
        for f in r.figures:
            role = {"not_replayable": "n/r", "leave_out": "leave"}.get(f.role, f.role)
            label = f.label.split(" (leave-out")[0]
            if len(label) > 27:  # whole on its own line (runs differing only at the end, 'ctx 10k' / 'ctx 30k')
                console.print(f"  {escape(label)}", highlight=False)
                label = ""
            if f.role == "not_replayable":
                console.print(f"  {escape(label):27s} {role:6s} not replayable:", highlight=False)
                console.print(escape(textwrap.fill(f.why, width=78, initial_indent="    ", subsequent_indent="    ")),
                              highlight=False)
                continue
            digits = 2 if f.metric == "tpot_ms" else 1
            pub = f"{f.published:,.{digits}f} {UNITS.get(f.metric, f.metric)}"
            ok = {True: "[green]yes[/]", False: "[red]no[/]", None: ""}[f.passed]
            sp = "" if f.speedup_error is None else f"{f.speedup_error:+.3f}"
            console.print(f"  {escape(label):27s} {role:6s} {pub:>13s} {f.predicted:>9,.{digits}f} "
                          f"{_pct(f.error_frac):>7s} {sp:>7s} {ok}", highlight=False)
        fitted = [f.label for f in r.figures if f.role == "leave_out"]
        if fitted:
            console.print(f"  leave: fitted on the two end runs:{fitted[0].split('(leave-out:')[1].rstrip(')')}",
                          highlight=False)
    if s["scored_cases"]:
        console.print(f"{s['passed']} of {s['scored_cases']} scored cases pass ({s['pass_frac']:.0%}); "
                      f"{s['not_replayable']} have nothing scored", highlight=False)
    else:
        console.print(f"no scored cases: {s['not_replayable']} have nothing scored", highlight=False)
    if json_out is not None:
        console.print(f"wrote {output_name(json_out)}")
