"""`specdecsim` command line: parse, load, validate, run, write. No modelled numbers here.

Bad input ends with one message naming the file and field, and exit code 2.
"""

from __future__ import annotations

import math
from collections import Counter

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from simulator import __version__
from simulator.scenario import UserInputError, load_profile_for, load_scenario

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Discrete-event performance simulator for speculative decoding on TP GPU boxes.")
console = Console()
err_console = Console(stderr=True)


def fail(message: str, code: int = 2) -> None:
    """Print a user-facing error and exit (no traceback)."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@app.callback(invoke_without_command=True)
def _root(ctx: typer.Context,
          version: Annotated[bool, typer.Option("--version", help="Print the version.")] = False) -> None:
    if version:
        console.print(__version__)
        raise typer.Exit(0)
    if ctx.invoked_subcommand is None:
        console.print(ctx.get_help())
        raise typer.Exit(2)


@app.command()
def simulate(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML, e.g. scenarios/tp1_draft.yaml.")],
    profile: Annotated[Optional[str], typer.Option(help="Profile name or JSON path (default: the scenario's).")] = None,
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="Override a field: key.path=value.")] = None,
    seed: Annotated[Optional[int], typer.Option(help="RNG seed (overrides the scenario's).")] = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the result as JSON here.")] = None,
    trace: Annotated[Optional[Path], typer.Option(help="Write a Chrome/Perfetto trace here.")] = None,
) -> None:
    """Predict tokens/s, accept length, TPOT and the cycle-time breakdown of one scenario."""
    from simulator.profile import write_json_atomic
    from simulator.simulate import simulate as run_simulation
    from simulator.trace import write_trace

    overrides = list(set_ or [])
    if seed is not None and seed < 0:
        fail(f"--seed must be >= 0, got {seed}")
    if seed is not None:
        overrides.append(f"seed={seed}")
    for flag, path in (("--json", json_out), ("--trace", trace)):
        if path is not None and path.is_dir():
            fail(f"{flag} {path} is a folder; give a file to write")
    try:
        sc = load_scenario(scenario, overrides)
        prof, prof_path = load_profile_for(sc, profile, base_dir=None if profile else scenario.parent)
    except UserInputError as e:
        fail(str(e))
    if trace is not None and sc.engine.granularity != "kernel":
        if sc.engine.granularity == "cycle":
            fail(f"{scenario}: --trace needs engine.granularity forward or kernel (cycle granularity keeps no spans)")
        console.print("[dim]trace: forward granularity gives one span per forward; "
                      "--set engine.granularity=kernel for per-kernel spans[/]")
    result, events = run_simulation(sc, prof, profile_ref=str(prof_path), trace=trace is not None)
    print_result(result)
    if json_out is not None:
        write_json_atomic(json_out, result.model_dump(mode="json"))
        console.print(f"wrote {json_out}")
    if trace is not None:
        write_trace(trace, events)
        console.print(f"wrote {trace} (open in https://ui.perfetto.dev)")


@app.command()
def validate(
    records: Annotated[list[Path], typer.Argument(help="LiveRun JSON files or folders of them.")],
    profile: Annotated[str, typer.Option(help="Profile name or JSON path to predict from.")] = "h200",
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the comparison as JSON here.")] = None,
    judge_mode: Annotated[str, typer.Option(help="Mode the thresholds apply to: graph, eager or all.")] = "graph",
    max_median_error_pct: Annotated[Optional[float], typer.Option(help="Fail if median |tok/s error| exceeds this.")] = None,
    max_error_pct: Annotated[Optional[float], typer.Option(help="Fail if any |tok/s error| exceeds this.")] = None,
    max_speedup_error: Annotated[Optional[float], typer.Option(help="Fail if any |speedup error| exceeds this.")] = None,
    acceptance: Annotated[str, typer.Option(help="measured: the accept lengths the run drew; scenario: its model.")] = "measured",
    costs_source: Annotated[Optional[str], typer.Option(help="per_op or whole_forward (default: each record's).")] = None,
) -> None:
    """Predict every live record from a profile alone and compare with what was measured."""
    from simulator.profile import write_json_atomic
    from simulator.validate import compare, load_records, summarize, to_json, with_costs_source
    from simulator.scenario import load_profile_for

    if judge_mode not in ("graph", "eager", "all"):
        fail(f"--judge-mode must be graph, eager or all, got {judge_mode!r}")
    if acceptance not in ("measured", "scenario"):
        fail(f"--acceptance must be measured or scenario, got {acceptance!r}")
    for opt, v in (("--max-median-error-pct", max_median_error_pct), ("--max-error-pct", max_error_pct),
                   ("--max-speedup-error", max_speedup_error)):
        if v is not None and not (v >= 0 and math.isfinite(v)):
            fail(f"{opt} must be a finite number >= 0, got {v}")
    if json_out is not None and json_out.is_dir():
        fail(f"--json {json_out} is a folder; give a file to write")
    try:
        recs = load_records(records)
        prof, prof_path = load_profile_for(recs[0][1].scenario, profile)
    except UserInputError as e:
        fail(str(e))
    if costs_source not in (None, "per_op", "whole_forward"):
        fail(f"--costs-source must be per_op or whole_forward, got {costs_source!r}")
    recs = with_costs_source(recs, costs_source)
    points = compare(recs, prof, acceptance)
    summaries = summarize(points)
    print_validation(points, summaries)
    counts = Counter((p.record_set, p.label) for p in points)
    twice = [label for (_, label), n in counts.items() if n > 1]
    if twice:
        console.print(f"[yellow]note: more than one record in one folder for {len(twice)} point(s) (e.g. a quick "
                      f"and a noise take); each record is compared: {', '.join(twice[:3])}"
                      f"{' ...' if len(twice) > 3 else ''}[/]")
    if json_out is not None:
        write_json_atomic(json_out, to_json(points, summaries, str(prof_path)))
        console.print(f"wrote {json_out}")
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
        err_console.print(f"[bold red]threshold exceeded:[/] {f}")
    if failed:
        raise typer.Exit(1)


def print_validation(points, summaries) -> None:
    """Rich tables: one row per point, then a summary per mode."""
    t = Table(title="predicted vs measured (tokens/s)", title_justify="left")
    for col in ("point", "measured", "predicted", "error", "accept len meas/pred", "repeat spread"):
        t.add_column(col, justify="left" if col == "point" else "right")
    for p in sorted(points, key=lambda p: (p.mode, p.target, p.acceptance, p.batch_size, p.num_steps)):
        spread = f"{p.measured_repeat_spread_frac * 100:.1f}%" if p.measured_repeat_spread_frac is not None else ""
        t.add_row(p.label, f"{p.measured_tok_per_s:,.1f}", f"{p.predicted_tok_per_s:,.1f}",
                  f"{p.tok_per_s_error_frac * 100:+.2f}%",
                  f"{p.measured_accept_length:.2f}/{p.predicted_accept_length:.2f}", spread)
    console.print(t)
    s = Table(title="summary by mode", title_justify="left")
    for col in ("mode", "points", "median |err|", "mean |err|", "max |err|", "max |speedup err|",
                "best num_steps agree", "median repeat spread"):
        s.add_column(col, justify="right")
    for sm in summaries:
        s.add_row(sm.mode, str(sm.num_points), f"{sm.median_abs_error_frac * 100:.2f}%",
                  f"{sm.mean_abs_error_frac * 100:.2f}%", f"{sm.max_abs_error_frac * 100:.2f}%",
                  f"{sm.max_abs_speedup_error:.3f}" if sm.max_abs_speedup_error is not None else "",
                  f"{sm.best_num_steps_agree}/{sm.best_num_steps_cells}",
                  f"{sm.median_repeat_spread_frac * 100:.1f}%" if sm.median_repeat_spread_frac is not None else "")
    console.print(s)
    for sm in summaries:
        if sm.faster_placement_cells:
            console.print(f"{sm.mode}: the predicted-faster draft placement is the measured-faster one in "
                          f"{sm.faster_placement_agree} of {sm.faster_placement_cells} cells")


def _short_path(path: str) -> str:
    """`path` relative to the working folder when it lies below it, else unchanged."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(path)


def print_result(r) -> None:
    """Rich tables of a SimulationResult."""
    sc = r.scenario
    spec = sc["spec"]
    title = (f"{sc['name']}: {sc['target']['name']} TP{sc['tp_size']}, draft {sc['placement']}, "
             f"num_steps={spec['num_steps']} topk={spec['topk']}, batch {sc['workload']['batch_size']}, "
             f"{'CUDA graph' if sc['engine']['cuda_graph'] else 'eager'}")
    t = Table(title=title, show_header=True, title_justify="left")
    t.add_column("metric")
    t.add_column("value", justify="right")
    t.add_column("95% interval / note", justify="right")
    t.add_row("tokens/s (system)", f"{r.tok_per_s:,.1f}", f"{r.tok_per_s_ci95[0]:,.1f} .. {r.tok_per_s_ci95[1]:,.1f}")
    t.add_row("baseline tokens/s (no speculation)", f"{r.baseline_tok_per_s:,.1f}", "")
    t.add_row("speedup", f"{r.speedup:.3f}x", "")
    t.add_row("accept length (tokens/cycle)", f"{r.accept_length.mean:.3f}",
              f"{r.accept_length.ci95_low:.3f} .. {r.accept_length.ci95_high:.3f}")
    t.add_row("cycle time (us)", f"{r.cycle_time_us:,.1f}", f"baseline step {r.baseline_step_us:,.1f}")
    if r.tpot_us is not None:
        t.add_row("TPOT p50 / p90 / p99 (us)", f"{r.tpot_us.p50:,.1f}", f"{r.tpot_us.p90:,.1f} / {r.tpot_us.p99:,.1f}")
    t.add_row("closed form tokens/s", f"{r.analytic_tok_per_s:,.1f}",
              f"{(r.tok_per_s / r.analytic_tok_per_s - 1) * 100:+.2f}% DES vs closed form")
    console.print(t)
    b = Table(title="where the cycle goes (mean per cycle)", title_justify="left")
    b.add_column("bucket")
    b.add_column("us", justify="right")
    b.add_column("share", justify="right")
    for k, v in sorted(r.breakdown_us.items(), key=lambda kv: -kv[1]):
        b.add_row(k, f"{v:,.1f}", f"{v / r.cycle_time_us * 100:.1f}%")
    console.print(b)
    console.print(f"[dim]{r.num_cycles} cycles, {r.simulated_us / 1e6:.3f} s simulated, seed {r.seed}, "
                  f"profile {_short_path(r.profile)}[/]")
    roof = [n for n in r.notes if n.startswith("no table for ")]
    for n in [n for n in r.notes if n not in roof]:
        console.print(f"[yellow]note:[/] {n}", highlight=False)
    if roof:
        console.print(f"[yellow]note:[/] {len(roof)} op shapes have no measured table in this profile and use "
                      "its roofline (list: the `notes` of --json output)", highlight=False)


@app.command()
def live(
    out: Annotated[Path, typer.Option(help="Folder for one LiveRun JSON per point (resumes).")],
    quick: Annotated[bool, typer.Option(help="A few points, fewer cycles (< 1 min on one GPU).")] = False,
    device: Annotated[str, typer.Option(help="torch device.")] = "cuda",
    cycles: Annotated[Optional[int], typer.Option(help="Timed cycles per point.")] = None,
    warmup: Annotated[Optional[int], typer.Option(help="Warm-up cycles per point.")] = None,
    noise: Annotated[bool, typer.Option(help="The CUDA-graph batch-1 grid, 3 runs per point (noise).")] = False,
) -> None:
    """Run the live speculative grid on a GPU (real forwards, seeded acceptance oracle); needs torch."""
    try:
        from calibration.live_grid import main as live_grid_main
    except ImportError as e:
        fail(f"specdecsim live needs torch: pip install 'specdecsim[calibrate]' ({e})")
    argv = ["--out", str(out), "--device", device] + (["--quick"] if quick else []) + (["--noise"] if noise else [])
    argv += (["--cycles", str(cycles)] if cycles else []) + (["--warmup", str(warmup)] if warmup else [])
    live_grid_main(argv)


def _register_commands() -> None:
    """Mount the sweep/plot commands and, where its package is installed, `calibrate` and `live`.

    calibration.cli imports only typer at import time (torch is imported inside its commands),
    so `specdecsim --help` stays light; without the calibrate extra those commands say how to
    install it.
    """
    from simulator.plots import plot_command
    from simulator.sweep import sweep_command

    app.command("sweep")(sweep_command)
    app.command("plot")(plot_command)
    try:
        from calibration.cli import calibrate_app
    except ImportError:
        return
    app.add_typer(calibrate_app, name="calibrate")


_register_commands()


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except UserInputError as e:  # raised outside a command's own handling
        err_console.print(f"[bold red]error:[/] {e}")
        sys.exit(2)
    except OSError as e:  # an output path that is a folder, unwritable, ...
        err_console.print(f"[bold red]error:[/] {e.filename or ''}: {e.strerror or e}")
        sys.exit(2)
