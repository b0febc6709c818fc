"""What a sweep writes and `specdecsim plot` reads: sweep.csv and sweep.json, one schema each.

`SweepRow` types and bounds the columns plots use (the CSV's other columns are the grid fields
and the breakdown buckets `<bucket>_us`, times >= 0); `SweepMeta` is sweep.json. Readers go
through `simulator.inputs` and name the file, the line and the column of any problem.
`SweepResult` is what a sweep produced (point by point or grouped) and `write_outputs` writes it.
Column meanings: `simulator.studies.sweep`.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from simulator import __version__
from simulator.config import Scenario
from simulator.files import SWEEP_OUTPUT, is_own_output, write_csv_atomic, write_json_atomic
from simulator.inputs import (MAX_INPUT_BYTES, UserInputError, format_validation_error, load_json, quote,
                             read_json, read_text)

if TYPE_CHECKING:
    from simulator.studies.grid import GridAxis

DESCRIPTIVE_COLUMNS = ("placement", "tp_size", "num_steps", "topk", "num_draft_tokens", "acceptance_kind",
                       "acceptance_rate", "batch_size", "context_len")
METRIC_COLUMNS = ("solver", "tok_per_s", "tok_per_s_ci95_low", "tok_per_s_ci95_high", "baseline_tok_per_s",
                  "speedup", "accept_length", "cycle_time_us", "tpot_ms")
# The dashboard's chart kinds (simulator.studies.plots.SECTION_NOTES): its PNGs are named {kind}_{i}.png.
CHART_KINDS = ("tok_per_s_vs_acceptance", "best_num_steps", "cycle_breakdown", "serving_latency_vs_throughput",
               "serving_best_num_steps", "allreduce_latency", "verify_latency", "predicted_vs_measured")
BUCKET_ORDER = ("draft_extend_compute", "draft_extend_comm", "draft_compute", "draft_comm", "verify_compute",
                "verify_comm", "accept_compute", "accept_comm", "sync", "host")


@dataclass
class SweepResult:
    """What `run_sweep` produced. Rows are dicts keyed by the CSV columns: a list, or a grouped
    sweep's `simulator.studies.sweep_grouped.GroupedRows`, which makes each when asked (and
    streams them to sweep.csv: its `write_csv`)."""

    rows: list[dict]
    columns: list[str]
    grid_fields: list[str]
    solver: str
    jobs: int  # chunks run at once: local worker processes, or the Ray cluster's CPUs
    elapsed_s: float
    des_check: dict | None
    csv_path: Path | None = None
    json_path: Path | None = None
    best_path: Path | None = None
    best_rows: list[dict] = field(default_factory=list)
    crossover_rows: list[dict] = field(default_factory=list)  # simulator.studies.serving_sweep.crossover
    backend: str = "local"  # simulator.studies.backend.BACKENDS
    num_infeasible: int = 0  # points whose weights and KV cache do not fit the GPU (column fits_memory false)
    break_even_rows: list[dict] = field(default_factory=list)  # simulator.studies.answer.break_even_rows
    break_even_note: str | None = None
    extrapolation_note: str | None = None  # simulator.studies.extrapolation.summary of the points


def describe(sc: Scenario) -> dict:
    """The scenario fields plots group by (DESCRIPTIVE_COLUMNS)."""
    acc = sc.acceptance
    return dict(placement=sc.placement.label, tp_size=sc.tp_size, num_steps=sc.spec.num_steps, topk=sc.spec.topk,
                num_draft_tokens=sc.spec.num_draft_tokens, acceptance_kind=acc.kind,
                acceptance_rate=getattr(acc, "acceptance_rate", None), batch_size=sc.workload.batch_size,
                context_len=sc.workload.context_len)


def cell_key(v: Any) -> Any:
    """A cell's value as a dict key: a list or dict as its JSON, anything else as itself."""
    return json.dumps(v) if isinstance(v, (list, dict)) else v


class SweepGridMeta(BaseModel):
    """One swept field as sweep.json records it."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    spec: str
    field: str
    values: list


class SweepMeta(BaseModel):
    """sweep.json: what `specdecsim sweep` ran; `specdecsim plot` reads it beside sweep.csv."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    specdecsim_output: Literal["sweep/1"] = Field(SWEEP_OUTPUT, description="Kind and schema version.")
    version: str
    scenario_path: str
    overrides: list[str]
    grids: list[SweepGridMeta]
    chain_rule: str
    solver: Literal["closed_form", "des"]
    backend: Literal["local", "ray"] = Field("local", description="Where the points ran (simulator.studies.backend).")
    jobs: int = Field(ge=1, description="Chunks run at once: local worker processes, or the Ray cluster's CPUs.")
    num_points: int = Field(ge=1)
    seed: int = Field(ge=0)
    des_sample: int = Field(ge=0)
    profiles: dict[str, str]
    elapsed_s: float = Field(ge=0)
    csv: str
    best_num_steps_csv: str | None
    des_check: dict | None
    serving_crossover: list[dict] | None = Field(None, description="Where speculation stops paying along the "
                                                                   "swept serving load (simulator.studies.serving_sweep).")
    break_even: list[dict] | None = Field(None, description="The acceptance rate above which speculation pays, per "
                                                            "combination of the other grid fields "
                                                            "(simulator.studies.answer.break_even_rows).")


class SweepRow(BaseModel):
    """One row of sweep.csv as `specdecsim plot` needs it: the plotted columns typed and in range.

    Grid-field columns and `<bucket>_us` columns come as extras; a `_us` or `_ms` extra is a time >= 0.
    """

    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)
    point_idx: int = Field(ge=0)
    placement: str | dict = Field(description="A label, or the mapping a grid wrote.")
    num_steps: int = Field(ge=1)
    tp_size: int | None = Field(None, ge=1)
    topk: int | None = Field(None, ge=1)
    num_draft_tokens: int | None = Field(None, ge=1)
    acceptance_kind: str | None = None
    acceptance_rate: float | None = Field(None, ge=0, le=1)
    batch_size: int | None = Field(None, ge=1)
    context_len: int | None = Field(None, ge=1)
    solver: Literal["closed_form", "des"]
    tok_per_s: float = Field(gt=0, description="tokens per second")
    tok_per_s_ci95_low: float | None = None
    tok_per_s_ci95_high: float | None = None
    baseline_tok_per_s: float = Field(gt=0, description="tokens per second")
    speedup: float = Field(gt=0)
    accept_length: float = Field(ge=1)
    cycle_time_us: float = Field(gt=0)
    tpot_ms: float | None = Field(None, ge=0)
    scenario_json: str

    @model_validator(mode="after")
    def _check_times(self) -> Self:
        for k, v in (self.model_extra or {}).items():
            if k.endswith(("_us", "_ms")) and v is not None and not (
                    isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0):
                raise ValueError(f"{k} must be a time >= 0 in {k[-2:]}, got {quote(v)}")
        return self


def _parse_cell(text: str) -> Any:
    """A CSV cell as `write_csv_atomic` wrote it: '' = None, numbers, True/False, JSON lists/objects.

    Raises:
        ValueError: a number that is NaN or infinite (the tools never write one).
    """
    if text == "":
        return None
    for conv in (int, float):
        try:
            value = conv(text)
        except ValueError:
            continue
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{quote(text)} is not a finite number")
        return value
    if text in ("True", "False"):
        return text == "True"
    if text[:1] in "[{":
        try:
            return json.loads(text, parse_constant=lambda c: text)
        except (json.JSONDecodeError, RecursionError, ValueError):
            pass
    return text


def read_sweep_table(path: Path) -> list[dict]:
    """Rows of a sweep CSV with numbers parsed back (scenario_json stays a string), each checked
    against `SweepRow`.

    Raises:
        UserInputError: unreadable file, not a CSV, or a row that is not a sweep row, naming the
            file, the line and the column.
    """
    _check_plottable(Path(path))
    text = read_text(path, "sweep CSV")
    rows = []
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        header = reader.fieldnames or []
        if not header:
            raise UserInputError(f"{path}: empty; a sweep CSV has a header and a row per point")
        if None in header or len(set(header)) != len(header):
            raise UserInputError(f"{path}: line 1: the header names a column twice or is empty")
        required = [n for n, f in SweepRow.model_fields.items() if f.is_required()]
        missing = [c for c in required if c not in header]
        if missing:
            raise UserInputError(f"{path}: line 1: not a sweep table (missing columns {', '.join(missing)})")
        for r in reader:
            line = reader.line_num
            if None in r:
                raise UserInputError(f"{path}: line {line}: more cells than the header has columns")
            row = {}
            for k, v in r.items():
                try:
                    row[k] = v if (k == "scenario_json" or v is None) else _parse_cell(v)
                except ValueError as e:
                    raise UserInputError(f"{path}: line {line}: column {k}: {e}") from None
            try:
                SweepRow.model_validate(row, strict=True)
            except ValidationError as e:
                raise UserInputError(format_validation_error(f"{path}: line {line}", e, max_lines=2)) from None
            rows.append(row)
    except csv.Error as e:
        raise UserInputError(f"{path}: not a CSV file here: {e}") from None
    if not rows:
        raise UserInputError(f"{path}: a header and no rows; a sweep CSV has a row per point")
    return rows


# The most points `sweep --html` takes: sweep.csv rows are 3.3-4.3 kB (each carries its resolved
# scenario), so about this many fit the MAX_INPUT_BYTES a sweep CSV is read up to.
MAX_PLOT_POINTS = 7_500


def _check_plottable(path: Path) -> None:
    """Refuse a sweep CSV over MAX_INPUT_BYTES with the number of its points that would fit.

    Raises:
        UserInputError: naming the file, its size, the limit and about how many of its rows fit.
    """
    try:
        size = path.stat().st_size
        if size <= MAX_INPUT_BYTES or not path.is_file():
            return  # read_text says what else is wrong with it
        with path.open("rb") as f:
            f.readline()
            row_bytes = max(len(f.readline(2**20)), 1)
    except OSError:
        return
    raise UserInputError(f"{path}: {size:,} bytes, about {size // row_bytes:,} points; a sweep CSV is read up to "
                         f"{MAX_INPUT_BYTES:,} bytes (about {MAX_INPUT_BYTES // row_bytes:,} of its {row_bytes:,}-byte "
                         "rows): plot a sweep of fewer points (a coarser --grid)")


def read_sweep_meta(path: Path) -> SweepMeta:
    """sweep.json of a sweep folder.

    Raises:
        UserInputError: unreadable, not JSON, or not a sweep.json, naming the file and field.
    """
    data = read_json(path, "sweep.json")
    if not isinstance(data, dict):
        raise UserInputError(f"{path}: not a sweep.json (expected a JSON object, got {type(data).__name__})")
    try:
        return SweepMeta.model_validate(data, strict=True)
    except ValidationError as e:
        raise UserInputError(format_validation_error(str(path), e)) from None


def row_scenario(row: dict, where: str) -> Scenario:
    """The resolved Scenario of a sweep row (its scenario_json cell).

    Args:
        where: the file and line, for messages.

    Raises:
        UserInputError: the cell is not JSON or not a scenario, naming `where` and the field.
    """
    data = load_json(row["scenario_json"], f"{where}: column scenario_json")
    try:
        return Scenario.model_validate(data, strict=True)
    except ValidationError as e:
        raise UserInputError(format_validation_error(f"{where}: column scenario_json", e)) from None


def write_outputs(result: SweepResult, out_dir: Path, scenario_path: Path, axes: list[GridAxis],
                  overrides: list[str] | None, profile_paths: dict[str, str], seed: int, des_sample: int,
                  progress: bool = False) -> None:
    """sweep.csv (rows that write themselves, GroupedRows, stream to it), best_num_steps.csv when
    the sweep has one (an earlier sweep's is removed when this one has none) and sweep.json; an
    earlier sweep's dashboard (plots/index.html) is removed with it."""
    from simulator.files import StagedFolder, is_own_html
    replacing_ours = is_own_output(out_dir / "sweep.json", SWEEP_OUTPUT)
    with StagedFolder(out_dir) as stage:  # the folder is the earlier sweep's or this one's, never a mix
        result.csv_path = out_dir / "sweep.csv"
        if hasattr(result.rows, "write_csv"):
            result.rows.write_csv(stage.path("sweep.csv"), progress)
        else:
            write_csv_atomic(stage.path("sweep.csv"), result.rows, result.columns)
        if result.best_rows:
            result.best_path = out_dir / "best_num_steps.csv"
            write_csv_atomic(stage.path("best_num_steps.csv"), result.best_rows, list(result.best_rows[0]))
        elif replacing_ours:
            stage.remove("best_num_steps.csv")  # it answered the earlier sweep's grid, not this one's
        if replacing_ours and is_own_html(out_dir / "plots" / "index.html"):
            stage.remove("plots/index.html")  # the earlier sweep's dashboard (`--html` draws this one's anew)
            for png in (out_dir / "plots").glob("*_*.png"):  # and its charts' PNGs
                kind, _, i = png.stem.rpartition("_")
                if kind in CHART_KINDS and i.isdigit():
                    stage.remove(f"plots/{png.name}")
        result.json_path = out_dir / "sweep.json"
        meta = SweepMeta(
            version=__version__, scenario_path=str(scenario_path), overrides=list(overrides or []),
            grids=[SweepGridMeta(spec=a.spec, field=a.field, values=list(a.values)) for a in axes],
            chain_rule="spec.num_steps swept, spec.topk == 1, spec.num_draft_tokens not swept: "
                       "num_draft_tokens = num_steps + 1",
            solver=result.solver, backend=result.backend, jobs=result.jobs, num_points=len(result.rows), seed=seed,
            des_sample=des_sample, profiles=profile_paths, elapsed_s=result.elapsed_s, csv=result.csv_path.name,
            best_num_steps_csv=result.best_path.name if result.best_path else None, des_check=result.des_check,
            serving_crossover=result.crossover_rows or None, break_even=result.break_even_rows or None)
        write_json_atomic(stage.path("sweep.json"), meta.model_dump(mode="json"), allow_nan=False)


CSV_NUMBERS_BYTES = 1024  # a sweep.csv row's columns beside scenario_json (about 30 numbers of up to 33 characters)


def sweep_disk_bytes(num_points: int, probe: list[Scenario]) -> float:
    """Bytes a sweep writes: per point the scenario_json column (the mean of the probed points'
    compact JSON) and the numbers beside it (CSV_NUMBERS_BYTES), plus sweep.json and the best table."""
    per_point = (sum(len(json.dumps(sc.model_dump(mode="json"), separators=(",", ":"))) for sc in probe)
                 / len(probe)) if probe else 0.0
    return num_points * (per_point + CSV_NUMBERS_BYTES) + 64 * 1024
