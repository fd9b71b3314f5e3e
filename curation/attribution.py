"""Rule-based failure attribution to the paper's five types, from execution evidence.

The rules read only the trajectory (steps, feedback, verdict evidence), so they work for
any policy; the scripted policy's injected faults give ground truth to measure them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence

from contract import (
    GATE_KINDS,
    TERMINAL_KINDS,
    ErrorKind,
    FailureType,
    Outcome,
    Step,
    TaskSpec,
    Termination,
    Verdict,
)

LOOP_THRESHOLD = 3


def attribute_failure(
    steps: Sequence[Step],
    verdict: Verdict,
    termination: Termination,
    outcome: Outcome,
    *,
    planned: Collection[str] = (),
) -> FailureType | None:
    """The most likely cause of a failed episode; None when it succeeded or the backend
    failed (a backend fault is not the policy's failure). ``planned``: the targets of
    the task's reference plan (``planned_targets``), which collateral damage is judged by."""
    if outcome is not Outcome.FAILURE:
        return None
    errors = [s.feedback.error for s in steps if s.feedback.error is not None]
    calls = Counter(s.action.describe() for s in steps if s.action is not None)
    if calls and max(calls.values()) >= LOOP_THRESHOLD:
        return FailureType.STATE_TRACKING
    if any(e.kind is ErrorKind.UNKNOWN_TOOL for e in errors):
        return FailureType.ROUTING
    if _unrecovered_error(steps):
        return FailureType.RECOVERY
    if verdict.harmed:
        return _collateral_cause(steps, verdict, planned)
    unmet = [c for c in verdict.checks if not c.met]
    touched = {ch.entity_id for s in steps for ch in s.feedback.state_changes}
    if any(_wrote_near_miss(c.evidence, touched) for c in unmet):
        return FailureType.ARGUMENT_GROUNDING
    if any(c.kind == "exact_tool_call" and _called_tool(c.evidence) for c in unmet):
        return FailureType.ARGUMENT_GROUNDING
    if termination in (Termination.FINISHED, Termination.CLARIFIED, Termination.REFUSED):
        return FailureType.PREMATURE_TERMINATION
    if termination is Termination.BUDGET_EXHAUSTED:
        return FailureType.STATE_TRACKING
    if any(c.kind in ("action_order", "collaboration") for c in unmet):
        return FailureType.ROUTING
    return FailureType.STATE_TRACKING


def planned_targets(task: TaskSpec) -> frozenset[str]:
    """What the reference plan acts on: its tools, memory keys, skills and agents."""
    return frozenset(a.target for a in task.reference_plan if a.target is not None)


def _unexpected_rows(verdict: Verdict) -> set[tuple[str, str]]:
    rows: set[tuple[str, str]] = set()
    for check in verdict.checks:
        evidence = check.evidence
        if check.kind in GATE_KINDS and not check.met and isinstance(evidence, dict):
            listed = evidence.get("unexpected")
            for change in listed if isinstance(listed, list) else []:
                if isinstance(change, dict):
                    rows.add((str(change.get("collection")), str(change.get("id"))))
    return rows


def _collateral_cause(
    steps: Sequence[Step], verdict: Verdict, planned: Collection[str]
) -> FailureType:
    """Collateral damage, by the steps that made the unexpected changes.

    No failure type of its own (the paper's five are what repair sets exercise), so the
    nearest one: a state-changing call of a tool the task never calls for is *routing*
    (the wrong tool chosen); repeating a call already made is *state tracking* (the
    policy lost track of what it had done); the right tool on another row or with other
    values is *argument grounding*."""
    unexpected = _unexpected_rows(verdict)
    guilty = [
        s
        for s in steps
        if s.action is not None
        and s.feedback.error is None
        and any((c.collection, c.entity_id) in unexpected for c in s.feedback.state_changes)
    ]
    if not guilty:  # no recorded step made the change: the state was lost track of
        return FailureType.STATE_TRACKING
    if any(s.action is not None and s.action.target not in planned for s in guilty):
        return FailureType.ROUTING
    earlier = {s.action.describe() for s in steps if s.action is not None and s not in guilty}
    if any(s.action is not None and s.action.describe() in earlier for s in guilty):
        return FailureType.STATE_TRACKING
    return FailureType.ARGUMENT_GROUNDING


def erroneous_steps(steps: Sequence[Step]) -> tuple[int, ...]:
    """Steps that look wrong on the record: an execution error in their feedback, or an
    injected fault. The curator's marks: pre-selected for annotators, and left out of the
    SFT loss of items no person decided."""
    return tuple(
        s.index for s in steps if s.feedback.error is not None or s.injected_fault is not None
    )


def _unrecovered_error(steps: Sequence[Step]) -> bool:
    """An action failed and no later step ran an action with the same target successfully."""
    for i, step in enumerate(steps):
        if step.feedback.error is None or step.action is None:
            continue
        if step.action.kind in TERMINAL_KINDS:
            continue
        target = step.action.target
        later = steps[i + 1 :]
        if not any(
            s.action is not None and s.action.target == target and s.feedback.error is None
            for s in later
        ):
            return True
    return False


def _wrote_near_miss(evidence: object, touched: set[str]) -> bool:
    """The row closest to what a state check wants was written in the episode: the
    policy did the right kind of thing with wrong arguments."""
    if not isinstance(evidence, dict):
        return False
    closest = evidence.get("closest")
    return isinstance(closest, dict) and closest.get("id") in touched


def _called_tool(evidence: object) -> bool:
    return isinstance(evidence, dict) and bool(evidence.get("calls_of_tool"))
