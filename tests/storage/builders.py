"""Builders shared by the storage tests."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa

from contract import (
    CurationRecord,
    DatasetMember,
    DatasetVersion,
    MixTarget,
    ReviewDecision,
    Routing,
    Trajectory,
    content_hash,
)
from storage import write_trajectory_shard

ROUND = "round-a"
SHARD_SIZE = 20


def with_screens(trajectory: Trajectory) -> Trajectory:
    """The same episode with the fields the sandbox leaves empty filled in."""
    data = trajectory.model_dump(mode="json", exclude={"id"})
    for i, step in enumerate(data["steps"]):
        step["observation"] = f"<screen n='{i}'>ünïcode ✓</screen>"
        step["artifacts"] = [f"ab/cd/{'0' * 64}.png"]
        step["input_tokens"] = 100 + i
        step["output_tokens"] = 7
    data["metadata"]["device"] = "emulator-5554"
    data["metadata"]["attempt"] = 2
    data["metadata"]["policy"]["model"] = "tiny-qwen"
    data["cost"]["usd"] = 0.1 + 0.2
    return Trajectory.model_validate(data)


def write_shards(
    trajectories: Sequence[Trajectory], folder: Path, size: int = SHARD_SIZE
) -> list[Path]:
    """Shards of ``size`` trajectories, named shard-00000.parquet, ..."""
    paths = []
    for i in range(0, len(trajectories), size):
        path = folder / f"shard-{i // size:05d}.parquet"
        write_trajectory_shard(trajectories[i : i + size], path, shard=path.stem)
        paths.append(path)
    return paths


def make_version(
    trajectories: Sequence[Trajectory], round_id: str = ROUND, parent: str | None = None
) -> DatasetVersion:
    members = tuple(
        DatasetMember(trajectory_id=t.id, task_id=t.task.id, weight=1.0) for t in trajectories
    )
    return DatasetVersion(
        round_id=round_id,
        parent=parent,
        content_hash=content_hash([m.model_dump(mode="json") for m in members]),
        members=members,
        target=MixTarget(),
        achieved={},
        policies=("scripted@1",),
        human_reviewed=0,
    )


def approved_curation(trajectory: Trajectory) -> CurationRecord:
    """A curation record of ``trajectory`` in ``ROUND`` that keeps and approves it."""
    return CurationRecord(
        trajectory_id=trajectory.id,
        task_id=trajectory.task.id,
        round_id=ROUND,
        kept=True,
        supported=True,
        quality=0.8,
        routing=Routing.AUTO_APPROVE,
        suggested=ReviewDecision.APPROVE,
        reason="looks fine",
    )


def curations_in(table: pa.Table) -> list[CurationRecord]:
    """The records of a curated partition's rows (``storage.curation_files``)."""
    return [CurationRecord.model_validate_json(r) for r in table.column("record").to_pylist()]
