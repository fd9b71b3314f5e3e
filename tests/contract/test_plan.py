"""Generation plans: backward-compatible feedback fields, validation naming the field, and
the change table."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from contract import (
    Capability,
    Difficulty,
    FailureType,
    GenerationPlan,
    Quota,
    Recurate,
    RepairQuota,
    Replay,
    TaskPattern,
    TemplateWeight,
    default_plan,
)


def test_a_default_plan_serializes_as_before_the_feedback_fields() -> None:
    plan = default_plan(30)
    data = plan.model_dump(mode="json")
    assert set(data) == {"quotas", "source"}
    assert GenerationPlan.model_validate(data) == plan
    assert plan.total == plan.quota_total == 30
    assert plan.changes() == []
    assert plan.recollect_fingerprints == frozenset()


def _feedback_plan() -> GenerationPlan:
    quotas = list(default_plan(20).quotas)
    quotas[3] = quotas[3].model_copy(update={"count": 1, "reason": "memory mastered: 2 → 1"})
    return GenerationPlan(
        quotas=tuple(quotas),
        source="feedback fb-1",
        repairs=(RepairQuota(failure_type=FailureType.ARGUMENT_GROUNDING, count=3, reason="g"),),
        replays=(Replay(fingerprint="fp-b", attempts=4, reason="inconsistent"),),
        preserve=(Replay(fingerprint="fp-a", attempts=1, reason="mastered"),),
        recurate=(Recurate(fingerprint="fp-c", reason="unknown to the catalog"),),
        template_weights=(TemplateWeight(template="text_contact", weight=0.5, reason="m"),),
    )


def test_feedback_fields_round_trip_and_count() -> None:
    plan = _feedback_plan()
    assert GenerationPlan.from_json(plan.to_json()) == plan
    assert plan.quota_total == 19 and plan.repair_total == 3 and plan.total == 22
    assert plan.recollect_fingerprints == {"fp-a", "fp-b"}
    assert plan.repairs[0].pattern is TaskPattern.GROUNDING


def test_the_change_table_lists_every_change_with_its_reason() -> None:
    plan = _feedback_plan()
    rows = {row.what: row for row in plan.changes()}
    baseline = {(q.capability, q.difficulty): q.count for q in default_plan(22).quotas}
    changed = [q for q in plan.quotas if q.count != baseline[(q.capability, q.difficulty)]]
    for q in changed:
        row = rows[f"quota {q.capability.value}/{q.difficulty.value}"]
        assert (row.before, row.after, row.reason) == (
            baseline[(q.capability, q.difficulty)],
            q.count,
            q.reason,
        )
    assert rows["repair argument_grounding"].model_dump() == {
        "what": "repair argument_grounding",
        "before": 0,
        "after": 3,
        "reason": "g",
    }
    assert (rows["replay fp-b"].after, rows["replay fp-b"].reason) == (4, "inconsistent")
    assert (rows["preserve fp-a"].after, rows["preserve fp-a"].reason) == (1, "mastered")
    assert (rows["template text_contact"].before, rows["template text_contact"].after) == (1, 0.5)
    assert rows["recurate fp-c"].reason == "unknown to the catalog"
    assert len(rows) == len(changed) + 5
    assert all(row.reason for row in rows.values())


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"replays": [{"fingerprint": "fp-a", "attempts": 2}] * 2}, "replays: fp-a appears twice"),
        (
            {"preserve": [{"fingerprint": "fp-a", "attempts": 1}] * 2},
            "preserve: fp-a appears twice",
        ),
        (
            {
                "replays": [{"fingerprint": "fp-a", "attempts": 2}],
                "preserve": [{"fingerprint": "fp-a", "attempts": 1}],
            },
            "preserve: fp-a is also in replays",
        ),
        (
            {
                "replays": [{"fingerprint": "fp-a", "attempts": 2}],
                "recurate": [{"fingerprint": "fp-a", "reason": "doubtful"}],
            },
            "recurate: fp-a goes back to curation",
        ),
        (
            {"repairs": [{"failure_type": "routing", "count": 1}] * 2},
            "repairs: routing appears twice",
        ),
        (
            {"template_weights": [{"template": "t", "weight": 0.5}] * 2},
            "template_weights: t appears twice",
        ),
        ({"replays": [{"fingerprint": "fp-a", "attempts": 0}]}, r"replays\.0\.attempts"),
        ({"template_weights": [{"template": "t", "weight": 1.5}]}, r"template_weights\.0\.weight"),
        ({"repairs": [{"failure_type": "typo", "count": 1}]}, r"repairs\.0\.failure_type"),
    ],
)
def test_bad_plans_are_refused_naming_the_field(changes: dict[str, object], message: str) -> None:
    data = {**default_plan(4).model_dump(mode="json"), **changes}
    with pytest.raises(ValidationError, match=message):
        GenerationPlan.model_validate(data)


def test_a_cell_still_appears_once() -> None:
    quota = Quota(capability=Capability.MEMORY, difficulty=Difficulty.EASY, count=1)
    with pytest.raises(ValidationError, match=r"quotas: a .* cell appears twice"):
        GenerationPlan(quotas=(quota, quota))
