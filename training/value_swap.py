"""Counterfactual values for SFT rows: every value a row's tool calls copy from what the
model read is swapped, everywhere in the row, for another value of its kind.

A model trained from scratch on a round's rows sees each template's few dozen parameter
draws, each value a handful of times. Writing the values it saw most is then a better bet
than copying, and it never learns to copy, which is what every new draw needs (measured:
README, "The nano base"). In a swapped row the values are unlike any it has seen, so only
copying predicts them; the row stays as consistent as the original, because each value is
replaced by the same new one in the goal, in the tool results and in the arguments.

A *copied value* is a string or integer in a tool call's arguments that appears, as a
whole token, in the user turns or tool results before that call. Its replacement has the
same kind:

- an entity id (``c-12``): the same prefix with a number that prefix does not use in the
  row;
- an integer: another with as many digits, absent from the row;
- a member of the argument's enumeration (``running``): another member absent from the
  row;
- any other text: a copied text value of another row with the same shape (as many words,
  an ``@`` or not, a capital first letter or not), absent from the row (``ValuePool``).

Never swapped: dates and times (the plan derives ``2026-03-27`` from "Friday, March 27"
and the end of an event from its start, which a swap would break), booleans, text of one
character, and values the row does not show before the call that uses them.
"""

from __future__ import annotations

import copy
import json
import random
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agents.policies.chat_format import json_value

ENTITY = re.compile(r"^([a-z]+)-(\d+)$")
DATE_OR_TIME = re.compile(r"^(\d{4}-\d{2}-\d{2}|\d{1,2}:\d{2})$")
MAX_TRIES = 50

Row = Mapping[str, Any]
Value = str | int
Shape = tuple[int, bool, bool]


def occurrences(text: str) -> re.Pattern[str]:
    """Where ``text`` occurs as a whole token: not inside a longer word, number, id, date
    or time (``14`` is not found in ``c-14``, ``2026-03-14``, ``14:00`` or ``140``)."""
    if text.isdigit():
        return re.compile(rf"(?<![\w.])(?<!\w-)(?<!\d:){re.escape(text)}(?!\w|[-:.]\d)")
    return re.compile(rf"(?<![\w-]){re.escape(text)}(?![\w]|-\d)")


def copied_values(row: Row) -> list[Value]:
    """The values ``row``'s tool calls copy (module docstring), in order of first use."""
    read = ""
    found: dict[str, Value] = {}
    for message in row["messages"]:
        if message.get("role") in ("user", "tool"):
            read += "\n" + (message.get("content") or "")
        elif message.get("role") == "assistant":
            for call in message.get("tool_calls") or ():
                for value in _leaves(_arguments(call)):
                    text = str(value)
                    if text in found or not _swappable(value):
                        continue
                    if occurrences(text).search(read):
                        found[text] = value
    return list(found.values())


@dataclass(frozen=True)
class ValuePool:
    """Text values to swap in, by shape: the copied text values of a set of rows."""

    by_shape: Mapping[Shape, tuple[str, ...]]

    @classmethod
    def of(cls, rows: Iterable[Row]) -> ValuePool:
        shapes: dict[Shape, set[str]] = {}
        for row in rows:
            for value in copied_values(row):
                if isinstance(value, str) and not ENTITY.match(value) and _plain(value):
                    shapes.setdefault(_shape(value), set()).add(value)
        return cls({shape: tuple(sorted(values)) for shape, values in shapes.items()})

    def candidates(self, value: str) -> tuple[str, ...]:
        return self.by_shape.get(_shape(value), ())


def swap_values(row: Row, rng: random.Random, pool: ValuePool) -> dict[str, Any]:
    """A copy of ``row`` whose copied values are replaced consistently (module docstring);
    a value with no replacement of its kind stays. ``row`` is not changed."""
    values = copied_values(row)
    text = json.dumps(row["messages"], ensure_ascii=False)
    enums = _enumerations(row.get("tools") or ())
    mapping: dict[str, str] = {}
    for value in values:
        new = _replacement(value, text, enums, pool, rng, set(mapping.values()))
        if new is not None:
            mapping[str(value)] = new
    swapped = copy.deepcopy(dict(row))
    if mapping:
        replace = _Replacer(mapping)
        for message in swapped["messages"]:
            if message.get("role") == "system":
                continue
            if message.get("content"):
                message["content"] = replace.text(message["content"])
            for call in message.get("tool_calls") or ():
                function = call.get("function") or call
                arguments = _arguments(call)
                if arguments is not None:
                    function["arguments"] = replace.value(arguments)
    return swapped


def swapped_passes(
    rows: Sequence[Row], passes: int, share: float, seed: int
) -> Iterator[dict[str, Any]]:
    """``passes`` passes over ``rows``, each row swapped with probability ``share`` (anew
    in every pass, from ``seed``), as plain dicts."""
    rng = random.Random(seed)
    pool = ValuePool.of(rows)
    for _ in range(passes):
        for row in rows:
            yield swap_values(row, rng, pool) if rng.random() < share else dict(row)


def _literal(new: str) -> Callable[[re.Match[str]], str]:
    """A substitution that inserts ``new`` as it is (a string replacement would read its
    backslashes as group references)."""
    return lambda _match: new


class _Replacer:
    def __init__(self, mapping: Mapping[str, str]) -> None:
        self.mapping = mapping
        longest_first = sorted(mapping, key=len, reverse=True)
        self.patterns = [(occurrences(old), mapping[old]) for old in longest_first]

    def text(self, text: str) -> str:
        for pattern, new in self.patterns:
            text = pattern.sub(_literal(new), text)
        return text

    def value(self, value: Any) -> Any:
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int):
            new = self.mapping.get(str(value))
            return int(new) if new is not None and new.isdigit() else value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.value(item) for item in value]
        if isinstance(value, dict):
            return {key: self.value(item) for key, item in value.items()}
        return value


def _replacement(
    value: Value,
    text: str,
    enums: Mapping[str, tuple[str, ...]],
    pool: ValuePool,
    rng: random.Random,
    taken: set[str],
) -> str | None:
    old = str(value)

    def free(candidate: str) -> bool:
        if candidate == old or candidate in taken:
            return False
        return not occurrences(candidate).search(text)

    if isinstance(value, int):
        digits = len(old)
        low, high = (1, 9) if digits == 1 else (10 ** (digits - 1), 10**digits - 1)
        options: Iterable[str] = (str(rng.randint(low, high)) for _ in range(MAX_TRIES))
    elif match := ENTITY.match(old):
        prefix = match.group(1)
        options = (f"{prefix}-{rng.randint(1, 99)}" for _ in range(MAX_TRIES))
    elif old in enums:
        members = [m for m in enums[old] if free(m)]
        return rng.choice(members) if members else None
    else:
        candidates = pool.candidates(old)
        if not candidates:
            return None
        options = (rng.choice(candidates) for _ in range(MAX_TRIES))
    return next((option for option in options if free(option)), None)


def _swappable(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return False
    text = str(value)
    if isinstance(value, int):
        return value > 0
    return len(text) >= 2 and not DATE_OR_TIME.match(text) and _plain(text)


def _plain(text: str) -> bool:
    """Text that can be written into a JSON string unchanged (no quote, backslash or
    control character), so a tool result's JSON stays valid after a swap."""
    return not any(c in text for c in '"\\') and text.isprintable()


def _shape(text: str) -> Shape:
    return (len(text.split()), "@" in text, text[:1].isupper())


def _leaves(value: Any) -> Iterator[Value]:
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)


def _arguments(call: Mapping[str, Any]) -> Any:
    function = call.get("function") or call
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            return json_value(arguments)
        except ValueError:
            return None
    return arguments


def _enumerations(tools: Iterable[Mapping[str, Any]]) -> dict[str, tuple[str, ...]]:
    """Each enumeration member of the tools' parameters, with its enumeration."""
    members: dict[str, tuple[str, ...]] = {}
    for tool in tools:
        function = tool.get("function") or tool
        properties = (function.get("parameters") or {}).get("properties") or {}
        for schema in properties.values():
            if isinstance(schema, Mapping) and schema.get("enum"):
                enum = tuple(str(member) for member in schema["enum"])
                for member in enum:
                    members[member] = enum
    return members
