"""`specdecsim validate-serving`: live serving runs against the serving DES on the same scenario."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from simulator.cli.common import FORCE_HELP, console, fail, json_to_stdout, output_name
from simulator.inputs import UserInputError, quote


def validate_serving(
    records: Annotated[list[Path], typer.Argument(help="LiveServingRun JSON files or folders of them "
                                                       "(`specdecsim live --serving`).")],
    profile: Annotated[str, typer.Option(help="Profile name or JSON path to simulate from.")] = "h200",
    costs_source: Annotated[Optional[str], typer.Option(help="per_op or whole_forward (default: each "
                                                             "record's).")] = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the comparison as JSON here (\'-\': standard output, the tables then on standard error).")] = None,
    bar_pct: Annotated[float, typer.Option(help="The bar on |tok/s error| and |TPOT p50 error|, percent.")] = 5.0,
    acceptance: Annotated[str, typer.Option(help="scenario: each record's forced rate; measured: the i.i.d. rate "
                                                 "of the accept length the run realized (an engine's runs); "
                                                 "replay: each request at the rate it realized. Records of the "
                                                 "simulator's own scheduler (specdecsim live --serving) draw as the "
                                                 "DES does: leave them at scenario.")] = "scenario",
    strict: Annotated[bool, typer.Option("--strict", help="Exit 1 when the bar is not met.")] = False,
    force: Annotated[bool, typer.Option("--force", help=FORCE_HELP)] = False,
) -> None:
    """Simulate every live serving record's scenario (serving DES, the profile's costs) and compare
    output tok/s and TPOT p50 (also TTFT and ITL p50) with what was measured."""
    json_to_stdout(json_out)
    from simulator.files import SERVING_VALIDATION_OUTPUT, check_output_file, write_json_atomic
    from simulator.scenario import load_profile_for
    from simulator.evidence.validate_serving import check_record, load_serving_records, serving_bar, to_json

    if costs_source not in (None, "per_op", "whole_forward"):
        fail(f"--costs-source must be per_op or whole_forward, got {quote(costs_source)}")
    if not 0 <= bar_pct <= 100:
        fail(f"--bar-pct must be 0..100, got {bar_pct}")
    if acceptance not in ("measured", "replay", "scenario"):
        fail(f"--acceptance must be measured, replay or scenario, got {quote(acceptance)}")
    try:
        check_output_file(json_out, "--json", SERVING_VALIDATION_OUTPUT, force)
        recs = load_serving_records(records)
        prof, prof_path = load_profile_for(recs[0][1].scenario, profile)
        rows = [check_record(src, rec, prof, costs_source, acceptance) for src, rec in recs]
    except (UserInputError, ArithmeticError) as e:
        fail(str(e))
    if acceptance != "scenario":
        from simulator.evidence.validate_serving import realized_acceptance_rate
        left = sum(1 for _, rec in recs if rec.speculative and realized_acceptance_rate(rec) is None)
        if left:
            console.print(f"[yellow]note:[/] {left} speculative record{'s' if left > 1 else ''} force no i.i.d. rate or "
                          f"draw one accept length a step for the whole batch: --acceptance {acceptance} leaves "
                          f"{'them' if left > 1 else 'it'} at the scenario's acceptance", highlight=False)
    rows.sort(key=lambda r: (r.target, r.concurrency, not r.speculative, r.source))
    if json_out is not None:
        write_json_atomic(json_out, to_json(rows, str(prof_path), bar_pct / 100))
    t = Table(title=f"live serving vs serving DES ({escape(str(prof_path))})")
    for col in ("run", "C", "reqs", "same sched", "tok/s meas", "tok/s sim", "err", "TPOT p50 meas ms",
                "sim ms", "err ", "TTFT p50 err", "ITL p50 err"):
        t.add_column(col, justify="left" if col == "run" else "right")
    for r in rows:
        t.add_row(escape(Path(r.source).stem), str(r.concurrency), str(r.num_requests),
                  "yes" if r.same_schedule else "NO", f"{r.measured_tok_per_s:.0f}", f"{r.predicted_tok_per_s:.0f}",
                  f"{r.tok_per_s_error_frac:+.1%}", f"{r.measured_tpot_p50_ms:.2f}",
                  f"{r.predicted_tpot_p50_ms:.2f}", _pct(r.tpot_p50_error_frac),
                  _pct(r.ttft_p50_error_frac), _pct(r.itl_p50_error_frac))
    Console(width=max(console.width, 150), stderr=console.stderr).print(t)
    met, line = serving_bar(rows, bar_pct / 100)
    console.print(escape(line), highlight=False)
    if json_out is not None:
        console.print(f"wrote {output_name(json_out)}", highlight=False)
    if strict and not met:
        raise typer.Exit(1)


def _pct(frac: float) -> str:
    """A signed percentage; '-' where the record cannot give the figure (no ITL gaps, say)."""
    import math
    return f"{frac:+.1%}" if math.isfinite(frac) else "-"
