"""The verifier engine: a pure function from a spec, the history and privileged evidence
to a verdict. Backend-independent: it reads states as collections of rows.

An unmet check may earn partial credit (``CheckResult.credit``, CARE's shaped progress),
for what the episode itself did and never for what the world already held:

- a state check expecting a row: the share of its conditions met by the best row the
  episode created or changed in that collection (half when it made several matches
  where one was expected);
- an action order: the share of its steps done in order;
- an exact tool call: the share of its arguments met by the best successful call of
  that tool;
- a collaboration: half, when the agent was called but not as the check asks;
- BFCL's check: the share of its turn checks met (``envs.bfcl.verify``).

Checks of other kinds earn nothing short of being met, and no unmet check earns more
than ``MAX_CREDIT``."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import orjson
from lxml import etree
from pydantic import JsonValue

from contract import (
    Action,
    ActionOrderCheck,
    ActionPattern,
    AnswerCheck,
    BfclCheck,
    Check,
    CheckResult,
    Clarify,
    CollaborationCheck,
    CollateralCheck,
    Condition,
    ExactToolCallCheck,
    Finish,
    Refuse,
    RejectedTask,
    RejectionReason,
    RubricCheck,
    StatePredicateCheck,
    Step,
    SubAgentCall,
    TaskSpec,
    ToolCall,
    UIStateCheck,
    Verdict,
    VerifierSpec,
)
from envs.backend import Backend, PrivilegedEvidence, Row
from envs.bfcl.verify import check_steps
from envs.screen import ScreenError, parse_screen, select
from envs.state_diff import state_diff, unexpected_changes

MAX_CREDIT = 0.75
"""The most an unmet check earns: a met one is always worth more."""

RubricJudge = Callable[[RubricCheck, Sequence[Step]], tuple[bool, str]]
"""Judges a rubric check on the history: (met, explanation). An LLM in production."""


def verify(
    spec: VerifierSpec,
    steps: Sequence[Step],
    evidence: PrivilegedEvidence,
    judge: RubricJudge | None = None,
) -> Verdict:
    """Run every check of ``spec``; passed when all are met."""
    done = [s.action for s in steps if s.action is not None and s.feedback.error is None]
    results = tuple(_run_check(check, steps, done, evidence, judge) for check in spec.checks)
    return Verdict.from_checks(results)


def replay_plan(task: TaskSpec, plan: Sequence[Action], backend: Backend) -> Verdict:
    """Run ``plan`` on the task's fresh initial state on ``backend``, without a policy,
    and verify it (a reference plan's self-check, a verifier's strength probes)."""
    backend.reset(task)
    steps = [
        Step(index=i, action=action, feedback=backend.execute(action))
        for i, action in enumerate(plan)
    ]
    return verify(task.verifier, steps, backend.evidence())


def references_passing(
    round_id: str, tasks: Iterable[TaskSpec], backend: Backend, limit: int | None = None
) -> tuple[list[TaskSpec], list[RejectedTask]]:
    """Up to ``limit`` (None: all) of ``tasks``, in order, whose reference plan passes
    its verifier on ``backend`` (a constructor's self-check), and those met before that
    which fail, as rejections naming the checks they did not meet."""
    accepted: list[TaskSpec] = []
    rejected: list[RejectedTask] = []
    for task in tasks:
        if limit is not None and len(accepted) >= limit:
            break
        verdict = replay_plan(task, task.reference_plan, backend)
        if verdict.passed:
            accepted.append(task)
            continue
        failing = "; ".join(c.description for c in verdict.checks if not c.met)
        rejected.append(
            RejectedTask(
                round_id=round_id,
                fingerprint=task.fingerprint,
                template=task.template,
                reason=RejectionReason.REFERENCE_FAILS,
                detail=f"{task.params.get('id', task.id)}: {failing}",
                goal=task.goal,
            )
        )
    return accepted, rejected


def _run_check(
    check: Check,
    steps: Sequence[Step],
    done: list[Action],
    evidence: PrivilegedEvidence,
    judge: RubricJudge | None,
) -> CheckResult:
    if isinstance(check, ExactToolCallCheck):
        met, info = _exact_tool_call(check, done)
    elif isinstance(check, StatePredicateCheck):
        met, info = _state(check, evidence)
    elif isinstance(check, ActionOrderCheck):
        met, info = _action_order(check, done)
    elif isinstance(check, CollaborationCheck):
        met, info = _collaboration(check, steps, done)
    elif isinstance(check, AnswerCheck):
        met, info = _answer(check, steps)
    elif isinstance(check, UIStateCheck):
        met, info = _ui_state(check, evidence)
    elif isinstance(check, CollateralCheck):
        met, info = _collateral(check, evidence)
    elif isinstance(check, BfclCheck):
        # One replay gives the verdict and the share of turn checks met (its credit).
        met, info, share = check_steps(check.task, steps)
        return _result(check, met, info, None if met else _capped(share))
    else:
        met, info = _rubric(check, steps, judge)
    return _result(check, met, info, None if met else _credit(check, done, evidence))


def _result(check: Check, met: bool, info: JsonValue, credit: float | None) -> CheckResult:
    return CheckResult(
        kind=check.kind,
        description=check.describe(),
        met=met,
        weight=check.weight,
        evidence=info,
        credit=credit,
    )


def _credit(check: Check, done: list[Action], evidence: PrivilegedEvidence) -> float | None:
    """What an unmet check earns (module docstring); None for nothing."""
    share: float = 0.0
    if isinstance(check, StatePredicateCheck) and check.expect in ("exists", "exactly_one"):
        share = _state_credit(check, evidence)
    elif isinstance(check, ActionOrderCheck) and check.sequence:
        share = _done_in_order(check, done) / len(check.sequence)
    elif isinstance(check, ExactToolCallCheck) and check.arguments:
        calls = [a for a in done if isinstance(a, ToolCall) and a.tool == check.tool]
        met = max((_arguments_met(check.arguments, c.arguments) for c in calls), default=0)
        share = met / len(check.arguments)
    elif isinstance(check, CollaborationCheck):
        called = any(isinstance(a, SubAgentCall) and a.agent == check.agent for a in done)
        share = 0.5 if called else 0.0
    return _capped(share)


def _capped(share: float) -> float | None:
    return round(min(share, MAX_CREDIT), 6) if share > 0 else None


def _state_credit(check: StatePredicateCheck, evidence: PrivilegedEvidence) -> float:
    final = evidence.final.get(check.collection) or {}
    initial = evidence.initial.get(check.collection) or {}
    changed = [row for key, row in final.items() if initial.get(key) != row]
    if not changed or not check.where:
        return 0.0
    if len(_filter(changed, check.where)) > 1:
        return 0.5
    best = max(_conditions_met(row, check.where) for row in changed)
    return best / len(check.where)


# -- value matching -------------------------------------------------------------------


def same(expected: Any, actual: Any) -> bool:
    """Equality that forgives case and surrounding spaces in strings, and int vs float."""
    if isinstance(expected, str) and isinstance(actual, str):
        return expected.strip().casefold() == actual.strip().casefold()
    if isinstance(expected, bool) or isinstance(actual, bool):
        return expected is actual
    if isinstance(expected, int | float) and isinstance(actual, int | float):
        return float(expected) == float(actual)
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(map(same, expected, actual))
    if isinstance(expected, dict) and isinstance(actual, dict):
        return expected.keys() == actual.keys() and all(
            same(v, actual[k]) for k, v in expected.items()
        )
    return bool(expected == actual)


def arguments_match(expected: Mapping[str, Any], actual: Mapping[str, Any]) -> bool:
    return _arguments_met(expected, actual) == len(expected)


def _arguments_met(expected: Mapping[str, Any], actual: Mapping[str, Any]) -> int:
    """How many of the expected arguments ``actual`` has, with the same value."""
    return sum(1 for k, v in expected.items() if k in actual and same(v, actual[k]))


def _condition(cond: Condition, row: Row) -> bool:
    if cond.field not in row:
        return False
    value, target = row[cond.field], cond.value
    op = cond.op
    if op == "eq":
        return same(target, value)
    if op == "ne":
        return not same(target, value)
    if op in ("contains", "icontains"):
        if isinstance(value, str) and isinstance(target, str):
            if op == "icontains":
                return target.casefold() in value.casefold()
            return target in value
        if isinstance(value, list):
            return any(same(target, v) if op == "icontains" else target == v for v in value)
        return False
    if op == "in":
        return isinstance(target, list) and any(same(t, value) for t in target)
    try:
        if op == "gt":
            return bool(value > target)
        if op == "gte":
            return bool(value >= target)
        if op == "lt":
            return bool(value < target)
        return bool(value <= target)
    except TypeError:
        return False


def matches(pattern: ActionPattern, action: Action) -> bool:
    if action.kind != pattern.kind:
        return False
    if pattern.target is not None and not same(pattern.target, action.target):
        return False
    if pattern.arguments:
        args = action.arguments if isinstance(action, ToolCall | SubAgentCall) else {}
        return arguments_match(pattern.arguments, args)
    return True


# -- check kinds ----------------------------------------------------------------------


def _exact_tool_call(check: ExactToolCallCheck, done: list[Action]) -> tuple[bool, JsonValue]:
    calls = [a for a in done if isinstance(a, ToolCall) and a.tool == check.tool]
    for call in calls:
        ok = arguments_match(check.arguments, call.arguments)
        if ok and check.match == "exact":
            ok = set(call.arguments) == set(check.arguments)
        if ok:
            return True, {"matched_call": call.arguments}
    return False, {"calls_of_tool": [c.arguments for c in calls[:5]]}


def _filter(rows: Iterable[Row], where: Sequence[Condition]) -> list[Row]:
    return [r for r in rows if all(_condition(c, r) for c in where)]


def _state(check: StatePredicateCheck, evidence: PrivilegedEvidence) -> tuple[bool, JsonValue]:
    final = evidence.final.get(check.collection)
    if final is None:
        return False, {"error": f"unknown collection {check.collection!r}"}
    matched = _filter(final.values(), check.where)
    ids = [str(r.get("id")) for r in matched]
    info: dict[str, Any] = {"matched": ids[:5], "count": len(ids)}
    if check.expect == "exists":
        met = bool(matched)
    elif check.expect == "exactly_one":
        met = len(matched) == 1
    elif check.expect == "absent":
        met = not matched
    else:
        before = _filter(evidence.initial.get(check.collection, {}).values(), check.where)
        met = sorted(before, key=_row_key) == sorted(matched, key=_row_key)
        info["before"] = [str(r.get("id")) for r in before][:5]
    if not met and check.expect in ("exists", "exactly_one") and not matched:
        info["closest"] = _closest(final.values(), check.where)
    return met, info


def _row_key(row: Row) -> str:
    return str(row.get("id"))


def _closest(rows: Iterable[Row], where: Sequence[Condition]) -> JsonValue:
    """The row meeting the most conditions, and which it misses: evidence for attribution."""
    best: tuple[int, Row] | None = None
    for row in rows:
        score = _conditions_met(row, where)
        if best is None or score > best[0]:
            best = (score, row)
    if best is None:
        return None
    row = best[1]
    return {
        "id": str(row.get("id")),
        "unmet": [c.describe() for c in where if not _condition(c, row)],
    }


def _conditions_met(row: Row, where: Sequence[Condition]) -> int:
    return sum(_condition(c, row) for c in where)


def _done_in_order(check: ActionOrderCheck, done: list[Action]) -> int:
    """How many of the sequence's steps ``done`` took, in order (a subsequence)."""
    position = 0
    for action in done:
        if position < len(check.sequence) and matches(check.sequence[position], action):
            position += 1
    return position


def _action_order(check: ActionOrderCheck, done: list[Action]) -> tuple[bool, JsonValue]:
    position = _done_in_order(check, done)
    met = position == len(check.sequence)
    info: dict[str, Any] = {"matched": position, "of": len(check.sequence)}
    if not met:
        info["missing"] = check.sequence[position].describe()
    return met, info


def _collaboration(
    check: CollaborationCheck, steps: Sequence[Step], done: list[Action]
) -> tuple[bool, JsonValue]:
    attempted = [s.action for s in steps if isinstance(s.action, SubAgentCall)]
    forbidden = sorted({a.agent for a in attempted if a.agent in check.forbidden_agents})
    calls = [
        i
        for i, a in enumerate(done)
        if isinstance(a, SubAgentCall)
        and a.agent == check.agent
        and arguments_match(check.arguments, a.arguments)
    ]
    count = sum(1 for a in attempted if a.agent == check.agent)
    info: dict[str, Any] = {"calls": count, "forbidden_used": list(forbidden)}
    if not calls:
        info["problem"] = f"no successful call of the {check.agent} agent"
        return False, info
    if check.mentions:
        asked = [_request_text(done[i]) for i in calls]
        calls = [
            i for i, text in zip(calls, asked, strict=True) if _names_all(text, check.mentions)
        ]
        if not calls:
            info["problem"] = (
                f"the {check.agent} agent was never asked about {list(check.mentions)}"
            )
            return False, info
    if forbidden or count > check.max_calls:
        info["problem"] = "forbidden agent used" if forbidden else "too many calls"
        return False, info
    if check.then is not None:
        then = check.then
        if not any(matches(then, a) for a in done[calls[0] + 1 :]):
            info["problem"] = f"no {then.describe()} after the delegation"
            return False, info
    return True, info


def _request_text(action: Action) -> str:
    """What a sub-agent was asked: its instruction and the values of its arguments."""
    if not isinstance(action, SubAgentCall):
        return ""
    return " ".join(
        [action.instruction, *(orjson.dumps(v).decode() for v in action.arguments.values())]
    )


def _names_all(text: str, terms: Sequence[str]) -> bool:
    said = _normalize_answer(text)
    return all(_normalize_answer(t) in said for t in terms)


def _shown_text(steps: Sequence[Step]) -> str:
    """Everything the agent was shown by successful steps: results and screens."""
    parts = [
        orjson.dumps(s.feedback.result).decode() + " " + (s.observation or "")
        for s in steps
        if s.action is not None and s.feedback.error is None
    ]
    return _normalize_answer(" ".join(parts))


def _answer(check: AnswerCheck, steps: Sequence[Step]) -> tuple[bool, JsonValue]:
    last = steps[-1].action if steps else None
    text = ""
    if isinstance(last, Finish):
        text = last.answer
    elif isinstance(last, Clarify):
        text = last.question
    elif isinstance(last, Refuse):
        text = last.reason
    if last is None or last.kind != check.via:
        return False, {"ended_with": last.kind if last is not None else None}
    said = _normalize_answer(text)
    missing: list[JsonValue] = [t for t in check.contains if _normalize_answer(t) not in said]
    info: dict[str, Any] = {"text": text[:500], "missing": missing}
    if check.shown:
        read = _shown_text(steps[:-1])
        unread: list[JsonValue] = [v for v in check.shown if _normalize_answer(v) not in read]
        info["not_read"] = unread
        missing += unread
    return not missing, info


_LEADING_ZERO_HOUR = re.compile(r"\b0(\d:[0-5]\d)\b")


def _normalize_answer(text: str) -> str:
    """Case-folded, single-spaced, hours without a leading zero ("08:00" says "8:00")."""
    return _LEADING_ZERO_HOUR.sub(r"\1", " ".join(text.casefold().split()))


def _ui_state(check: UIStateCheck, evidence: PrivilegedEvidence) -> tuple[bool, JsonValue]:
    """The elements of the final screen that the XPath selects, with their attributes."""
    if evidence.screen is None:
        return False, {"error": "this backend has no screen"}
    try:
        selected = select(parse_screen(evidence.screen), check.xpath)
    except (ScreenError, etree.XPathError) as exc:
        return False, {"error": f"{type(exc).__name__}: {exc}"}
    matching = [a for a in selected if all(a.get(k) == v for k, v in check.attributes.items())]
    met = {
        "exists": bool(matching),
        "exactly_one": len(matching) == 1,
        "absent": not matching,
    }[check.expect]
    shown: list[JsonValue] = [
        {k: a[k] for k in ("id", "text", "checked") if a.get(k)} for a in selected[:5]
    ]
    return met, {"selected": len(selected), "matching": len(matching), "elements": shown}


MAX_LISTED_CHANGES = 20
"""Unexpected changes listed in a collateral check's evidence (the count is complete)."""


def _collateral(check: CollateralCheck, evidence: PrivilegedEvidence) -> tuple[bool, JsonValue]:
    """Every row that differs between the initial and the final state is allowed."""
    changes = state_diff(evidence.initial, evidence.final)
    unexpected = unexpected_changes(changes, check.allowed)
    listed: list[JsonValue] = [c.to_json() for c in unexpected[:MAX_LISTED_CHANGES]]
    return not unexpected, {"changes": len(changes), "unexpected": listed, "count": len(unexpected)}


def _rubric(
    check: RubricCheck, steps: Sequence[Step], judge: RubricJudge | None
) -> tuple[bool, JsonValue]:
    if judge is None:
        return False, {"problem": "no rubric judge configured"}
    met, why = judge(check, steps)
    return met, {"judge": why}
