"""Pydantic's validation errors, reworded as ``InvalidInputError``s that name the field.

A field is named by its path in the JSON document: ``tasks[2].successes``,
``capability_scores.memory``, ``cost.mean_steps``. A validator that checks several
fields at once raises ``InvalidInputError`` with a path relative to its model, and that
path is joined to where the model sits.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from contract.errors import InvalidInputError

_KEY = "[key]"
_NAMED = re.compile(r"^([A-Za-z_][\w.\[\]]*): (.+)$", re.DOTALL)
"""A plain ValueError whose message starts with a field path (``id: ...``)."""
_QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'|([^\s,']+)")
_LISTED_FIELDS = 5
_SHAPES = {
    "model_type": "an object",
    "model_attributes_type": "an object",
    "dict_type": "an object",
    "list_type": "a list",
    "tuple_type": "a list",
}
"""JSON's names for the shapes pydantic names after Python types."""


class InvalidRecordError(InvalidInputError):
    """A record with one or more invalid fields: ``field``, ``problem`` and ``allowed``
    describe the first, ``problems`` holds them all."""

    def __init__(self, problems: Sequence[InvalidInputError]) -> None:
        first = problems[0]
        super().__init__(first.field, first.problem, first.allowed)
        self.problems = tuple(problems)
        if len(problems) > 1:
            fields = [p.field for p in problems[1:]]
            listed = ", ".join(fields[:_LISTED_FIELDS])
            if len(fields) > _LISTED_FIELDS:
                listed += ", ..."
            noun = "problem" if len(fields) == 1 else "problems"
            self.args = (f"{self.args[0]}; {len(fields)} more {noun}: {listed}",)


def field_path(loc: Sequence[int | str], relative: str = "") -> str:
    """``("tasks", 2, "successes")`` -> ``tasks[2].successes``; a dictionary key counts as a
    field name; ``relative`` (a validator's own path) is appended."""
    path = ""
    for part in loc:
        if part == _KEY:
            continue
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    if not relative:
        return path
    if not path or relative.startswith("["):
        return path + relative
    return f"{path}.{relative}"


def invalid_input(exc: ValidationError, root: str = "record") -> InvalidRecordError:
    """Every problem in ``exc`` as an ``InvalidInputError`` naming its field; a problem
    with the document as a whole is named ``root``."""
    return InvalidRecordError([_problem(error, root) for error in exc.errors()])


def _problem(error: ErrorDetails, root: str) -> InvalidInputError:
    kind = error["type"]
    loc = error["loc"]
    ctx: dict[str, Any] = dict(error.get("ctx") or {})
    value = error.get("input")
    field = field_path(loc) or root
    if kind == "value_error":
        cause = ctx.get("error")
        if isinstance(cause, InvalidInputError):
            return InvalidInputError(field_path(loc, cause.field), cause.problem, cause.allowed)
        message = str(cause) if cause is not None else error["msg"]
        named = _NAMED.match(message)
        if named and not loc:
            return InvalidInputError(named.group(1), named.group(2))
        return InvalidInputError(field, message)
    if kind == "missing":
        return InvalidInputError(field, "is required")
    if kind == "extra_forbidden":
        return InvalidInputError(field, "is not a field of this record (misspelt?)")
    if kind == "enum" and loc and loc[-1] == _KEY:
        return InvalidInputError(field, f"{_shown(value)} is not a known key", _allowed(ctx))
    if kind == "enum":
        return InvalidInputError(field, f"{_shown(value)} is not a known value", _allowed(ctx))
    if kind == "literal_error":
        return InvalidInputError(field, f"{_shown(value)} is not supported", _allowed(ctx))
    if kind == "json_invalid":
        return InvalidInputError(field, f"not valid JSON ({ctx.get('error', error['msg'])})")
    if kind == "string_pattern_mismatch":
        return InvalidInputError(field, f"{_shown(value)} does not match {ctx.get('pattern')}")
    if kind == "finite_number":
        return InvalidInputError(field, f"must be a finite number (got {_shown(value)})")
    if kind in _SHAPES:
        return InvalidInputError(field, f"must be {_SHAPES[kind]} (got {_shown(value)})")
    message = re.sub(r"^Input should ", "must ", error["msg"])
    return InvalidInputError(field, f"{message} (got {_shown(value)})")


def _allowed(ctx: dict[str, Any]) -> list[str]:
    """``"'trainer', 'evaluation' or 'external'"`` -> ``["trainer", "evaluation", "external"]``."""
    expected = str(ctx.get("expected", ""))
    values = [quoted or bare for quoted, bare in _QUOTED.findall(expected)]
    return [v for v in values if v != "or"]


def _shown(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
