"""Atomic file writes: a reader sees the old file, the whole new file, or nothing."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

TEMP_MARK = ".tmp-"


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
