"""Identifiers checked as the CLI parses them, before anything is opened or started."""

from __future__ import annotations

from collections.abc import Callable

import typer

from contract import IdShape


def checked(shape: IdShape, *words: str) -> Callable[[typer.CallbackParam, str | None], str | None]:
    """A typer callback that passes ``None``, the ``words`` (``latest``) and values of
    ``shape``; anything else is refused naming the option."""

    def check(param: typer.CallbackParam, value: str | None) -> str | None:
        if value is None or value in words:
            return value
        name = param.opts[0] if param.opts and param.opts[0].startswith("-") else param.name
        return shape.check(str(name), value)

    return check
