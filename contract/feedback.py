"""Feedback: what the backend answers to an action."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, JsonValue

from contract.base import Record
from contract.enums import ErrorKind


class ExecutionError(Record):
    """A typed error: the episode goes on, the policy sees it, curation can attribute it."""

    kind: ErrorKind
    message: str
    field: str | None = Field(default=None, description="the argument at fault, if one is")


class StateChange(Record):
    """An observable change made by an action: which entity, in which collection, how."""

    collection: str
    entity_id: str
    op: Literal["created", "updated", "deleted"]


class Feedback(Record):
    """The result of an action, or the state change it made, or a typed error.

    ``latency_ms`` is wall-clock time on real backends; the sandbox reports a simulated,
    seeded latency so that the same seed gives the same records.
    """

    result: JsonValue = None
    state_changes: tuple[StateChange, ...] = ()
    error: ExecutionError | None = None
    latency_ms: float = 0.0
    cost: float = Field(default=0.0, description="execution cost of the call, in USD")

    @property
    def ok(self) -> bool:
        return self.error is None

    @classmethod
    def failure(
        cls, kind: ErrorKind, message: str, field: str | None = None, latency_ms: float = 0.0
    ) -> Feedback:
        return cls(
            error=ExecutionError(kind=kind, message=message, field=field), latency_ms=latency_ms
        )
