"""Where files of the data path live: a local folder, or any fsspec URL (object storage).

A ``Location`` is a local ``Path`` or a URL with a scheme (``s3://bucket/prefix``): a
shard written by a Ray worker on another machine lands where the catalog's machine reads
it. fsspec resolves the URL to its filesystem (s3fs for ``s3://``); credentials and
endpoints come from that filesystem's own environment (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``), never from code or settings files.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from contract import InvalidInputError
from storage.files import path_inside, write_atomically

if TYPE_CHECKING:  # fsspec is imported when a URL is used, not by every command's start
    from fsspec import AbstractFileSystem

Location = Path | str
"""A local path, or a URL (``scheme://...``)."""

URL = re.compile(r"^[a-z][a-z0-9+.-]*://\S+$")
_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def is_url(location: Location) -> bool:
    """Whether ``location`` names a place by URL rather than a local path."""
    return isinstance(location, str) and URL.match(location) is not None


def check_url(value: str) -> str:
    """``value`` when it is a URL of a filesystem fsspec knows; else an error naming the
    schemes it knows (a ``file://`` URL is a local folder: give the path instead)."""
    import fsspec

    match = URL.match(value)
    scheme = value.split("://", 1)[0] if match else ""
    known = sorted(set(fsspec.available_protocols()) - {"file", "local"})
    if not match or scheme not in known:
        raise InvalidInputError("url", f"{value!r} is not a URL of a known filesystem", known)
    return value.rstrip("/")


def filesystem(location: Location) -> tuple[AbstractFileSystem, str]:
    """The filesystem of ``location`` and the path it has there."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(str(location))
    return fs, path


def join(root: Location, *parts: str) -> Location:
    """``root`` and ``parts``: a path that stays inside a local ``root``; below a URL,
    parts of plain names only (letters, digits, ``.``, ``_``, ``-``; no ``..``)."""
    if not is_url(root):
        return path_inside(Path(root), *parts)
    for part in parts:
        if not _PART.match(part) or part.strip(".") == "":
            raise InvalidInputError("path", f"{part!r} is not a plain name below {root}")
    return "/".join([str(root).rstrip("/"), *parts])


def name_of(location: Location) -> str:
    """The last component of ``location``."""
    return Path(location).name if not is_url(location) else str(location).rsplit("/", 1)[-1]


def parent_of(location: Location) -> Location:
    """The folder ``location`` is in."""
    return Path(location).parent if not is_url(location) else str(location).rsplit("/", 1)[0]


def write_whole(location: Location, write: Callable[[BinaryIO], object]) -> None:
    """Write ``location`` through ``write`` so that a reader sees all of it or nothing: a
    local file is written under a temporary name and renamed; at a URL, one object is
    uploaded, which appears once the upload completed."""
    if is_url(location):
        fs, key = filesystem(location)
        with fs.open(key, "wb") as sink:
            write(sink)
    else:
        write_atomically(Path(location), write)


def read_whole(location: Location) -> bytes:
    """The bytes at ``location`` (FileNotFoundError when there are none)."""
    if is_url(location):
        fs, key = filesystem(location)
        with fs.open(key, "rb") as source:
            data: bytes = source.read()
        return data
    return Path(location).read_bytes()
