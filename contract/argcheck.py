"""A compiled checker for the JSON-Schema subset that tool parameters use.

Tools validate every call, so the check must cost microseconds: a schema is compiled
once into nested closures. Supported keywords: type, enum, const, properties, required,
additionalProperties (boolean), items, minItems, maxItems, minimum, maximum, minLength,
maxLength, pattern; annotations (description, title, default, examples, format) are
ignored. Any other keyword is refused at compile time, so a schema never silently
checks less than it says.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from contract.errors import SchemaError

ArgumentProblem = tuple[str, str]
"""(field path, what is wrong with it)."""

Checker = Callable[[Any, str], ArgumentProblem | None]

_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "format"})
_SUPPORTED = _ANNOTATIONS | {
    "type", "enum", "const", "properties", "required", "additionalProperties", "items",
    "minItems", "maxItems", "minimum", "maximum", "minLength", "maxLength", "pattern",
}  # fmt: skip

_TYPE_TESTS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "null": lambda v: v is None,
}


_CLASSES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
    "null": (type(None),),
}


def _json_type_name(value: Any) -> str:
    for name in ("boolean", "integer", "number", "string", "object", "array", "null"):
        if _TYPE_TESTS[name](value):
            return name
    return type(value).__name__


def compile_schema(schema: dict[str, Any], path: str = "") -> Checker:
    """Compile ``schema`` into a function ``check(value, path) -> problem or None``."""
    unknown = set(schema) - _SUPPORTED
    if unknown:
        raise SchemaError(f"{path or 'schema'}: unsupported keywords {sorted(unknown)}")
    parts: list[Checker] = []

    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        for name in names:
            if name not in _TYPE_TESTS:
                raise SchemaError(f"{path or 'schema'}: unknown type {name!r}")
        classes = tuple(c for n in names for c in _CLASSES[n])
        bools_ok = "boolean" in names  # bool is an int in Python, not in JSON
        expected = " or ".join(names)

        def check_type(value: Any, at: str) -> ArgumentProblem | None:
            if isinstance(value, classes) and (bools_ok or value.__class__ is not bool):
                return None
            return at, f"expected {expected}, got {_json_type_name(value)}"

        parts.append(check_type)

    if "enum" in schema:
        allowed = list(schema["enum"])
        listing = ", ".join(map(str, allowed))

        def check_enum(value: Any, at: str) -> ArgumentProblem | None:
            if value in allowed and any(type(value) is type(a) for a in allowed):
                return None
            return at, f"{value!r} is not allowed (allowed: {listing})"

        parts.append(check_enum)

    if "const" in schema:
        const = schema["const"]
        parts.append(lambda v, at: None if v == const else (at, f"must be {const!r}"))

    _compile_bounds(schema, parts)
    _compile_object(schema, path, parts)
    _compile_array(schema, path, parts)

    if len(parts) == 1:
        return parts[0]

    def check(value: Any, at: str) -> ArgumentProblem | None:
        for part in parts:
            problem = part(value, at)
            if problem is not None:
                return problem
        return None

    return check


def _compile_bounds(schema: dict[str, Any], parts: list[Checker]) -> None:
    number = _TYPE_TESTS["number"]
    if "minimum" in schema:
        low = schema["minimum"]
        parts.append(lambda v, at: (at, f"must be >= {low}") if number(v) and v < low else None)
    if "maximum" in schema:
        high = schema["maximum"]
        parts.append(lambda v, at: (at, f"must be <= {high}") if number(v) and v > high else None)
    if "minLength" in schema:
        n = schema["minLength"]
        parts.append(
            lambda v, at: (
                (at, f"must have at least {n} characters")
                if isinstance(v, str) and len(v) < n
                else None
            )
        )
    if "maxLength" in schema:
        m = schema["maxLength"]
        parts.append(
            lambda v, at: (
                (at, f"must have at most {m} characters")
                if isinstance(v, str) and len(v) > m
                else None
            )
        )
    if "pattern" in schema:
        pattern = re.compile(schema["pattern"])
        text = schema["pattern"]
        parts.append(
            lambda v, at: (
                (at, f"{v!r} does not match the pattern {text}")
                if isinstance(v, str) and not pattern.search(v)
                else None
            )
        )


def _compile_object(schema: dict[str, Any], path: str, parts: list[Checker]) -> None:
    properties: dict[str, Any] = schema.get("properties", {})
    required: list[str] = list(schema.get("required", []))
    closed = schema.get("additionalProperties", True) is False
    if not (properties or required or closed):
        return
    fields = {name: compile_schema(sub, f"{path}.{name}") for name, sub in properties.items()}
    known = ", ".join(fields) or "none"

    def check_object(value: Any, at: str) -> ArgumentProblem | None:
        if not isinstance(value, dict):
            return None
        for name in required:
            if name not in value:
                return _join(at, name), "is required"
        for name, item in value.items():
            sub = fields.get(name)
            if sub is None:
                if closed:
                    return _join(at, name), f"is not a known field (known: {known})"
                continue
            problem = sub(item, _join(at, name))
            if problem is not None:
                return problem
        return None

    parts.append(check_object)


def _compile_array(schema: dict[str, Any], path: str, parts: list[Checker]) -> None:
    if "minItems" in schema:
        n = schema["minItems"]
        parts.append(
            lambda v, at: (
                (at, f"must have at least {n} items")
                if isinstance(v, list) and len(v) < n
                else None
            )
        )
    if "maxItems" in schema:
        m = schema["maxItems"]
        parts.append(
            lambda v, at: (
                (at, f"must have at most {m} items") if isinstance(v, list) and len(v) > m else None
            )
        )
    if "items" in schema:
        item_check = compile_schema(schema["items"], f"{path}[]")

        def check_items(value: Any, at: str) -> ArgumentProblem | None:
            if not isinstance(value, list):
                return None
            for i, item in enumerate(value):
                problem = item_check(item, f"{at}[{i}]")
                if problem is not None:
                    return problem
            return None

        parts.append(check_items)


def _join(at: str, name: str) -> str:
    return f"{at}.{name}" if at else name
