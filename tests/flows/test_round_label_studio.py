"""A round whose gate is Label Studio: people's decisions arrive after the round."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from label_studio_sdk import LabelStudio

from contract import Outcome, ReviewDecision
from flows.servers import LabelStudioAccess
from human_gate import final_decisions
from human_gate.label_studio.labeling import OBJECT_NAME, VERDICT, RejectReason
from storage import Catalog
from tests.flows.commands import flywheel_json, run_round
from tests.human_gate.annotations import new_annotator, project_of, result, tasks_by_trajectory

APPROVE = ReviewDecision.APPROVE
CORRECT = ReviewDecision.CORRECT
REJECT = ReviewDecision.REJECT
QUARANTINE = ReviewDecision.QUARANTINE


def _gate(home: Path, api: str, *args: str, **extra: str) -> dict[str, Any]:
    out: dict[str, Any] = flywheel_json(home, api, "gate", *args, **extra)
    return out


def _approve_everything(access: LabelStudioAccess, title: str) -> int:
    client = LabelStudio(base_url=access.url, api_key=access.token)  # type: ignore[no-untyped-call]
    listed: list[Any] = list(client.projects.list(title=title))
    projects = [p for p in listed if p.title == title]
    assert len(projects) == 1
    tasks: list[Any] = list(client.tasks.list(project=projects[0].id, fields="all"))
    verdict = {"choices": [ReviewDecision.APPROVE.value]}
    region = {"from_name": VERDICT, "to_name": OBJECT_NAME, "type": "choices", "value": verdict}
    for task in tasks:
        client.annotations.create(id=task.id, result=[region])
    return len(tasks)


@pytest.mark.slow
def test_undecided_items_are_carried_over_then_synced(
    prefect_api_url: str, label_studio: LabelStudioAccess, tmp_path: Path
) -> None:
    prefix = f"gate-{uuid.uuid4().hex[:8]}"
    settings = {
        "FLYWHEEL_CURATION__AUDIT_RATE": "1.0",  # every kept item goes to a person
        "FLYWHEEL_GATE__PROJECT_PREFIX": prefix,
        "FLYWHEEL_LABEL_STUDIO__URL": label_studio.url,
        "FLYWHEEL_LABEL_STUDIO__TOKEN": label_studio.token,
    }
    out = run_round(
        tmp_path, prefect_api_url, "--tasks", "12", "--gate", "label-studio", **settings
    )
    counts = out["counts"]
    assert counts["curated"] > 0
    assert counts["pending"] == counts["curated"], "nobody has annotated: nothing is decided"
    assert counts["approved"] == counts["rejected"] == counts["in_dataset"] == 0
    assert out["dataset_version"] is None

    title = f"{prefix} {out['round_id']}"
    client = LabelStudio(base_url=label_studio.url, api_key=label_studio.token)  # type: ignore[no-untyped-call]
    (project,) = project_of(client, title)
    url = f"{label_studio.url}/projects/{project}/data"
    where = {"name": f"Label Studio project '{title}'", "url": url}
    waiting = {"items": counts["curated"], "workplace": where["name"], "url": url}
    assert out["waiting"] == waiting | {"problem": None}
    before = _gate(tmp_path, prefect_api_url, "status", **settings)
    assert before["carried_over"] == counts["curated"] and before["approved"] == 0
    assert before["workplace"] == where and before["waiting_to_join"] == 0

    annotated = _approve_everything(label_studio, title)
    assert annotated == counts["curated"]
    after = _gate(tmp_path, prefect_api_url, "sync", **settings)
    assert after["approved"] == after["human_reviewed"] == counts["curated"]
    assert after["carried_over"] == 0
    assert after["waiting_to_join"] == counts["curated"], "decided, for the next version"
    again = _gate(tmp_path, prefect_api_url, "sync", **settings)
    assert again == after


@pytest.mark.slow
def test_two_annotators_decide_and_the_next_round_freezes_exactly_what_they_accepted(
    prefect_api_url: str, label_studio: LabelStudioAccess, tmp_path: Path
) -> None:
    """Round 1 waits for nobody: its items are carried over. Two annotators then approve
    one (with a mark), correct one (same answer, marks), reject one (marks) and disagree
    on one; round 2 takes the decisions up and its dataset holds exactly the approved and
    corrected items, with their masks and the correction."""
    prefix = f"gate-{uuid.uuid4().hex[:8]}"
    settings = {
        "FLYWHEEL_CURATION__AUDIT_RATE": "1.0",
        "FLYWHEEL_GATE__MIN_ANNOTATIONS": "2",
        "FLYWHEEL_GATE__PROJECT_PREFIX": prefix,
        "FLYWHEEL_LABEL_STUDIO__URL": label_studio.url,
        "FLYWHEEL_LABEL_STUDIO__TOKEN": label_studio.token,
    }
    first = run_round(
        tmp_path, prefect_api_url, "--tasks", "12", "--gate", "label-studio", **settings
    )
    assert first["dataset_version"] is None and first["approval"] is None
    with Catalog.open(tmp_path / "catalog.duckdb", read_only=True) as catalog:
        runs = {t.id: t for t in catalog.trajectories.of_round(first["round_id"])}
        kept = [
            c.trajectory_id for c in catalog.reviews.curations_of_round(first["round_id"]) if c.kept
        ]
    marked = [t for t in kept if len(runs[t].steps) >= 2]  # the marks below name steps 0 and 1
    successes = [t for t in marked if runs[t].metadata.outcome is Outcome.SUCCESS]
    assert len(successes) >= 2 and len(marked) >= 3 and len(kept) >= 5
    approved, corrected = successes[:2]
    rejected = next(t for t in marked if t not in (approved, corrected))
    split, *untouched = [t for t in kept if t not in (approved, corrected, rejected)]

    client = LabelStudio(base_url=label_studio.url, api_key=label_studio.token)  # type: ignore[no-untyped-call]
    (project,) = project_of(client, f"{prefix} {first['round_id']}")
    tasks = tasks_by_trajectory(client, project)
    assert set(tasks) == set(kept), "the round pushed every kept item once"
    ana, _ = new_annotator(client, "ana")
    bo, _ = new_annotator(client, "bo")
    answer = "Booked the 9:40 flight"
    for user, regions in [
        (ana, {approved: result(APPROVE, (0,)), corrected: result(CORRECT, (1,), answer)}),
        (bo, {approved: result(APPROVE), corrected: result(CORRECT, (0, 1), answer)}),
        (ana, {rejected: result(REJECT, (0,), reason=RejectReason.WRONG_OUTCOME)}),
        (bo, {rejected: result(REJECT, (1,), reason=RejectReason.UNSAFE)}),
        (ana, {split: result(APPROVE)}),
        (bo, {split: result(REJECT, reason=RejectReason.LOW_QUALITY)}),
    ]:
        for trajectory_id, regions_of in regions.items():
            client.annotations.create(
                id=tasks[trajectory_id].id, result=regions_of, completed_by=user
            )

    second = run_round(
        tmp_path,
        prefect_api_url,
        "--tasks",
        "12",
        "--seed",
        "1",
        "--gate",
        "label-studio",
        **settings,
    )

    assert second["counts"]["carried_in"] == 4  # the four decided; the rest stay carried
    assert second["counts"]["carried_in_approved"] == 2
    dataset_id = second["dataset_version"]
    with Catalog.open(tmp_path / "catalog.duckdb", read_only=True) as catalog:
        members = {m.trajectory_id: m for m in catalog.datasets.get(dataset_id).members}
        summary = catalog.datasets.describe(dataset_id)
        reviews = catalog.reviews.of_trajectories([approved, corrected, rejected, split])
        still_open = catalog.reviews.carried_out_of(first["round_id"], open_only=True)
    assert set(members) == {approved, corrected}, "exactly the approved and corrected items"
    assert members[approved].decision is APPROVE and members[approved].masked_steps == (0,)
    assert members[approved].human and members[approved].correction is None
    assert members[corrected].decision is CORRECT and members[corrected].masked_steps == (0, 1)
    assert members[corrected].correction == answer
    assert summary["human_reviewed"] == 2 and summary["review"]["corrected"] == 1
    assert still_open == len(untouched)

    decided = final_decisions(reviews)
    assert decided[rejected].decision is REJECT and decided[split].decision is QUARANTINE
    reviewers = {(r.trajectory_id, r.reviewer) for r in reviews if not r.automatic}
    assert len(reviewers) == len(reviews) == 12, "two annotations and a consensus each, once"

    status = _gate(tmp_path, prefect_api_url, "status", "--round", first["round_id"], **settings)
    assert (status["approved"], status["corrected"]) == (1, 1)
    assert (status["rejected"], status["quarantined"]) == (1, 1)
    assert status["carried_over"] == len(untouched)
    assert status["waiting_to_join"] == 0, "round 2 took every decision in"
