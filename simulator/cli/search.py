"""`specdecsim search`: the best configuration for an objective (simulator.studies.search), its Pareto front."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich import box
from rich.console import Console
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
from simulator.studies.objectives import OBJECTIVES

if TYPE_CHECKING:
    from simulator.studies.search import SearchResult


def search_command(
    scenario: Annotated[Path, typer.Argument(help=SCENARIO_HELP)],
    objective: Annotated[str, typer.Option(help=f"What to optimise: {', '.join(OBJECTIVES)}.")] = "tok_per_s_per_user",
    space: Annotated[Optional[list[str]], typer.Option(
        "--space", help="field=values (sweep grid syntax) replacing or adding a search axis (repeat).")] = None,
    max_tpot_ms: Annotated[Optional[float], typer.Option(help="Constraint: TPOT p50 <= this (ms).")] = None,
    max_gpus: Annotated[Optional[int], typer.Option(help="Constraint: GPUs used <= this.")] = None,
    top: Annotated[int, typer.Option(help="Rows of the top table (and of search.json's top).")] = 10,
    out: Annotated[Optional[Path], typer.Option(help="Folder for search.json, search.csv, index.html.")] = None,
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="Override a field: key.path=value.")] = None,
    profile: Annotated[Optional[str], typer.Option(help="Profile name or JSON path (default: the scenario's).")] = None,
    jobs: Annotated[Optional[int], typer.Option(help=JOBS_HELP)] = None,
    backend: Annotated[str, typer.Option(help=BACKEND_HELP)] = "local",
    address: Annotated[Optional[str], typer.Option(help=ADDRESS_HELP)] = None,
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
    """Search placement, num_steps, topk / num_draft_tokens, TP size (and --space fields) for an objective."""
    from simulator.scenario import resolve_scenario_path
    from simulator.files import check_output_folder, is_own_output
    from simulator.studies.backend import make_backend
    from simulator.studies.search import SEARCH_OUTPUT, run_search, write_search

    def confirm(seconds: float, memory_bytes: float) -> None:
        check_work(f"serving DES of every search point ({scenario})", seconds, memory_bytes, force,
                   "restrict the space with --space, or lower serving.num_requests")

    if top < 1:
        fail(f"--top {top}: expected 1 or more")
    try:
        scenario = resolve_scenario_path(scenario)
        set_, word_notes = engine_words(scenario, set_ or [], speculative_config, speculative_algorithm,
                                        speculative_num_steps, speculative_eagle_topk, speculative_num_draft_tokens)
        set_, acceptance_notes = acceptance_words(scenario, set_, vllm_acceptance_rate,
                                                  vllm_per_position_accepted, vllm_num_drafts,
                                                  sglang_accept_length)
        word_notes += acceptance_notes
        if out is not None:
            check_output_folder(out, "--out", "search.json", lambda p: is_own_output(p, SEARCH_OUTPUT), force)
        res = run_search(scenario, objective, space, set_, profile, max_tpot_ms, max_gpus,
                         progress=backend == "ray" or (jobs or 1) > 1, confirm=confirm,
                         backend=make_backend(backend, jobs, address))
        if out is not None:
            write_search(res, out, scenario, set_, {"max_tpot_ms": max_tpot_ms, "max_gpus": max_gpus}, top)
    except UserInputError as e:
        fail(str(e))
    except ArithmeticError as e:  # the serving DES kept no request (a warm-up past the run's arrivals, say)
        fail(f"{scenario}: {e}")
    for line in res.answer.get("lines", []):
        console.print(f"[bold]answer:[/] {escape(line)}", highlight=False)
    for n in res.notes:
        err_console.print(f"[dim]{escape(n)}[/]", highlight=False)
    num_feasible = sum(r["feasible"] for r in res.rows)
    console.print(escape(f"{len(res.rows)} configurations ({num_feasible} feasible), {res.elapsed_s:.2f} s"
                         + (f"; wrote {', '.join(str(p) for p in res.paths)}" if res.paths else "")), highlight=False)
    if not res.ranked:
        fail("no configuration meets the constraints", code=1)
    engine_profile_note(scenario, set_)
    print_notes(word_notes, to_stderr=True)
    console.print(top_table(res, top))
    console.print(pareto_table(res))


_HEADERS = {"placement": "placement", "tp_size": "tp", "num_gpus": "GPUs", "num_steps": "steps", "topk": "topk",
            "num_draft_tokens": "ndt", "batch_size": "batch", "spec": "spec", "tok_per_s_per_user": "per user",
            "tok_per_s_per_gpu": "per GPU", "tok_per_s": "tok/s", "tpot_p50_ms": "TPOT ms",
            "serving_goodput_tok_per_s": "goodput"}


def _cell(col: str, v) -> str:
    if v is None:
        return "-"
    if col == "tpot_p50_ms":
        return f"{v:.2f}"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.1f}"
    return escape(str(v))


def _table(res: SearchResult, idxs: list[int], title: str) -> Table:
    from simulator.studies.search import SPACE_FIELDS
    extra = [c for c in res.space if c not in SPACE_FIELDS and c != "workload.batch_size"]
    metric_cols = ["tok_per_s_per_user", "tok_per_s_per_gpu", "tpot_p50_ms"]
    obj_col = OBJECTIVES[res.objective][0]
    if obj_col not in metric_cols:
        metric_cols.insert(0, obj_col)
    batch = ["batch_size"] if len({r["batch_size"] for r in res.rows}) > 1 else []
    cols = ["placement", "tp_size", "spec", *batch, *extra, *metric_cols]
    t = Table(title=escape(title), title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False,
              highlight=False, caption="tp: TP size (+1: a dedicated draft GPU); spec: num_steps/topk/num_draft_tokens;\n"
              "per user, per GPU: tok/s" + (";\n*: beyond the profile's measured range (search.csv: extrapolation)" if any(
                  res.rows[i].get("extrapolation") for i in idxs) else ""), caption_justify="left")
    t.add_column("#", justify="right", no_wrap=True, min_width=len(str(len(res.rows))) + 1)
    for c in cols:
        t.add_column(escape(_HEADERS.get(c, c.split(".")[-1])), justify="left" if c == "placement" else "right",
                     style="bold" if c == obj_col else None, no_wrap=True)
    for i in idxs:
        r = dict(res.rows[i])
        r["spec"] = f"{r['num_steps']}/{r['topk']}/{r['num_draft_tokens']}"
        r["tp_size"] = f"{r['tp_size']}+1" if r["num_gpus"] > r["tp_size"] else str(r["tp_size"])
        t.add_row(str(r["rank"] or "-") + ("*" if r.get("extrapolation") else ""), *(_cell(c, r.get(c)) for c in cols))
    return t


def top_table(res: SearchResult, top: int) -> Table:
    """The top configurations by the objective (fits 80 columns for the default space)."""
    return _table(res, res.ranked[:top], f"top {min(top, len(res.ranked))} by {res.objective}")


def pareto_table(res: SearchResult) -> Table:
    """The Pareto front's configurations."""
    (xc, xu), (yc, yu) = res.pareto_axes
    words = [f"{_HEADERS.get(c, c)} {'max' if up else 'min'}" for c, up in res.pareto_axes]
    return _table(res, res.pareto, f"Pareto front ({' vs '.join(words)}), {len(res.pareto)} points")


def render(res: SearchResult, top: int, width: int = 80) -> str:
    """The tables as text at a given width (for tests)."""
    c = Console(width=width, record=True, file=open("/dev/null", "w"), emoji=False)
    c.print(top_table(res, top))
    c.print(pareto_table(res))
    return c.export_text()
