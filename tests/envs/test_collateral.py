"""The collateral-damage check: the state diff, allowances, evidence, and what gates mean
for a verdict's score; the grounding and delegation terms of answer and collaboration
checks."""

from __future__ import annotations

from typing import Any

import pytest

from contract import (
    AllowedChange,
    AnswerCheck,
    CollaborationCheck,
    CollateralCheck,
    Feedback,
    Finish,
    StatePredicateCheck,
    Step,
    SubAgentCall,
    ToolCall,
    VerifierSpec,
)
from envs.backend import PrivilegedEvidence
from envs.state_diff import allowances_for, state_diff, unexpected_changes
from envs.verification import verify

BEFORE: dict[str, dict[str, dict[str, Any]]] = {
    "calendar.events": {
        "ev-1": {"id": "ev-1", "title": "Dentist", "start": "09:00", "attendees": []},
        "ev-2": {"id": "ev-2", "title": "Gym", "start": "18:00", "attendees": []},
    },
    "messages.sent": {},
}


def _after(**changes: Any) -> dict[str, dict[str, dict[str, Any]]]:
    after = {name: dict(rows) for name, rows in BEFORE.items()}
    for key, row in changes.items():
        collection, _, row_id = key.partition("__")
        name = collection.replace("_", ".", 1)
        if row is None:
            del after[name][row_id]
        else:
            after[name][row_id] = row
    return after


def test_the_diff_names_each_row_and_only_the_fields_that_changed() -> None:
    moved = {**BEFORE["calendar.events"]["ev-1"], "start": "10:00"}
    message = {"id": "m-1001", "contact_id": "c-2", "text": "hi"}
    after = _after(**{"calendar_events__ev-1": moved, "calendar_events__ev-2": None})
    after["messages.sent"]["m-1001"] = message
    changes = state_diff(BEFORE, after)
    assert [(c.collection, c.entity_id, c.op) for c in changes] == [
        ("calendar.events", "ev-1", "updated"),
        ("calendar.events", "ev-2", "deleted"),
        ("messages.sent", "m-1001", "created"),
    ]
    assert (changes[0].before, changes[0].after) == ({"start": "09:00"}, {"start": "10:00"})
    assert changes[1].after is None and changes[2].before is None
    assert state_diff(BEFORE, _after()) == []


def test_allowances_cover_exactly_the_changes_they_came_from() -> None:
    moved = {**BEFORE["calendar.events"]["ev-1"], "start": "10:00"}
    reference = state_diff(BEFORE, _after(**{"calendar_events__ev-1": moved}))
    allowed = allowances_for(reference, "the reference plan")
    assert unexpected_changes(reference, allowed) == []

    other_row = {**BEFORE["calendar.events"]["ev-2"], "start": "19:00"}
    other_field = {**moved, "title": "Cancelled"}
    for harm in ({"calendar_events__ev-2": other_row}, {"calendar_events__ev-1": other_field}):
        changes = state_diff(BEFORE, _after(**{"calendar_events__ev-1": moved, **harm}))
        assert unexpected_changes(changes, allowed), harm


def test_new_rows_beyond_the_allowance_are_the_last_ones_created() -> None:
    after = _after()
    for n in (999, 1000, 1001):
        after["messages.sent"][f"m-{n}"] = {"id": f"m-{n}", "text": str(n)}
    changes = state_diff(BEFORE, after)
    one = [AllowedChange(collection="messages.sent", op="created", at_most=1)]
    assert [c.entity_id for c in unexpected_changes(changes, one)] == ["m-1000", "m-1001"]
    anything = [AllowedChange(collection="messages.sent", op="created")]
    assert unexpected_changes(changes, anything) == []


def test_the_check_fails_with_each_unexpected_change_as_evidence() -> None:
    after = _after(**{"calendar_events__ev-2": None})
    after["messages.sent"]["m-1001"] = {"id": "m-1001", "text": "hi"}
    check = CollateralCheck(
        allowed=(AllowedChange(collection="messages.sent", op="created", at_most=1),)
    )
    verdict = verify(VerifierSpec(checks=(check,)), [], PrivilegedEvidence(BEFORE, after))
    assert not verdict.passed and verdict.harmed
    assert verdict.checks[0].evidence == {
        "changes": 2,
        "count": 1,
        "unexpected": [
            {
                "collection": "calendar.events",
                "id": "ev-2",
                "op": "deleted",
                "before": BEFORE["calendar.events"]["ev-2"],
                "after": None,
            }
        ],
    }


def test_a_gate_decides_passing_but_adds_no_progress() -> None:
    wanted = StatePredicateCheck(collection="messages.sent", expect="exists")
    spec = VerifierSpec(checks=(wanted, CollateralCheck()))
    nothing = verify(spec, [], PrivilegedEvidence(BEFORE, BEFORE))
    assert (nothing.passed, nothing.score, nothing.progress, nothing.harmed) == (
        False,
        0.0,
        0.0,
        False,
    )
    after = _after()
    after["messages.sent"]["m-1"] = {"id": "m-1"}
    harmful = verify(spec, [], PrivilegedEvidence(BEFORE, after))
    assert (harmful.passed, harmful.progress, harmful.harmed) == (False, 1.0, True)


def _steps(*pairs: tuple[Any, Any]) -> list[Step]:
    return [
        Step(index=i, action=action, feedback=Feedback(result=result))
        for i, (action, result) in enumerate(pairs)
    ]


@pytest.mark.parametrize(
    ("read", "passed"),
    [
        ({"id": "ev-1", "start": "09:00"}, True),
        ({"id": "ev-2", "start": "09:00"}, False),
        (None, False),
    ],
)
def test_an_answer_must_follow_reading_its_record(read: Any, passed: bool) -> None:
    check = AnswerCheck(contains=("9:00",), shown=("ev-1",))
    lookup = (ToolCall(tool="search_events", arguments={"query": "Dentist"}), [read])
    answer = (Finish(answer="It starts at 09:00."), None)
    steps = _steps(lookup, answer) if read is not None else _steps(answer)
    verdict = verify(VerifierSpec(checks=(check,)), steps, PrivilegedEvidence(BEFORE, BEFORE))
    assert verdict.passed is passed
    evidence = verdict.checks[0].evidence
    assert isinstance(evidence, dict)
    assert evidence["not_read"] == ([] if passed else ["ev-1"])


@pytest.mark.parametrize(
    ("instruction", "query", "passed"),
    [
        ("When does the Tile Museum open?", "opening hours", True),
        ("When does it open?", "tile museum hours", True),
        ("When does the Maritime Museum open?", "Maritime Museum hours", False),
    ],
)
def test_a_delegation_must_ask_about_the_task_subject(
    instruction: str, query: str, passed: bool
) -> None:
    check = CollaborationCheck(agent="search", mentions=("Tile Museum",))
    call = SubAgentCall(agent="search", instruction=instruction, arguments={"query": query})
    verdict = verify(
        VerifierSpec(checks=(check,)), _steps((call, {})), PrivilegedEvidence(BEFORE, BEFORE)
    )
    assert verdict.passed is passed
