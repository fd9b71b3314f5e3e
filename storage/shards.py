"""Parquet shards: how collectors hand trajectories to the catalog without touching it.

A shard is one Parquet file of trajectories (schema ``rows.SHARD_SCHEMA``), written under
a temporary name and renamed into place, so a file with a shard's name is always whole.
Each task spec is stored once per shard, which makes a shard self-contained.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from contract import TaskSpec, Trajectory
from storage.errors import CatalogError
from storage.files import is_temporary, write_atomically
from storage.rows import SHARD_SCHEMA, rebuild_trajectory, step_rows, task_row, trajectory_row

SHARD_FORMAT = 1
SHARD_SUFFIX = ".parquet"
_META_KEY = b"flywheel.shard"


@dataclass(frozen=True)
class ShardInfo:
    """What a written shard holds."""

    path: Path
    shard: str
    trajectories: int
    steps: int
    tasks: int
    bytes: int
    round_id: str | None = None
    """The round of its trajectories, when they all share one."""


def write_trajectory_shard(
    trajectories: Sequence[Trajectory], path: Path, *, shard: str
) -> ShardInfo:
    """Write ``trajectories`` as one Parquet file at ``path``, atomically.

    The file is written under a hidden temporary name in the same folder, synced, then
    renamed: a crash leaves at most a temporary file, which readers ignore.
    """
    rows = _shard_rows(trajectories, shard)
    rounds = {t.metadata.round for t in trajectories}
    meta = {
        "format": SHARD_FORMAT,
        "shard": shard,
        "trajectories": len(rows),
        "steps": sum(len(t.steps) for t in trajectories),
        "tasks": sum(row["task"] is not None for row in rows),
        "round_id": rounds.pop() if len(rounds) == 1 else None,
    }
    schema = SHARD_SCHEMA.with_metadata({_META_KEY: orjson.dumps(meta)})
    table = pa.Table.from_pylist(rows, schema=schema)
    write_atomically(path, lambda sink: pq.write_table(table, sink, compression="zstd"))
    return _info(path, meta)


def _info(path: Path, meta: dict[str, Any]) -> ShardInfo:
    return ShardInfo(
        path=path,
        shard=meta["shard"],
        trajectories=meta["trajectories"],
        steps=meta["steps"],
        tasks=meta["tasks"],
        bytes=path.stat().st_size,
        round_id=meta["round_id"],
    )


def _shard_rows(trajectories: Sequence[Trajectory], shard: str) -> list[dict[str, Any]]:
    seen: set[str] = set()
    rows = []
    for trajectory in trajectories:
        row = trajectory_row(trajectory, shard)
        row["steps"] = step_rows(trajectory)
        task = trajectory.task
        row["task"] = None if task.id in seen else task_row(task, trajectory.metadata.round)
        seen.add(task.id)
        rows.append(row)
    return rows


def _complete_meta(path: Path) -> dict[str, Any] | None:
    """The footer metadata of a whole shard, or None for anything else."""
    if is_temporary(path) or not path.is_file():
        return None
    try:
        raw = (pq.read_metadata(path).metadata or {}).get(_META_KEY)
    except (OSError, pa.ArrowException):
        return None
    if raw is None:
        return None
    meta: dict[str, Any] = orjson.loads(raw)
    return meta if meta.get("format") == SHARD_FORMAT else None


def shard_complete(path: Path) -> bool:
    """Whether ``path`` is a whole shard: not a temporary file, with a readable footer."""
    return _complete_meta(path) is not None


def shard_info(path: Path) -> ShardInfo:
    """What the shard at ``path`` holds, read from its footer."""
    meta = _complete_meta(path)
    if meta is None:
        raise CatalogError(
            f"{path} is not a complete trajectory shard (missing, still being written, "
            "or not written by write_trajectory_shard)"
        )
    return _info(path, meta)


def list_shards(folder: Path) -> list[Path]:
    """The complete shards in ``folder`` (not recursive), sorted by name."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.suffix == SHARD_SUFFIX and shard_complete(p))


def read_trajectory_shard(path: Path) -> list[Trajectory]:
    """The exact trajectories of a shard, in the order they were written."""
    shard_info(path)
    rows = pq.read_table(path, schema=SHARD_SCHEMA).to_pylist()
    tasks: dict[str, TaskSpec] = {}
    for row in rows:
        if row["task"] is not None:
            tasks[row["task"]["id"]] = TaskSpec.model_validate_json(row["task"]["spec"])
    missing = {row["task_id"] for row in rows} - tasks.keys()
    if missing:
        raise CatalogError(f"shard {path} lacks the spec of task(s) {', '.join(sorted(missing))}")
    return [rebuild_trajectory(row, tasks[row["task_id"]], row["steps"]) for row in rows]
