"""One connection helper for every store in the catalog file.

DuckDB lets one process at a time hold a file, so a store holds a connection only for the
length of one operation: ``read()`` for a query, ``write()`` for one transaction that is
committed whole or rolled back whole. Opening checks the schema version and applies the
migrations the file lacks.

The file is attached (``ATTACH``) to an in-memory DuckDB instance named after it, which
concurrent operations in one process share as ``duckdb.connect(path)`` would share its
instance; attaching is what lets the catalog choose its row group size.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from storage.errors import CatalogError
from storage.migrations import SCHEMA_VERSION, migrate, schema_version

DEFAULT_LOCK_WAIT_S = 120.0
"""How long an operation waits for a catalog that another process is using: DuckDB lets
one process at a time hold the file, and another round's stage may hold it for a long
transaction (storing a large round's curation). Waited with backoff, then refused."""
_CHECKPOINT = "1MB"
"""A commit larger than this checkpoints into the file instead of writing the WAL first
(one write of the data, not two; the close would checkpoint)."""
ROW_GROUP_SIZE = 4_096
"""Rows per row group of what this code writes (DuckDB's default: 122,880). A checkpoint
(each writable connection's close makes one) rewrites a table's last, partial row group
whole, and with groups of 8,192 every third filled group cost a write +0.12 GB: storing a
round's real task rows 500 at a time peaked +0.12 GB at 25,000, 49,500, 74,000 and 98,500
rows with 8,192, +0.077 GB and growing with 122,880, at most +0.051 GB with 4,096 (and
+0.05 with 2,048, whose metadata grew faster). `flywheel bench curation` (200,000
trajectories) took the same CPU with 4,096 as with 8,192 (91.2 s against 93.0 s)."""
_ATTACHED_AS = "catalog"
_SAY_WAITING_AFTER_S = 3.0
_LOCKED = "Could not set lock"
_OPEN_HERE = ("Unique file handle conflict", "different configuration than existing connections")
"""The file is open in this process in the other mode, or by a connection the catalog did
not make: waited for like a lock, since another operation may let go of it soon."""
_LOG = logging.getLogger(__name__)


class CatalogFile:
    """Connections to one DuckDB catalog file, one operation at a time. Build it with
    ``CatalogFile.open``."""

    def __init__(self, path: Path, *, read_only: bool, lock_wait_s: float) -> None:
        self.path = path
        self.read_only = read_only
        self.lock_wait_s = lock_wait_s
        self._closed = False

    @classmethod
    def open(
        cls, path: Path, *, read_only: bool = False, lock_wait_s: float = DEFAULT_LOCK_WAIT_S
    ) -> CatalogFile:
        """The catalog file at ``path``, created and upgraded unless ``read_only``.

        Raises CatalogError for a missing file (read-only), an unwritable folder, a file
        that is not a catalog, a schema newer than this code, or a file that another
        process holds for longer than ``lock_wait_s`` (it holds it for one operation).
        """
        path = Path(path)
        if read_only and not path.exists():
            raise CatalogError(f"no catalog at {path}: run a round first")
        if not read_only:
            _ensure_writable_folder(path.parent)
        file = cls(path, read_only=read_only, lock_wait_s=lock_wait_s)
        file._upgrade()
        return file

    def _upgrade(self) -> None:
        """Check the schema version and apply the migrations this file lacks."""
        with self.read() as con:
            version = schema_version(con)
            if version is None:
                raise CatalogError(
                    f"{self.path} is a DuckDB database but not a flywheel catalog "
                    "(it has no meta table)"
                )
            if version > SCHEMA_VERSION:
                raise CatalogError(
                    f"catalog schema version {version} is newer than this code's "
                    f"{SCHEMA_VERSION}: upgrade the code"
                )
            if version < SCHEMA_VERSION:
                if self.read_only:
                    raise CatalogError(
                        f"catalog {self.path} has schema version {version}, older than this "
                        f"code's {SCHEMA_VERSION}: open it once for writing to upgrade it"
                    )
                migrate(con, version)

    def close(self) -> None:
        """Refuse further operations (no connection is held between operations)."""
        self._closed = True

    @contextmanager
    def read(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection for one operation, closed after it."""
        if self._closed:
            raise CatalogError(f"catalog {self.path} is closed")
        con = _connect_file(self.path, self.read_only, self.lock_wait_s)
        try:
            yield con
        finally:
            con.close()

    @contextmanager
    def write(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection inside one transaction: committed whole, or rolled back whole.
        Its close frees what DuckDB held for it: a large write is a series of these (one
        connection for many transactions keeps their data in memory until it closes)."""
        if self.read_only:
            raise CatalogError(f"catalog {self.path} was opened read-only")
        with self.read() as con:
            con.execute(f"SET checkpoint_threshold = '{_CHECKPOINT}'")
            with transaction(con):
                yield con


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """A transaction on ``con``: committed whole, or rolled back whole."""
    con.begin()
    try:
        yield
    except BaseException:
        con.rollback()
        raise
    con.commit()


def _connect_file(path: Path, read_only: bool, wait_s: float) -> duckdb.DuckDBPyConnection:
    """Open the DuckDB file, waiting up to ``wait_s`` while another process (or another
    mode in this one) holds it; DuckDB's errors become messages for a person."""
    start = time.monotonic()
    deadline = start + wait_s
    pause = 0.02
    said = False
    while True:
        try:
            return _attach(path, read_only)
        except duckdb.Error as exc:
            busy = any(mark in str(exc) for mark in (_LOCKED, *_OPEN_HERE))
            now = time.monotonic()
            if busy and now < deadline:
                if not said and now - start >= _SAY_WAITING_AFTER_S:
                    said = True
                    pid = _holder_pid(exc)
                    who = f" by PID {pid}" if pid else ""
                    _LOG.warning(
                        "catalog %s is in use%s: waiting for it, up to %g s", path, who, wait_s
                    )
                time.sleep(min(pause, max(deadline - now, 0.0)))
                pause = min(pause * 2, 1.0)
                continue
            raise _open_error(path, exc, wait_s) from exc


def _attach(path: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
    """A connection to ``path``, attached with ``ROW_GROUP_SIZE`` in this process's
    instance for it (one per file and mode, alive while a connection to it is)."""
    mode = "read-only" if read_only else "writable"
    name = hashlib.sha256(os.path.abspath(path).encode()).hexdigest()[:32]
    con = duckdb.connect(f":memory:flywheel-{mode}-{name}")
    try:
        options = f"ROW_GROUP_SIZE {ROW_GROUP_SIZE}" + (", READ_ONLY" if read_only else "")
        literal = str(path).replace("'", "''")
        con.execute(f"ATTACH IF NOT EXISTS '{literal}' AS {_ATTACHED_AS} ({options})")
        con.execute(f"USE {_ATTACHED_AS}")
    except BaseException:
        con.close()
        raise
    return con


def _holder_pid(exc: duckdb.Error) -> str | None:
    """The PID of the process holding the file, as DuckDB's lock error names it."""
    found = re.search(r"PID (\d+)", str(exc))
    return found.group(1) if found else None


def _open_error(path: Path, exc: duckdb.Error, wait_s: float) -> CatalogError:
    text = str(exc)
    if _LOCKED in text:
        pid = _holder_pid(exc)
        who = f" (PID {pid})" if pid else ""
        return CatalogError(
            f"catalog {path} is in use by another process{who}, still after {wait_s:g} s: "
            "wait for it to finish, then retry"
        )
    if any(mark in text for mark in _OPEN_HERE):
        return CatalogError(
            f"catalog {path} is open in this process both read-only and writable, or by "
            "a connection the catalog did not make: use one at a time"
        )
    if "not a valid DuckDB database" in text:
        return CatalogError(
            f"{path} is not a DuckDB catalog (corrupt, or another kind of file): "
            "move it away or choose another state folder"
        )
    return CatalogError(f"cannot open catalog {path}: {text}")


def _ensure_writable_folder(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CatalogError(f"cannot create state folder {folder}: {exc.strerror}") from exc
    if not os.access(folder, os.W_OK | os.X_OK):
        raise CatalogError(
            f"state folder {folder} is not writable: fix its permissions or choose another one"
        )
