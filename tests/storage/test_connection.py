"""The catalog file's connections: row groups of the catalog's size, one shared instance
per file and mode in a process, and nothing held between operations."""

from __future__ import annotations

import threading
from pathlib import Path

import duckdb
import pytest

from storage import CatalogError
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
