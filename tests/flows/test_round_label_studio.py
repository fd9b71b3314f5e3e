"""A round whose gate is Label Studio: people's decisions arrive after the round."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from label_studio_sdk import LabelStudio

from contract import ReviewDecision
from flows.servers import LabelStudioAccess
from human_gate.label_studio.labeling import OBJECT_NAME, VERDICT
from tests.flows.commands import flywheel_json, run_round


def _gate(home: Path, api: str, command: str, **extra: str) -> dict[str, Any]:
    out: dict[str, Any] = flywheel_json(home, api, "gate", command, **extra)
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

    before = _gate(tmp_path, prefect_api_url, "status", **settings)
    assert before["carried_over"] == counts["curated"] and before["approved"] == 0

    annotated = _approve_everything(label_studio, f"{prefix} {out['round_id']}")
    assert annotated == counts["curated"]
    after = _gate(tmp_path, prefect_api_url, "sync", **settings)
    assert after["approved"] == after["human_reviewed"] == counts["curated"]
    assert after["carried_over"] == 0
    again = _gate(tmp_path, prefect_api_url, "sync", **settings)
    assert again == after
