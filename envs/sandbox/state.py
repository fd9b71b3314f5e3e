"""The sandbox's structured state and the context tool handlers change it through."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from contract import ErrorKind, StateChange
from envs.backend import Row

Collections = dict[str, dict[str, Row]]

WORLD_DATE = "2026-03-14"
"""The sandbox's "today" (a Saturday); relative dates in goals are resolved from it."""
WORLD_TIME = "09:00"


class ToolFailure(Exception):  # noqa: N818 - control flow inside the sandbox, not an error
    """Raised by a handler to return a typed error; the sandbox turns it into feedback."""

    def __init__(
        self,
        message: str,
        field: str | None = None,
        kind: ErrorKind = ErrorKind.PRECONDITION_FAILED,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.kind = kind


class ToolContext:
    """State access for handlers: lookups that fail as typed errors, writes that are logged.

    Handlers replace rows and never mutate a stored row, list or dict in place, so states
    may share rows. The collections are shared (with the world cache and the episode's
    initial state) until written: see :func:`writable`.
    """

    __slots__ = ("_owned", "changes", "collections", "counters")

    def __init__(self, collections: Collections, counters: dict[str, int], owned: set[str]) -> None:
        self.collections = collections
        self.counters = counters
        self.changes: list[StateChange] = []
        self._owned = owned

    def rows(self, collection: str) -> Iterator[Row]:
        return iter(self.collections[collection].values())

    def get(self, collection: str, entity_id: str, field: str) -> Row:
        row = self.collections[collection].get(entity_id)
        if row is None:
            raise ToolFailure(f"{entity_id!r} not found in {collection}", field=field)
        return row

    def new_id(self, prefix: str) -> str:
        self.counters[prefix] = self.counters.get(prefix, 1000) + 1
        return f"{prefix}-{self.counters[prefix]}"

    def insert(self, collection: str, row: Row) -> Row:
        writable(self.collections, self._owned, collection)[row["id"]] = row
        self.changes.append(StateChange(collection=collection, entity_id=row["id"], op="created"))
        return row

    def update(self, collection: str, entity_id: str, **fields: Any) -> Row:
        rows = writable(self.collections, self._owned, collection)
        row = {**rows[entity_id], **fields}
        rows[entity_id] = row
        self.changes.append(StateChange(collection=collection, entity_id=entity_id, op="updated"))
        return row

    def delete(self, collection: str, entity_id: str) -> Row:
        row = writable(self.collections, self._owned, collection).pop(entity_id)
        self.changes.append(StateChange(collection=collection, entity_id=entity_id, op="deleted"))
        return row


def writable(collections: Collections, owned: set[str], name: str) -> dict[str, Row]:
    """``collections[name]`` to write to: copied on its first write (then added to
    ``owned``), since until then it is shared with the world cache and the initial state."""
    rows = collections[name]
    if name not in owned:
        rows = collections[name] = dict(rows)
        owned.add(name)
    return rows
