"""Parquet shards: exact round trips, one spec per task, and no half shard ever visible."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from contract import Trajectory
from storage import (
    CatalogError,
    list_shards,
    read_trajectory_shard,
    shard_complete,
    shard_info,
    write_trajectory_shard,
)
from tests.storage.builders import ROUND


def test_a_shard_rebuilds_the_exact_trajectories(
    tmp_path: Path, round_trajectories: list[Trajectory]
) -> None:
    path = tmp_path / "s.parquet"
    info = write_trajectory_shard(round_trajectories, path, shard="s")

    assert read_trajectory_shard(path) == round_trajectories
    assert info == shard_info(path)
    assert (info.shard, info.round_id) == ("s", ROUND)
    assert info.trajectories == len(round_trajectories)
    assert info.steps == sum(len(t.steps) for t in round_trajectories)
    assert info.tasks == len({t.task.id for t in round_trajectories}) < info.trajectories
    assert shard_complete(path)


def test_a_shard_stores_each_task_spec_once(
    tmp_path: Path, round_trajectories: list[Trajectory]
) -> None:
    path = tmp_path / "s.parquet"
    write_trajectory_shard(round_trajectories, path, shard="s")
    tasks = pq.read_table(path, columns=["task"]).column("task").to_pylist()
    specs = [t["id"] for t in tasks if t is not None]
    assert sorted(specs) == sorted({t.task.id for t in round_trajectories})


def test_an_empty_shard_is_complete(tmp_path: Path) -> None:
    path = tmp_path / "empty.parquet"
    info = write_trajectory_shard([], path, shard="empty")
    assert (info.trajectories, info.steps, info.round_id) == (0, 0, None)
    assert read_trajectory_shard(path) == []


def test_a_half_written_shard_is_never_taken_for_a_shard(
    tmp_path: Path, round_trajectories: list[Trajectory]
) -> None:
    whole = tmp_path / "shard-00000.parquet"
    write_trajectory_shard(round_trajectories[:10], whole, shard="shard-00000")
    data = whole.read_bytes()
    # What a crash while writing shard 1 leaves: its temporary file, or a truncated copy.
    temporary = tmp_path / ".shard-00001.parquet.tmp-4242-0a0b0c0d"
    temporary.write_bytes(data[: len(data) // 2])
    truncated = tmp_path / "shard-00002.parquet"
    truncated.write_bytes(data[:-100])

    assert list_shards(tmp_path) == [whole]
    assert not shard_complete(temporary)
    assert not shard_complete(truncated)
    assert not shard_complete(tmp_path / "missing.parquet")
    with pytest.raises(CatalogError, match="not a complete trajectory shard"):
        read_trajectory_shard(temporary)


def test_a_failed_write_keeps_the_previous_shard_and_leaves_no_file(
    tmp_path: Path, round_trajectories: list[Trajectory], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.parquet"
    write_trajectory_shard(round_trajectories[:5], path, shard="s")

    def crash(table: pa.Table, sink: object, **options: object) -> None:
        sink.write(b"PAR1 half a shard")  # type: ignore[attr-defined]
        raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", crash)
    with pytest.raises(OSError, match="disk full"):
        write_trajectory_shard(round_trajectories, path, shard="s")
    with pytest.raises(OSError, match="disk full"):
        write_trajectory_shard(round_trajectories, tmp_path / "new.parquet", shard="new")
    monkeypatch.undo()

    assert read_trajectory_shard(path) == round_trajectories[:5]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.parquet"]


def test_a_parquet_file_of_another_kind_is_not_a_shard(tmp_path: Path) -> None:
    path = tmp_path / "other.parquet"
    pq.write_table(pa.table({"x": [1, 2]}), path)
    assert not shard_complete(path)
    assert list_shards(tmp_path) == []
