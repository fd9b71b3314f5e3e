"""Plausible wrong values: what a policy that grounds an argument badly would send.

Used by the scripted policy's ``wrong_argument`` fault and by the tests that check each
verifier rejects a wrong argument.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import JsonValue

_ID = re.compile(r"^([a-z_]+)-(\d+)$")
_TIME = re.compile(r"^(\d{2}):(\d{2})$")
_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")

FREE_ARGUMENTS = frozenset({"query", "limit", "max_results"})
"""Free-text or paging inputs of searches: verifiers do not pin them, so they are not
perturbed as 'wrong arguments'."""


def perturb(value: JsonValue, schema: dict[str, Any] | None = None) -> JsonValue:
    """A different value of the same shape (another id, hour, date, enum member, ...)."""
    schema = schema or {}
    enum = schema.get("enum")
    if enum and value in enum and len(enum) > 1:
        return enum[(enum.index(value) + 1) % len(enum)]  # type: ignore[no-any-return]
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        maximum = schema.get("maximum")
        return value - 1 if maximum is not None and value >= maximum else value + 1
    if isinstance(value, float):
        return round(value + 1.5, 2)
    if isinstance(value, str):
        return _perturb_text(value)
    if isinstance(value, list):
        if len(value) > 1:
            return value[:-1]
        return [perturb(value[0], schema.get("items"))] if value else ["unexpected"]
    if isinstance(value, dict) and value:
        key = next(iter(value))
        sub = schema.get("properties", {}).get(key)
        return {**value, key: perturb(value[key], sub)}
    return "unexpected"


def _perturb_text(value: str) -> str:
    if m := _ID.match(value):
        return f"{m.group(1)}-{int(m.group(2)) + 1}"
    if m := _TIME.match(value):
        return f"{(int(m.group(1)) + 1) % 24:02d}:{m.group(2)}"
    if m := _DATE.match(value):
        day = int(m.group(3))
        return f"{m.group(1)}-{m.group(2)}-{day + 1 if day < 28 else day - 1:02d}"
    return f"wrong {value[::-1]}"
