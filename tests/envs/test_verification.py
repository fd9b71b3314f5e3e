"""The verifier engine on histories and states built by hand."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from contract import (
    Action,
    ActionOrderCheck,
    ActionPattern,
    AnswerCheck,
    CollaborationCheck,
    Condition,
    ErrorKind,
    ExactToolCallCheck,
    Feedback,
    Finish,
    MemoryRead,
    Refuse,
    RubricCheck,
    StatePredicateCheck,
    Step,
    SubAgentCall,
    ToolCall,
    VerifierSpec,
)
from envs.backend import PrivilegedEvidence
from envs.verification import verify

BEFORE = {
    "calendar.events": {
        "ev-1": {"id": "ev-1", "title": "Dentist", "date": "2026-03-16", "start": "09:00"},
        "ev-2": {"id": "ev-2", "title": "Gym", "date": "2026-03-17", "start": "18:00"},
    }
}
AFTER = {
    "calendar.events": {
        "ev-1": {"id": "ev-1", "title": "Dentist", "date": "2026-03-16", "start": "10:00"},
        "ev-2": {"id": "ev-2", "title": "Gym", "date": "2026-03-17", "start": "18:00"},
        "ev-3": {"id": "ev-3", "title": "Lunch with Ana", "date": "2026-03-18", "start": "12:30"},
    }
}


def _steps(*actions: Action, failed: Sequence[int] = ()) -> list[Step]:
    refused = Feedback.failure(ErrorKind.PRECONDITION_FAILED, "no")
    return [
        Step(index=i, action=a, feedback=refused if i in failed else Feedback())
        for i, a in enumerate(actions)
    ]


def _check(check: Any, steps: list[Step]) -> tuple[bool, Any]:
    verdict = verify(VerifierSpec(checks=(check,)), steps, PrivilegedEvidence(BEFORE, AFTER))
    return verdict.passed, verdict.checks[0].evidence


def test_state_predicates() -> None:
    lunch = (Condition(field="title", op="icontains", value="lunch"),)
    assert _check(StatePredicateCheck(collection="calendar.events", where=lunch), [])[0]
    moved = (Condition(field="title", value="dentist"), Condition(field="start", value="09:00"))
    met, evidence = _check(StatePredicateCheck(collection="calendar.events", where=moved), [])
    assert not met
    assert evidence["closest"] == {"id": "ev-1", "unmet": ["start eq '09:00'"]}
    late = (Condition(field="start", op="gte", value="12:00"),)
    assert not _check(
        StatePredicateCheck(collection="calendar.events", where=late, expect="exactly_one"), []
    )[0]
    assert _check(
        StatePredicateCheck(collection="calendar.events", where=late, expect="exists"), []
    )[0]
    gym = (Condition(field="title", value="Gym"),)
    dentist = (Condition(field="title", value="Dentist"),)
    unchanged = StatePredicateCheck(collection="calendar.events", where=gym, expect="unchanged")
    changed = StatePredicateCheck(collection="calendar.events", where=dentist, expect="unchanged")
    assert _check(unchanged, [])[0] and not _check(changed, [])[0]
    within = (Condition(field="date", op="in", value=["2026-03-18", "2026-03-19"]),)
    assert _check(
        StatePredicateCheck(collection="calendar.events", where=within, expect="exactly_one"), []
    )[0]
    met, evidence = _check(StatePredicateCheck(collection="nowhere.rows"), [])
    assert not met and "unknown collection" in evidence["error"]


def test_exact_tool_call_counts_only_successful_calls() -> None:
    call = ToolCall(tool="set_alarm", arguments={"time": "07:30", "label": "Gym"})
    subset = ExactToolCallCheck(tool="set_alarm", arguments={"time": "07:30"})
    exact = ExactToolCallCheck(tool="set_alarm", arguments={"time": "07:30"}, match="exact")
    assert _check(subset, _steps(call))[0]
    assert not _check(exact, _steps(call))[0]
    assert not _check(subset, _steps(call, failed=[0]))[0]


def test_action_order_is_an_ordered_subsequence() -> None:
    check = ActionOrderCheck(
        sequence=(
            ActionPattern(kind="memory_read", target="user.sister"),
            ActionPattern(kind="tool_call", target="send_message", arguments={"contact_id": "c-2"}),
        )
    )
    read = MemoryRead(key="user.sister")
    send = ToolCall(tool="send_message", arguments={"contact_id": "c-2", "text": "hi"})
    other = ToolCall(tool="search_contacts", arguments={"query": "x"})
    assert _check(check, _steps(read, other, send))[0]
    met, evidence = _check(check, _steps(send, read))
    assert not met and evidence["matched"] == 1
    assert not _check(check, _steps(read, send, failed=[0]))[0]


def test_collaboration_pattern() -> None:
    check = CollaborationCheck(
        agent="gui",
        arguments={"app": "bank"},
        then=ActionPattern(kind="tool_call", target="send_money"),
        forbidden_agents=("search",),
        max_calls=2,
    )
    gui = SubAgentCall(agent="gui", instruction="read the code", arguments={"app": "bank"})
    pay = ToolCall(tool="send_money", arguments={})
    search = SubAgentCall(agent="search", instruction="look it up")
    assert _check(check, _steps(gui, pay))[0]
    assert not _check(check, _steps(pay, gui))[0]
    assert not _check(check, _steps(gui, search, pay))[0]
    assert not _check(check, _steps(gui, gui, gui, pay))[0]


def test_answer_checks_the_terminal_action_and_its_words() -> None:
    check = AnswerCheck(contains=("08:30", "Dentist"))
    assert _check(check, _steps(Finish(answer="Your dentist is at 8:30 tomorrow.")))[0]
    met, evidence = _check(check, _steps(Finish(answer="It is at 9:30.")))
    assert not met and evidence["missing"] == ["08:30", "Dentist"]
    assert not _check(check, _steps(Refuse(reason="08:30 dentist")))[0]
    assert _check(AnswerCheck(via="refuse"), _steps(Refuse(reason="too risky")))[0]


def test_rubric_needs_a_judge() -> None:
    check = RubricCheck(criteria="polite")
    steps = _steps(Finish(answer="ok"))
    evidence = PrivilegedEvidence(BEFORE, AFTER)
    spec = VerifierSpec(checks=(check,))
    assert not verify(spec, steps, evidence).passed
    judged = verify(spec, steps, evidence, judge=lambda c, s: (True, "polite enough"))
    assert judged.passed and judged.checks[0].evidence == {"judge": "polite enough"}


def test_score_is_weighted_and_progress_is_the_share_met() -> None:
    spec = VerifierSpec(
        checks=(
            StatePredicateCheck(collection="calendar.events", weight=3.0),
            AnswerCheck(contains=("never said",)),
        )
    )
    verdict = verify(spec, _steps(Finish(answer="done")), PrivilegedEvidence(BEFORE, AFTER))
    assert not verdict.passed
    assert verdict.progress == 0.5
    assert verdict.score == 0.75


def _credits(spec: VerifierSpec, steps: list[Step]) -> tuple[float | None, ...]:
    verdict = verify(spec, steps, PrivilegedEvidence(BEFORE, AFTER))
    return tuple(c.credit for c in verdict.checks)


def test_an_unmet_state_check_earns_the_share_its_best_changed_row_meets() -> None:
    # ev-3 was created: right title and date, wrong start; ev-1 (changed) meets less
    lunch = (
        Condition(field="title", op="icontains", value="lunch"),
        Condition(field="date", value="2026-03-18"),
        Condition(field="start", value="13:00"),
    )
    check = StatePredicateCheck(collection="calendar.events", where=lunch)
    (credit,) = _credits(VerifierSpec(checks=(check,)), [])
    assert credit == pytest.approx(2 / 3)


def test_rows_the_episode_did_not_touch_earn_nothing() -> None:
    # ev-2 meets two of three conditions but was there before: doing nothing earns 0
    gym = (
        Condition(field="title", value="Gym"),
        Condition(field="date", value="2026-03-17"),
        Condition(field="start", value="07:00"),
    )
    spec = VerifierSpec(checks=(StatePredicateCheck(collection="calendar.events", where=gym),))
    assert _credits(spec, []) == (None,)
    untouched = verify(spec, [], PrivilegedEvidence(BEFORE, BEFORE))
    assert untouched.partial_progress == 0.0


def test_order_and_exact_call_credit_what_was_done_and_never_reach_a_met_check() -> None:
    read = MemoryRead(key="user.sister")
    look = ToolCall(tool="search_contacts", arguments={"query": "Ana"})
    send = ToolCall(tool="send_message", arguments={"contact_id": "c-9", "text": "hi"})
    order = ActionOrderCheck(
        sequence=(
            ActionPattern(kind="memory_read", target="user.sister"),
            ActionPattern(kind="tool_call", target="search_contacts"),
            ActionPattern(kind="tool_call", target="send_message"),
            ActionPattern(kind="finish"),
        )
    )
    exact = ExactToolCallCheck(tool="send_message", arguments={"contact_id": "c-2", "text": "hi"})
    spec = VerifierSpec(checks=(order, exact))
    assert _credits(spec, _steps(read, look, send)) == (0.75, 0.5)
    assert _credits(spec, _steps(look, read)) == (0.25, None)
    full = ExactToolCallCheck(tool="send_message", arguments={"text": "hi"}, weight=2.0)
    twice = VerifierSpec(checks=(full, exact))
    verdict = verify(twice, _steps(send), PrivilegedEvidence(BEFORE, AFTER))
    assert [c.met for c in verdict.checks] == [True, False]
    assert verdict.partial_progress == 0.75
    assert verdict.progress == 0.5


def test_a_collaboration_with_the_right_agent_done_wrong_earns_half() -> None:
    check = CollaborationCheck(agent="gui", arguments={"app": "bank"})
    wrong_app = SubAgentCall(agent="gui", instruction="read", arguments={"app": "mail"})
    search = SubAgentCall(agent="search", instruction="look it up")
    spec = VerifierSpec(checks=(check,))
    assert _credits(spec, _steps(wrong_app)) == (0.5,)
    assert _credits(spec, _steps(search)) == (None,)


def test_a_met_check_records_no_credit_so_stored_verdicts_keep_their_ids() -> None:
    lunch = (Condition(field="title", op="icontains", value="lunch"),)
    verdict = verify(
        VerifierSpec(checks=(StatePredicateCheck(collection="calendar.events", where=lunch),)),
        [],
        PrivilegedEvidence(BEFORE, AFTER),
    )
    assert verdict.checks[0].credit is None
    assert "credit" not in verdict.checks[0].model_dump(mode="json")


def test_several_changed_rows_matching_where_one_was_asked_earn_half() -> None:
    lunch = (Condition(field="title", op="icontains", value="lunch"),)
    check = StatePredicateCheck(collection="calendar.events", where=lunch, expect="exactly_one")
    twice = {
        "calendar.events": {
            **AFTER["calendar.events"],
            "ev-4": {"id": "ev-4", "title": "Lunch", "date": "2026-03-19", "start": "12:00"},
        }
    }
    verdict = verify(VerifierSpec(checks=(check,)), [], PrivilegedEvidence(BEFORE, twice))
    assert not verdict.passed
    assert verdict.checks[0].credit == 0.5
    once = verify(VerifierSpec(checks=(check,)), [], PrivilegedEvidence(BEFORE, AFTER))
    assert once.passed and once.checks[0].credit is None
