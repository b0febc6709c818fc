"""The one-line error every user-facing failure becomes (file, field, what is allowed)."""

from __future__ import annotations

from pydantic import ValidationError


class UserInputError(Exception):
    """Bad user input (scenario, override, profile); the message is meant for the terminal."""


def format_validation_error(source: str, err: ValidationError) -> str:
    """One line per problem: '<source>: <field.path>: <message> (got <input>)'."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"]) or "(top level)"
        got = e.get("input")
        got_r = repr(got)
        got_r = got_r if len(got_r) <= 80 else got_r[:77] + "..."
        got_s = "" if isinstance(got, dict) or e["type"] == "missing" else f" (got {got_r})"
        msg = e["msg"].removeprefix("Value error, ")
        lines.append(f"{source}: {loc}: {msg}{got_s}")
    return "\n".join(lines)
