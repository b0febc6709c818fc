"""What a sweep writes and `specdecsim plot` reads: sweep.csv and sweep.json, one schema each.

`SweepRow` types and bounds the columns plots use (the CSV's other columns are the grid fields
and the breakdown buckets `<bucket>_us`, times >= 0); `SweepMeta` is sweep.json. Readers go
through `simulator.inputs` and name the file, the line and the column of any problem.
Column meanings: `simulator.studies.sweep`.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from simulator.config import Scenario
from simulator.files import SWEEP_OUTPUT
from simulator.inputs import (MAX_INPUT_BYTES, UserInputError, format_validation_error, load_json, quote,
                             read_json, read_text)


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


class SweepRow(BaseModel):
    """One row of sweep.csv as `specdecsim plot` needs it: the plotted columns typed and in range.

    Grid-field columns and `<bucket>_us` columns come as extras; a `_us` extra is a time >= 0.
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
    tpot_us: float | None = Field(None, ge=0)
    scenario_json: str

    @model_validator(mode="after")
    def _check_times(self) -> Self:
        for k, v in (self.model_extra or {}).items():
            if k.endswith("_us") and v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool)
                                                              and math.isfinite(v) and v >= 0):
                raise ValueError(f"{k} must be a time >= 0 in us, got {quote(v)}")
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
