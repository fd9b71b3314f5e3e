"""``DatasetStore.diff``: what changed between two dataset versions."""

from __future__ import annotations

import pytest

from contract import DatasetMember, DatasetVersion, ReviewDecision, Split, Trajectory
from storage import Catalog, UnknownIdError
from tests.storage.builders import make_version


def test_membership_weights_reviews_composition_and_lineage(
    ingested: Catalog, round_trajectories: list[Trajectory]
) -> None:
    train = [t for t in round_trajectories if t.task.split is Split.TRAIN][:8]
    first = make_version(train[:6])
    kept, reweighted, reviewed, *_ = train[:6]
    removed = train[5]
    members = [
        DatasetMember(trajectory_id=t.id, task_id=t.task.id, weight=1.0)
        for t in train[:5]
        if t.id not in (reweighted.id, reviewed.id)
    ]
    members += [
        DatasetMember(trajectory_id=reweighted.id, task_id=reweighted.task.id, weight=2.5),
        DatasetMember(
            trajectory_id=reviewed.id,
            task_id=reviewed.task.id,
            weight=1.0,
            decision=ReviewDecision.CORRECT,
            human=True,
            masked_steps=(1,),
            correction="fixed",
        ),
        *(DatasetMember(trajectory_id=t.id, task_id=t.task.id, weight=1.0) for t in train[6:8]),
    ]
    second = DatasetVersion.model_validate(
        first.model_dump()
        | {
            "id": "",
            "round_id": "round-b",
            "parent": first.id,
            "content_hash": "second",
            "members": sorted(members, key=lambda m: m.trajectory_id),
            "human_reviewed": 1,
        }
    )
    assert ingested.datasets.freeze(first) and ingested.datasets.freeze(second)

    changes = ingested.datasets.diff(first.id, second.id)

    assert changes["size"] == {"a": 6, "b": 7, "delta": 1}
    membership = changes["members"]
    assert membership["added"] == sorted(t.id for t in train[6:8])
    assert membership["removed"] == [removed.id]
    assert membership["reweighted"] == [{"trajectory_id": reweighted.id, "a": 1.0, "b": 2.5}]
    assert membership["review_changed"] == [reviewed.id]
    assert membership["unchanged"] == 3  # train[0], train[3], train[4]
    assert kept.id not in membership["added"] + membership["removed"]
    assert changes["human_reviewed"] == {"a": 0, "b": 1, "delta": 1}
    assert changes["lineage"] == {
        "b_descends_from_a": True,
        "rounds": {"a": first.round_id, "b": "round-b"},
    }
    difficulty = changes["composition"]["difficulty"]
    assert sum(d["a"] for d in difficulty.values()) == 6
    assert sum(d["b"] for d in difficulty.values()) == 7
    assert all(d["delta"] == d["b"] - d["a"] for d in difficulty.values())

    backwards = ingested.datasets.diff(second.id, first.id)
    assert backwards["members"]["added"] == membership["removed"]
    assert backwards["lineage"]["b_descends_from_a"] is False


def test_an_unknown_version_is_named(
    ingested: Catalog, round_trajectories: list[Trajectory]
) -> None:
    version = make_version([t for t in round_trajectories if t.task.split is Split.TRAIN][:2])
    ingested.datasets.freeze(version)
    with pytest.raises(UnknownIdError, match="ds-nope"):
        ingested.datasets.diff(version.id, "ds-nope")
