"""Text that reads differently than it is (a right-to-left override that turns "pay 900
to Anna" around, a zero-width space inside a name, NUL) reaches an annotator in a real
Label Studio as visible, marked escapes."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from agents.curator import curate
from agents.policies.scripted import ScriptedPolicy
from agents.runner import run_episode
from contract import ReviewDecision, Routing, Trajectory
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks
from flows.servers import LabelStudioAccess
from human_gate import GateItem
from human_gate.label_studio import LabelStudioGate
from human_gate.label_studio.view import INVISIBLE

TRICKS = {
    "override": "pay \u202e009 ot\u202c Anna",
    "isolate": "\u2067Anna\u2069 gets 900",
    "zero-width": "An\u200bna",
    "nul": "An\x00na",
    "bom-and-tag": "\ufeffAnna\U000e0041",
}


def tricked(trajectory: Trajectory, text: str) -> Trajectory:
    data = trajectory.model_dump(mode="json")
    del data["id"], data["task"]["id"]
    data["task"]["goal"] += f" ({text})"
    data["steps"][0]["model_output"] = text
    data["steps"][-1]["action"] = {"kind": "finish", "answer": text}
    return Trajectory.model_validate(data)


@pytest.mark.slow
def test_label_studio_stores_no_invisible_character_and_flags_each_step(
    label_studio: LabelStudioAccess,
) -> None:
    sandbox = MobileSandbox()
    base = next(
        t
        for t in (run_episode(x, sandbox, ScriptedPolicy()) for x in sample_tasks(20, 9, sandbox))
        if len(t.steps) >= 2
    )
    items = []
    for text in TRICKS.values():
        trajectory = tricked(base, text)
        (record,) = curate([trajectory], "r")
        record = record.model_copy(
            update={"routing": Routing.NEEDS_HUMAN, "suggested": ReviewDecision.QUARANTINE}
        )
        items.append(GateItem(trajectory, record))
    round_id = f"invisible-{uuid.uuid4().hex[:8]}"
    gate = LabelStudioGate.connect(label_studio.url, label_studio.token)
    gate.submit(round_id, items)
    project = gate.project_id(round_id)
    assert project is not None
    listed: list[Any] = list(gate.client.tasks.list(project=project))
    stored = {t.data["trajectory_id"]: t.data for t in listed}
    assert set(stored) == {i.trajectory_id for i in items}
    for item, text in zip(items, TRICKS.values(), strict=True):
        data = stored[item.trajectory_id]
        for field in ("html", "goal"):
            assert not INVISIBLE.search(str(data[field])), field
        html = str(data["html"])
        assert html.count("⚠ invisible characters") >= 2  # the first and last steps
        assert "invisible characters in the goal" in html
        hidden = next(c for c in text if INVISIBLE.match(c))
        assert f"U+{ord(hidden):04X}" in html
