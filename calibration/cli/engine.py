"""`specdecsim calibrate engine` and `specdecsim live --engine`: calibration and live runs inside
the serving engine a user deploys (calibration/engines/).

    specdecsim calibrate engine --engine vllm --out PROFILE.json [--points P.jsonl] [--num-steps 1,2,3,4,6]
                                [--batches 1,2,...,64] [--context-lens 1024,4096] [--acceptance 0.7] [--few]
    specdecsim calibrate engine --from-points P.jsonl[.gz] --out PROFILE.json [--few]   (rebuild, no GPU)
    specdecsim live --engine vllm --out DIR [--points P.jsonl] [--engine-profile NAME] [--batches ...]
    specdecsim live --from-points P.jsonl[.gz] --out DIR [--engine-profile NAME]        (rebuild, no GPU)

One engine process per configuration (the baseline and each num_steps), each measuring its points
and appending them to the points file, which resumes. `--engine fake` runs the same code on a fake
engine with known costs (no GPU; CI). Parses, checks, runs and writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from calibration.cli.common import (check_choice, check_gpus, check_output, console, err_console,
                                    fail, int_list, need_torch, out_path)

ENGINE_PROFILE_OUTPUT = "engine_profile/1"


def _spec(engine: str):
    """The registered engine (calibration.engines.backends): what it runs with, and where it differs."""
    from calibration.engines.backends import engine_spec
    return engine_spec(engine)


def _engines() -> tuple[str, ...]:
    from calibration.engines.backends import ENGINES
    return tuple(ENGINES)


def _ints(option: str, text: str, low: int, high: int) -> list[int]:
    return list(int_list(option, text, low, high))


def _configs(target: str, draft: str) -> tuple[dict, dict, dict, dict]:
    """(target HF config, draft HF config, target ModelShape fields, draft ModelShape fields): the
    shapes read from the configs under data/models/engine/ (simulator.model_config), named by the
    target's file name less a trailing '-instruct', the draft `eagle3-<target name>`."""
    from calibration.engines.plans import model_configs
    from calibration.shapes import EAGLE3_NUM_FC_INPUT_HIDDEN_STATES
    from simulator.config import ModelShape
    from simulator.model_config import shape_fields_from_hf_config
    try:
        t, d = model_configs(target, draft)
    except FileNotFoundError as e:
        fail(f"--target/--draft: {e.filename}: no such model config (data/models/engine/<name>.config.json)")
    except ValueError as e:
        fail(f"--target/--draft: {e}")
    name = target.removesuffix("-instruct")
    try:
        t_fields, _ = shape_fields_from_hf_config(t)
        d_fields, _ = shape_fields_from_hf_config(d)
        t_shape = ModelShape(name=name, **t_fields)
        d_shape = ModelShape(name=f"eagle3-{name}", **{"num_fc_input_hidden_states": EAGLE3_NUM_FC_INPUT_HIDDEN_STATES,
                                                       **d_fields})  # an EAGLE-3 config gives it too
    except (ValueError, TypeError) as e:
        fail(f"--target {target} / --draft {draft}: not a model shape: {str(e).splitlines()[0]}")
    if d_shape.num_hidden_layers != 1 or d_shape.hidden_size != t_shape.hidden_size:
        fail(f"--draft {draft}: an EAGLE-3 draft has one decoder layer at the target's hidden_size "
             f"{t_shape.hidden_size}; this config has {d_shape.num_hidden_layers} at {d_shape.hidden_size}")
    return t, d, t_shape.model_dump(), d_shape.model_dump()


MAX_MODEL_LEN = 8192  # what the engine processes start with (calibration.engines.plans.ProcessPlan)
MAX_NUM_SEQS = 64  # the requests a step the engine processes run at most (ProcessPlan's default max_num_seqs)


def _check_engine_installed(engine: str, what: str | None = None) -> None:
    """--engine vllm / sglang (or a queue's plans, `what`) needs the engine (and torch) importable here:
    one line before any process starts."""
    import importlib.util
    for mod in _spec(engine).requires:
        if importlib.util.find_spec(mod) is None:
            fail(f"{what or '--engine ' + engine}: {mod} is not installed in this Python ({mod} runs the engine; "
                 "on a GPU host without a package index, an offline bundle brings it: ../shared/engines/ for vLLM, "
                 "engines/build-sglang-bundle.sh for SGLang)")


def _check_deadline(deadline_s: Optional[float]) -> None:
    import math
    if deadline_s is not None and not (math.isfinite(deadline_s) and deadline_s > 0):
        fail(f"--deadline-s {deadline_s}: seconds, a finite number > 0")


def _check_context_lens(ps: list[int], ks: list[int]) -> None:
    """Every prompt leaves room for the point's steps within the engine's max_model_len."""
    from calibration.engines.run_loop import PointPlan, max_tokens_for
    for p in ps:
        try:
            max_tokens_for(PointPlan(batch_size=1, prompt_len=p, acceptance_rate=None, timed_steps=48), max(ks),
                           MAX_MODEL_LEN)
        except ValueError as e:
            fail(f"--context-lens {p}: {e}")


def _check_points_output(pts: Path, name: str = "--points") -> None:
    """--points is new, empty, or an engine points file (never appended to another file)."""
    from calibration.engines.points import POINTS_SCHEMA
    if not pts.exists() or pts.stat().st_size == 0:
        return
    with open(pts, "rb") as f:
        head = f.readline(1 << 16)
    if b'"schema":"engine_points/1"' not in head.replace(b" ", b""):
        fail(f"{name} {pts}: exists and is not an engine points file ({POINTS_SCHEMA} lines); give a new path")


def _check_not_input(out: Path, inputs: list[Path], option: str) -> None:
    if any(out.resolve() == Path(f).resolve() for f in inputs):
        fail(f"{option} {out}: is one of the --from-points inputs; give another path")


def _check_catalog_gpu(catalog_gpu: Optional[str]) -> None:
    if catalog_gpu is None:
        return
    from simulator.hardware import default_catalog
    gpus = default_catalog().gpus
    if catalog_gpu not in gpus:
        fail(f"--catalog-gpu {catalog_gpu!r}: not in the hardware catalog ({', '.join(sorted(gpus))})")


def _existing_points(paths: list[Path]) -> list[Path]:
    """--from-points files, each an existing regular file."""
    for f in paths:
        if f.exists() and not f.is_file():
            fail(f"--from-points {f}: {'a folder' if f.is_dir() else 'not a regular file'}, not a points file")
        if not f.is_file():
            fail(f"--from-points {f}: no such file")
    return list(paths)


def _points_path(points: Optional[Path], default: Path, name: str = "--points") -> Path:
    p = points or default
    if p.exists() and not p.is_file():
        fail(f"{name} {p}: not a regular file")
    if p.suffix == ".gz":
        fail(f"{name} {p}: a compressed points file is read with --from-points, not appended to")
    _check_points_output(p, name)
    return p


def _variant(engine: str, topk: int, num_draft_tokens: Optional[int], no_overlap: bool, ks: list[int]) -> dict:
    """The ProcessPlan fields of --topk / --num-draft-tokens / --no-overlap, and the label suffix
    that keeps their processes apart in one points file."""
    if not 1 <= topk <= 16:
        fail(f"--topk {topk}: an integer 1..16")
    if not _spec(engine).tree_and_overlap and (topk != 1 or num_draft_tokens is not None or no_overlap):
        fail("--topk, --num-draft-tokens and --no-overlap are SGLang's; vLLM runs a chain of num_steps drafts "
             "with its async scheduling (and the fake engine stands in for it)")
    if num_draft_tokens is not None:
        if topk == 1:
            fail(f"--num-draft-tokens {num_draft_tokens}: a chain (--topk 1) verifies num_steps + 1 tokens; "
                 "give --num-draft-tokens with --topk > 1 only")
        # SGLang's tree: topk candidates at the first step, topk^2 at each later one, the best
        # num_draft_tokens - 1 of them verified with the root (simulator.config.SpecConfig's bound)
        low, high = max(ks) + 1, min(256, 1 + topk + (min(ks) - 1) * topk * topk)
        if not low <= num_draft_tokens <= high:
            fail(f"--num-draft-tokens {num_draft_tokens}: with --topk {topk} and --num-steps {','.join(map(str, ks))}, "
                 + (f"{low}..{high} (at least the deepest chain num_steps + 1, at most the tree's nodes + 1)"
                    if low <= high else f"no value fits (num_steps {max(ks)} needs at least {low}, num_steps "
                                        f"{min(ks)} allows at most {high}): give --num-steps"))
    suffix = (f"_t{topk}" if topk > 1 else "") + (f"_n{num_draft_tokens}" if num_draft_tokens else "") + (
        "_nooverlap" if no_overlap else "")
    return {"plan": dict(topk=topk, num_draft_tokens=num_draft_tokens, overlap=not no_overlap), "suffix": suffix,
            "key": (topk, num_draft_tokens, not no_overlap)}


def _tp_group(engine: str, tp: Optional[int], draft_tp: Optional[int], running: bool) -> dict:
    """The ProcessPlan fields of --tp / --draft-tp, the label suffix that keeps their processes apart
    in one points file, and the TP group to build from (None: the only one the points hold)."""
    if tp is not None and not 1 <= tp <= 8:
        fail(f"--tp {tp}: 1..8 GPUs (one process a rank, each on its own GPU)")
    if draft_tp is not None and tp is None and running:
        fail(f"--draft-tp {draft_tp}: give --tp too (the target's TP group the draft is placed in)")
    n = tp or 1
    if draft_tp is not None:
        if not 1 <= draft_tp <= 8:
            fail(f"--draft-tp {draft_tp}: 1 or the target's --tp")
        if tp is not None and draft_tp not in (1, n):
            fail(f"--draft-tp {draft_tp}: 1 or the target's --tp ({n})")
        if not _spec(engine).own_draft_tp and draft_tp != n:
            fail(f"--draft-tp {draft_tp}: SGLang runs an EAGLE draft in the target's TP group (it has no draft TP "
                 f"setting); leave --draft-tp out or give {n}")
    if running and n > 1:  # the ranks join a torch.distributed group (gloo for the fake engine): one line, not one a rank
        need_torch(f"--tp {n}")
    if running and n > 1 and not _spec(engine).in_process:
        check_gpus(f"--tp {n}", n, hint="one engine rank a GPU")
    suffix = (f"_tp{n}" if n > 1 else "") + (f"_d{draft_tp}" if draft_tp is not None and draft_tp != n else "")
    # the group to build from: None takes the only one the points hold; a target TP of None, the only one there
    group = None if tp is None and draft_tp is None else (tp, draft_tp if draft_tp is not None else tp)
    return {"plan": dict(tensor_parallel_size=n, draft_tensor_parallel_size=draft_tp), "suffix": suffix,
            "group": group}


def _tp_suffix(tpg: dict, num_steps: int) -> str:
    """A process's TP label suffix: a baseline's names its group only (it runs no draft, so campaigns of
    two draft placements share it: the second finds it measured)."""
    return tpg["suffix"] if num_steps else tpg["suffix"].split("_d")[0]


TP_HELP = ("GPUs of the target's TP group (1..8): one engine process a rank, each on its GPU; with --from-points, "
           "the group to build from (default: the only one the points hold).")
DRAFT_TP_HELP = ("The draft's TP asked of the engine: 1 (one GPU of the group) or --tp (sharded with the target; "
                 "vLLM's draft_tensor_parallel_size, SGLang only --tp). What the engine built is recorded and is "
                 "what --from-points selects by.")


def calibrate_engine(
    out: Annotated[str, typer.Option(help="Engine profile JSON to write.")],
    engine: Annotated[Optional[str], typer.Option(
        help="The engine to measure: vllm or sglang (on a GPU host where it is installed) or fake (known costs, "
             "no GPU); default vllm. With --from-points: the points' engine (given, it must be theirs).")] = None,
    points: Annotated[Optional[Path], typer.Option(help="Resumable points file (JSONL); default OUT with the "
                                                        "suffix .points.jsonl.")] = None,
    from_points: Annotated[Optional[list[Path]], typer.Option(help="Build the profile from these points files "
                                                                   "(plain or .gz) without running an engine.")] = None,
    num_steps: Annotated[Optional[str], typer.Option(
        help="num_speculative_tokens to calibrate, comma-separated 1..16 (one engine process each, and one for the "
             "baseline; default 1,2,3,4,6); with --from-points, the ones to build from (default: all).")] = None,
    batches: Annotated[Optional[str], typer.Option(help="Batch sizes, comma-separated (default 1,2,4,8,16,32,64); "
                                                        "with --from-points, the ones to build from (default: "
                                                        "all).")] = None,
    context_lens: Annotated[Optional[str], typer.Option(help="Prompt lengths (the context each point decodes at), "
                                                             "comma-separated 16..65536 (default 1024,4096); with "
                                                             "--from-points, the ones to build from (default: "
                                                             "all).")] = None,
    acceptance: Annotated[float, typer.Option(help="Forced per-position acceptance rate, in (0, 1].")] = 0.7,
    few: Annotated[bool, typer.Option("--few", help="Only the few runs a busy box affords: the baseline at the "
                                                    "smallest and largest batch, one point per num_steps.")] = False,
    target: Annotated[str, typer.Option(help="Target config under data/models/engine/.")] = "llama-3.1-8b-instruct",
    draft: Annotated[str, typer.Option(help="EAGLE-3 draft config under data/models/engine/.")] = "eagle3-llama-3.1-8b",
    name: Annotated[Optional[str], typer.Option(help="Profile name; default the file stem.")] = None,
    catalog_gpu: Annotated[Optional[str], typer.Option(help="Hardware-catalog id of the GPU measured; default: the "
                                                            "catalog GPU whose device_names hold the name the engine "
                                                            "reported (none: the profile names no catalog GPU).")] = None,
    deadline_s: Annotated[Optional[float], typer.Option(help="Start no engine process after this many seconds, "
                                                             "and end one still running then.")] = None,
    with_live: Annotated[Optional[Path], typer.Option(help="Also the live grid (`specdecsim live --engine`) into "
                                                           "this folder, its processes interleaved with the "
                                                           "calibration's by num_steps (a campaign cut short still "
                                                           "holds matched pairs).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an OUT that is not an engine profile.")] = False,
    topk: Annotated[int, typer.Option(help="Draft branches per step (SGLang's speculative_eagle_topk, 1..16); "
                                           "1 is a chain, the only shape vLLM runs.")] = 1,
    num_draft_tokens: Annotated[Optional[int], typer.Option(help="Tokens verified per request (SGLang's "
                                                                 "speculative_num_draft_tokens); default "
                                                                 "num_steps + 1, more with --topk > 1.")] = None,
    no_overlap: Annotated[bool, typer.Option("--no-overlap", help="SGLang: its overlap scheduler off "
                                                                  "(disable_overlap_schedule).")] = False,
    exclude_process: Annotated[Optional[list[str]], typer.Option(
        help="With --from-points: leave out this engine process's points (its label, e.g. calibrate_s3_r2; "
             "repeatable); the profile's notes name it.")] = None,
    tp: Annotated[Optional[int], typer.Option("--tp", help=TP_HELP)] = None,
    draft_tp: Annotated[Optional[int], typer.Option("--draft-tp", help=DRAFT_TP_HELP)] = None,
) -> None:
    """Measure the serving engine's own cycle parts (inside it) into an engine-native profile."""
    from calibration.engines.build import build_profile
    from calibration.engines.campaign import run_processes
    from calibration.engines.plans import calibrate_plans, few_run_keys, full_graph_rule
    from calibration.provenance import command_line, git_commit
    from simulator.files import write_json_atomic
    from simulator.inputs import UserInputError

    out = out_path("--out", out)
    if engine is not None:
        check_choice("--engine", engine, _engines())
    t_cfg, d_cfg, t_shape, d_shape = _configs(target, draft)
    if from_points:  # nothing runs: the points say whose they are, and --engine, given, must agree
        engine = _check_points(_existing_points(from_points), engine, t_cfg, d_cfg)
    engine = engine or "vllm"
    check_output("--out", out, ENGINE_PROFILE_OUTPUT, force)
    ks_given = num_steps is not None
    ks = _ints("--num-steps", num_steps if ks_given else "1,2,3,4,6", 1, 16)
    variant = _variant(engine, topk, num_draft_tokens, no_overlap, ks)
    tpg = _tp_group(engine, tp, draft_tp, running=not from_points)
    bs = _ints("--batches", batches if batches is not None else "1,2,4,8,16,32,64", 1,
               4096 if from_points else MAX_NUM_SEQS)
    ps = _ints("--context-lens", context_lens if context_lens is not None else "1024,4096", 16, 65536)
    if not 0.0 < acceptance <= 1.0:
        fail(f"--acceptance {acceptance}: a rate in (0, 1]")
    _check_deadline(deadline_s)
    _check_catalog_gpu(catalog_gpu)
    if name is not None and not name.strip():
        fail(f"--name {name!r}: give the profile a name (default: the --out file's stem)")
    if exclude_process and not from_points:
        fail("--exclude-process goes with --from-points (it leaves a measured process out of the profile)")
    grid, keys = None, None
    if from_points:
        files = _existing_points(from_points)
        _check_not_input(out, files, "--out")
        if exclude_process:
            from calibration.engines.build import engine_lines
            try:
                labels = sorted({ln["label"] for ln in engine_lines(files, "calibrate")[1]})
            except UserInputError as e:
                fail(str(e))
            unknown = [x for x in dict.fromkeys(exclude_process) if x not in labels]
            if unknown:
                fail(f"--exclude-process {', '.join(map(repr, unknown))}: no such calibration process in "
                     f"{', '.join(map(str, files))} (processes: {', '.join(labels)})")
    if few:
        sizes, seqs = None, 64
        if from_points:  # the capture sizes the measured engines ran with
            from calibration.engines.build import engine_lines
            try:
                engines, _ = engine_lines(files, "calibrate")
            except UserInputError as e:
                fail(str(e))
            sizes = sorted({s for e in engines for s in e["info"].get("cudagraph_capture_sizes", [])}) or None
            seqs = max([int(e["info"].get("max_num_seqs") or 0) for e in engines] or [0]) or 64
        keys = set(few_run_keys(ks, bs, ps, full_graph_rule(sizes, seqs)))
    if not from_points:
        _check_context_lens(ps, ks)
        _check_engine_installed(engine)
        grid = {(k, b, p) for k in [0, *ks] for b in bs for p in ps}  # this run's points, not a file's older ones
        from calibration.engines.plans import DEFAULT_LIVE_ACCEPTANCES, interleave, live_plans, spread_order
        if points is None and str(out) == "-":
            fail("--out -: the profile goes to standard output; give --points for the measured points' file")
        pts = _points_path(points, out.with_suffix(".points.jsonl"))
        if pts.resolve() == out.resolve():
            fail(f"--points {pts}: is --out too; the profile would replace the measured points (give another path)")
        base = dict(engine=engine, target_config=t_cfg, draft_config=d_cfg, **variant["plan"], **tpg["plan"])
        order = spread_order(ks)
        plans = calibrate_plans(base, order, bs, ps, acceptance)
        if keys is not None:
            plans = [p.model_copy(update={"points": [q for q in p.points if (p.num_steps, q["batch_size"],
                                                                            q["prompt_len"]) in keys]}) for p in plans]
            plans = [p for p in plans if p.points]
        if with_live is not None:
            if with_live.exists() and not with_live.is_dir():
                fail(f"--with-live {with_live}: not a folder")
            plans = interleave(plans, live_plans(base, order, bs, ps, DEFAULT_LIVE_ACCEPTANCES), order[0])
        if variant["suffix"] or tpg["suffix"]:
            plans = [p.model_copy(update={"label": p.label + variant["suffix"] + _tp_suffix(tpg, p.num_steps)})
                     for p in plans]
        status = run_processes(plans, pts, deadline_s=deadline_s, in_process=_spec(engine).in_process,
                               log=lambda s: err_console.print(escape(s), highlight=False))
        bad = {k: v for k, v in status.items() if v not in ("done", "skipped")}
        if bad:
            err_console.print(escape("engine processes not finished: " + ", ".join(f"{k} ({v})" for k, v in bad.items())
                                     + f" (their error lines in {pts} say why)"), highlight=False)
        files = [pts]
    wanted = keys if keys is not None else grid
    keep = (lambda key: key in wanted) if wanted is not None else None
    if from_points and not few and (ks_given or batches or context_lens):  # the points asked for
        def keep(key):
            return ((not ks_given or key[0] == 0 or key[0] in ks) and (not batches or key[1] in bs)
                    and (not context_lens or key[2] in ps))
    notes: list[str] = []
    try:
        prof = build_profile(files, name or out.stem, t_shape, d_shape, keep=keep, command_line=command_line(),
                             git_commit=git_commit(), catalog_gpu=catalog_gpu, notes=notes, variant=variant["key"],
                             exclude_labels=tuple(dict.fromkeys(exclude_process or ())), group=tpg["group"])
    except (ValueError, UserInputError) as e:
        for n in notes:  # a torn last line skipped, say, is part of why
            err_console.print(escape(f"note: {n}"), highlight=False)
        asked = [f"{o} {v}" for o, v in (("--num-steps", num_steps), ("--batches", batches),
                                         ("--context-lens", context_lens)) if v is not None and from_points]
        fail(str(e) + (f" at {', '.join(asked)}" if asked and str(e).startswith("no calibration points") else ""))
    for n in notes:
        err_console.print(escape(f"note: {n}"), highlight=False)
    missing = sorted(set(ks) - {p.num_steps for p in prof.points}) if from_points and ks_given else []
    if missing:
        from calibration.engines.build import engine_lines, of_variant
        held = sorted({ln["point"]["num_steps"] for ln in engine_lines(files, "calibrate")[1]
                       if of_variant(ln, variant["key"])} - {0})
        fail(f"--num-steps {','.join(map(str, missing))}: no calibration points of "
             f"{'that num_steps' if len(missing) == 1 else 'those num_steps'} of this shape in "
             f"{', '.join(map(str, files))} (the file holds num_steps {', '.join(map(str, held)) or 'none'})")
    write_json_atomic(out, prof.model_dump(mode="json", exclude_none=True))
    console.print(escape(f"wrote {out}: {prof.engine} {prof.engine_version}, {prof.attention_backend}, "
                         f"{prof.cudagraph_mode}, {prof.gpu_name}; {len(prof.points)} points"), highlight=False)
    if with_live is not None:
        live_engine(with_live, None, None, files, str(out), None, force, target, draft, topk=topk,
                    num_draft_tokens=num_draft_tokens, no_overlap=no_overlap, tp=tp, draft_tp=draft_tp)
    for part, fit in prof.fits.items():
        console.print(escape(f"  {part}: {fit.form} fit over {fit.num_points} point{'s' if fit.num_points != 1 else ''}, median |err| "
                             f"{fit.median_abs_error_frac:.1%}, max {fit.max_abs_error_frac:.1%}"), highlight=False)
    if prof.host_probe_us is not None:
        console.print(escape(f"  host probe: {prof.host_probe_us:,.1f} us, the median of the calibration windows' (the "
                             "host speed it stepped at; a box of another host: serving_engine.host_probe_us)"),
                      highlight=False)


def _check_points(files: list[Path], engine: str | None, t_cfg: dict | None = None,
                  d_cfg: dict | None = None) -> str | None:
    """One read of the points files: their engine (a given --engine must be it), and, with t_cfg, that
    they are of the --target / --draft given where their engine lines say which model ran. The points'
    engine where they hold one, else `engine`."""
    from calibration.engines.build import engine_lines, model_mismatch
    from simulator.inputs import UserInputError
    try:
        engines, lines = engine_lines(files)
    except UserInputError as e:
        fail(str(e))
    held = sorted({ln["engine"] for ln in lines})
    if engine is not None and held and engine not in held:
        fail(f"--engine {engine}: the points in {', '.join(map(str, files))} are {', '.join(held)}'s; "
             f"give --engine {held[0]} or leave --engine out")
    if t_cfg is not None and (why := model_mismatch(engines, t_cfg, d_cfg)):
        fail(f"{', '.join(map(str, files))}: {why}")
    return held[0] if len(held) == 1 else engine


def live_engine(out: Path, engine: str | None, points: Optional[Path], from_points: Optional[list[Path]],
                engine_profile: Optional[str], batches: Optional[str], force: bool,
                target: str = "llama-3.1-8b-instruct", draft: str = "eagle3-llama-3.1-8b", topk: int = 1,
                num_draft_tokens: Optional[int] = None, no_overlap: bool = False, tp: Optional[int] = None,
                draft_tp: Optional[int] = None) -> None:
    """`specdecsim live --engine ...` / `--from-points ...`: the engine's live grid as LiveRun records."""
    from calibration.engines.campaign import run_processes
    from calibration.engines.plans import (DEFAULT_LIVE_ACCEPTANCES, DEFAULT_NUM_STEPS, DEFAULT_PROMPT_LENS,
                                           live_plans)
    from calibration.engines.records import live_records, write_records
    from simulator.inputs import UserInputError

    if engine is not None:
        check_choice("--engine", engine, _engines())
        if not from_points:  # with --from-points nothing runs: --engine says whose points they must be
            _check_engine_installed(engine)
    bs = _ints("--batches", batches if batches is not None else "1,2,4,8,16,32,64", 1,
               4096 if from_points else MAX_NUM_SEQS)
    # the num_steps come from the points files (or the grid below): any num_draft_tokens a tree can verify passes
    variant = _variant(engine or "sglang", topk, num_draft_tokens, no_overlap,
                       [num_draft_tokens - 1] if num_draft_tokens else [1])
    tpg = _tp_group(engine or "vllm", tp, draft_tp, running=not from_points)
    t_cfg, d_cfg, t_shape, d_shape = _configs(target, draft)
    if engine_profile is not None and not engine_profile.strip():
        fail("--engine-profile '': give a shipped engine profile's name or a path")
    if engine_profile:
        from simulator.engines.profile import load_engine_profile
        try:
            eprof = load_engine_profile(engine_profile)
        except (FileNotFoundError, UserInputError, ValueError) as e:
            fail(f"--engine-profile: {e}")
        if not from_points and eprof.tp_size != (tp or 1):  # before the grid runs, not after
            fail(f"--engine-profile {engine_profile}: measured at tp {eprof.tp_size}; this grid runs at --tp {tp or 1}")
    if from_points:
        files = _existing_points(from_points)
        _check_points(files, engine, t_cfg, d_cfg)
    else:
        pts = _points_path(points, out / "points.jsonl")
        plans = live_plans(dict(engine=engine, target_config=t_cfg, draft_config=d_cfg, **variant["plan"],
                                **tpg["plan"]), DEFAULT_NUM_STEPS, bs, DEFAULT_PROMPT_LENS, DEFAULT_LIVE_ACCEPTANCES)
        if tpg["suffix"]:
            plans = [p.model_copy(update={"label": p.label + _tp_suffix(tpg, p.num_steps)}) for p in plans]
        if variant["suffix"]:  # the variant's speculative processes where it can run (a tree's tokens fit num_steps)
            n = num_draft_tokens
            plans = [p.model_copy(update={"label": p.label + variant["suffix"]}) for p in plans if p.num_steps
                     and (n is None or p.num_steps + 1 <= n <= topk * p.num_steps + 1)]
        run_processes(plans, pts, in_process=_spec(engine).in_process,
                      log=lambda s: err_console.print(escape(s), highlight=False))
        files = [pts]
    notes: list[str] = []
    try:
        recs = live_records(files, t_shape, d_shape, engine_profile=engine_profile, notes=notes, variant=variant["key"],
                            group=tpg["group"])
        from calibration.engines.request_records import request_records
        reqs = request_records(files, t_shape, d_shape, engine_profile=engine_profile) if from_points else []
    except (ValueError, UserInputError) as e:
        fail(str(e))
    for n in notes:
        err_console.print(escape(f"note: {n}"), highlight=False)
    if reqs:  # request-level runs: serving records (`specdecsim validate-serving OUT/requests`)
        write_records(reqs, out / "requests")
        console.print(escape(f"wrote {len(reqs)} request-level serving records to {out / 'requests'}"),
                      highlight=False)
        if not recs:
            return
    if not recs:
        fail(f"no live points in {', '.join(map(str, files))}" + (
            f" of topk {variant['key'][0]}, num_draft_tokens {variant['key'][1]}, overlap "
            f"{'on' if variant['key'][2] else 'off'}" if variant["suffix"] else ""))
    if engine_profile:
        from simulator.costs.engine_native import profile_mismatch
        from simulator.engines.profile import load_engine_profile
        prof = load_engine_profile(engine_profile)
        whys = [w for _, r in recs if (w := profile_mismatch(prof, r.scenario))]
        if whys:
            fail(f"--engine-profile {engine_profile}: does not price {len(whys)} of the {len(recs)} records "
                 f"({whys[0]}); give the profile of these records' shape (`specdecsim live --from-points "
                 f"{files[0]} --engine-profile ...` writes them again from the points, no engine run)")
    existing = [out / n for n, _ in recs if (out / n).exists()]
    if existing and not force:
        from simulator.evidence.validate import load_records
        try:
            load_records(existing)
        except (UserInputError, ValueError):
            fail(f"--out {out}: holds files with the records' names that are not LiveRun records; --force replaces them")
    write_records(recs, out)
    console.print(escape(f"wrote {len(recs)} live records to {out}"), highlight=False)
