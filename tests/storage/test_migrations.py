"""Opening a catalog: creation, upgrades, and refusals a person can act on."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from storage import SCHEMA_VERSION, Catalog, CatalogError, migrations
from storage.catalog import TABLES
from storage.migrations import migrate, schema_version
from tests.storage.holders import catalog_held


def _version(path: Path) -> int | None:
    with duckdb.connect(str(path), read_only=True) as con:
        return schema_version(con)


def _snapshot(path: Path) -> tuple[bytes, int, list[str]]:
    return path.read_bytes(), path.stat().st_mtime_ns, sorted(os.listdir(path.parent))


def test_a_new_catalog_has_every_table_at_the_current_version(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "state" / "catalog.duckdb"
    with Catalog.open(path) as catalog:
        assert catalog.stats() == dict.fromkeys(TABLES, 0)
    assert _version(path) == SCHEMA_VERSION
    assert Catalog.open(path, read_only=True).stats() == dict.fromkeys(TABLES, 0)


def test_an_old_catalog_is_upgraded_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "catalog.duckdb"
    with duckdb.connect(str(path)) as con:
        migrate(con, 0, target=1)
        con.execute(
            "INSERT INTO rounds (id, config, status, started_at) "
            "VALUES ('round-old', '{}', 'done', now())"
        )
        con.execute("INSERT INTO dataset_members VALUES ('ds-old', 'traj-1', 'task-1', 1.5, 0)")
    assert _version(path) == 1

    catalog = Catalog.open(path)

    assert _version(path) == SCHEMA_VERSION == 10
    stats = catalog.stats()
    # the tables versions 2 to 10 add
    assert stats["shards"] == stats["dataset_approvals"] == stats["carry_over"] == 0
    assert stats["feedback_reports"] == stats["feedback_tasks"] == stats["models"] == 0
    assert stats["deployments"] == stats["goal_sketches"] == 0
    assert catalog.models.aliases() == {} and catalog.models.alias_history() == []
    old = catalog.rounds.get("round-old")
    assert old is not None and old.status == "done"
    with duckdb.connect(str(path), read_only=True) as con:
        member = con.execute(
            "SELECT weight, decision, human, masked_steps, correction FROM dataset_members"
        ).fetchall()
    assert member == [(1.5, "approve", False, [], None)]  # version 3's columns, defaulted


def test_goal_sketches_without_shingles_are_dropped_to_be_sketched_again(
    tmp_path: Path,
) -> None:
    """A version 9 digest has no shingles to confirm a twin on: the upgrade drops it and
    the tasks are named as lacking a sketch, which the next round's construction keeps."""
    path = tmp_path / "catalog.duckdb"
    with duckdb.connect(str(path)) as con:
        migrate(con, 0, target=9)
        con.execute("INSERT INTO goal_sketches VALUES ('task-1', [1, 2, 3])")

    catalog = Catalog.open(path)

    assert _version(path) == 10 and catalog.stats()["goal_sketches"] == 0
    with duckdb.connect(str(path), read_only=True) as con:
        columns = con.execute("SELECT column_name FROM (DESCRIBE goal_sketches)").fetchall()
    assert columns == [("task_id",), ("digest",), ("shingles",)]


def test_a_failed_upgrade_stops_at_the_last_whole_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "catalog.duckdb"
    with duckdb.connect(str(path)) as con:
        migrate(con, 0, target=1)
    broken = (*migrations.MIGRATIONS[1], "SELECT * FROM no_such_table")
    monkeypatch.setattr(migrations, "MIGRATIONS", (migrations.MIGRATIONS[0], broken))

    with pytest.raises(CatalogError, match=r"schema version 2 failed .*stays at version 1"):
        Catalog.open(path)

    assert _version(path) == 1
    with duckdb.connect(str(path), read_only=True) as con:
        assert not con.execute(
            "SELECT * FROM duckdb_tables() WHERE table_name = 'shards'"
        ).fetchall()


def test_a_newer_catalog_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "catalog.duckdb"
    Catalog.open(path).close()
    with duckdb.connect(str(path)) as con:
        con.execute(
            "UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(SCHEMA_VERSION + 1)]
        )
    before = _snapshot(path)

    for read_only in (False, True):
        with pytest.raises(CatalogError) as refused:
            Catalog.open(path, read_only=read_only)
        assert str(refused.value) == (
            f"catalog schema version {SCHEMA_VERSION + 1} is newer than this code's "
            f"{SCHEMA_VERSION}: upgrade the code"
        )
    assert _snapshot(path) == before


def test_a_corrupt_file_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "catalog.duckdb"
    path.write_bytes(os.urandom(64 * 1024))
    before = _snapshot(path)
    for read_only in (False, True):
        with pytest.raises(CatalogError, match="is not a DuckDB catalog"):
            Catalog.open(path, read_only=read_only)
    assert _snapshot(path) == before


def test_a_duckdb_file_that_is_not_a_catalog_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE somebody_elses (x INTEGER)")
    with pytest.raises(CatalogError, match="not a flywheel catalog"):
        Catalog.open(path)


def test_read_only_open_of_a_missing_catalog_says_to_run_a_round(tmp_path: Path) -> None:
    path = tmp_path / "state" / "catalog.duckdb"
    with pytest.raises(CatalogError, match=r"no catalog at .*catalog\.duckdb: run a round first"):
        Catalog.open(path, read_only=True)
    assert not path.parent.exists()


def test_read_only_open_of_an_old_catalog_asks_for_an_upgrade(tmp_path: Path) -> None:
    path = tmp_path / "catalog.duckdb"
    with duckdb.connect(str(path)) as con:
        migrate(con, 0, target=1)
    with pytest.raises(CatalogError, match="open it once for writing to upgrade it"):
        Catalog.open(path, read_only=True)
    assert _version(path) == 1


def test_a_state_folder_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "state").write_text("not a folder")
    with pytest.raises(CatalogError, match="cannot create state folder"):
        Catalog.open(tmp_path / "state" / "catalog.duckdb")


def test_a_catalog_held_by_another_process_is_refused_with_its_pid(tmp_path: Path) -> None:
    path = tmp_path / "catalog.duckdb"
    Catalog.open(path).close()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys; con = duckdb.connect(sys.argv[1]); print('held', flush=True); "
            "sys.stdin.read()",
            str(path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        with pytest.raises(CatalogError, match=rf"in use by another process \(PID {holder.pid}\)"):
            Catalog.open(path, lock_wait_s=0.3)
        assert time.monotonic() - started >= 0.3
    finally:
        holder.communicate("", timeout=30)
    Catalog.open(path).close()  # free again once the other process ends


def test_a_folder_without_write_permission_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same refusal as above, where the suite runs as root: permissions are faked."""
    monkeypatch.setattr(os, "access", lambda *args, **kwargs: False)
    with pytest.raises(CatalogError, match=r"state folder .* is not writable"):
        Catalog.open(tmp_path / "catalog.duckdb")
    assert not (tmp_path / "catalog.duckdb").exists()


def test_an_operation_waits_for_another_process_to_let_go(tmp_path: Path) -> None:
    path = tmp_path / "catalog.duckdb"
    Catalog.open(path).close()
    with catalog_held(path, release_after_s=0.5), Catalog.open(path, lock_wait_s=20) as catalog:
        assert catalog.stats()["rounds"] == 0


def test_one_process_cannot_mix_read_only_and_writable(tmp_path: Path) -> None:
    path = tmp_path / "catalog.duckdb"
    Catalog.open(path).close()
    with (
        duckdb.connect(str(path)),
        pytest.raises(CatalogError, match="both read-only and writable"),
    ):
        Catalog.open(path, read_only=True, lock_wait_s=0.1)
