"""`specdecsim cases [FILE] [--json OUT]`: replay published figures and score the predictions."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from simulator.cli.common import console, fail
from simulator.files import CASES_OUTPUT, OUTPUT_KEY, check_output_file, write_json_atomic


UNITS = {"tok_s": "tok/s", "tpot_ms": "ms", "latency_us": "us"}


def _pct(x: float | None) -> str:
    return "" if x is None else f"{x:+.1%}"


def cases_command(
    file: Annotated[Optional[Path], typer.Argument(help="Case file (default: the shipped data/cases/public.yaml).")] = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write per-case results as JSON here.")] = None,
    force: Annotated[bool, typer.Option(help="Replace a --json file that is not an earlier cases output.")] = False,
) -> None:
    """Replay each published case (engine, hardware, models, steps, accept length as the source
    states them) and print predicted vs published; a case passes when its speculative tok/s is
    within 10% and its speedup within 0.10, a baseline within 10%, a communication case within 15%."""
    from simulator.cases import DEFAULT_CASES, replay_cases, summary
    from simulator.inputs import UserInputError
    from simulator.profile import data_dir
    path = file or data_dir() / DEFAULT_CASES
    if not path.is_file():
        fail(f"case file {path} not found")
    try:
        check_output_file(json_out, "--json", CASES_OUTPUT, force)
        results = replay_cases(path)
    except UserInputError as e:
        fail(str(e))
    console.print(f"published cases: {escape(str(path))}", highlight=False)
    console.print(f"  {'figure':24s} {'role':9s} {'published':>13s} {'predicted':>9s} {'error':>7s} {'d spdup':>7s} ok",
                  highlight=False)
    for r in results:
        verdict = {True: "[green]passes[/]", False: "[red]fails[/]", None: "nothing scored"}[r.passed]
        console.print(f"[bold]{escape(r.id)}[/]: {verdict}", highlight=False)
        for f in r.figures:
            role = {"not_replayable": "n/r", "leave_out": "leave-out"}.get(f.role, f.role)
            label = f.label.split(" (leave-out")[0]
            if f.role == "not_replayable":
                console.print(f"  {escape(label[:24]):24s} {role:9s} {escape(f.why)}", highlight=False)
                continue
            pub = f"{f.published:,.4g} {UNITS.get(f.metric, f.metric)}"
            ok = {True: "[green]yes[/]", False: "[red]no[/]", None: ""}[f.passed]
            sp = "" if f.speedup_error is None else f"{f.speedup_error:+.3f}"
            console.print(f"  {escape(label[:24]):24s} {role:9s} {pub:>13s} {f.predicted:>9,.4g} "
                          f"{_pct(f.error_frac):>7s} {sp:>7s} {ok}", highlight=False)
        fitted = [f.label for f in r.figures if f.role == "leave_out"]
        if fitted:
            console.print(f"  leave-out fit on the sweep's two end runs:{fitted[0].split('(leave-out:')[1].rstrip(')')}",
                          highlight=False)
    s = summary(results)
    console.print(f"{s['passed']} of {s['scored_cases']} scored cases pass ({s['pass_frac']:.0%}); "
                  f"{s['not_replayable']} cases have nothing scored (inputs not stated, or fit only)")
    if json_out is not None:
        write_json_atomic(json_out, {OUTPUT_KEY: CASES_OUTPUT, "file": str(path), "summary": s,
                                     "cases": [r.to_json() for r in results]}, allow_nan=False)
        console.print(f"wrote {escape(str(json_out))}")
