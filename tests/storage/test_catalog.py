"""The catalog's records: rounds, tasks, rejections, curation and reviews."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import JsonValue

import storage.review_store
import storage.sql
import storage.task_store
from contract import (
    CurationRecord,
    DropReason,
    FailureType,
    RejectedTask,
    RejectionReason,
    Review,
    ReviewDecision,
    Routing,
    Split,
    TaskSpec,
    Trajectory,
)
from storage import Catalog, UnknownIdError
from storage.catalog import TABLES
from tests.storage.builders import ROUND


def _curation(
    trajectory: Trajectory, quality: float = 0.8, judge: JsonValue = None
) -> CurationRecord:
    failed = not trajectory.verdict.passed
    return CurationRecord(
        trajectory_id=trajectory.id,
        task_id=trajectory.task.id,
        round_id=ROUND,
        kept=not failed,
        drop_reason=DropReason.DUPLICATE if failed else None,
        supported=True,
        failure_attribution=FailureType.RECOVERY if failed else None,
        quality=quality,
        routing=Routing.NEEDS_HUMAN,
        suggested=ReviewDecision.APPROVE,
        reason="looks fine",
        judge=judge,
    )


def _review(trajectory: Trajectory, decision: ReviewDecision, reviewer: str) -> Review:
    return Review(
        trajectory_id=trajectory.id,
        round_id=ROUND,
        decision=decision,
        reviewer=reviewer,
        automatic=reviewer == "auto",
        erroneous_steps=(0,) if decision is ReviewDecision.CORRECT else (),
    )


def test_a_round_is_begun_once_and_finished(catalog: Catalog) -> None:
    started = catalog.rounds.begin(ROUND, {"tasks": 48, "seed": 7})
    assert catalog.rounds.begin(ROUND, {"tasks": 1}) == started
    assert (started.status, started.stage, started.counts) == ("running", None, {})
    assert started.started_at.tzinfo is UTC
    assert abs((datetime.now(UTC) - started.started_at).total_seconds()) < 60

    catalog.rounds.set_stage(ROUND, "collect")
    catalog.rounds.set_flow_run(ROUND, "flow-1")
    assert catalog.rounds.get(ROUND) == started.__class__(
        **{**vars(started), "stage": "collect", "flow_run_id": "flow-1"}
    )

    catalog.rounds.finish(ROUND, dataset_id="ds-1", counts={"collected": 3}, flow_run_id=None)
    done = catalog.rounds.get(ROUND)
    assert done is not None
    assert (done.status, done.dataset_id, done.counts, done.flow_run_id) == (
        "done",
        "ds-1",
        {"collected": 3},
        "flow-1",
    )
    assert done.config == {"tasks": 48, "seed": 7}
    assert done.finished_at is not None and done.finished_at >= done.started_at
    assert catalog.rounds.get("round-nope") is None


def test_rounds_are_listed_oldest_first(catalog: Catalog) -> None:
    for name in ("round-2", "round-1", "round-3"):
        catalog.rounds.begin(name, {})
    assert [r.id for r in catalog.rounds.every()] == ["round-2", "round-1", "round-3"]


def test_updating_an_unknown_round_names_the_known_ones(catalog: Catalog) -> None:
    with pytest.raises(
        UnknownIdError, match="unknown round id 'round-x'; the catalog has no round"
    ):
        catalog.rounds.set_stage("round-x", "collect")
    for i in range(7):
        catalog.rounds.begin(f"round-{i}", {})
    with pytest.raises(UnknownIdError) as unknown:
        catalog.rounds.finish("round-x", dataset_id=None, counts={}, flow_run_id=None)
    assert unknown.value.recent == ("round-6", "round-5", "round-4", "round-3", "round-2")


def test_tasks_are_added_once(catalog: Catalog, round_trajectories: list[Trajectory]) -> None:
    tasks = list({t.task.id: t.task for t in round_trajectories}.values())
    assert catalog.tasks.add(ROUND, tasks + tasks[:3]) == len(tasks)
    assert catalog.tasks.add("round-b", tasks) == 0

    by_id = sorted(tasks, key=lambda t: t.id)
    assert catalog.tasks.of_round(ROUND) == by_id
    assert catalog.tasks.of_round("round-b") == []
    assert catalog.tasks.get(tasks[5].id) == tasks[5]
    assert catalog.tasks.goals() == [(t.id, t.goal) for t in by_id]
    assert catalog.tasks.fingerprints() == {t.fingerprint for t in tasks}
    dev = {t.fingerprint for t in tasks if t.split is Split.DEV}
    assert dev and catalog.tasks.fingerprints(Split.DEV) == dev
    assert catalog.tasks.fingerprints(Split.TRAIN) == {t.fingerprint for t in tasks} - dev


def test_an_unknown_task_names_five_recent_ones(
    catalog: Catalog, round_trajectories: list[Trajectory]
) -> None:
    tasks: list[TaskSpec] = list({t.task.id: t.task for t in round_trajectories}.values())
    catalog.tasks.add(ROUND, tasks)
    with pytest.raises(UnknownIdError, match=r"unknown task id 'task-x'; most recent: task-"):
        catalog.tasks.get("task-x")


def test_rejections_are_added_once(catalog: Catalog) -> None:
    rejections = [
        RejectedTask(
            round_id=ROUND,
            fingerprint=f"fp-{i}",
            template="send_message" if i else None,
            reason=RejectionReason.DUPLICATE,
            detail=f"same as task-{i}",
            goal=None if i == 2 else "Text Ana hello",
        )
        for i in range(4)
    ]
    assert catalog.tasks.add_rejections(rejections) == 4
    assert catalog.tasks.add_rejections(rejections[:2]) == 0
    assert catalog.tasks.rejections_of_round(ROUND) == sorted(rejections, key=lambda r: r.id)
    assert catalog.tasks.rejections_of_round("round-b") == []


def test_a_new_judgement_replaces_the_old_one(
    catalog: Catalog, round_trajectories: list[Trajectory]
) -> None:
    first = [_curation(t) for t in round_trajectories[:10]]
    assert catalog.reviews.add_curations(first) == 10
    assert catalog.reviews.add_curations(first) == 0

    judged = _curation(round_trajectories[3], quality=0.25, judge={"verdict": "meh", "n": [1]})
    assert catalog.reviews.add_curations([judged, first[4]]) == 1

    expected = {c.trajectory_id: c for c in first} | {judged.trajectory_id: judged}
    assert catalog.reviews.curations_of_round(ROUND) == [expected[k] for k in sorted(expected)]
    assert catalog.stats()["curations"] == 10


def test_reviews_are_added_once_in_order(
    catalog: Catalog, round_trajectories: list[Trajectory]
) -> None:
    auto = [_review(t, ReviewDecision.APPROVE, "auto") for t in round_trajectories[:5]]
    human = [_review(round_trajectories[0], ReviewDecision.CORRECT, "ana")]
    assert catalog.reviews.add(auto) == 5
    assert catalog.reviews.add(human + auto) == 1
    assert catalog.reviews.of_round(ROUND) == auto + human


def test_a_failed_write_leaves_the_catalog_as_it_was(
    catalog: Catalog, round_trajectories: list[Trajectory], monkeypatch: pytest.MonkeyPatch
) -> None:
    real_insert = storage.sql.insert_rows

    def insert_then_fail(*args: Any) -> int:
        real_insert(*args)
        raise RuntimeError("crash after the rows went in")

    monkeypatch.setattr(storage.review_store, "insert_rows", insert_then_fail)
    monkeypatch.setattr(storage.task_store, "insert_rows", insert_then_fail)
    reviews = [_review(t, ReviewDecision.APPROVE, "auto") for t in round_trajectories[:5]]
    with pytest.raises(RuntimeError, match="crash after"):
        catalog.reviews.add(reviews)
    with pytest.raises(RuntimeError, match="crash after"):
        catalog.tasks.add(ROUND, [round_trajectories[0].task])
    assert catalog.stats() == dict.fromkeys(TABLES, 0)
