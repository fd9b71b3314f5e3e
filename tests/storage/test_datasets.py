"""Dataset versions: immutable, never of development tasks, summarized for people."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import orjson
import pytest

from contract import InvalidInputError, Outcome, Split, Trajectory
from storage import Catalog, UnknownIdError
from storage import datasets as datasets_module
from tests.storage.builders import ROUND, make_version, write_shards


def _train(trajectories: list[Trajectory]) -> list[Trajectory]:
    return [t for t in trajectories if t.task.split is Split.TRAIN]


def test_a_version_is_frozen_once_and_comes_back_equal(
    ingested: Catalog, round_trajectories: list[Trajectory]
) -> None:
    train = _train(round_trajectories)
    version = make_version(list(reversed(train[:12])))

    assert ingested.datasets.freeze(version) is True
    assert ingested.datasets.freeze(version) is False

    assert ingested.datasets.get(version.id) == version
    assert ingested.datasets.latest_id() == version.id
    (summary,) = ingested.datasets.summaries()
    assert (summary.id, summary.size, summary.parent) == (version.id, 12, None)
    assert ingested.stats()["dataset_members"] == 12


def test_the_latest_version_is_the_last_frozen(
    ingested: Catalog, round_trajectories: list[Trajectory]
) -> None:
    train = _train(round_trajectories)
    assert ingested.datasets.latest_id() is None
    first = make_version(train[:5])
    second = make_version(train[5:9], round_id="round-b", parent=first.id)
    ingested.datasets.freeze(first)
    ingested.datasets.freeze(second)
    ingested.datasets.freeze(first)
    assert ingested.datasets.latest_id() == second.id
    assert [d.id for d in ingested.datasets.summaries()] == [first.id, second.id]
    assert ingested.datasets.summaries()[1].parent == first.id


def test_a_version_with_a_development_task_is_refused(
    ingested: Catalog, round_trajectories: list[Trajectory]
) -> None:
    dev = next(t for t in round_trajectories if t.task.split is Split.DEV)
    version = make_version([*_train(round_trajectories)[:3], dev])
    with pytest.raises(
        InvalidInputError, match=rf"development tasks.*{dev.id} \(task {dev.task.id}\)"
    ):
        ingested.datasets.freeze(version)
    assert ingested.stats()["dataset_versions"] == ingested.stats()["dataset_members"] == 0
    assert ingested.datasets.latest_id() is None


def test_a_version_of_unknown_trajectories_is_refused(
    catalog: Catalog, round_trajectories: list[Trajectory]
) -> None:
    with pytest.raises(UnknownIdError, match="unknown trajectory id"):
        catalog.datasets.freeze(make_version(_train(round_trajectories)[:2]))
    with pytest.raises(UnknownIdError, match="unknown dataset id 'ds-nope'"):
        catalog.datasets.get("ds-nope")
    with pytest.raises(UnknownIdError, match="unknown dataset id"):
        catalog.datasets.describe("ds-nope")


def test_a_member_must_name_its_trajectory_s_task(
    ingested: Catalog, round_trajectories: list[Trajectory]
) -> None:
    first, second = _train(round_trajectories)[:2]
    version = make_version([first])
    wrong = version.model_copy(
        update={"members": (version.members[0].model_copy(update={"task_id": second.task.id}),)}
    )
    with pytest.raises(InvalidInputError, match=f"{first.id} is a trajectory of {first.task.id}"):
        ingested.datasets.freeze(wrong)
    twice = make_version([first, first])
    with pytest.raises(InvalidInputError, match="more than once"):
        ingested.datasets.freeze(twice)


def test_a_failure_half_way_stores_no_members(
    ingested: Catalog, round_trajectories: list[Trajectory], monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(*args: object) -> str:
        raise RuntimeError("crash after the members went in")

    monkeypatch.setattr(datasets_module, "dataset_record_json", fail)
    with pytest.raises(RuntimeError, match="crash after"):
        ingested.datasets.freeze(make_version(_train(round_trajectories)[:4]))
    assert ingested.stats()["dataset_members"] == 0


def test_the_summary_counts_members_per_capability_difficulty_and_outcome(
    ingested: Catalog, round_trajectories: list[Trajectory]
) -> None:
    members = _train(round_trajectories)
    version = make_version(members)
    ingested.datasets.freeze(version)

    summary = ingested.datasets.describe(version.id)

    outcomes = Counter(
        "recovery"
        if t.metadata.outcome is Outcome.SUCCESS and t.metadata.recovered
        else t.metadata.outcome.value
        for t in members
    )
    assert outcomes["recovery"] > 0 and outcomes["success"] > 0 and outcomes["failure"] > 0
    capabilities = Counter(c.value for t in members for c in t.task.capabilities)
    assert sum(capabilities.values()) > len(members)  # some tasks have two capabilities
    assert summary["counts"] == {
        "capability": dict(sorted(capabilities.items())),
        "difficulty": dict(sorted(Counter(t.task.difficulty.value for t in members).items())),
        "outcome": dict(sorted(outcomes.items())),
    }
    assert summary["lineage"] == {
        "round": ROUND,
        "policies": ["scripted@1"],
        "task_ids": sorted({t.task.id for t in members}),
        "trajectory_ids": sorted(t.id for t in members),
    }
    assert {k: summary[k] for k in ("id", "round_id", "parent", "size", "human_reviewed")} == {
        "id": version.id,
        "round_id": ROUND,
        "parent": None,
        "size": len(members),
        "human_reviewed": 0,
    }
    assert summary["content_hash"] == version.content_hash
    assert summary["target"] == version.target.model_dump(mode="json")
    assert summary["achieved"] == {}
    assert summary["created_at"].endswith("+00:00")
    assert orjson.loads(orjson.dumps(summary)) == summary


def test_datasets_survive_reopening(tmp_path: Path, round_trajectories: list[Trajectory]) -> None:
    path = tmp_path / "catalog.duckdb"
    version = make_version(_train(round_trajectories)[:3])
    with Catalog.open(path) as catalog:
        catalog.trajectories.ingest(write_shards(round_trajectories, tmp_path / "shards"))
        catalog.datasets.freeze(version)
    with Catalog.open(path, read_only=True) as reader:
        assert reader.datasets.get(version.id) == version
