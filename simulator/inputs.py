"""What the tools read from users: files, YAML and JSON text, and the one-line error for them.

Every file a tool reads (scenario YAML, model `config.json`, profile, live records, sweep CSV and
JSON, validate JSON) goes through `read_text`, and every YAML or JSON text through `load_yaml` /
`load_json`, so one set of rules holds everywhere:

- a file is a regular file of at most `MAX_INPUT_BYTES`, UTF-8 text (a BOM is allowed);
  anything else is refused with one line naming the file;
- a document nests at most `MAX_DEPTH` levels and holds at most `MAX_NODES` values after YAML
  aliases are expanded (a recursive alias is refused), so a deep nest cannot overflow the stack
  and a "billion laughs" cannot hang whatever walks the result;
- a key written twice in one mapping is an error (YAML and JSON): what the user wrote is used
  as written or refused, never half used;
- NaN and infinities are refused where they are read: no field of a scenario, profile or record
  takes them;
- YAML floats may be written without a dot (`1e-7`), as in YAML 1.2 and JSON, so `--set`,
  `--grid` and a scenario file read a number the same way.

Errors are `UserInputError`s: one line (a few at most) naming the file, the line or field and
what is allowed, which the CLI prints without a traceback.
"""

from __future__ import annotations

import json
import math
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, SequenceNode

if TYPE_CHECKING:
    from pydantic import ValidationError

MAX_INPUT_BYTES = 32 * 2**20  # the largest shipped profile is 0.3 MB; a live record a few kB
MAX_TRACE_BYTES = 256 * 2**20  # torch.profiler traces of 24 live-loop cycles of an 8B model: up to 36 MB
MAX_DEPTH = 32  # a scenario nests 4 levels, a profile 5
MAX_NODES = 2_000_000  # values in one document after aliases are expanded
MAX_ERROR_LINES = 5  # problems listed per validation error; the rest are counted


class UserInputError(ValueError):
    """Bad user input (a file, a field, an option); the message is meant for the terminal.

    A ValueError, so callers that handle bad values (the calibration tools) handle it too.
    """


# ---- files --------------------------------------------------------------------------------------

def _a(what: str) -> str:
    """`what` with its indefinite article ('an engine profile JSON', 'a scenario')."""
    return f"{'an' if what[:1].lower() in 'aeiou' else 'a'} {what}"


def read_text(path: Path | str, what: str = "file", max_bytes: int = MAX_INPUT_BYTES) -> str:
    """The text of a user's file: a regular file of at most `max_bytes` (MAX_INPUT_BYTES) of UTF-8.

    Args:
        path: the file. what: what the file is, for messages ('scenario file', 'profile', ...).
        max_bytes: the bound (engine outputs may be profiler traces: MAX_TRACE_BYTES).

    Returns:
        The decoded text (a UTF-8 byte-order mark removed).

    Raises:
        UserInputError: missing, a folder, not a regular file (device, FIFO, socket), too large,
            unreadable or not UTF-8; the message names the file.
    """
    path = check_regular_file(path, what, max_bytes)
    try:
        with open(path, "rb") as f:
            raw = f.read(max_bytes + 1)
    except OSError as e:
        raise UserInputError(f"{path}: cannot read the {what}: {e.strerror or e}") from None
    if len(raw) > max_bytes:
        raise UserInputError(f"{path}: more than {max_bytes:,} bytes; {_a(what)} is at most that")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise UserInputError(f"{path}: not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start}); "
                             f"{_a(what)} is UTF-8") from None

def check_regular_file(path: Path | str, what: str = "file", max_bytes: int | None = MAX_INPUT_BYTES) -> Path:
    """`path` as a Path, checked: it exists, is a regular file (not a folder, device, FIFO or
    socket) and holds at most `max_bytes` (None: no bound, for files read as a stream).

    Raises:
        UserInputError: naming the file and what is wrong.
    """
    path = Path(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise UserInputError(f"{path}: {what} not found") from None
    except NotADirectoryError:
        raise UserInputError(f"{path}: {what} not found (a part of the path is a file, not a folder)") from None
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the path
        raise UserInputError(f"{path}: cannot read the {what}: {getattr(e, 'strerror', None) or e}") from None
    if stat.S_ISDIR(st.st_mode):
        raise UserInputError(f"{path}: is a folder, expected {_a(what)}")
    if not stat.S_ISREG(st.st_mode):
        raise UserInputError(f"{path}: is not a regular file (a device, FIFO or socket); expected {_a(what)}")
    if max_bytes is not None and st.st_size > max_bytes:
        raise UserInputError(f"{path}: {st.st_size:,} bytes; {_a(what)} is at most {max_bytes:,} bytes")
    return path



def read_yaml(path: Path | str, what: str = "YAML file") -> Any:
    """`load_yaml` of `read_text(path)`; errors name the file and line."""
    return load_yaml(read_text(path, what), str(path))


def read_json(path: Path | str, what: str = "JSON file") -> Any:
    """`load_json` of `read_text(path)`; errors name the file and line."""
    return load_json(read_text(path, what), str(path))


# ---- YAML ---------------------------------------------------------------------------------------
# YAML 1.2 / JSON floats: a dot or an exponent (YAML 1.1, PyYAML's default, needs the dot, so
# `1e-7` would be read as a string).
_FLOAT_12 = re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")


class BoundedSafeLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader with bounds: depth and expanded size, no recursive aliases, no duplicate
    keys, finite floats only, YAML 1.2 exponent floats."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0
        self._sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded values, expanded depth)

    def compose_node(self, parent, index):
        alias = self.check_event(AliasEvent)
        mark = self.peek_event().start_mark
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if alias:
            if id(node) not in self._sizes:
                raise ComposerError(None, None, "an alias refers to the node that holds it (a recursive "
                                                "structure)", mark)
            return node
        children: list = []
        if isinstance(node, SequenceNode):
            children = node.value
        elif isinstance(node, MappingNode):
            children = [n for kv in node.value for n in kv]
        size = 1 + sum(self._sizes[id(c)][0] for c in children)
        depth = 1 + max((self._sizes[id(c)][1] for c in children), default=0)
        if size > MAX_NODES:
            raise ComposerError(None, None, f"more than {MAX_NODES:,} values once its aliases are expanded", mark)
        if depth > MAX_DEPTH:
            raise ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels once its aliases are "
                                            "expanded", mark)
        self._sizes[id(node)] = (size, depth)
        return node

    def construct_mapping(self, node, deep=False):
        if isinstance(node, MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:
                    continue  # unhashable: SafeConstructor refuses it with its own message
                if first is not None:
                    raise ConstructorError("while constructing a mapping", node.start_mark,
                                           f"key {quote(key)} is written twice (first on line {first.line + 1})",
                                           key_node.start_mark)
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_float(self, node):
        value = super().construct_yaml_float(node)
        if not math.isfinite(value):
            raise ConstructorError(None, None, f"{quote(node.value)} is not a finite number", node.start_mark)
        return value


BoundedSafeLoader.add_constructor("tag:yaml.org,2002:float", BoundedSafeLoader.construct_yaml_float)
BoundedSafeLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_12, list("-+0123456789"))


def load_yaml(text: str, source: str) -> Any:
    """Parse YAML text with `BoundedSafeLoader`.

    Args:
        text: the document. source: what it is, for messages (a path, or `--set 'x=y'`).

    Raises:
        UserInputError: '<source>:<line>:<col>: invalid YAML: <problem>'.
    """
    loader = None
    try:
        loader = BoundedSafeLoader(text)
        return loader.get_single_data()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        what = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise UserInputError(f"{source}{where}: invalid YAML: {what}") from None
    except (ValueError, RecursionError) as e:  # int("1" * 5000) in the int constructor, say
        raise UserInputError(f"{source}: invalid YAML: {_first_line(e)}") from None
    finally:
        if loader is not None:
            loader.dispose()


def load_yaml_scalar(raw: str, source: str) -> Any:
    """A command-line value (`--set`, `--grid`) read as a YAML value, by the scenario file's rules."""
    return load_yaml(raw, source)


# ---- JSON ---------------------------------------------------------------------------------------
def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"key {quote(k)} is written twice in one object")
        out[k] = v
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number")


def _finite_float(text: str) -> float:
    """A JSON number with a fraction or exponent, refused where it overflows to infinity (1e400)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{quote(text, 30)} is not a finite number (past 1.8e308)")
    return value


def load_json(text: str, source: str) -> Any:
    """Parse JSON text: no duplicate keys, no NaN/Infinity (nor a number past the float range), depth
    and size bounded.

    Raises:
        UserInputError: '<source>:<line>:<col>: not valid JSON: <problem>' or the bound it breaks.
    """
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant,
                          parse_float=_finite_float)
    except json.JSONDecodeError as e:
        raise UserInputError(f"{source}:{e.lineno}:{e.colno}: not valid JSON: {e.msg}") from None
    except RecursionError:
        raise UserInputError(f"{source}: not valid JSON here: nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as e:
        raise UserInputError(f"{source}{_constant_at(text)}: not valid JSON here: {_first_line(e)}") from None
    check_bounds(data, source)
    return data


def load_json_line(line: str, source: str) -> Any:
    """`load_json` of one line of a JSON-lines file (`source`: 'file:line'); the error says the column
    after the problem, not a line:column of its own: '<file>:<line>: not valid JSON: <problem> (column C)'."""
    try:
        return load_json(line, source)
    except UserInputError as e:
        m = re.match(r"(?::\d+:(\d+))?(?: \(key [^)]*\))?: (.*)", str(e)[len(source):], re.S)
        if m is None:
            raise
        raise UserInputError(f"{source}: {m.group(2)}" + (f" (column {m.group(1)})" if m.group(1) else "")) from None


def _constant_at(text: str) -> str:
    """':<line>:<col> (key K)' of the first bare NaN / Infinity in JSON text (outside strings), or ''."""
    import re
    last_key = None
    for m in re.finditer(r'"((?:[^"\\]|\\.)*)"\s*(:)?|(-?Infinity|NaN)', text):
        if m.group(2):
            last_key = m.group(1)
        elif m.group(3):
            line = text.count("\n", 0, m.start()) + 1
            col = m.start() - (text.rfind("\n", 0, m.start()) + 1) + 1
            return f":{line}:{col}" + (f" (key {quote(last_key)})" if last_key is not None else "")
    return ""


def check_bounds(data: Any, source: str) -> None:
    """Refuse a structure nested deeper than MAX_DEPTH or holding more than MAX_NODES values.

    Raises:
        UserInputError: naming `source` and the bound.
    """
    stack = [(data, 1)]
    count = 0
    while stack:
        node, depth = stack.pop()
        count += 1
        if depth > MAX_DEPTH:
            raise UserInputError(f"{source}: nested deeper than {MAX_DEPTH} levels")
        if count > MAX_NODES:
            raise UserInputError(f"{source}: more than {MAX_NODES:,} values")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend((v, depth + 1) for v in node)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    if text.startswith("Exceeds the limit"):  # int() of a number with thousands of digits
        return "a number with thousands of digits"
    return text.splitlines()[0] if text else type(e).__name__


# ---- validation errors ----------------------------------------------------------------------------
# Tags pydantic puts in an error's location for a discriminated union's member (they are not keys
# a user writes): serving_engine.<kind>.field, acceptance.<kind>.field. The engine kinds are
# simulator.engines.models.ENGINE_KINDS (`_union_tags`: read there when an error is formatted, so
# that importing this module, as the CLI does to build its commands, loads no schema).
_UNION_TAGS = {"acceptance": ("iid", "positional", "empirical", "tree"),
               "arrivals": ("poisson", "closed_loop", "closed_batch", "trace"),
               "expert_routing": ("uniform", "zipf", "histogram"),
               "input_len": ("fixed", "uniform", "lognormal", "file"),
               "output_len": ("fixed", "uniform", "lognormal", "file")}


def _union_tags() -> dict[str, tuple[str, ...]]:
    from simulator.engines.models import ENGINE_KINDS
    return {"serving_engine": ENGINE_KINDS, **_UNION_TAGS}


def _without_union_tags(loc: tuple) -> tuple:
    tags = _union_tags()
    out = []
    for i, part in enumerate(loc):
        if i > 0 and part in tags.get(loc[i - 1], ()) and i + 1 < len(loc):
            continue
        out.append(part)
    return tuple(out)


def format_validation_error(source: str, err: ValidationError, max_lines: int = MAX_ERROR_LINES) -> str:
    """One line per problem, '<source>: <field.path>: <message> (got <input>)', at most `max_lines`
    of them; missing fields of one section share a line; further problems are counted on one
    more line."""
    lines: list[str] = []
    missing: dict[str, list[str]] = {}
    for e in err.errors():
        e = {**e, "loc": _without_union_tags(e["loc"])}
        if e["type"] == "missing" and e["loc"]:
            parent = ".".join(str(x) for x in e["loc"][:-1])
            if parent not in missing:
                missing[parent] = []
                lines.append(parent)  # placeholder, filled below
            missing[parent].append(".".join(str(x) for x in e["loc"]))
            continue
        loc = ".".join(str(x) for x in e["loc"]) or "(top level)"
        got = e.get("input")
        got_r = repr(got)
        got_r = got_r if len(got_r) <= 80 else got_r[:77] + "..."
        got_s = "" if isinstance(got, (dict, list)) or e["type"] == "missing" else f" (got {got_r})"
        msg = " ".join(e["msg"].removeprefix("Value error, ").split())
        if e["type"] == "extra_forbidden" and e["loc"]:
            hint = did_you_mean(err.title, e["loc"])
            if hint and hint == str(e["loc"][-1]):  # the name exists, on another kind of this section
                msg += "; that field belongs to another kind of this section (its `kind` chooses the fields)"
            else:
                msg += f"; did you mean {hint!r}?" if hint else ""
        msg = msg if len(msg) <= 300 else msg[:297] + "..."
        lines.append(f"{source}: {loc}: {msg}{got_s}")
    out = []
    for line in lines:
        if line in missing:
            names = missing.pop(line)
            shown = ", ".join(names[:12]) + (f" and {len(names) - 12} more" if len(names) > 12 else "")
            out.append(f"{source}: missing field{'s' * (len(names) > 1)} {shown}")
        else:
            out.append(line)
    if len(out) > max_lines:
        out = out[:max_lines] + [f"{source}: ... and {len(out) - max_lines} more problems"]
    return "\n".join(out)


def _model_classes(annotation) -> list[type]:
    """The pydantic models an annotation holds (inside Optional, Union, list, dict, Annotated)."""
    import typing

    from pydantic import BaseModel
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    out: list[type] = []
    for arg in typing.get_args(annotation):
        out += _model_classes(arg)
    return out


def _all_models(base: type) -> dict[str, type]:
    out: dict[str, type] = {}
    for sub in base.__subclasses__():
        out.setdefault(sub.__name__, sub)
        out.update({k: v for k, v in _all_models(sub).items() if k not in out})
    return out


def did_you_mean(model_name: str, loc: tuple) -> str | None:
    """For a key a model refuses (`extra_forbidden` at `loc` of the model named `model_name`): the
    closest field name where it was written (difflib), or None."""
    import difflib

    from pydantic import BaseModel
    root = _all_models(BaseModel).get(model_name)
    if root is None:
        return None
    models = [root]
    for part in loc[:-1]:
        inner = [c for m in models if isinstance(part, str) and part in m.model_fields
                 for c in _model_classes(m.model_fields[part].annotation)]
        models = inner or models  # a list index or a dict key: the same models hold the value
    names = {n for m in models for n, f in m.model_fields.items()} | \
        {f.alias for m in models for f in m.model_fields.values() if f.alias}
    close = difflib.get_close_matches(str(loc[-1]), sorted(names), n=1, cutoff=0.75)
    return close[0] if close else None


def refuse_nulls(data: Any, source: str, path: str = "") -> None:
    """Refuse an explicit null (YAML `~`, `null` or an empty value) anywhere in a user's document:
    a field is written with a value or left out, never written empty to mean 'absent'.

    Raises:
        UserInputError: naming the first field written as null.
    """
    if isinstance(data, dict):
        for k, v in data.items():
            where = f"{path}.{k}" if path else str(k)
            if v is None:
                raise UserInputError(f"{source}: {where}: is null (empty); write a value, or leave the key out "
                                     "for the default")
            refuse_nulls(v, source, where)
    elif isinstance(data, list):
        for i, v in enumerate(data):
            where = f"{path}.{i}"
            if v is None:
                raise UserInputError(f"{source}: {where}: is null (empty); write a value")
            refuse_nulls(v, source, where)


def quote(value: Any, limit: int = 60) -> str:
    """User text or a value for a message: its repr, cut to about `limit` characters, so a
    100 kB argument is not echoed back whole."""
    if isinstance(value, str):
        return repr(value) if len(value) <= limit else repr(value[:limit]) + f"... ({len(value):,} characters)"
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text):,} characters)"


__all__ = ["MAX_DEPTH", "MAX_INPUT_BYTES", "MAX_NODES", "BoundedSafeLoader", "UserInputError", "check_bounds",
           "format_validation_error", "load_json", "load_json_line", "load_yaml", "load_yaml_scalar", "quote", "read_json",
           "read_text", "read_yaml", "refuse_nulls"]
