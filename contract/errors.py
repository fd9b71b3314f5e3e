"""The one error tree of the project.

Expected outcomes (a failed episode, a tool that reports an error) are data, not
exceptions. Exceptions are for bad input from a person or a program, and for faults
that no record can describe.
"""

from __future__ import annotations

from collections.abc import Iterable


class FlywheelError(Exception):
    """Root of every error this project raises on purpose."""


class InvalidInputError(FlywheelError, ValueError):
    """Input that names a field or value we do not accept.

    The message always names the field and, where they are few, the allowed values.
    """

    def __init__(self, field: str, problem: str, allowed: Iterable[object] | None = None) -> None:
        self.field = field
        self.problem = problem
        self.allowed = tuple(allowed) if allowed is not None else None
        message = f"{field}: {problem}"
        if self.allowed is not None:
            message += f" (allowed: {', '.join(map(str, self.allowed))})"
        super().__init__(message)


class SchemaError(FlywheelError):
    """A JSON Schema that uses a keyword or shape our checker does not support."""
