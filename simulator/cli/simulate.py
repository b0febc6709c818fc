"""`specdecsim simulate`: one scenario -> table, JSON, Chrome/Perfetto trace."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from simulator.cli.common import console, fail, refuse_folder, short_path
from simulator.scenario import UserInputError, load_profile_for, load_scenario


def simulate(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML, e.g. scenarios/tp1_draft.yaml.")],
    profile: Annotated[Optional[str], typer.Option(help="Profile name or JSON path (default: the scenario's).")] = None,
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="Override a field: key.path=value.")] = None,
    seed: Annotated[Optional[int], typer.Option(help="RNG seed (overrides the scenario's).")] = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the result as JSON here.")] = None,
    trace: Annotated[Optional[Path], typer.Option(help="Write a Chrome/Perfetto trace here.")] = None,
) -> None:
    """Predict tokens/s, accept length, TPOT and the cycle-time breakdown of one scenario."""
    from simulator.files import write_json_atomic
    from simulator.simulate import simulate as run_simulation
    from simulator.trace import write_trace

    overrides = list(set_ or [])
    if seed is not None and seed < 0:
        fail(f"--seed must be >= 0, got {seed}")
    if seed is not None:
        overrides.append(f"seed={seed}")
    refuse_folder("--json", json_out)
    refuse_folder("--trace", trace)
    try:
        sc = load_scenario(scenario, overrides)
        prof, prof_path = load_profile_for(sc, profile, base_dir=None if profile else scenario.parent,
                                           source=str(scenario))
    except UserInputError as e:
        fail(str(e))
    if trace is not None and sc.fidelity.granularity != "kernel":
        if sc.fidelity.granularity == "cycle":
            fail(f"{scenario}: --trace needs fidelity.granularity forward or kernel (cycle granularity keeps no spans)")
        console.print("[dim]trace: forward granularity gives one span per forward; "
                      "--set fidelity.granularity=kernel for per-kernel spans[/]")
    result, events = run_simulation(sc, prof, profile_ref=str(prof_path), trace=trace is not None)
    print_result(result)
    if json_out is not None:
        write_json_atomic(json_out, result.model_dump(mode="json"))
        console.print(f"wrote {escape(str(json_out))}")
    if trace is not None:
        write_trace(trace, events)
        console.print(f"wrote {escape(str(trace))} (open in https://ui.perfetto.dev)")


def print_result(r) -> None:
    """Rich tables of a SimulationResult."""
    sc = r.scenario
    spec = sc["spec"]
    title = escape(f"{sc['name']}: {sc['target']['name']} TP{sc['tp_size']}, draft {sc['placement']}, "
                   f"num_steps={spec['num_steps']} topk={spec['topk']}, batch {sc['workload']['batch_size']}, "
                   f"{'CUDA graph' if sc['serving_engine']['cuda_graph'] else 'eager'}")
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
                  f"profile {escape(short_path(r.profile))}[/]")
    roof = [n for n in r.notes if n.startswith("no table for ")]
    for n in [n for n in r.notes if n not in roof]:
        console.print(f"[yellow]note:[/] {escape(n)}", highlight=False)
    if roof:
        console.print(f"[yellow]note:[/] {len(roof)} op shapes have no measured table in this profile and use "
                      "its roofline (list: the `notes` of --json output)", highlight=False)
