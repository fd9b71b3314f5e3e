"""Parquet shards: how collectors hand trajectories to the catalog without touching it.

A shard is one Parquet file of trajectories (schema ``rows.SHARD_SCHEMA``), written under
a temporary name and renamed into place, so a file with a shard's name is always whole;
at a URL (``storage.locations``: object storage) it is one object, which a store shows
only once it is whole. Each task spec is stored once per shard, which makes a shard
self-contained.
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
from storage.files import is_temporary
from storage.locations import Location, filesystem, is_url, name_of, write_whole
from storage.rows import SHARD_SCHEMA, rebuild_trajectory, step_rows, task_row, trajectory_row

SHARD_FORMAT = 1
SHARD_SUFFIX = ".parquet"
_META_KEY = b"flywheel.shard"


@dataclass(frozen=True)
class ShardInfo:
    """What a written shard holds."""

    path: Location
    shard: str
    trajectories: int
    steps: int
    tasks: int
    bytes: int
    round_id: str | None = None
    """The round of its trajectories, when they all share one."""


def write_trajectory_shard(
    trajectories: Sequence[Trajectory], path: Location, *, shard: str
) -> ShardInfo:
    """Write ``trajectories`` as one Parquet file at ``path``, atomically.

    A local file is written under a hidden temporary name in the same folder, synced,
    then renamed: a crash leaves at most a temporary file, which readers ignore. At a URL
    it is uploaded as one object, which appears once the upload completed.
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
    write_whole(path, lambda sink: pq.write_table(table, sink, compression="zstd"))
    return _info(path, meta)


def _info(path: Location, meta: dict[str, Any]) -> ShardInfo:
    if is_url(path):
        fs, key = filesystem(path)
        size = int(fs.size(key))
    else:
        size = Path(path).stat().st_size
    return ShardInfo(
        path=path,
        shard=meta["shard"],
        trajectories=meta["trajectories"],
        steps=meta["steps"],
        tasks=meta["tasks"],
        bytes=size,
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


def _complete_meta(path: Location) -> dict[str, Any] | None:
    """The footer metadata of a whole shard, or None for anything else."""
    if is_temporary(Path(name_of(path))):
        return None
    try:
        if is_url(path):
            fs, key = filesystem(path)
            if not fs.isfile(key):
                return None
            with fs.open(key, "rb") as source:
                footer = pq.read_metadata(source)
        elif Path(path).is_file():
            footer = pq.read_metadata(path)
        else:
            return None
        raw = (footer.metadata or {}).get(_META_KEY)
    except (OSError, pa.ArrowException):
        return None
    if raw is None:
        return None
    meta: dict[str, Any] = orjson.loads(raw)
    return meta if meta.get("format") == SHARD_FORMAT else None


def shard_complete(path: Location) -> bool:
    """Whether ``path`` is a whole shard: not a temporary file, with a readable footer."""
    return _complete_meta(path) is not None


def shard_info(path: Location) -> ShardInfo:
    """What the shard at ``path`` holds, read from its footer."""
    meta = _complete_meta(path)
    if meta is None:
        raise CatalogError(
            f"{path} is not a complete trajectory shard (missing, still being written, "
            "or not written by write_trajectory_shard)"
        )
    return _info(path, meta)


def list_shards(folder: Location) -> list[Location]:
    """The complete shards in ``folder`` (not recursive), sorted by name."""
    if not is_url(folder):
        local = Path(folder)
        if not local.is_dir():
            return []
        named: list[Location] = [p for p in local.iterdir() if p.suffix == SHARD_SUFFIX]
    else:
        fs, key = filesystem(folder)
        if not fs.isdir(key):
            return []
        named = [
            f"{str(folder).rstrip('/')}/{name_of(p)}"
            for p in fs.ls(key, detail=False)
            if name_of(p).endswith(SHARD_SUFFIX)
        ]
    return sorted((p for p in named if shard_complete(p)), key=str)


def read_trajectory_shard(path: Location) -> list[Trajectory]:
    """The exact trajectories of a shard, in the order they were written."""
    shard_info(path)
    if is_url(path):
        fs, key = filesystem(path)
        table = pq.read_table(key, schema=SHARD_SCHEMA, filesystem=fs)
    else:
        table = pq.read_table(path, schema=SHARD_SCHEMA)
    rows = table.to_pylist()
    tasks: dict[str, TaskSpec] = {}
    for row in rows:
        if row["task"] is not None:
            tasks[row["task"]["id"]] = TaskSpec.model_validate_json(row["task"]["spec"])
    missing = {row["task_id"] for row in rows} - tasks.keys()
    if missing:
        raise CatalogError(f"shard {path} lacks the spec of task(s) {', '.join(sorted(missing))}")
    return [rebuild_trajectory(row, tasks[row["task_id"]], row["steps"]) for row in rows]
