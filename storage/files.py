"""Atomic file writes: a reader sees the old file, the whole new file, or nothing."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from contract import InvalidInputError

TEMP_MARK = ".tmp-"


def path_inside(root: Path, *parts: str) -> Path:
    """``root / parts`` with ``..`` and symbolic links resolved; ``InvalidInputError``
    when that leaves ``root`` (a part that is absolute, climbs out, or links outside).
    Ids are checked for their shape where they enter; this holds whatever reaches it."""
    base = Path(root).resolve()
    path = base.joinpath(*parts).resolve()
    if not path.is_relative_to(base):
        raise InvalidInputError(
            "path", f"{'/'.join(parts)!r} leads outside {root} (to {path}): refused"
        )
    return path


def temporary_name(path: Path) -> Path:
    """A hidden, unique sibling of ``path`` to write before renaming."""
    return path.with_name(f".{path.name}{TEMP_MARK}{os.getpid()}-{secrets.token_hex(4)}")


def is_temporary(path: Path) -> bool:
    """Whether ``path`` is the temporary name of a file being written."""
    return path.name.startswith(".") and TEMP_MARK in path.name


def write_atomically(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write ``path`` through ``write`` under a temporary name in the same folder, sync
    it, then rename it into place: a crash leaves at most a temporary file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = temporary_name(path)
    try:
        with temp.open("wb") as sink:
            write(sink)
            sink.flush()
            os.fsync(sink.fileno())
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)
    _sync_folder(path.parent)


def _sync_folder(folder: Path) -> None:
    """Make the rename durable (skipped where a folder cannot be opened, e.g. Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
