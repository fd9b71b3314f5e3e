"""Records handed between machines as one JSON-lines file each (a task manifest, a
curated partition): written whole or not at all at a local path or an object-storage
URL, read back validated, a missing or damaged file refused with its location."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from pydantic import BaseModel

from storage.errors import CatalogError
from storage.locations import Location, read_whole, write_whole

JSON_LINES_SUFFIX = ".jsonl"

M = TypeVar("M", bound=BaseModel)


def write_json_lines(lines: Iterable[bytes], location: Location) -> None:
    """Write ``lines`` (each one JSON document, without its newline) at ``location``,
    whole or not at all."""
    data = b"".join(line + b"\n" for line in lines)
    write_whole(location, lambda sink: sink.write(data))


def read_json_lines(
    location: Location, model: type[M], *, what: str, line: str, remedy: str
) -> list[M]:
    """The ``model`` records of the file at ``location``, in order; CatalogError naming
    the file (``what``, and ``remedy`` when it is missing) or the first line that is not
    a ``model`` (``line``: what one should be)."""
    try:
        data = read_whole(location)
    except FileNotFoundError:
        raise CatalogError(f"no {what} at {location}: {remedy}") from None
    records = []
    for number, text in enumerate(data.splitlines(), start=1):
        try:
            records.append(model.model_validate_json(text))
        except ValueError as exc:
            raise CatalogError(
                f"{what} {location}, line {number}, is not {line}: {str(exc).splitlines()[0]}"
            ) from None
    return records
