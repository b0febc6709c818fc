"""What every `specdecsim` command shares: the consoles, the one-line error, short paths, the
checks before work (outputs, run time) and the progress bar.

Bad input ends with one line naming the file and field (a few short lines at most), and exit
code 2; user text is printed escaped, so brackets in a path or a value are never read as
terminal markup. Outputs are checked before any work and written before anything is printed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape

from simulator.inputs import MAX_ERROR_LINES

# No emoji codes: a name like ':smile:' is printed as written, as markup is escaped.
console = Console(emoji=False)
err_console = Console(stderr=True, emoji=False)

MAX_RUN_S = 600.0  # estimated seconds above which a run needs --force
MAX_RUN_BYTES = 8 * 2**30  # estimated memory above which a run needs --force
SHOW_ESTIMATE_S = 5.0  # runs estimated longer than this print the estimate and show progress
BACKEND_HELP = "Where points run: local (this machine) or ray (a Ray cluster; pip install 'specdecsim\\[ray]')."
JOBS_HELP = "local: worker processes (default 1); ray: CPUs of the Ray instance started here (default all)."
ADDRESS_HELP = ("With --backend ray: the cluster to use (host:port, ray://host:port or auto); default: start "
                "a Ray instance here.")
SCENARIO_HELP = ("Scenario YAML, e.g. scenarios/tp1_draft.yaml, or a shipped scenario's name (vllm_llama8b_h200: "
                 "scenarios/vllm_llama8b_h200.yaml of the checkout or of the installed package).")
FORCE_HELP = ("Replace an existing file that is not this command's output, and run work estimated above "
              f"{MAX_RUN_S / 60:.0f} minutes or {MAX_RUN_BYTES / 2**30:.0f} GiB.")


def json_to_stdout(json_out: Path | None) -> None:
    """Route the console for a command with a `--json` option: with `--json -` the JSON is the
    standard output and the tables and notes go to standard error; otherwise standard output.
    Called first by each such command (a process may run several, as tests do)."""
    from simulator.files import is_stdout
    console.stderr = is_stdout(json_out)


def output_name(path: Path) -> str:
    """An output path for a 'wrote ...' line: 'standard output' for '-'."""
    return "standard output" if str(path) == "-" else escape(str(path))


def fail(message: str, code: int = 2) -> None:
    """Print a user-facing error (markup in it escaped; at most a few lines) and exit with `code`."""
    lines = str(message).splitlines() or [""]
    if len(lines) > MAX_ERROR_LINES + 1:
        lines = lines[:MAX_ERROR_LINES] + [f"... and {len(lines) - MAX_ERROR_LINES} more lines"]
    err_console.print(f"[bold red]error:[/] {escape(chr(10).join(lines))}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def short_path(path: str | Path) -> str:
    """`path` relative to the working folder when it lies below it, else unchanged."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError, RuntimeError):
        return str(path)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _free_bytes(out: Path | None) -> float | None:
    """Free space where `out` will be written (its nearest existing folder); None if unknown."""
    import shutil
    if out is None:
        return None
    p = Path(out).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        usage = shutil.disk_usage(p)
    except OSError:
        return None
    return float(usage.free) if usage.total else None  # a pseudo file system (/proc) has no size


def check_work(what: str, seconds: float, memory_bytes: float, force: bool, hint: str,
               disk_bytes: float = 0.0, out: Path | None = None) -> bool:
    """Print the estimate of a long run and refuse one above the limits unless `force`.

    Args:
        what: the work, for messages ('the simulation'). seconds, memory_bytes: its estimate.
        force: the user insists (`--force`). hint: how to make it smaller.
        disk_bytes, out: what the run writes and where: refused when it exceeds the free space there.

    Returns:
        Whether to show progress (the run is estimated longer than SHOW_ESTIMATE_S).
    """
    too_long, too_big = seconds > MAX_RUN_S, memory_bytes > MAX_RUN_BYTES
    free = _free_bytes(out) if disk_bytes else None
    too_much_disk = free is not None and disk_bytes > free
    estimate = f"{what}: estimated {_duration(seconds)}, {memory_bytes / 2**30:.1f} GiB of memory" + (
        f", writes {disk_bytes / 2**20:,.0f} MiB" if disk_bytes else "")
    if (too_long or too_big or too_much_disk) and not force:
        limit = (f"over the {_duration(MAX_RUN_S)} limit" if too_long
                 else f"over the {MAX_RUN_BYTES / 2**30:.0f} GiB limit" if too_big
                 else f"more than the {free / 2**20:,.0f} MiB free at {out}")
        fail(f"{estimate}, {limit}; {hint}, or add --force to run it anyway")
    if seconds > SHOW_ESTIMATE_S:
        err_console.print(escape(estimate), highlight=False)
        return True
    return False


@contextmanager
def progress_bar(description: str, enabled: bool = True) -> Iterator:
    """A rich progress bar on stderr; yields `update(fraction_done)` (a no-op when disabled)."""
    if not enabled:
        yield lambda frac: None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
    bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                   TimeElapsedColumn(), TimeRemainingColumn(), console=err_console, transient=True)
    with bar:
        task = bar.add_task(escape(description), total=1.0)
        yield lambda frac: bar.update(task, completed=min(max(float(frac), 0.0), 1.0))


def engine_profile_note(scenario, overrides, rows=()) -> None:
    """Notes for a sweep or search whose scenario names an engine profile
    (simulator.costs.engine_notes): what the profile measured, and, of the study's rows (each with
    `batch_size` and `num_steps`), the vLLM cells whose verify gets no full CUDA graph; nothing where it
    names none or does not load."""
    from rich.markup import escape

    from simulator.costs.engine_notes import graph_gap_note, study_note
    from simulator.engines.profile import scenario_engine_profile
    from simulator.inputs import UserInputError
    from simulator.scenario import load_scenario
    try:
        sc = load_scenario(scenario, overrides)
        cells = [(int(r["batch_size"]), int(r["num_steps"])) for r in rows if "batch_size" in r and "num_steps" in r]
        prof = scenario_engine_profile(sc)  # read once, for both notes
        notes = [study_note(prof), graph_gap_note(sc, prof, cells)] if prof is not None else []
    except (UserInputError, ValueError, FileNotFoundError, KeyError, TypeError):
        return
    for note in filter(None, notes):
        err_console.print(f"[yellow]note:[/] {escape(note)}", highlight=False)


# The engines' own words for the speculative settings (simulator.engines.spec_words), on simulate, sweep, search.
SpeculativeConfigOption = Annotated[Optional[str], typer.Option(
    "--speculative-config", help="vLLM's --speculative-config JSON, e.g. '{\"method\": \"eagle3\", "
    "\"num_speculative_tokens\": 3, \"draft_tensor_parallel_size\": 1}': sets spec (and placement); a note says how.")]
SpeculativeAlgorithmOption = Annotated[Optional[str], typer.Option(
    "--speculative-algorithm", help="SGLang's: EAGLE3, EAGLE, NEXTN, STANDALONE or NGRAM -> spec.method.")]
SpeculativeNumStepsOption = Annotated[Optional[int], typer.Option(
    "--speculative-num-steps", help="SGLang's -> spec.num_steps (a chain's num_draft_tokens follows).")]
SpeculativeEagleTopkOption = Annotated[Optional[int], typer.Option(
    "--speculative-eagle-topk", help="SGLang's -> spec.topk.")]
SpeculativeNumDraftTokensOption = Annotated[Optional[int], typer.Option(
    "--speculative-num-draft-tokens", help="SGLang's -> spec.num_draft_tokens.")]


def engine_words(scenario: Path, overrides: list[str], speculative_config: str | None, algorithm: str | None,
                 num_steps: int | None, topk: int | None, num_draft_tokens: int | None) -> tuple[list[str], list[str]]:
    """The user's `--set` overrides followed by those of the engines' own words (vLLM's --speculative-config,
    SGLang's --speculative-* flags: simulator.engines.spec_words), and the notes saying what became what.

    Raises:
        UserInputError: both engines' words at once, or words that do not map.
    """
    from simulator.engines.spec_words import sglang_overrides, vllm_overrides
    from simulator.inputs import UserInputError
    sglang = (algorithm, num_steps, topk, num_draft_tokens)
    if speculative_config is None and all(v is None for v in sglang):
        return list(overrides), []
    if speculative_config is not None and any(v is not None for v in sglang):
        raise UserInputError("--speculative-config (vLLM's) and --speculative-* flags (SGLang's): give one engine's")
    if speculative_config is not None:
        from simulator.scenario import apply_overrides, read_scenario_dict
        tp_size = apply_overrides(read_scenario_dict(scenario), list(overrides), str(scenario)).get("tp_size", 1)
        sets, note = vllm_overrides(speculative_config, tp_size if isinstance(tp_size, int) else 1)
    else:
        sets, note = sglang_overrides(*sglang)
    return [*overrides, *sets], [note]


def print_notes(notes: list[str], to_stderr: bool = False) -> None:
    """Notes as `note:` lines (markup escaped)."""
    for note in notes:
        (err_console if to_stderr else console).print(f"[yellow]note:[/] {escape(note)}", highlight=False)


# Acceptance as the engines print it (simulator.evidence.importers.acceptance), on simulate, sweep, search.
AcceptanceRatePctOption = Annotated[Optional[float], typer.Option(
    "--vllm-acceptance-rate", help="vLLM's 'Acceptance rate (%)' (accepted / draft tokens), in %: the scenario's "
    "acceptance becomes the i.i.d. alpha giving it at its num_steps; a note shows the conversion.")]
PerPositionOption = Annotated[Optional[str], typer.Option(
    "--vllm-per-position-accepted", help="vLLM's accepted tokens per draft position, 'c1,c2,...' (one per num_steps; "
    "with --vllm-num-drafts): positional acceptance (conditional rates).")]
NumDraftsOption = Annotated[Optional[int], typer.Option(
    "--vllm-num-drafts", help="vLLM's number of drafts (vllm:spec_decode_num_drafts) the counts are out of.")]
AcceptLengthOption = Annotated[Optional[float], typer.Option(
    "--sglang-accept-length", help="SGLang's accept length (with the bonus token): the i.i.d. alpha giving it.")]


def acceptance_words(scenario: Path, overrides: list[str], rate_pct: float | None, per_position: str | None,
                     num_drafts: int | None, accept_length: float | None) -> tuple[list[str], list[str]]:
    """The overrides followed by the `acceptance` an engine's printed acceptance converts to (at the scenario's
    num_steps, after the overrides), and the note showing the conversion.

    Raises:
        UserInputError: more than one form, counts without --vllm-num-drafts, values out of range.
    """
    import json

    from simulator.evidence.importers import acceptance as conv
    from simulator.inputs import UserInputError
    given = [x is not None for x in (rate_pct, per_position, accept_length)]
    if not any(given) and num_drafts is None:
        return overrides, []
    if sum(given) != 1 or (per_position is None) != (num_drafts is None):
        raise UserInputError("give one of --vllm-acceptance-rate, --vllm-per-position-accepted (with "
                             "--vllm-num-drafts) or --sglang-accept-length")
    from simulator.scenario import load_scenario
    num_steps = load_scenario(scenario, overrides).spec.num_steps
    if rate_pct is not None:
        acc, note = conv.from_vllm_acceptance_rate(rate_pct / 100.0, num_steps)
    elif accept_length is not None:
        acc, note = conv.from_sglang_accept_length(accept_length, num_steps)
    else:
        import re
        items = [c.strip() for c in per_position.split(",")]
        if not all(re.fullmatch(r"[0-9]{1,15}", c) for c in items):  # ASCII digits, no sign, '_' or empty item
            raise UserInputError(f"--vllm-per-position-accepted {per_position!r}: expected counts c1,c2,... written "
                                 "in digits 0-9, one per draft position")
        counts = [int(c) for c in items]
        acc, note = conv.from_vllm_per_position_counts(counts, num_drafts, num_steps)
    return [*overrides, f"acceptance={json.dumps(acc)}"], [note]
