"""`specdecsim sweep`: what-if grids over scenario fields (simulator.studies.sweep), written as CSV and JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from simulator.cli.common import (ADDRESS_HELP, BACKEND_HELP, FORCE_HELP, JOBS_HELP, SCENARIO_HELP, check_work,
                                  console, engine_profile_note, err_console, fail)
from simulator.cli.common import (SpeculativeAlgorithmOption, SpeculativeConfigOption, SpeculativeEagleTopkOption,
                                  SpeculativeNumDraftTokensOption, SpeculativeNumStepsOption, engine_words,
                                  print_notes)
from simulator.cli.common import (AcceptanceRatePctOption, AcceptLengthOption, NumDraftsOption, PerPositionOption,
                                  acceptance_words)
from simulator.inputs import UserInputError


def sweep_command(
    scenario: Annotated[Path, typer.Argument(help=SCENARIO_HELP)],
    grid: Annotated[list[str], typer.Option("--grid", help="field=values: 1..8 | 0.3:0.95:0.05 | a,b,c (repeat).")],
    solver: Annotated[str, typer.Option(help="closed_form (fast) or des.")] = "closed_form",
    jobs: Annotated[Optional[int], typer.Option(help=JOBS_HELP)] = None,
    backend: Annotated[str, typer.Option(help=BACKEND_HELP)] = "local",
    address: Annotated[Optional[str], typer.Option(help=ADDRESS_HELP)] = None,
    out: Annotated[Path, typer.Option(help="Folder for sweep.csv, sweep.json, best_num_steps.csv")] = Path("sweep_out"),
    des_sample: Annotated[int, typer.Option(help="With --solver closed_form: points also run through the DES.")] = 5,
    html: Annotated[bool, typer.Option("--html/--no-html",
                                       help="Also write the dashboard page OUT/plots/index.html.")] = False,
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="Override a field: key.path=value.")] = None,
    profile: Annotated[Optional[str], typer.Option(help="Profile name or JSON path (default: the scenario's).")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Seed of the DES spot-check sample.")] = None,
    force: Annotated[bool, typer.Option("--force", help=FORCE_HELP)] = False,
    engine: Annotated[Optional[str], typer.Option(hidden=True, help="Renamed: --solver.")] = None,
    speculative_config: SpeculativeConfigOption = None,
    speculative_algorithm: SpeculativeAlgorithmOption = None,
    speculative_num_steps: SpeculativeNumStepsOption = None,
    speculative_eagle_topk: SpeculativeEagleTopkOption = None,
    speculative_num_draft_tokens: SpeculativeNumDraftTokensOption = None,
    vllm_acceptance_rate: AcceptanceRatePctOption = None,
    vllm_per_position_accepted: PerPositionOption = None,
    vllm_num_drafts: NumDraftsOption = None,
    sglang_accept_length: AcceptLengthOption = None,
) -> None:
    """Sweep scenario fields over a grid: tok/s, speedup and cycle breakdown per point, best num_steps."""
    from simulator.scenario import resolve_scenario_path
    from simulator.files import SWEEP_OUTPUT, check_output_folder, is_own_html, is_own_output
    from simulator.studies.backend import make_backend
    from simulator.studies.sweep import run_sweep

    if engine is not None:
        fail("--engine was renamed --solver (closed_form or des; 'analytic' is now 'closed_form')")

    def confirm(seconds: float, memory_bytes: float, disk_bytes: float = 0.0) -> None:
        check_work(f"sweep of {scenario}", seconds, memory_bytes, force,
                   "sweep fewer points, or lower workload.max_new_tokens, fidelity.num_cycles or --des-sample",
                   disk_bytes=disk_bytes, out=out)

    try:
        scenario = resolve_scenario_path(scenario)
        set_, word_notes = engine_words(scenario, set_ or [], speculative_config, speculative_algorithm,
                                        speculative_num_steps, speculative_eagle_topk, speculative_num_draft_tokens)
        set_, acceptance_notes = acceptance_words(scenario, set_, vllm_acceptance_rate,
                                                  vllm_per_position_accepted, vllm_num_drafts,
                                                  sglang_accept_length)
        word_notes += acceptance_notes
        check_output_folder(out, "--out", "sweep.json", lambda p: is_own_output(p, SWEEP_OUTPUT), force)
        if html:
            check_output_folder(out / "plots", "--out", "index.html", is_own_html, force)
            check_html_points(grid)
        res = run_sweep(scenario, grid, solver, out_dir=out, des_sample=des_sample, overrides=set_, profile=profile,
                        seed=seed, confirm=confirm, backend=make_backend(backend, jobs, address))
    except UserInputError as e:
        fail(str(e))
    print_answer(res)
    workers = f"{res.jobs} job(s)" if res.backend == "local" else f"{res.backend} on {res.jobs} CPU(s)"
    console.print(escape(f"{len(res.rows)} points, solver {res.solver}, {workers}, {res.elapsed_s:.2f} s; "
                         f"wrote {res.csv_path}, {res.json_path}" + (f", {res.best_path}" if res.best_path else "")),
                  highlight=False)
    engine_profile_note(scenario, set_, res.rows)
    print_notes(word_notes, to_stderr=True)
    if res.num_infeasible:
        console.print(f"[yellow]note:[/] {res.num_infeasible:,} of the {len(res.rows):,} points do not fit in GPU "
                      "memory (weights and KV cache past the GPU's): sweep.csv's fits_memory is false there, "
                      "memory_gb_per_gpu says by how much (simulator.memory)", highlight=False)
    if res.des_check:
        dc = res.des_check
        console.print(f"DES spot-check on {dc['num_points']} points: DES vs closed form tok/s, "
                      f"max |diff| {dc['max_abs_rel_diff'] * 100:.2f}%, median {dc['median_abs_rel_diff'] * 100:.2f}%")
    if res.extrapolation_note:
        console.print(f"[yellow]note:[/] {escape(res.extrapolation_note)}", highlight=False)
    if res.best_rows:
        from simulator.studies.serving_sweep import LOAD_FIELDS
        print_best_table(res.best_rows, load=next((c for c in res.best_rows[0] if c in LOAD_FIELDS), None))
        import json
        grids = json.loads(res.json_path.read_text(encoding="utf-8")).get("grids", []) if res.json_path else []
        swept = [int(v) for g in grids if g.get("field") == "spec.num_steps" for v in g.get("values", [])]
        edge = best_on_grid_edge(res.best_rows, swept)
        if edge:
            console.print(f"[yellow]note:[/] {escape(edge)}", highlight=False)
    if res.crossover_rows:
        print_crossover(res.crossover_rows)
    if html:
        from simulator.studies.plots import plot_sweep
        try:
            index = plot_sweep(out, out / "plots", profile=profile, console=console)
        except UserInputError as e:
            fail(str(e))
        console.print(f"wrote {escape(str(index))}", highlight=False)


def check_html_points(grid: list[str]) -> None:
    """Refuse `--html` before the sweep runs when the grid has more points than the dashboard reads.

    Raises:
        UserInputError: more than MAX_PLOT_POINTS points (a bad grid: as `run_sweep` says it).
    """
    import math

    from simulator.studies.grid import parse_grids
    from simulator.studies.sweep_files import MAX_PLOT_POINTS
    from simulator.studies.sweep_grouped import MAX_GROUPED_GRID_POINTS
    num_points = math.prod(len(a.values) for a in parse_grids(list(grid), MAX_GROUPED_GRID_POINTS))
    if num_points > MAX_PLOT_POINTS:
        raise UserInputError(f"--html: the grid has {num_points:,} points; the dashboard reads a sweep of at most "
                             f"{MAX_PLOT_POINTS:,} (its sweep.csv up to 32 MiB): sweep without --html, or fewer points")


def best_on_grid_edge(best_rows: list[dict], swept: list[int]) -> str | None:
    """A note where the best num_steps of some combinations is the largest the grid swept (the
    optimum may lie beyond it); None otherwise."""
    if not best_rows or len(swept) < 2:
        return None
    top = max(swept)
    hi = sum(r["best_num_steps"] == top for r in best_rows)
    if not hi:
        return None
    return (f"the best num_steps is the largest swept ({top}) in {hi} of {len(best_rows)} combinations: the optimum "
            "may lie beyond the grid (sweep spec.num_steps further)")


def print_answer(res) -> None:
    """The answer first (simulator.studies.answer): where speculation pays (the break-even acceptance
    rate per batch or load), where no speculation is fastest, near ties."""
    from simulator.studies.answer import NEAR_TIE_FRAC, break_even_sentences
    for line in break_even_sentences(res.break_even_rows):
        console.print(f"[bold]answer:[/] {escape(line)}", highlight=False)
    if res.break_even_note:
        console.print(f"[bold]answer:[/] {escape(res.break_even_note)}", highlight=False)
    best = res.best_rows
    if best:
        none = [r for r in best if r["best_num_steps"] == 0]
        ties = [r for r in best if r["near_tie"]]
        words = (f"no speculation is fastest in {len(none)} of {len(best)} combinations (best_num_steps 0)" if none
                 else f"speculation is fastest in all {len(best)} combinations")
        if ties:
            words += (f"; {len(ties)} near tie(s), best and runner-up within {NEAR_TIE_FRAC:.0%} "
                      "(column runner_up_gap_pct)")
        console.print(f"[bold]answer:[/] {escape(words)}", highlight=False)


def print_best_table(best_rows: list[dict], max_rows: int = 40, load: str | None = None) -> None:
    """Rich table of `best_num_steps` rows (first max_rows): the best num_steps ('0 (no speculation)'
    where the baseline is fastest), its tok/s and speedup, the runner-up and how far behind it is
    (near ties marked), and whether the best point lies beyond the profile's measured range."""
    from simulator.studies.answer import steps_word
    tok = "serving_output_tok_per_s" if "serving_output_tok_per_s" in best_rows[0] else "tok_per_s"
    title = ("best num_steps per " + (load.split(".")[-1] if load else "combination") +
             (" (highest serving output tok/s" if tok != "tok_per_s" else " (highest tok/s") + ")")
    t = Table(title=escape(title), title_justify="left", highlight=False)
    combo = [c for c in best_rows[0] if c not in (
        "best_num_steps", tok, "speedup", "serving_speedup", "baseline_tok_per_s", "serving_baseline_output_tok_per_s",
        "best_speculative_num_steps", "best_speculative_speedup", "runner_up_num_steps", "runner_up_gap_pct",
        "near_tie", "extrapolation")]
    for c in [*combo, "best num_steps", "tok/s", "speedup", "runner-up (behind)", "beyond measured"]:
        t.add_column(escape(c.split(".")[-1]), justify="right")
    for r in best_rows[:max_rows]:
        speedup = r.get("speedup", r.get("serving_speedup"))
        runner = f"{steps_word(r['runner_up_num_steps'])} ({r['runner_up_gap_pct']:.1f}%" + (
            ", near tie)" if r["near_tie"] else ")")
        t.add_row(*(f"{r[c]:,.2f}" if isinstance(r[c], float) else escape(str(r[c])) for c in combo),
                  escape(steps_word(r["best_num_steps"])), f"{r[tok]:,.0f}", f"{speedup:.2f}x", escape(runner),
                  "yes" if r.get("extrapolation") else "")
    console.print(t)
    if len(best_rows) > max_rows:
        console.print(f"[dim]... {len(best_rows) - max_rows} more rows in best_num_steps.csv[/]")


def print_crossover(rows: list[dict]) -> None:
    """Rich table of the serving crossover (simulator.studies.serving_sweep.crossover)."""
    load = rows[0]["load_field"]
    t = Table(title=escape(f"where speculation stops paying along {load} (output tok/s <= no speculation)"),
              title_justify="left", highlight=False)
    extra = [c for c in rows[0] if c not in ("load_field", "crossover", "last_paying", "speedups")]
    for c in [*extra, "crossover", "last paying", "speedup by load"]:
        t.add_column(escape(c.split(".")[-1]), justify="right")
    for r in rows:
        speedups = ", ".join(f"{x:g}: {s:.2f}x" for x, s in r["speedups"])
        t.add_row(*(escape(str(r[c])) for c in extra), "none swept" if r["crossover"] is None else str(r["crossover"]),
                  "-" if r["last_paying"] is None else str(r["last_paying"]), escape(speedups))
    console.print(t)
