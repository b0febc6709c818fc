"""Grid specs for sweeps: parsing `field=values` and expanding grids into validated scenarios.

A grid spec names one dotted scenario field and its values:

- `spec.num_steps=1..8`                        integer range, both ends included;
- `acceptance.acceptance_rate=0.3:0.95:0.05`   float start:stop:step, stop included when the
                                               steps land on it within 1e-9 of a step;
- `placement=shared_tp,tp1_colocated`          a list; each value is a YAML scalar (brackets
                                               keep commas inside lists: `[0.9,0.8],[0.8,0.7]`).

The field is checked against the pydantic Scenario model, and each value against the field's
type and bounds, before anything runs. Values are read by the scenario file's rules
(`simulator.inputs.load_yaml_scalar`: `1e-7` is a number, NaN and infinities are refused). A grid
has at most MAX_AXIS_VALUES values per field and MAX_GRID_POINTS points (a grouped closed-form
sweep: `simulator.studies.sweep_grouped.MAX_GROUPED_GRID_POINTS`), checked before any value is made.
The sweep is the Cartesian product of its grids; each point is the scenario dict with the point's values applied by
`simulator.scenario.apply_overrides` and validated by `scenario_from_dict`, so a point gets
exactly the checks a scenario file gets.

Chain rule: when `spec.num_steps` is swept, a point whose `spec.topk` is 1 and where
`spec.num_draft_tokens` is not swept gets `num_draft_tokens = num_steps + 1` (the only value a
chain allows). Positional or empirical acceptance lists are not resized: a list whose length
does not fit a swept num_steps is an error naming the point.

A grid with its acceptance fields apart from the rest (the closed-form sweep of a large grid) is
`simulator.studies.grid_groups`'s.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import re
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, BeforeValidator, TypeAdapter, ValidationError

from simulator.config import Placement, Scenario
from simulator.inputs import load_yaml_scalar, quote
from simulator.scenario import UserInputError, apply_overrides, scenario_from_dict

NUM_STEPS_FIELD = "spec.num_steps"
MAX_AXIS_VALUES = 10_000  # values of one swept field
MAX_GRID_POINTS = 100_000  # points of a sweep run point by point (the product of its fields' values)
_FLOAT_TOL = 1e-9
_INT_RANGE = re.compile(r"^\s*(-?\d+)\s*\.\.\s*(-?\d+)\s*$")
# 'a..b' with a number on one side and not an integer on the other (1..inf, 1.5..8, 2..): not a range
_RANGE_LIKE = re.compile(r"^\s*(?:[-+]?\d[\w.+-]*\s*\.\.\s*[\w.+-]*|[\w.+-]*\s*\.\.\s*[-+]?\d[\w.+-]*)\s*$")
_FLOAT_RANGE = re.compile(r"^\s*([^:,\[\]{}]+):([^:,\[\]{}]+):([^:,\[\]{}]+)\s*$")


@dataclass(frozen=True)
class GridAxis:
    """One swept field: its dotted path, its values in order, and the spec it came from."""

    field: str
    values: tuple
    spec: str


# ---- grid specs ---------------------------------------------------------------------------------
def _split_top_level(raw: str) -> list[str]:
    """Split on commas outside brackets/braces."""
    out, depth, cur = [], 0, ""
    for ch in raw:
        depth += ch in "[{"
        depth -= ch in "]}"
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return out


def _number(text: str, spec: str) -> int | float:
    try:
        value = load_yaml_scalar(text, f"--grid {quote(spec)}")
    except UserInputError:
        value = None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UserInputError(f"--grid {quote(spec)}: {quote(text.strip())} is not a number "
                             "(float ranges are start:stop:step of finite numbers, e.g. 0.3:0.95:0.05)")
    return value


def _too_many(spec: str, n: int | float) -> UserInputError:
    return UserInputError(f"--grid {quote(spec)}: {n:,.0f} values; a swept field takes at most {MAX_AXIS_VALUES:,} "
                          "(a coarser step, or several sweeps)")


def _float_range(start: float, stop: float, step: float, spec: str) -> tuple:
    if step == 0:
        raise UserInputError(f"--grid {quote(spec)}: step must not be 0")
    steps = (stop - start) / step  # all three finite (_number); the quotient may still overflow
    if not np.isfinite(steps) or steps + 1 > MAX_AXIS_VALUES:
        raise _too_many(spec, steps + 1 if np.isfinite(steps) else float("inf"))
    n = int(np.floor(steps + _FLOAT_TOL)) + 1
    if n <= 0:
        raise UserInputError(f"--grid {quote(spec)}: empty range ({start} to {stop} by {step})")
    if all(isinstance(x, int) for x in (start, stop, step)):
        return tuple(start + i * step for i in range(n))
    return tuple(round(start + i * step, 12) for i in range(n))


def parse_grid(spec: str) -> GridAxis:
    """Parse one `--grid` spec (see the module docstring for the syntax).

    The field is checked against the Scenario model and each value against the field's type and
    bounds, so a typo fails before anything runs.

    Raises:
        UserInputError: malformed spec, unknown field, empty range, or a value of the wrong type;
            the message quotes the spec.
    """
    if "=" not in spec:
        raise UserInputError(f"--grid {quote(spec)}: expected field=values, e.g. spec.num_steps=1..8, "
                             "acceptance.acceptance_rate=0.3:0.95:0.05 or placement=shared_tp,tp1_colocated")
    name, raw = (s.strip() for s in spec.split("=", 1))
    if not name or any(not p for p in name.split(".")):
        raise UserInputError(f"--grid {quote(spec)}: empty field name")
    if not raw:
        raise UserInputError(f"--grid {quote(spec)}: no values after '='")
    adapters = field_adapters(name, spec)
    if m := _INT_RANGE.match(raw):
        if max(len(m.group(1)), len(m.group(2))) > 18:
            raise _too_many(spec, float("inf"))
        lo, hi = int(m.group(1)), int(m.group(2))
        if hi < lo:
            raise UserInputError(f"--grid {quote(spec)}: empty range {lo}..{hi} (the end is below the start)")
        if hi - lo + 1 > MAX_AXIS_VALUES:
            raise _too_many(spec, hi - lo + 1)
        values: tuple = tuple(range(lo, hi + 1))
    elif _RANGE_LIKE.match(raw):
        raise UserInputError(f"--grid {quote(spec)}: malformed integer range {quote(raw)}; write start..stop, e.g. 1..8")
    elif m := _FLOAT_RANGE.match(raw):
        values = _float_range(*(_number(g, spec) for g in m.groups()), spec=spec)
    else:
        parts = _split_top_level(raw)
        if len(parts) > MAX_AXIS_VALUES:
            raise _too_many(spec, len(parts))
        if any(not p.strip() for p in parts):
            raise UserInputError(f"--grid {quote(spec)}: empty value in the list")
        values = tuple(load_yaml_scalar(p, f"--grid {quote(spec)}") for p in parts)
    for v in values:
        _check_value(v, adapters, spec, name)
    return GridAxis(field=name, values=values, spec=spec)


def _model_variants(annotation: Any) -> list[type[BaseModel]]:
    """Pydantic model classes inside an annotation (unwrapping Annotated / unions)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _model_variants(arg)]


def field_adapters(path: str, spec: str = "") -> list[TypeAdapter]:
    """TypeAdapters (type + bounds) of a dotted Scenario field, one per union variant holding it.

    Raises:
        UserInputError: no such field, naming the fields there are.
    """
    models: list[type[BaseModel]] = [Scenario]
    parts = path.split(".")
    infos = []
    for i, part in enumerate(parts):
        infos = [m.model_fields[part] for m in models if part in m.model_fields]
        if not infos:
            have = sorted({f for m in models for f in m.model_fields})
            where = ".".join(parts[:i]) or "a scenario"
            raise UserInputError(f"--grid {quote(spec or path)}: unknown field {quote(path)}: {where} has fields "
                                 f"{', '.join(have)}")
        if i < len(parts) - 1:
            models = [v for info in infos for v in _model_variants(info.annotation)]
            if not models:
                raise UserInputError(f"--grid {quote(spec or path)}: {quote('.'.join(parts[:i + 1]))} is not a section")
    return [_placement_adapter() if info.annotation is Placement else TypeAdapter(Annotated[info.annotation, info])
            for info in infos]


def _placement_adapter() -> TypeAdapter:
    """A placement label is checked for its form here; whether its draft TP size divides the
    point's tp_size is checked when the point's scenario is validated."""
    return TypeAdapter(Annotated[Placement, BeforeValidator(lambda v: Placement.parse(v, tp_size=1))])


def _check_value(value: Any, adapters: list[TypeAdapter], spec: str, name: str) -> None:
    errors: list[str] = []
    tries = [value]
    if isinstance(value, int) and not isinstance(value, bool):
        tries.append(str(value))  # a release like 2026 reads as an integer; the engine section takes it as text
    for ad in adapters:
        for v in tries:
            try:
                ad.validate_python(v, strict=True)
                return
            except ValidationError as e:
                msg = e.errors()[0]["msg"]
                if v is value and msg not in errors:  # the text retry's own error says nothing of the value
                    errors.append(msg)
    allowed = sorted({r for r in map(_allowed_range, adapters) if r})
    raise UserInputError(f"--grid {quote(spec)}: value {quote(value)} does not fit {name}"
                         + (f" ({' or '.join(allowed)})" if allowed else "") + f": {' or '.join(errors[:4])}")


def _allowed_range(adapter: TypeAdapter) -> str:
    """'an integer, 1 <= x <= 4096' for a bounded number field (its core schema's ge/gt/le/lt), else ''."""
    schema = adapter.core_schema
    while schema.get("type") in ("default", "nullable") and "schema" in schema:
        schema = schema["schema"]
    kind = {"int": "an integer", "float": "a number"}.get(schema.get("type"))
    if kind is None:
        return ""
    def num(key: str) -> str:
        return f"{schema[key]:,}" if isinstance(schema[key], int) else f"{schema[key]:g}"
    low = (f"{num('ge')} <= " if "ge" in schema else f"{num('gt')} < " if "gt" in schema else "")
    high = (f" <= {num('le')}" if "le" in schema else f" < {num('lt')}" if "lt" in schema else "")
    return f"{kind}, {low}x{high}" if low or high else kind


def parse_grids(specs: list[str], max_points: int = MAX_GRID_POINTS) -> list[GridAxis]:
    """Parse several specs; a field swept twice, or more than `max_points` points, is an error."""
    axes = [parse_grid(s) for s in specs]
    seen: dict[str, str] = {}
    for ax in axes:
        if ax.field in seen:
            raise UserInputError(f"--grid {quote(ax.spec)}: {ax.field} is already swept by {quote(seen[ax.field])}")
        seen[ax.field] = ax.spec
    check_grid_points(axes, max_points)
    return axes


def check_grid_points(axes: list[GridAxis], max_points: int, what: str = "points; a sweep") -> None:
    """Raises UserInputError: the grid has more than `max_points` points (naming its sizes; `what`
    follows the count: what they are and who takes at most max_points)."""
    points = math.prod(len(ax.values) for ax in axes)
    if points > max_points:
        sizes = " x ".join(f"{len(ax.values)} {ax.field}" for ax in axes)
        raise UserInputError(f"--grid: {sizes} = {points:,} {what} takes at most {max_points:,}")


# ---- expansion --------------------------------------------------------------------------------------
def _get(data: dict, path: str, default: Any = None) -> Any:
    node: Any = data
    for p in path.split("."):
        if not isinstance(node, dict) or p not in node:
            return default
        node = node[p]
    return node


def _with_overrides(data: dict, overrides: list[str], parsed: dict, source: str) -> dict:
    """`apply_overrides(copy.deepcopy(data), overrides, source)` for overrides that
    apply_overrides has already accepted on this dict's layout: the mappings along each path are
    copied, everything else is shared (nothing downstream mutates a scenario dict), and each
    override's value is parsed once per text (`parsed`, by key and text)."""
    data = dict(data)
    for item in overrides:
        key, raw = item.split("=", 1)
        if (key, raw) not in parsed:
            parsed[key, raw] = apply_overrides({}, [f"value={raw}"], source)["value"]
        parts = key.strip().split(".")
        node = data
        for p in parts[:-1]:
            node[p] = dict(node.get(p, {}))
            node = node[p]
        node[parts[-1]] = copy.deepcopy(parsed[key, raw])
    return data


class PointError(UserInputError):
    """A grid point that fails scenario validation (the message names the point)."""


class GridPoints:
    """Grid points made one at a time: the point's scenario dict (the grid values applied to the
    base by `simulator.scenario.apply_overrides`, the chain rule) validated by `scenario_from_dict`.

    The first point made, and every point of a grid with fields inside other swept fields, takes
    the long way (a deep copy and `apply_overrides`); the others copy only the dicts their
    overrides write into (`_with_overrides`: the same dict).
    """

    def __init__(self, base: dict, axes: list[GridAxis], source: str, base_dir: Path):
        self.base, self.axes, self.source, self.base_dir = base, axes, source, base_dir
        self.fields = [a.field for a in axes]
        self.chain_rule = NUM_STEPS_FIELD in self.fields and "spec.num_draft_tokens" not in self.fields
        self.nested = any(f != g and g.startswith(f + ".") for f in self.fields for g in self.fields)
        self._parsed: dict[tuple[str, str], Any] = {}  # each override text read once (it reads the same every time)
        self._first = True

    def data(self, combo: tuple) -> dict:
        """The scenario dict of a point (grid values in axis order), not validated.

        Raises:
            UserInputError: an override that does not apply (checked on the first point made).
        """
        values = dict(zip(self.fields, combo))
        overrides = [f"{k}={json.dumps(v)}" for k, v in values.items()]
        if self.nested or self._first:  # the first point (and fields inside other swept fields) the long way
            data = apply_overrides(copy.deepcopy(self.base), overrides, self.source)
            self._first = False
        else:  # the same dict: a copy of what the overrides write into, the rest shared, unchanged
            data = _with_overrides(self.base, overrides, self._parsed, self.source)
        if self.chain_rule and _get(data, "spec.topk", 1) == 1:
            data = _with_overrides(data, [f"spec.num_draft_tokens={int(values[NUM_STEPS_FIELD]) + 1}"],
                                   self._parsed, self.source)
        return data

    def point(self, combo: tuple, data: dict | None = None) -> tuple[dict, Scenario]:
        """(grid values by field, validated Scenario) of a point.

        Raises:
            PointError: the point fails scenario validation; the message names the point.
            UserInputError: an override that does not apply.
        """
        values = dict(zip(self.fields, combo))
        data = self.data(combo) if data is None else data
        try:
            return values, scenario_from_dict(data, self.source, self.base_dir)
        except UserInputError as e:
            point = ", ".join(f"{k}={quote(v, 30)}" for k, v in values.items())
            hint = ""
            if NUM_STEPS_FIELD in self.fields and "acceptance" in str(e) and "entries" in str(e):
                hint = ("\nhint: positional/empirical acceptance lists are not resized with num_steps; "
                        "sweep the list too or use acceptance kind iid")
            raise PointError(f"grid point ({point}): {e}{hint}") from None


def expand(base: dict, axes: list[GridAxis], source: str, base_dir: Path) -> list[tuple[dict, Scenario]]:
    """Every grid point as (grid values by field, validated Scenario), in row-major order.

    Args:
        base: scenario dict, `--set` overrides already applied. source: file name for errors.
        base_dir: folder of the scenario file (model config_path files are relative to it).

    Raises:
        UserInputError: a point fails scenario validation; the message names the point.
    """
    points = GridPoints(base, axes, source, base_dir)
    out = [points.point(combo) for combo in itertools.product(*(a.values for a in axes))]
    if not out:
        raise UserInputError("the grid has no points")
    return out
