"""The catalog file's connections: row groups of the catalog's size, one DuckDB instance
per mode in a process with each file attached while operations use it, and nothing held
between operations."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import duckdb
import pytest

from storage import CatalogError, connection
from storage.connection import ROW_GROUP_SIZE, CatalogFile


@pytest.fixture
def file(tmp_path: Path) -> CatalogFile:
    return CatalogFile.open(tmp_path / "catalog.duckdb")


def _row_groups(file: CatalogFile, table: str) -> int:
    with file.read() as con:
        row = con.execute(
            "SELECT count(DISTINCT row_group_id) FROM pragma_storage_info(?)", [table]
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_what_the_catalog_writes_has_row_groups_of_its_size(file: CatalogFile) -> None:
    rows = 3 * ROW_GROUP_SIZE + 5
    with file.write() as con:
        con.execute(
            "CREATE TABLE scratch AS SELECT range AS i, repeat('x', 40) AS s FROM range(?)",
            [rows],
        )
    assert _row_groups(file, "scratch") == 4
    for _ in range(3):
        with file.write() as con:
            con.execute("INSERT INTO scratch SELECT range, 'y' FROM range(?)", [ROW_GROUP_SIZE])
    assert _row_groups(file, "scratch") == 7
    with file.read() as con:
        assert con.execute("SELECT count(*) FROM scratch").fetchone() == (
            rows + 3 * ROW_GROUP_SIZE,
        )


def test_a_file_written_with_duckdbs_default_row_groups_takes_appends(tmp_path: Path) -> None:
    path = tmp_path / "catalog.duckdb"
    CatalogFile.open(path)
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE scratch AS SELECT range AS i FROM range(?)", [ROW_GROUP_SIZE])
    file = CatalogFile.open(path)
    with file.write() as con:
        con.execute("INSERT INTO scratch SELECT range FROM range(?)", [2 * ROW_GROUP_SIZE])
    with file.read() as con:
        assert con.execute("SELECT count(*), count(DISTINCT i) FROM scratch").fetchone() == (
            3 * ROW_GROUP_SIZE,
            2 * ROW_GROUP_SIZE,
        )


def test_operations_of_several_threads_at_once_all_take_effect(file: CatalogFile) -> None:
    with file.write() as con:
        con.execute("CREATE TABLE scratch (thread INTEGER, n INTEGER)")
    errors: list[BaseException] = []
    started = threading.Barrier(4)

    def work(thread: int) -> None:
        try:
            started.wait()
            for n in range(15):
                with file.write() as con:
                    con.execute("INSERT INTO scratch VALUES (?, ?)", [thread, n])
                with file.read() as con:
                    con.execute("SELECT count(*) FROM scratch").fetchall()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with file.read() as con:
        assert con.execute(
            "SELECT count(*), count(DISTINCT (thread, n)) FROM scratch"
        ).fetchone() == (
            60,
            60,
        )


def test_nothing_holds_the_file_between_operations(file: CatalogFile) -> None:
    with file.write() as con:
        con.execute("CREATE TABLE scratch AS SELECT 1 AS i")
    with duckdb.connect(str(file.path)) as con:
        assert con.execute("SELECT i FROM scratch").fetchone() == (1,)
    with file.read() as con:
        assert con.execute("SELECT i FROM scratch").fetchone() == (1,)


def test_reading_while_this_process_writes_is_refused_by_name(file: CatalogFile) -> None:
    with file.write() as con:
        con.execute("CREATE TABLE scratch AS SELECT 1 AS i")
        with pytest.raises(CatalogError, match="both read-only and writable"):
            CatalogFile.open(file.path, read_only=True, lock_wait_s=0.1)
    reader = CatalogFile.open(file.path, read_only=True)
    with reader.read() as con:
        assert con.execute("SELECT i FROM scratch").fetchone() == (1,)
    with pytest.raises(CatalogError, match="opened read-only"), reader.write():
        pass


def test_a_path_with_a_quote_is_attached_as_given(tmp_path: Path) -> None:
    file = CatalogFile.open(tmp_path / "it's here" / "catalog.duckdb")
    with file.write() as con:
        con.execute("CREATE TABLE scratch AS SELECT 1 AS i")
    assert (tmp_path / "it's here" / "catalog.duckdb").exists()
    with file.read() as con:
        assert con.execute("SELECT i FROM scratch").fetchone() == (1,)


def _attached(con: duckdb.DuckDBPyConnection) -> set[str]:
    rows = con.execute("SELECT path FROM duckdb_databases() WHERE path IS NOT NULL").fetchall()
    return {os.path.realpath(row[0]) for row in rows}


def test_a_nested_operation_shares_the_file_and_the_last_to_end_lets_it_go(
    file: CatalogFile,
) -> None:
    with file.write() as con:
        con.execute("CREATE TABLE scratch AS SELECT 1 AS i")
    with file.read() as outer:
        with file.read() as inner:
            assert inner.execute("SELECT i FROM scratch").fetchone() == (1,)
        assert outer.execute("SELECT i FROM scratch").fetchone() == (1,)
        with pytest.raises(duckdb.Error):  # still attached: the file is this process's
            duckdb.connect(str(file.path)).execute("CREATE TABLE other (i INTEGER)")
    with duckdb.connect(str(file.path)) as con:
        con.execute("CREATE TABLE other (i INTEGER)")
    with file.read() as con:
        assert con.execute("SELECT count(*) FROM other").fetchone() == (0,)


def test_two_catalog_files_in_one_process_keep_their_own_tables(tmp_path: Path) -> None:
    first = CatalogFile.open(tmp_path / "a" / "catalog.duckdb")
    second = CatalogFile.open(tmp_path / "b" / "catalog.duckdb")
    with first.write() as a, second.write() as b:
        a.execute("CREATE TABLE scratch AS SELECT 'a' AS s")
        b.execute("CREATE TABLE scratch AS SELECT 'b' AS s")
        assert _attached(a) == {os.path.realpath(first.path), os.path.realpath(second.path)}
    with first.read() as a:
        assert a.execute("SELECT s FROM scratch").fetchall() == [("a",)]
        assert _attached(a) == {os.path.realpath(first.path)}  # the other was let go
    with second.read() as b:
        assert b.execute("SELECT s FROM scratch").fetchall() == [("b",)]


_FORKING = """
import os, sys
from pathlib import Path
from storage.connection import CatalogFile

file = CatalogFile.open(Path(sys.argv[1]))
with file.write() as con:
    con.execute("CREATE TABLE scratch (who VARCHAR)")
    con.execute("INSERT INTO scratch VALUES ('parent')")
for child_writes in (False, True):
    pid = os.fork()
    if pid == 0:  # exits as a program does, through the interpreter's own shutdown
        if child_writes:
            with file.write() as con:
                con.execute("INSERT INTO scratch VALUES ('child')")
        sys.exit(0)
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status))
with file.read() as con:
    print(sorted(row[0] for row in con.execute("SELECT who FROM scratch").fetchall()))
"""


def test_a_forked_child_uses_the_catalog_and_exits_cleanly(tmp_path: Path) -> None:
    """A child forked after its parent used the catalog (multiprocessing's default on
    Linux) opens it on its own, and its exit does not crash on the parent's instance."""
    done = subprocess.run(
        [sys.executable, "-c", _FORKING, str(tmp_path / "catalog.duckdb")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == ["0", "0", "['child', 'parent']"]


def _memory_limit(con: duckdb.DuckDBPyConnection) -> str:
    row = con.execute("SELECT current_setting('memory_limit')").fetchone()
    assert row is not None
    return str(row[0])


def test_short_operations_share_an_instance_and_a_long_one_closes_it(
    file: CatalogFile, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A global setting made in one operation shows whether the next runs in the same
    DuckDB instance: short ones do; a long one's instance is closed after it."""
    monkeypatch.setattr(connection, "LONG_OPERATION_S", 3600.0)
    with file.read() as con:
        default = _memory_limit(con)
        con.execute("SET memory_limit = '123MB'")
    with file.read() as con:
        assert _memory_limit(con) != default  # the same instance
    monkeypatch.setattr(connection, "LONG_OPERATION_S", 0.0)
    with file.read() as con:
        assert _memory_limit(con) != default
    with file.read() as con:
        assert _memory_limit(con) == default  # a new instance
    with file.read() as outer:
        outer.execute("SET memory_limit = '123MB'")
        with file.read():
            pass  # long, but another operation still uses the instance
        assert _memory_limit(outer) != default
