"""A development task never enters a training dataset, whoever tries and from wherever.

The development set is identified by task fingerprint. Each test below tries one entry
point: construction, a person's approval at the gate, the balancer, freezing (directly
and through an approval), a task that claims the train split under a development
fingerprint. Two more live beside their code: a plan that replays or preserves a
development task (tests/agents/test_task_constructor.py), and exporting a version that
holds one (tests/training/test_export.py).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from agents.balancer import balance
from agents.policies.scripted import FaultConfig, ScriptedPolicy
from agents.runner import run_episode
from agents.task_constructor import construct_tasks
from contract import (
    ApprovalDecision,
    DatasetApproval,
    InvalidInputError,
    MixTarget,
    RejectionReason,
    Review,
    ReviewDecision,
    Split,
    TaskSpec,
    Trajectory,
    default_plan,
)
from envs.sandbox import MobileSandbox
from storage import Catalog, write_trajectory_shard
from tests.storage.builders import make_version

DEV_MESSAGE = "development tasks, which are never trained on"


@pytest.fixture(scope="module")
def episodes(faulty_trajectories: list[Trajectory]) -> list[Trajectory]:
    return faulty_trajectories


def _dev_success(episodes: list[Trajectory]) -> Trajectory:
    return next(
        t for t in episodes if t.task.split is Split.DEV and t.metadata.outcome.value == "success"
    )


def _person_approves(trajectory: Trajectory) -> Review:
    return Review(
        trajectory_id=trajectory.id,
        round_id="r",
        decision=ReviewDecision.APPROVE,
        reviewer="ana@example.com",
        automatic=False,
    )


def _catalog(tmp_path: Path, trajectories: list[Trajectory]) -> Catalog:
    catalog = Catalog.open(tmp_path / "catalog.duckdb")
    shard = tmp_path / "shard-00000.parquet"
    write_trajectory_shard(trajectories, shard, shard="shard-00000")
    catalog.trajectories.ingest([shard])
    return catalog


def test_construction_rejects_development_fingerprints(sandbox: MobileSandbox) -> None:
    plan = default_plan(12)
    free = construct_tasks("round-x", plan, 3, sandbox).tasks
    held_out = frozenset(t.fingerprint for t in free)

    again = construct_tasks("round-x", plan, 3, sandbox, dev_fingerprints=held_out)

    assert not {t.fingerprint for t in again.tasks} & held_out
    assert {r.reason for r in again.rejected} >= {RejectionReason.DEVELOPMENT_TASK}
    assert all(t.split is Split.TRAIN for t in free + again.tasks)


def test_a_persons_approval_does_not_make_a_development_task_trainable(
    episodes: list[Trajectory],
) -> None:
    dev = _dev_success(episodes)
    train = [t for t in episodes if t.task.split is Split.TRAIN][:20]
    reviews = [_person_approves(t) for t in [dev, *train]]

    version = balance("r", [dev, *train], reviews, MixTarget())

    assert version is not None
    assert dev.id not in {m.trajectory_id for m in version.members}


def test_freezing_refuses_a_development_member(tmp_path: Path, episodes: list[Trajectory]) -> None:
    dev = _dev_success(episodes)
    train = [t for t in episodes if t.task.split is Split.TRAIN][:3]
    with _catalog(tmp_path, [dev, *train]) as catalog:
        version = make_version([dev, *train])
        with pytest.raises(InvalidInputError, match=DEV_MESSAGE):
            catalog.datasets.freeze(version)
        approval = DatasetApproval(
            dataset_id=version.id,
            round_id=version.round_id,
            content_hash=version.content_hash,
            target=version.target,
            decision=ApprovalDecision.APPROVE,
            approver="ana",
            automatic=False,
            decided_at=datetime.now(UTC),
        )
        with pytest.raises(InvalidInputError, match=DEV_MESSAGE):
            catalog.datasets.decide(version, approval)
        assert catalog.datasets.summaries() == [] and catalog.datasets.approval(version.id) is None


def test_a_task_claiming_the_train_split_under_a_development_fingerprint_is_refused(
    tmp_path: Path, sandbox: MobileSandbox, episodes: list[Trajectory]
) -> None:
    dev = _dev_success(episodes)
    disguised = TaskSpec.model_validate(
        dev.task.model_dump(mode="json", exclude={"id"}) | {"split": Split.TRAIN.value}
    )
    assert disguised.fingerprint == dev.task.fingerprint and disguised.id != dev.task.id
    policy = ScriptedPolicy(FaultConfig(rate=0.0))
    smuggled = run_episode(disguised, sandbox, policy, round_id="r")
    with _catalog(tmp_path, [dev, smuggled]) as catalog:
        with pytest.raises(InvalidInputError, match=DEV_MESSAGE):
            catalog.datasets.freeze(make_version([smuggled]))
        assert catalog.datasets.summaries() == []
