"""One connection helper for every store in the catalog file.

DuckDB lets one process at a time hold a file, so a store holds a connection only for the
length of one operation: ``read()`` for a query, ``write()`` for one transaction that is
committed whole or rolled back whole. Opening checks the schema version and applies the
migrations the file lacks.

The file is attached (``ATTACH``) to an in-memory DuckDB instance that lives as long as
the process (one per mode: read-only, writable), while operations use it: the first
attaches it, concurrent ones in the process share it, and the last detaches it, which
checkpoints it and lets go of its lock. Attaching is what lets the catalog choose its row
group size; keeping the instance is what makes an operation cheap (a new DuckDB instance
costs about 12 ms of CPU, attaching a catalog about 3 ms: a 2,000-task round makes over
a hundred operations).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
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
        started = time.monotonic()
        try:
            yield con
        finally:
            con.close()
            _release(self.path, self.read_only, time.monotonic() - started)

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
    """A connection to the DuckDB file, waiting up to ``wait_s`` while another process (or
    another mode in this one) holds it; DuckDB's errors become messages for a person."""
    start = time.monotonic()
    deadline = start + wait_s
    pause = 0.02
    said = False
    while True:
        try:
            return _connect(path, read_only)
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


LONG_OPERATION_S = 0.25
"""An operation at least this long closes its instance when no other one uses it, which
hands what DuckDB's allocator still holds for it back to the system at once (about 190 MB
after reading 200,000 trajectory rows, otherwise given back over about a second); a new
instance, about 12 ms of CPU, is small beside such an operation. Shorter ones keep it.
Measured with `flywheel bench curation` (200,000 trajectories): with every instance kept,
curate → export peaked at 2.72-2.84 GB against 2.33-2.36 GB, since the export's workers
read their chunks (0.5-0.7 s each) one after another; with 0.05 s the curation's
partitions (reads of about 75 ms, 100 of them) lost most of the gain; with 0.25 s,
2.41-2.52 GB. jemalloc told to return freed pages at once (``DUCKDB_JE_MALLOC_CONF`` with
no decay) kept the peak at 2.35 GB but took 67.5 s against about 54."""
_LOCK = threading.Lock()
"""Guards the instances and the count of operations using each attached file."""
_KEEPERS: dict[bool, duckdb.DuckDBPyConnection] = {}
"""A connection to this process's instance for each mode (read-only or not): it keeps the
instance alive, and attaches and detaches the files."""
_USERS: dict[tuple[bool, str], int] = {}
"""Operations of this process using each attached file, by mode and alias."""
_INHERITED: list[duckdb.DuckDBPyConnection] = []
"""A forked child's copies of instances that were in use in its parent when it forked:
never used, never closed (closing an instance whose threads stayed in the parent crashes
the child)."""


def _connect(path: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
    """A connection using ``path`` in the instance for the mode, which attaches it with
    ``ROW_GROUP_SIZE`` unless an operation of this process uses it already (DuckDB's error
    when another process holds it)."""
    alias = _alias(path)
    with _LOCK:
        keeper = _KEEPERS.get(read_only)
        if keeper is None:
            mode = "read-only" if read_only else "writable"
            keeper = _KEEPERS[read_only] = duckdb.connect(f":memory:flywheel-{mode}")
        if not _USERS.get((read_only, alias)):
            options = f"ROW_GROUP_SIZE {ROW_GROUP_SIZE}" + (", READ_ONLY" if read_only else "")
            literal = str(path).replace("'", "''")
            keeper.execute(f"ATTACH '{literal}' AS {alias} ({options})")
        _USERS[read_only, alias] = _USERS.get((read_only, alias), 0) + 1
        con = keeper.cursor()
    try:
        con.execute(f"USE {alias}")
    except BaseException:
        con.close()
        _release(path, read_only, 0.0)
        raise
    return con


def _release(path: Path, read_only: bool, lasted_s: float) -> None:
    """One operation on ``path`` is over (its connection closed); the last one detaches
    the file, which checkpoints it and lets go of its lock, and after a long operation
    (``LONG_OPERATION_S``) the last one of the mode closes its instance."""
    alias = _alias(path)
    with _LOCK:
        _USERS[read_only, alias] -= 1
        if not _USERS[read_only, alias]:
            del _USERS[read_only, alias]
            _KEEPERS[read_only].execute(f"DETACH {alias}")
        if lasted_s >= LONG_OPERATION_S and not _in_use(read_only):
            _KEEPERS.pop(read_only).close()


def _in_use(read_only: bool) -> bool:
    """Whether an operation of the mode is under way."""
    return any(mode == read_only for mode, _ in _USERS)


def _alias(path: Path) -> str:
    """The name ``path`` is attached as: one per file, whatever path names it."""
    return "catalog_" + hashlib.sha256(os.path.abspath(path).encode()).hexdigest()[:32]


def _before_fork() -> None:
    """Close the instances no operation uses, so that a forked child inherits none (one it
    inherited would crash it when closed, at its exit at the latest); hold the lock
    through the fork."""
    _LOCK.acquire()
    for read_only in [mode for mode in _KEEPERS if not _in_use(mode)]:
        _KEEPERS.pop(read_only).close()


def _after_fork_in_child() -> None:
    """A forked child makes its own instances: those it inherited, and the operations that
    used them, are its parent's."""
    _INHERITED.extend(_KEEPERS.values())
    _KEEPERS.clear()
    _USERS.clear()
    _LOCK.release()


os.register_at_fork(
    before=_before_fork, after_in_parent=_LOCK.release, after_in_child=_after_fork_in_child
)


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
