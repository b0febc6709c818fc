"""`specdecsim calibrate` commands that build from files already there, without torch: a profile
from nccl-tests logs (import-nccl-tests), from points files (merge) or from torch.profiler traces
(from-traces), a scenario with an engine's host times fitted to its own runs (from-runs), and a
scenario with an engine's fused-MoE time per layer from its MoE benchmark (moe-kernel-times).

    specdecsim calibrate import-nccl-tests LOG... --profile P --out OUT [--in-place]
    specdecsim calibrate merge --points P... --out OUT [--gpu-count N --interconnect T --topology T]
    specdecsim calibrate from-runs SCENARIO RUN... --out FITTED.yaml [--fit P,P]   (an engine's own logs)
    specdecsim calibrate from-traces DIR --out PROFILE.json [--roofline-from h200_datasheet] [--name N]
    specdecsim calibrate moe-kernel-times SCENARIO LOG --out OUT.yaml

The work is `calibration.build` (nccl_tests, merge), `simulator.evidence.engine_fit` with
`simulator.evidence.importers` (moe_bench for the MoE benchmark), and `simulator.evidence.trace_profile`; `calibration.cli.calibrate` mounts these
commands. Parses, checks, runs and writes; no modelled numbers here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from calibration.cli.common import (FORCE_HELP, check_at_least, check_choice, check_output, check_points_file,
                                    console, fail, print_profile)
from simulator.files import PROFILE_OUTPUT


def import_nccl_tests(
    logs: Annotated[list[Path], typer.Argument(help="nccl-tests logs (all_reduce_perf, broadcast_perf, "
                                                    "all_gather_perf, sendrecv_perf output).")],
    profile: Annotated[str, typer.Option(help="Existing profile to merge into: a shipped name (h200) or a JSON path.")],
    out: Annotated[Path, typer.Option(help="Profile JSON to write (may be the same as --profile).")],
    in_place: Annotated[bool, typer.Option("--in-place", help="Use the in-place time column.")] = False,
    op: Annotated[Optional[str], typer.Option(help="Collective, when the log does not say: allreduce, "
                                                   "broadcast, all_gather, send_recv.")] = None,
    world_size: Annotated[Optional[int], typer.Option(help="Ranks, when the log's '#  Rank' lines do not "
                                                           "show them all.")] = None,
    mode: Annotated[Optional[str], typer.Option(help="eager or graph, overriding the log's 'graph: K'.")] = None,
    command: Annotated[Optional[str], typer.Option(help="The nccl-tests command line, when the log lacks it.")] = None,
    force: Annotated[bool, typer.Option("--force", help=FORCE_HELP)] = False,
) -> None:
    """Merge nccl-tests latency tables into a profile (tables of the same op, world size, mode are replaced)."""
    from pydantic import ValidationError

    from calibration.build.nccl_tests import import_into_profile
    from simulator.profile import resolve_profile_path
    from simulator.scenario import format_validation_error

    check_choice("--mode", mode, ("eager", "graph"))
    check_output("--out", out, PROFILE_OUTPUT, force)
    missing = [str(p) for p in logs if not p.is_file()]
    if missing:
        fail(f"nccl-tests log not found: {', '.join(missing)}")
    try:
        profile_path = resolve_profile_path(profile)
    except FileNotFoundError as e:
        fail(str(e))
    try:
        merged = import_into_profile(profile_path, logs, out, in_place=in_place, op=op, world_size=world_size,
                                     mode=mode, command=command)
    except ValidationError as e:
        fail(format_validation_error(f"{profile_path} (with {', '.join(map(str, logs))})", e))
    except (ValueError, OSError) as e:
        fail(str(e))
    imported = {str(p) for p in logs}
    table = Table(title=f"collective tables in {out}")
    for col in ("op", "world_size", "mode", "sizes", "latency_us (first..last)", "from"):
        table.add_column(col)
    for t in merged.collectives:
        table.add_row(t.op, str(t.world_size), t.mode, f"{t.size_bytes[0]}..{t.size_bytes[-1]} B ({len(t.size_bytes)})",
                      f"{t.latency_us[0]:.2f}..{t.latency_us[-1]:.1f}",
                      "imported" if t.provenance.source in imported else "kept")
    console.print(table)
    console.print(f"[green]wrote {escape(str(out))}")


def merge(
    points: Annotated[list[Path], typer.Option(help="PointStore JSONL files, merged in order (a later file's "
                                                    "point replaces an earlier one's).")],
    out: Annotated[Path, typer.Option(help="Profile JSON to write (atomically).")],
    name: Annotated[Optional[str], typer.Option(help="Profile name; default the file stem.")] = None,
    gpu_count: Annotated[Optional[int], typer.Option(help="Override hardware.gpu_count.")] = None,
    interconnect: Annotated[Optional[str], typer.Option(help="Override hardware.interconnect.")] = None,
    topology: Annotated[Optional[str], typer.Option(help="Override hardware.topology.")] = None,
    catalog_gpu: Annotated[Optional[str], typer.Option(help="Hardware-catalog id of the measured GPU (specdecsim "
                                                            "hardware), so the profile can be carried to another "
                                                            "GPU.")] = None,
    catalog_box: Annotated[Optional[str], typer.Option(help="Hardware-catalog id of the box the collectives were "
                                                            "measured on (specdecsim hardware), so a box with another "
                                                            "interconnect prices them from its links.")] = None,
    force: Annotated[bool, typer.Option("--force", help=FORCE_HELP)] = False,
) -> None:
    """Build one profile from several points files (e.g. one GPU's op tables + a multi-GPU machine's collectives)."""
    from calibration.build.merge import merge_points
    from simulator.inputs import UserInputError
    from simulator.hardware import default_catalog
    from simulator.profile import save_profile

    check_at_least("--gpu-count", gpu_count, 1)
    if any(out.resolve() == p.resolve() for p in points):
        fail(f"--out {out} is one of the --points files; the profile goes to a file of its own")
    check_output("--out", out, PROFILE_OUTPUT, force)
    for p in points:
        check_points_file("--points", p)
    if catalog_gpu is not None:
        try:
            default_catalog().gpu(catalog_gpu)
        except UserInputError as e:
            fail(f"--catalog-gpu: {e}")
    if catalog_box is not None:
        try:
            default_catalog().box(catalog_box)
        except UserInputError as e:
            fail(f"--catalog-box: {e}")
    missing = [str(p) for p in points if not p.is_file()]
    if missing:
        fail(f"--points: no such points file: {', '.join(missing)}")
    update = {k: v for k, v in (("gpu_count", gpu_count), ("interconnect", interconnect), ("topology", topology),
                                ("catalog_gpu", catalog_gpu), ("catalog_box", catalog_box)) if v is not None}
    from pydantic import ValidationError

    from simulator.inputs import format_validation_error
    try:
        profile = merge_points(points, name or out.stem, update)
    except ValidationError as e:  # a measured value out of the profile's range (NaN, negative, ...)
        fail(format_validation_error(f"profile built from {', '.join(map(str, points))}", e))
    except (ValueError, OSError) as e:
        fail(str(e))
    except (KeyError, TypeError) as e:  # a point record without a field build_profile reads
        fail(f"--points {', '.join(map(str, points))}: a point record lacks or mistypes the field {e}")
    save_profile(profile, out)
    print_profile(profile, out)


FROM_RUNS_MARK = "# written by specdecsim calibrate from-runs\n"


def from_runs(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML of the runs' set-up (serving_engine kind sglang, "
                                                  "vllm or trtllm; hardware; models; spec).")],
    runs: Annotated[list[Path], typer.Argument(help="Engine outputs: SGLang server logs or bench output, vLLM "
                                                    "spec-decode logs, /metrics scrapes or bench output, "
                                                    "trtllm-bench reports (simulator.evidence.importers).")],
    out: Annotated[Path, typer.Option(help="Scenario YAML to write: SCENARIO with the fitted engine fields.")],
    fit: Annotated[Optional[str], typer.Option(help="Comma-separated engine fields to fit (default per engine: "
                                                    "host_decode_step_us, host_cycle_us[, host_draft_step_us]); "
                                                    "also kernel_efficiency.")] = None,
    run_format: Annotated[str, typer.Option("--format", help="Format of every RUN file, or auto.")] = "auto",
    force: Annotated[bool, typer.Option("--force", help="Replace an existing --out file.")] = False,
) -> None:
    """Fit a serving engine's host times (and optionally its kernel efficiency) to its own runs:
    each run's throughput, batch and acceptance are read from its log; the scenario gives the rest.
    Prints the fitted values with standard errors and each run's error, and writes SCENARIO with
    them as --out (a baseline and one speculative run are enough for the two default fields)."""
    from simulator.evidence.engine_fit import FIT_PARAMS, fit_engine, run_observations
    from simulator.engines.models import ENGINE_MODEL_KINDS
    from simulator.evidence.importers import FORMATS, iter_runs, operating_points
    from simulator.inputs import UserInputError
    from simulator.scenario import load_scenario

    if run_format != "auto":
        check_choice("--format", run_format, FORMATS)
    _check_scenario_out(out, [scenario, *runs], FROM_RUNS_MARK, "from-runs", force)
    if fit is not None and not fit.strip(", "):
        fail("--fit: empty; give comma-separated engine fields, e.g. host_cycle_us,host_decode_step_us")
    _check_inputs([scenario, *runs])
    check_output("--out", out, "scenario", force=True)  # its folder: writable, not under a file
    try:
        sc = _profile_beside(load_scenario(scenario), scenario)
        kind = sc.serving_engine.kind
        if kind == "live_loop":
            fail(f"{scenario}: serving_engine.kind live_loop: the live loop's host times are the profile's own "
                 f"(specdecsim calibrate); from-runs fits an engine kind ({', '.join(ENGINE_MODEL_KINDS)})")
        if kind not in FIT_PARAMS and fit is None:
            fail(f"{scenario}: serving_engine.kind {kind}: give --fit (fields to fit), or use an engine kind "
                 f"({', '.join(FIT_PARAMS)})")
        params = tuple(p.strip() for p in fit.split(",") if p.strip()) if fit else FIT_PARAMS[kind]
        # one run per operating point of each file (a server log's lines at one batch size and set-up
        # averaged: simulator.evidence.importers.points), the logs streamed line by line
        observed = [r for path in runs for r in operating_points(iter_runs(path, run_format))]
        other = sorted({r.engine for r in observed if r.engine not in (kind, None)})
        if other:
            console.print(f"[yellow]note:[/] runs of {', '.join(other)} fitted with a {kind} scenario", highlight=False)
        obs = run_observations(sc, observed, str(scenario))
        result = fit_engine(kind, obs, params)
    except UserInputError as e:
        fail(str(e))
    console.print(escape(result.table()), highlight=False)
    _write_engine_scenario(scenario, out, {k: round(v, 3) for k, v in result.params.items()}, FROM_RUNS_MARK,
                           [f"from {scenario} and {len(runs)} run file(s):"] + [f"  {p}" for p in runs]
                           + result.table().splitlines())


def _profile_beside(sc, scenario: Path):
    """`sc` with a profile path written relative to the scenario's folder made absolute, as
    `specdecsim simulate` finds it (the fit's predictions load the profile from the scenario alone)."""
    ref = sc.profile
    if ("/" in ref or ref.endswith(".json")) and not Path(ref).is_absolute() and (scenario.parent / ref).is_file():
        return sc.model_copy(update={"profile": str((scenario.parent / ref).resolve())})
    return sc


def _check_inputs(paths) -> None:
    """Exit 2 naming the first input that is a folder, not a regular file, or missing."""
    for p in paths:
        if p.is_dir():
            fail(f"{p}: is a folder, expected a file")
        if not p.is_file():
            fail(f"{p}: {'not a regular file' if p.exists() else 'not found'}")


def _check_scenario_out(out: Path, inputs, mark: str, command: str, force: bool) -> None:
    """Exit 2 when the scenario --out is a folder or not a regular file, is one of the inputs, or
    exists without `mark` (this command's earlier output) and no --force."""
    if out.is_dir():
        fail(f"--out {out}: is a folder; give the scenario YAML file to write")
    if out.exists() and not out.is_file():
        fail(f"--out {out}: not a regular file")
    if any(out.resolve() == p.resolve() for p in inputs if p.exists()):
        fail(f"--out {out}: is one of the inputs; write the scenario elsewhere")
    if out.exists() and not force and not out.read_text(errors="replace").startswith(mark):
        fail(f"--out {out}: exists and is not an earlier {command} output; --force replaces it")


def _write_engine_scenario(scenario: Path, out: Path, engine_fields: dict, mark: str, header: list[str]) -> None:
    """Write SCENARIO to `out` (atomically) with `engine_fields` set in its serving_engine section,
    a header of `mark` and commented `header` lines. The result is validated first (exit 2, one
    line, nothing written when it would not load); the files it names by relative path (config.json,
    a profile JSON, serving trace and length files) stay valid from out's folder."""
    import yaml

    from simulator.files import write_text_atomic
    from simulator.inputs import UserInputError
    from simulator.scenario import read_scenario_dict, scenario_from_dict

    data = read_scenario_dict(scenario)
    engine = dict(data.get("serving_engine") or {})
    engine.update(engine_fields)
    data["serving_engine"] = engine
    try:
        scenario_from_dict(data, f"--out {out}", scenario.parent)
    except UserInputError as e:
        fail(str(e))

    def rebase(ref):
        if not isinstance(ref, str) or not ref.strip() or Path(ref).is_absolute():
            return ref
        return os.path.relpath((scenario.parent / ref).resolve(), out.parent.resolve())

    for role in ("target", "draft"):
        model = data.get(role)
        if isinstance(model, dict) and "config_path" in model:
            model["config_path"] = rebase(model["config_path"])
    ref = data.get("profile")
    if isinstance(ref, str) and ("/" in ref or ref.endswith(".json")) and (scenario.parent / ref).is_file():
        data["profile"] = rebase(ref)
    serving = data.get("serving")
    for key in ("arrivals", "input_len", "output_len"):
        section = serving.get(key) if isinstance(serving, dict) else None
        if isinstance(section, dict) and "path" in section:
            section["path"] = rebase(section["path"])
    write_text_atomic(out, mark + "".join(f"# {line}\n" for line in header) + yaml.safe_dump(data, sort_keys=False))
    console.print(f"[green]wrote {escape(str(out))}[/]")


MOE_TIMES_MARK = "# written by specdecsim calibrate moe-kernel-times\n"


def moe_kernel_times(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML of the benchmark's set-up (serving_engine kind "
                                                  "sglang, vllm or trtllm; the target, TP and dtype it ran).")],
    log: Annotated[Path, typer.Argument(help="Output of SGLang's tuning_fused_moe_triton.py or vLLM's "
                                             "benchmarks/kernels/benchmark_moe.py ('Batch size: N, config: ...' / "
                                             "'Kernel time: X us'), or `calibrate engine-moe`'s JSON lines.")],
    out: Annotated[Path, typer.Option(help="Scenario YAML to write: SCENARIO with serving_engine."
                                           "moe_layer_latency_us from LOG.")],
    shape: Annotated[Optional[str], typer.Option(help="For `calibrate engine-moe`'s JSON lines: the shape to "
                                                      "take (e.g. kimi-k2-tp8).")] = None,
    routing: Annotated[str, typer.Option(help="For `calibrate engine-moe`'s JSON lines: rotating (experts "
                                              "differ from call to call, as from layer to layer) or same.")] = "rotating",
    force: Annotated[bool, typer.Option("--force", help="Replace an --out file that is not this command's "
                                                         "earlier output.")] = False,
) -> None:
    """Set an engine's fused-MoE time per layer from its own MoE benchmark: the target's routed
    experts then cost the table's times inside its token range and at least its end values outside
    it (docs/engines.md). Prints the table and what the scenario prices the same layer at without it
    (CostModel.moe_layer_us). Records of `calibrate engine-moe` must be of the target's shape at the
    scenario's TP/EP; a text log does not say its shape, so that is the user's to match."""
    from simulator.costs.forward import CostModel
    from simulator.engines.models import ENGINE_MODEL_KINDS
    from simulator.evidence.importers.moe_bench import load_moe_kernel_records
    from simulator.inputs import UserInputError
    from simulator.scenario import load_profile_for, load_scenario

    _check_inputs((scenario, log))
    _check_scenario_out(out, [scenario, log], MOE_TIMES_MARK, "moe-kernel-times", force)
    check_output("--out", out, "scenario", force=True)  # its folder: writable, not under a file
    try:
        sc = load_scenario(scenario)
        if sc.serving_engine.kind == "live_loop":
            fail(f"{scenario}: serving_engine.kind live_loop runs the profile's own kernels; moe_layer_latency_us "
                 f"is a field of the engine kinds ({', '.join(ENGINE_MODEL_KINDS)})")
        if not sc.target.is_moe:
            fail(f"{scenario}: the target {sc.target.name} has no MoE layers")
        check_choice("--routing", routing, ("rotating", "same"))
        times, measured = load_moe_kernel_records(log, shape, routing)
        profile, _ = load_profile_for(sc, base_dir=scenario.parent)
        cost = CostModel(sc, profile)
    except UserInputError as e:
        fail(str(e))
    t, ep = sc.target, sc.expert_parallel_size
    wants = {"E": t.n_routed_experts // ep, "K": t.hidden_size, "N": t.moe_intermediate_size // (sc.tp_size // ep),
             "top_k": t.num_experts_per_tok}
    w_bytes = t.weight_format("routed_experts")[0]
    if measured is not None:
        if {k: measured[k] for k in wants} != wants:
            fail(f"{log}: the records{f' of {shape}' if shape else ''} are of E={measured['E']} K={measured['K']} "
                 f"N={measured['N']} top_k={measured['top_k']}; the scenario's target {t.name} at tp{sc.tp_size} "
                 f"ep{ep} runs E={wants['E']} K={wants['K']} N={wants['N']} top_k={wants['top_k']} per rank (N: "
                 "intermediate size per rank): pick the matching --shape, or measure this shape")
        if str(measured.get("quant", "")).startswith("fp8") and w_bytes != 1:
            console.print(f"[yellow]note:[/] the records are fp8 experts; the scenario prices {t.name}'s routed "
                          f"experts at {w_bytes:g} bytes per weight (its 'modelled us' and the price outside the "
                          "table's range): give the target `precision: {routed_experts: fp8_block128}`",
                          highlight=False)
        gpu = sc.hardware.gpu or (sc.hardware.box or "the profile's GPU")
        console.print(f"[dim]measured on {escape(str(measured.get('gpu')))}; the scenario's hardware: "
                      f"{escape(str(gpu))}[/]", highlight=False)
    else:
        console.print(f"[dim]{escape(str(log))} does not say its shape: it must be {t.name} at tp{sc.tp_size} ep{ep} "
                      f"(E={wants['E']} K={wants['K']} N={wants['N']} per rank) with the weight format the scenario "
                      f"prices at {w_bytes:g} bytes per weight[/]", highlight=False)
    lines = [f"from {log} ({len(times)} token counts), for {sc.target.name} tp{sc.tp_size} ep{sc.expert_parallel_size}:",
             f"{'tokens':>8} {'measured us':>12} {'modelled us':>12}"]
    for t, us in times.items():
        lines.append(f"{t:>8} {us:>12.2f} {cost.moe_layer_us(t, engine_table=False):>12.2f}")
    console.print(escape("\n".join(lines)), highlight=False)
    _write_engine_scenario(scenario, out, {"moe_layer_latency_us": {int(k): float(v) for k, v in times.items()}},
                           MOE_TIMES_MARK, lines)


def from_traces(
    traces: Annotated[Path, typer.Argument(help="Folder `specdecsim diagnose trace --out` wrote (index.json and "
                                                "one torch.profiler trace per point).")],
    out: Annotated[Path, typer.Option(help="Profile JSON to write.")],
    roofline_from: Annotated[str, typer.Option(help="Profile (name or path) whose roofline prices what the "
                                                    "traces do not cover.")] = "h200_datasheet",
    name: Annotated[Optional[str], typer.Option(help="Profile name; default traces-<model>.")] = None,
    force: Annotated[bool, typer.Option("--force", help=FORCE_HELP)] = False,
) -> None:
    """A profile from the traces alone: whole-forward tables and host times of the traced loop
    (simulator/evidence/trace_profile.py); scenarios use it with costs.source whole_forward."""
    from simulator.inputs import UserInputError
    from simulator.profile import save_profile
    from simulator.evidence.trace_profile import profile_from_traces

    if not traces.is_dir():
        fail(f"{traces}: not a folder of traces (give the --out folder of `specdecsim diagnose trace`)")
    check_output("--out", out, PROFILE_OUTPUT, force)
    try:
        profile = profile_from_traces(traces, roofline_profile=roofline_from, name=name)
    except (UserInputError, FileNotFoundError) as e:
        fail(str(e))
    save_profile(profile, out)
    print_profile(profile, out)
    h = profile.host
    console.print(f"host: schedule {h.host_schedule_us:.1f} us (baseline {h.baseline_host_schedule_us:.1f}), "
                  f"d2h sync {h.d2h_sync_us:.1f} us, graph replay {h.graph_replay_us:.1f} us", highlight=False)
