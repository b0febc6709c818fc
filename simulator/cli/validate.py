"""`specdecsim validate`: predict live records from a profile alone and compare."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from simulator.cli.common import FORCE_HELP, console, err_console, fail, json_to_stdout, output_name
from simulator.inputs import UserInputError, quote


def validate(
    records: Annotated[list[Path], typer.Argument(help="LiveRun JSON files or folders of them.")],
    profile: Annotated[str, typer.Option(help="Profile name or JSON path to predict from.")] = "h200",
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the comparison as JSON here (\'-\': standard output, the tables then on standard error).")] = None,
    judge_mode: Annotated[str, typer.Option(help="Mode the thresholds apply to: graph, eager or all.")] = "graph",
    max_median_error_pct: Annotated[Optional[float], typer.Option(help="Fail if median |tok/s error| exceeds this.")] = None,
    max_error_pct: Annotated[Optional[float], typer.Option(help="Fail if any |tok/s error| exceeds this.")] = None,
    max_speedup_error: Annotated[Optional[float], typer.Option(help="Fail if any |speedup error| exceeds this.")] = None,
    acceptance: Annotated[str, typer.Option(help="measured: the accept lengths the run drew; scenario: its model.")] = "measured",
    costs_source: Annotated[Optional[str], typer.Option(help="per_op or whole_forward (default: each record's).")] = None,
    engine_profile: Annotated[Optional[str], typer.Option(help="Engine-native profile (name or path) every record's "
                                                               "serving engine prices from (default: each record's).")] = None,
    force: Annotated[bool, typer.Option("--force", help=FORCE_HELP)] = False,
) -> None:
    """Predict every live record from a profile alone and compare with what was measured."""
    json_to_stdout(json_out)
    from simulator.files import VALIDATION_OUTPUT, check_output_file, write_json_atomic
    from simulator.scenario import load_profile_for
    from simulator.evidence.validate import (batch_bar, compare, crossovers, load_records, summarize, summarize_by_batch,
                                    to_json, with_costs_source)

    if judge_mode not in ("graph", "eager", "all"):
        fail(f"--judge-mode must be graph, eager or all, got {quote(judge_mode)}")
    if acceptance not in ("measured", "scenario"):
        fail(f"--acceptance must be measured or scenario, got {quote(acceptance)}")
    for opt, v in (("--max-median-error-pct", max_median_error_pct), ("--max-error-pct", max_error_pct),
                   ("--max-speedup-error", max_speedup_error)):
        if v is not None and not (v >= 0 and math.isfinite(v)):
            fail(f"{opt} must be a finite number >= 0, got {v}")
    if costs_source not in (None, "per_op", "whole_forward"):
        fail(f"--costs-source must be per_op or whole_forward, got {quote(costs_source)}")
    try:
        check_output_file(json_out, "--json", VALIDATION_OUTPUT, force)
        recs = load_records(records)
        prof, prof_path = load_profile_for(recs[0][1].scenario, profile)
    except UserInputError as e:
        fail(str(e))
    recs = with_costs_source(recs, costs_source)
    if engine_profile is not None:
        from simulator.engines.profile import load_engine_profile
        from simulator.evidence.validate import with_engine_profile
        from simulator.costs.engine_native import profile_mismatch
        try:
            eprof = load_engine_profile(engine_profile)
            recs = with_engine_profile(recs, engine_profile)
        except (FileNotFoundError, UserInputError, ValueError) as e:
            fail(f"--engine-profile: {e}")
        def why_not(r):
            gpu = r.hardware.gpu_name if r.hardware else None
            if gpu and eprof.gpu_name and gpu != eprof.gpu_name:
                return f"it was measured on {eprof.gpu_name}, the record on {gpu}"
            return profile_mismatch(eprof, r.scenario)
        off = [(src, why) for src, r in recs if (why := why_not(r))]
        if off:
            fail(f"--engine-profile {engine_profile}: does not price {len(off)} of the {len(recs)} records "
                 f"({off[0][1]}: {off[0][0]})")
    try:
        points = compare(recs, prof, acceptance)
    except UserInputError as e:
        fail(str(e))
    summaries = summarize(points)
    if json_out is not None:
        write_json_atomic(json_out, to_json(points, summaries, str(prof_path)), allow_nan=False)
    print_validation(points, summaries)
    if len({p.batch_size for p in points}) > 1:
        checks = crossovers(points)
        print_batches(summarize_by_batch(points), checks)
        for mode in sorted({p.mode for p in points} if judge_mode == "all" else {judge_mode}):
            console.print(escape(batch_bar(points, checks, mode)[1]), highlight=False)
    counts = Counter((p.record_set, p.label) for p in points)
    twice = [label for (_, label), n in counts.items() if n > 1]
    if twice:
        console.print(f"[yellow]note: more than one record in one folder for {len(twice)} point(s) (e.g. a second "
                      f"engine process of the same configuration, or a quick and a noise take); each record is compared: {escape(', '.join(twice[:3]))}"
                      f"{' ...' if len(twice) > 3 else ''}[/]")
    if json_out is not None:
        console.print(f"wrote {output_name(json_out)}", highlight=False)
    failed = []
    for sm in summaries:
        if judge_mode != "all" and sm.mode != judge_mode:
            continue
        if max_median_error_pct is not None and sm.median_abs_error_frac * 100 > max_median_error_pct:
            failed.append(f"{sm.mode}: median |error| {sm.median_abs_error_frac * 100:.2f}% > {max_median_error_pct}%")
        if max_error_pct is not None and sm.max_abs_error_frac * 100 > max_error_pct:
            failed.append(f"{sm.mode}: max |error| {sm.max_abs_error_frac * 100:.2f}% > {max_error_pct}%")
        if max_speedup_error is not None and (sm.max_abs_speedup_error or 0) > max_speedup_error:
            failed.append(f"{sm.mode}: max |speedup error| {sm.max_abs_speedup_error:.3f} > {max_speedup_error}")
    for f in failed:
        err_console.print(f"[bold red]threshold exceeded:[/] {escape(f)}", highlight=False)
    if failed:
        raise typer.Exit(1)


def print_validation(points, summaries) -> None:
    """Rich tables: one row per point, then a summary per mode."""
    t = Table(title="predicted vs measured (tokens/s)", title_justify="left")
    for col in ("point", "measured", "predicted", "error", "accept len meas/pred", "repeat spread"):
        t.add_column(col, justify="left" if col == "point" else "right")
    for p in sorted(points, key=lambda p: (p.mode, p.target, p.acceptance, p.batch_size, p.num_steps)):
        spread = f"{p.measured_repeat_spread_frac * 100:.1f}%" if p.measured_repeat_spread_frac is not None else ""
        t.add_row(escape(p.label), f"{p.measured_tok_per_s:,.1f}", f"{p.predicted_tok_per_s:,.1f}",
                  f"{p.tok_per_s_error_frac * 100:+.2f}%",
                  f"{p.measured_accept_length:.2f}/{p.predicted_accept_length:.2f}", spread)
    console.print(t)
    s = Table(title="summary by mode", title_justify="left")
    for col in ("mode", "points", "median |err|", "mean |err|", "max |err|", "max |speedup err|",
                "best num_steps agree", "median repeat spread"):
        s.add_column(col, justify="right")
    for sm in summaries:
        s.add_row(escape(sm.mode), str(sm.num_points), f"{sm.median_abs_error_frac * 100:.2f}%",
                  f"{sm.mean_abs_error_frac * 100:.2f}%", f"{sm.max_abs_error_frac * 100:.2f}%",
                  f"{sm.max_abs_speedup_error:.3f}" if sm.max_abs_speedup_error is not None else "",
                  f"{sm.best_num_steps_agree}/{sm.best_num_steps_cells}",
                  f"{sm.median_repeat_spread_frac * 100:.1f}%" if sm.median_repeat_spread_frac is not None else "")
    console.print(s)
    for sm in summaries:
        if sm.faster_placement_cells:
            console.print(f"{escape(sm.mode)}: the predicted-faster draft placement is the measured-faster one in "
                          f"{sm.faster_placement_agree} of {sm.faster_placement_cells} cells")


def print_batches(batch_summaries, checks) -> None:
    """Rich table of the summary by batch size, then one line per crossover cell."""
    t = Table(title="summary by batch size", title_justify="left")
    for col in ("mode", "batch", "points", "median |err|", "max |err|", "max |speedup err|",
                "best speedup meas/pred"):
        t.add_column(col, justify="right")
    for b in batch_summaries:
        best = (f"{b.measured_best_speedup:.2f}/{b.predicted_best_speedup:.2f}"
                if b.measured_best_speedup is not None else "")
        t.add_row(escape(b.mode), str(b.batch_size), str(b.num_points), f"{b.median_abs_error_frac * 100:.2f}%",
                  f"{b.max_abs_error_frac * 100:.2f}%",
                  f"{b.max_abs_speedup_error:.3f}" if b.max_abs_speedup_error is not None else "", best)
    console.print(t)
    for c in checks:
        def at(b):
            return f"batch {b}" if b is not None else f"none up to batch {c.batch_sizes[-1]}"
        console.print(f"crossover (speculation stops paying) {escape(c.cell)}: measured {at(c.measured_crossover)}, "
                      f"predicted {at(c.predicted_crossover)}: {c.steps_apart} grid step(s) apart"
                      f"{'' if c.within_one_step else ' [bold red](more than one)[/]'}", highlight=False)
