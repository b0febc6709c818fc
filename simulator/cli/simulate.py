"""`specdecsim simulate`: one scenario -> table, JSON, Chrome/Perfetto trace."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from simulator.cli.common import FORCE_HELP, SCENARIO_HELP, check_work, console, err_console, fail, progress_bar, short_path, json_to_stdout, output_name
from simulator.cli.common import (SpeculativeAlgorithmOption, SpeculativeConfigOption, SpeculativeEagleTopkOption,
                                  SpeculativeNumDraftTokensOption, SpeculativeNumStepsOption, engine_words,
                                  print_notes)
from simulator.cli.common import (AcceptanceRatePctOption, AcceptLengthOption, NumDraftsOption, PerPositionOption,
                                  acceptance_words)
from simulator.inputs import UserInputError
from simulator.trace_window import DEFAULT_WINDOW_BYTES, TRACE_LIMIT_BYTES


def simulate(
    scenario: Annotated[Path, typer.Argument(help=SCENARIO_HELP)],
    profile: Annotated[Optional[str], typer.Option(help="Profile name or JSON path (default: the scenario's).")] = None,
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="Override a field: key.path=value.")] = None,
    seed: Annotated[Optional[int], typer.Option(help="RNG seed (overrides the scenario's).")] = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the result as JSON here (\'-\': standard output, the tables then on standard error).")] = None,
    trace: Annotated[Optional[Path], typer.Option(help="Write a Chrome/Perfetto trace here (streamed; the size "
                                                       "is printed first).")] = None,
    trace_cycles: Annotated[Optional[str], typer.Option(
        help="Cycles to trace, A:B = A to B-1 counted from 0 (warm-up included); A: to the end. Default: every "
             f"cycle when the trace fits {DEFAULT_WINDOW_BYTES // 2**20} MiB, else the first cycles that do.")] = None,
    force: Annotated[bool, typer.Option("--force", help=FORCE_HELP)] = False,
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
    """Predict tokens/s, accept length, TPOT and the cycle-time breakdown of one scenario."""
    json_to_stdout(json_out)
    from simulator.costs.forward import CostModel
    from simulator.files import SIMULATION_OUTPUT, TRACE_OUTPUT, check_output_file, write_json_atomic
    from simulator.scenario import load_profile_for, load_scenario, resolve_scenario_path
    from simulator.estimate import estimate_run
    from simulator.simulate import simulate as run_simulation
    from simulator.trace import TraceWriter

    if trace_cycles is not None and trace is None:
        fail("--trace-cycles needs --trace")
    overrides = list(set_ or [])
    if seed is not None and not 0 <= seed <= 2**63 - 1:
        fail(f"--seed must be >= 0 and < 2**63, got {seed}")
    if seed is not None:
        overrides.append(f"seed={seed}")
    try:
        scenario = resolve_scenario_path(scenario)
        overrides, word_notes = engine_words(scenario, overrides, speculative_config, speculative_algorithm,
                                             speculative_num_steps, speculative_eagle_topk, speculative_num_draft_tokens)
        overrides, acceptance_notes = acceptance_words(scenario, overrides, vllm_acceptance_rate,
                                                       vllm_per_position_accepted, vllm_num_drafts,
                                                       sglang_accept_length)
        word_notes += acceptance_notes
        check_output_file(json_out, "--json", SIMULATION_OUTPUT, force)
        check_output_file(trace, "--trace", TRACE_OUTPUT, force)
        if json_out is not None and trace is not None and json_out.resolve() == trace.resolve():  # after ..
            raise UserInputError(f"--json and --trace name the same file {json_out}")
        sc = load_scenario(scenario, overrides)
        prof, prof_path = load_profile_for(sc, profile, base_dir=None if profile else scenario.parent,
                                           source=str(scenario))
    except UserInputError as e:
        fail(str(e))
    if trace is not None and sc.fidelity.granularity == "cycle":
        fail(f"{scenario}: --trace needs fidelity.granularity forward or kernel (cycle granularity keeps no spans)")
    from simulator.memory import check_memory
    _, too_big, tight = check_memory(sc, prof)
    if too_big:
        fail(f"{scenario}: {too_big}")
    if tight:
        console.print(f"[yellow]note:[/] {escape(tight)}", highlight=False)
    cost = CostModel(sc, prof)
    window = None
    if trace is not None:
        try:
            window = trace_window(sc, cost, trace_cycles, force)
        except UserInputError as e:
            fail(str(e))
        if sc.fidelity.granularity == "forward":  # after the window is checked: a bad one is the only line
            console.print("[dim]trace: forward granularity gives one span per forward; "
                          "--set fidelity.granularity=kernel for per-kernel spans[/]")
    est = estimate_run(sc, cost, trace_cycles=window.num_cycles if window is not None else 0)
    show = check_work(f"{sc.name}: {est.num_cycles:,} cycles at {sc.fidelity.granularity} granularity",
                      est.seconds, est.memory_bytes, force,
                      "lower fidelity.num_cycles or use a coarser fidelity.granularity")
    if sc.serving is not None:
        from simulator.serving.run import estimate_serving
        s_sec, s_bytes, s_req = estimate_serving(sc)
        show = check_work(f"{sc.name}: serving, about {s_req:,} requests (with and without speculation)",
                          s_sec, s_bytes, force, "lower serving.num_requests or serving.duration_s") or show
    try:
        with progress_bar("simulating", enabled=show) as update:
            if trace is None:
                result, _ = run_simulation(sc, prof, profile_ref=str(prof_path), progress=update)
            else:
                with TraceWriter(trace, window) as writer:  # the file appears whole, or not at all
                    result, _ = run_simulation(sc, prof, profile_ref=str(prof_path), trace=writer,
                                               progress=update)
    except ArithmeticError as e:
        fail(f"{scenario}: {e}")
    except UserInputError as e:
        fail(str(e))
    except OSError as e:  # the trace is written during the run: a full disk, say (no partial file is left)
        fail(f"--trace {trace}: cannot write: {e.strerror or e}")
    from simulator.serving.run import simulate_generate
    try:
        generate, generate_note = simulate_generate(sc, prof)
    except (ArithmeticError, UserInputError) as e:  # the steady answer stands; the note says why this does not
        generate, generate_note = None, f"LLM.generate of the batch not simulated: {e}"
    result = result.model_copy(update={"generate": generate})
    written = []
    if json_out is not None:
        write_json_atomic(json_out, result.model_dump(mode="json"), allow_nan=False)
        written.append(f"wrote {output_name(json_out)}")
    if trace is not None:
        written.append(f"wrote {escape(str(trace))}: cycles {window}, {writer.num_events:,} events, "
                       f"{trace.stat().st_size / 2**20:,.1f} MiB (open in https://ui.perfetto.dev)")
    print_result(result, generate_note)
    print_notes(word_notes)
    for line in written:
        console.print(line, highlight=False)


def trace_window(sc, cost, text: str | None, force: bool):
    """The cycles to trace (`--trace-cycles`, or the default window), its size printed first.

    Returns:
        simulator.trace_window.TraceWindow.

    Raises:
        UserInputError: a bad window, or an estimated trace over TRACE_LIMIT_BYTES without `force`.
    """
    from simulator.estimate import trace_estimate
    from simulator.trace_window import default_window, parse_window
    total = sc.fidelity.num_cycles + sc.fidelity.warmup_cycles
    whole = trace_estimate(sc, cost, total)
    if text is None:
        window = default_window(total, whole.bytes_per_cycle)
        how = ("every cycle" if window.num_cycles == total else
               f"the first {window.num_cycles:,} of {total:,} cycles (all would be about "
               f"{whole.num_bytes / 2**20:,.0f} MiB); --trace-cycles A:B picks others")
    else:
        window = parse_window(text, total)
        how = f"cycles {window} of the run's {total:,}"
    est = trace_estimate(sc, cost, window.num_cycles)
    size = f"about {est.num_events:,} events, {est.num_bytes / 2**20:,.1f} MiB"
    if est.num_bytes > TRACE_LIMIT_BYTES and not force:
        raise UserInputError(f"--trace-cycles {window}: {size}, over the {TRACE_LIMIT_BYTES / 2**30:.0f} GiB trace "
                             "limit; trace fewer cycles, or add --force")
    err_console.print(escape(f"trace: {how}; {size}"), highlight=False)
    return window


def _num(x: float, decimals: int = 1) -> str:
    """A number with `decimals` decimals and thousands separators; small ones to 3 significant
    digits, so a rate of 0.0123 tokens/s does not print as 0.0."""
    if x != 0 and abs(x) < 10 ** (1 - decimals):
        return f"{x:.3g}"
    return f"{x:,.{decimals}f}"


def _engine_label(engine: dict) -> str:
    """A short label of a result's serving engine (its scenario dict)."""
    if engine["kind"] == "live_loop":
        return "CUDA graph" if engine["cuda_graph"] else "eager"
    if engine.get("engine_profile"):
        return f"{engine['kind']}, engine profile {Path(engine['engine_profile']).name.removesuffix('.json')}"
    return f"{engine['kind']}{' ' + engine['version'] if engine.get('version') else ''}, verify graph {engine['graph_verify']}"


def print_generate(g: dict) -> None:
    """Rich table of a result's generate block (simulator.serving.run.simulate_generate)."""
    s, sp, base = g["serving"], g["speculative"], g["baseline"]
    b = g["batch_size"]
    what = "this prompt" if b == 1 else f"these {b:,} prompts"
    p, n = g["prompt_tokens"], g["max_tokens"]
    t = Table(title=escape(f"LLM.generate of {what} ({p:,} token{'' if p == 1 else 's'}, {n:,} new"
                           f"{'' if b == 1 else ' each'}): prefill, decode, the batch draining"),
              title_justify="left", highlight=False)
    t.add_column("metric")
    t.add_column("speculative", justify="right")
    t.add_column("no speculation", justify="right")
    t.add_row("wall time (s)", _num(sp["generate_s"], 3), _num(base["generate_s"], 3))
    t.add_row("output tokens/s", _num(s["output_tok_per_s"]), _num(s["baseline_output_tok_per_s"]))
    dec = [_num(x["decode_tok_per_s"]) if x["decode_tok_per_s"] else "-" for x in (sp, base)]
    t.add_row("decode tok/s = (B x N - B) / (wall - prefill alone)", *dec)
    t.add_row("prefill alone (s)", _num(sp["prefill_alone_s"], 3), _num(base["prefill_alone_s"], 3))
    t.add_row("TTFT / TPOT p50 (ms)", f"{_ms(s['ttft_ms'])[0]} / {_ms(s['tpot_ms'])[0]}",
              f"- / {_num(s['baseline_tpot_ms']['p50'], 2)}" if s.get("baseline_tpot_ms") else "-")
    console.print(t)
    if sp.get("draws", 1) > 1:
        lo, hi = sp["generate_s_range"]
        console.print(f"[dim]speculative: the mean of {sp['draws']} draws of the acceptance; one generate's wall time "
                      f"is itself a draw (it ends with its unluckiest request): {lo:.3f} .. {hi:.3f} s over these "
                      "(serving.draws)[/]", highlight=False)
    console.print(f"[dim]prefill priced from {escape(g['prefill_priced_from'])}[/]", highlight=False)


def print_result(r, generate_note: str | None = None) -> None:
    """Rich tables of a SimulationResult."""
    sc = r.scenario
    spec = sc["spec"]
    title = escape(f"{sc['name']}: {sc['target']['name']} TP{sc['tp_size']}, draft {sc['placement']}, "
                   f"num_steps={spec['num_steps']} topk={spec['topk']}, "
                   f"{'' if sc.get('serving') else 'steady '}batch {sc['workload']['batch_size']}, "
                   f"{_engine_label(sc['serving_engine'])}")
    t = Table(title=title, show_header=True, title_justify="left", highlight=False)
    t.add_column("metric")
    t.add_column("value", justify="right")
    t.add_column("95% interval / note", justify="right")
    t.add_row("tokens/s (system)", _num(r.tok_per_s), f"{_num(r.tok_per_s_ci95[0])} .. {_num(r.tok_per_s_ci95[1])}")
    t.add_row("baseline tokens/s (no speculation)", _num(r.baseline_tok_per_s), "")
    t.add_row("speedup", f"{_num(r.speedup, 3)}x", "")
    t.add_row("accept length (tokens/cycle)", f"{r.accept_length.mean:.3f}",
              f"{r.accept_length.ci95_low:.3f} .. {r.accept_length.ci95_high:.3f}")
    t.add_row("cycle time (us)", _num(r.cycle_time_us), f"baseline step {_num(r.baseline_step_us)}")
    if r.tpot_ms is not None:
        t.add_row("TPOT p50 / p90 / p99 (ms)", _num(r.tpot_ms.p50, 2),
                  f"{_num(r.tpot_ms.p90, 2)} / {_num(r.tpot_ms.p99, 2)}")
    t.add_row("closed form tokens/s", _num(r.analytic_tok_per_s),
              f"{(r.tok_per_s / r.analytic_tok_per_s - 1) * 100:+.2f}% DES vs closed form")
    console.print(t)
    if r.generate is not None:
        print_generate(r.generate)
    b = Table(title="where the cycle goes (mean per cycle)", title_justify="left", highlight=False)
    b.add_column("bucket")
    b.add_column("us", justify="right")
    b.add_column("share", justify="right")
    for k, v in sorted(r.breakdown_us.items(), key=lambda kv: -kv[1]):
        v = v if abs(v) > 1e-9 * r.cycle_time_us else 0.0  # floating-point residue of a bucket that is empty
        b.add_row(escape(k), _num(v), f"{v / r.cycle_time_us * 100:.1f}%")
    console.print(b)
    if r.serving is not None:
        print_serving(r.serving, sc.get("serving") or {})
    eprof = sc["serving_engine"].get("engine_profile")
    native = eprof and r.priced_by_engine_profile
    console.print(f"[dim]{r.num_cycles} cycles, {r.simulated_us / 1e6:.3f} s simulated, seed {r.seed}, "
                  + (f"engine profile {escape(short_path(eprof))} (op-table profile {escape(short_path(r.profile))} "
                     "not used for the cycle)" if native else f"profile {escape(short_path(r.profile))}") + "[/]")
    roof = [n for n in r.notes if n in r.untabled_op_notes]
    for n in [n for n in r.notes if n not in r.untabled_op_notes]:
        console.print(f"[yellow]note:[/] {escape(n)}", highlight=False)
    if roof:
        near = sum(r.untabled_op_notes[n] for n in roof)
        how = f" ({near} GEMMs scaled from the nearest measured GEMM)" if near else ""
        console.print(f"[yellow]note:[/] {len(roof)} op shapes have no measured table in this profile and use "
                      f"its roofline{how} (list: the `notes` of --json output)", highlight=False)
    if not sc.get("serving"):
        b = sc["workload"]["batch_size"]
        gen = ("the LLM.generate table prices that (a closed batch, docs/engines/requests.md)" if r.generate
               else (generate_note or f"--set serving.arrivals.kind=closed_batch --set serving.num_requests={b} "
                     "simulates that"))
        console.print(f"[yellow]note:[/] the first table is a steady batch: each finished request is replaced at once. "
                      f"LLM.generate of {'one prompt' if b == 1 else f'{b:,} prompts'} also prefills and, speculating, "
                      f"drains as its requests finish; {gen}", highlight=False)


def _ms(p: dict | None) -> tuple[str, str]:
    """(p50, 'p90 / p99 (mean)') of a Percentiles dict in ms."""
    if p is None:
        return "-", ""
    return _num(p["p50"], 2), f"{_num(p['p90'], 2)} / {_num(p['p99'], 2)}  (mean {_num(p['mean'], 2)})"


def print_serving(s: dict, cfg: dict) -> None:
    """Rich table of a result's serving block (simulator.serving.metrics.ServingResult as JSON)."""
    arr = cfg.get("arrivals", {})
    how = {"poisson": f"Poisson {arr.get('rate_per_s')} req/s", "closed_loop": f"closed loop, concurrency "
           f"{arr.get('concurrency')}", "closed_batch": f"closed batch of {cfg.get('num_requests')} requests at t = 0 "
           "(LLM.generate)", "trace": f"trace {arr.get('path')}" if arr.get("path")
           else f"{len(arr.get('arrival_s') or [])} arrivals listed"}.get(arr.get("kind"), "")
    t = Table(title=escape(f"serving: {how}, {s['num_requests']} requests measured over {s['duration_s']:.1f} s"),
              title_justify="left", highlight=False)
    t.add_column("metric")
    t.add_column("value", justify="right")
    t.add_column("p90 / p99 (mean) / note", justify="right")
    base = s.get("baseline_output_tok_per_s")
    t.add_row("output tokens/s", _num(s["output_tok_per_s"]),
              f"no speculation {_num(base)}, speedup {s['speedup']:.3f}x" if base else "")
    t.add_row("requests/s", _num(s["request_per_s"], 3), "")
    t.add_row("tokens/s per user", _num(s["tok_per_s_per_user"]) if s["tok_per_s_per_user"] else "-", "")
    for label, key in (("TTFT p50 (ms)", "ttft_ms"), ("TPOT p50 (ms)", "tpot_ms"), ("ITL p50 (ms)", "itl_ms"),
                       ("end-to-end latency p50 (ms)", "e2e_latency_ms"), ("queueing p50 (ms)", "queue_ms")):
        t.add_row(label, *_ms(s[key]))
    slo = cfg.get("slo") or {}
    slo_text = ", ".join(f"{k} <= {v}" for k, v in slo.items() if v is not None) or "no SLO given"
    t.add_row("goodput (requests/s)", _num(s["goodput_request_per_s"], 3),
              f"{s['slo_attained_frac'] * 100:.1f}% meet {slo_text}")
    t.add_row("goodput (tokens/s)", _num(s["goodput_tok_per_s"]), "")
    t.add_row("mean decode batch", _num(s["mean_batch_size"], 2),
              f"speculating in {s['spec_step_frac'] * 100:.1f}% of decode steps")
    if s["mean_accept_length"] is not None:
        t.add_row("accept length (tokens/cycle)", f"{s['mean_accept_length']:.3f}", "")
    t.add_row("mean requests in system", _num(s["mean_requests_in_system"], 2),
              f"{s['num_preemptions']} preemptions, {s['num_engine_steps']:,} engine steps")
    console.print(t)
    if (s.get("draws") or 1) > 1:
        lo, hi = s["duration_s_range"]
        console.print(f"[dim]speculative: the mean of {s['draws']} draws of the acceptance (serving.draws); one closed "
                      f"batch's or loop's duration is itself a draw (it ends with its unluckiest request): {lo:.3f} .. {hi:.3f} s "
                      "over these[/]", highlight=False)
    finished = s.get("num_finished") or 0
    if finished and s["num_requests"] < 0.5 * finished:
        console.print(f"[yellow]note:[/] only {s['num_requests']:,} of {finished:,} finished requests are measured (the "
                      "others arrived during serving.warmup_s): the rates cover a short tail of the run, and the two "
                      "runs' windows differ", highlight=False)
