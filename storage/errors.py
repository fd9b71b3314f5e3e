"""Storage errors: one branch of the project's error tree, worded for a person at a CLI."""

from __future__ import annotations

from collections.abc import Sequence

from contract import FlywheelError


class CatalogError(FlywheelError):
    """The catalog, a shard or the state folder cannot be used as asked."""


class UnknownIdError(CatalogError):
    """An id that names nothing stored; the message lists some ids that do exist."""

    def __init__(
        self, kind: str, value: str, recent: Sequence[str] | None = None, *, where: str = ""
    ) -> None:
        self.kind = kind
        self.value = value
        self.recent = tuple(recent) if recent is not None else ()
        message = f"unknown {kind} id {value!r}"
        if where:
            message += f" in {where}"
        if recent is not None:
            message += (
                f"; most recent: {', '.join(self.recent)}"
                if self.recent
                else f"; the catalog has no {kind} yet"
            )
        super().__init__(message)
