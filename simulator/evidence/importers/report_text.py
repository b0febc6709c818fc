"""Printed engine reports read line by line: numbers, 'label: value' lines and the one-line error.

The parsers of `simulator.evidence.importers` share these so every malformed line is refused the same
way: `UserInputError('<file>:<line>: <what was found>; expected <what the engine prints>')`.
"""

from __future__ import annotations

import math
import re

from simulator.inputs import UserInputError, quote

_NUMBER = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$")
LABEL_VALUE = re.compile(r"^\s*(?P<label>[^:]+?):\s+(?P<value>\S+)\s*$")  # 'Mean TPOT (ms):   12.3'


def line_error(path: str, line_no: int, found: str, expected: str) -> UserInputError:
    """The one-line error for a malformed line: '<path>:<line_no>: <found>; expected <expected>'."""
    return UserInputError(f"{path}:{line_no}: {found}; expected {expected}")


def to_float(text: str, path: str, line_no: int, field: str, expected: str) -> float:
    """A finite number written in a report, else the one-line error naming the field."""
    text = text.strip().rstrip("%")
    if not _NUMBER.match(text):
        raise line_error(path, line_no, f"{field} is {quote(text)}, not a number", expected)
    value = float(text)
    if not math.isfinite(value):
        raise line_error(path, line_no, f"{field} is not finite", expected)
    return value


def to_int(text: str, path: str, line_no: int, field: str, expected: str) -> int:
    """A whole number written in a report (`12` or `12.0`), else the one-line error."""
    value = to_float(text, path, line_no, field, expected)
    if value != int(value):
        raise line_error(path, line_no, f"{field} is {quote(text.strip())}, not a whole number", expected)
    return int(value)


def to_bool(text: str, path: str, line_no: int, field: str, expected: str) -> bool:
    """'True' / 'False' as Python prints them."""
    text = text.strip()
    if text not in ("True", "False"):
        raise line_error(path, line_no, f"{field} is {quote(text)}, not True or False", expected)
    return text == "True"


def comma_fields(body: str) -> dict[str, str]:
    """'a: 1, b (x/s): 2, c: True' -> {'a': '1', 'b (x/s)': '2', 'c': 'True'}; pieces without ': ' are
    skipped (a trailing comma, a bare word)."""
    out: dict[str, str] = {}
    for piece in body.split(", "):
        label, sep, value = piece.partition(": ")
        if sep:
            out[label.strip()] = value.strip().rstrip(",").strip()
    return out


def json_numbers(rec: dict, required: tuple[str, ...], optional: tuple[str, ...], path: str, line_no: int,
                 what: str, expected: str) -> dict[str, float | int]:
    """The numeric fields of one JSON record: each of `required` must be there and a number, each of
    `optional` present is a number (a null counts as absent); bools and strings are refused.

    Raises:
        UserInputError: '<path>:<line_no>: <what> without 'key'; expected ...' or '... 'key' is ...'.
    """
    out: dict[str, float | int] = {}
    for key in required + optional:
        value = rec.get(key)
        if value is None:
            if key in required:
                raise line_error(path, line_no, f"{what} without {key!r}", expected)
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise line_error(path, line_no, f"{what}: {key!r} is {quote(value)}, not a number", expected)
        out[key] = value
    return out
