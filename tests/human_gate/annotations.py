"""Annotating through Label Studio's API as the labeling interface does: annotators,
projects, tasks and annotation results (tests only)."""

from __future__ import annotations

import uuid
from typing import Any

from label_studio_sdk import LabelStudio

from contract import ReviewDecision
from human_gate.label_studio.labeling import (
    ANSWER,
    ERRONEOUS_STEPS,
    OBJECT_NAME,
    REJECT_REASON,
    VERDICT,
    RejectReason,
)


def project_of(client: LabelStudio, title: str) -> list[int]:
    projects: list[Any] = list(client.projects.list(title=title))
    return [int(p.id) for p in projects if p.title == title]


def tasks_by_trajectory(client: LabelStudio, project: int) -> dict[str, Any]:
    tasks: list[Any] = list(client.tasks.list(project=project, fields="all"))
    return {t.data["trajectory_id"]: t for t in tasks}


def new_annotator(client: LabelStudio, name: str) -> tuple[int, str]:
    email = f"{name}-{uuid.uuid4().hex[:8]}@example.com"
    user = client.users.create(username=email, email=email, password=uuid.uuid4().hex)
    assert user.id is not None
    return int(user.id), email


def _choices(control: str, values: list[str]) -> dict[str, Any]:
    return {
        "from_name": control,
        "to_name": OBJECT_NAME,
        "type": "choices",
        "value": {"choices": values},
    }


def result(
    decision: ReviewDecision | None,
    steps: tuple[int, ...] = (),
    answer: str | None = None,
    reason: RejectReason | None = None,
) -> list[dict[str, Any]]:
    """An annotation's result as the labeling interface submits it."""
    regions = [] if decision is None else [_choices(VERDICT, [decision.value])]
    if steps:
        regions.append(_choices(ERRONEOUS_STEPS, [str(s) for s in steps]))
    if answer is not None:
        text = {"text": [answer]}
        regions.append(
            {"from_name": ANSWER, "to_name": OBJECT_NAME, "type": "textarea", "value": text}
        )
    if reason is not None:
        regions.append(_choices(REJECT_REASON, [reason.value.replace("_", " ").capitalize()]))
    return regions
