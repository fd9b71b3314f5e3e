"""Interaction patterns a task exhibits, checked on its reference plan in the sandbox.

Templates declare the patterns they exhibit (``TaskTemplate.patterns``); the generation
plan asks for repair sets by pattern (one per failure type, ``contract.REPAIR_PATTERN``),
and the task-constructor keeps a repair task only when ``exhibits`` confirms the pattern
on the task itself. Each check is a property of the reference run, not of the wording:

- ``grounding``: a call passes an argument value that appears in an earlier tool result
  and not in the goal, so it must be taken from that result.
- ``stateful``: skipping an earlier write makes a later call fail (the later call depends
  on state the task itself changed), or the plan makes one write several times with
  different arguments (the agent must track which of them it has done).
- ``recovery``: calling a step too early gets a typed error, and carrying on with the
  plan from there still passes the verifier: there is error feedback to recover from.
- ``long_horizon``: at least ``LONG_HORIZON_STEPS`` actions, and no proper prefix of the
  plan passes the verifier: finishing early always fails.
- ``routing``: the plan hands work to a sub-agent, or the task offers at least
  ``ROUTING_DISTRACTORS`` candidate tools the plan does not use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from pydantic import JsonValue

from contract import (
    Action,
    Feedback,
    SubAgentCall,
    TaskPattern,
    TaskSpec,
    ToolCall,
    ToolEffect,
    Verdict,
)
from envs.sandbox.sandbox import MobileSandbox
from envs.verification import replay_plan

LONG_HORIZON_STEPS = 4
"""Actions a long-horizon reference plan has at least."""
ROUTING_DISTRACTORS = 10
"""Unused candidate tools that make choosing the right one a routing problem."""


def exhibits(task: TaskSpec, pattern: TaskPattern, sandbox: MobileSandbox) -> bool:
    """Whether ``task``'s reference run shows ``pattern`` (replays it on ``sandbox``)."""
    return _CHECKS[pattern](task, sandbox)


def grounded_arguments(task: TaskSpec, sandbox: MobileSandbox) -> list[tuple[int, str, str]]:
    """``(step, argument, value)`` of call arguments taken from an earlier tool result.

    A value counts when it equals a leaf of an earlier tool call's result and does not
    occur in the goal (so the goal alone cannot supply it). Booleans and numbers below
    10 are ignored: they occur everywhere by chance.
    """
    sandbox.reset(task)
    goal = task.goal.lower()
    seen: set[str] = set()
    found: list[tuple[int, str, str]] = []
    for i, action in enumerate(task.reference_plan):
        feedback = sandbox.execute(action)
        if isinstance(action, ToolCall | SubAgentCall):
            for name, value in action.arguments.items():
                for leaf in _leaves(value):
                    if leaf in seen and leaf.lower() not in goal:
                        found.append((i, name, leaf))
        if isinstance(action, ToolCall) and feedback.ok:
            seen.update(leaf for leaf in _leaves(feedback.result) if _meaningful(leaf))
    return found


def _leaves(value: JsonValue) -> Iterator[str]:
    """Scalar leaves of JSON data, as text (booleans and small numbers left out)."""
    if isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int | float):
        if abs(value) >= 10:
            yield str(value)
    else:
        yield str(value)


def _meaningful(leaf: str) -> bool:
    return len(leaf) >= 2


def _is_write(action: Action, sandbox: MobileSandbox) -> bool:
    return (
        isinstance(action, ToolCall) and sandbox.tool_spec(action.tool).effect is ToolEffect.WRITE
    )


def _run(task: TaskSpec, plan: Sequence[Action], sandbox: MobileSandbox) -> list[Feedback]:
    sandbox.reset(task)
    return [sandbox.execute(action) for action in plan]


def dependent_writes(task: TaskSpec, sandbox: MobileSandbox) -> list[tuple[int, int]]:
    """``(write, later)``: skipping write step ``write`` makes step ``later`` fail."""
    plan = list(task.reference_plan)
    pairs: list[tuple[int, int]] = []
    for i, action in enumerate(plan):
        if not _is_write(action, sandbox):
            continue
        feedback = _run(task, plan[:i] + plan[i + 1 :], sandbox)
        for j, fb in enumerate(feedback[i:], start=i + 1):
            if fb.error is not None:
                pairs.append((i, j))
                break
    return pairs


def recoverable_slips(task: TaskSpec, sandbox: MobileSandbox) -> list[tuple[int, int]]:
    """``(before, early)``: calling step ``early`` right before step ``before`` gets a typed
    error, and carrying on with the plan from ``before`` still passes the verifier."""
    plan = list(task.reference_plan)
    slips: list[tuple[int, int]] = []
    for j, early in enumerate(plan):
        if not isinstance(early, ToolCall):
            continue
        for i in range(j):
            slipped = [*plan[:i], early, *plan[i:]]
            feedback = _run(task, slipped[: i + 1], sandbox)
            if feedback[i].error is None:
                continue
            if _verdict(task, slipped, sandbox).passed:
                slips.append((i, j))
                break
    return slips


def _verdict(task: TaskSpec, plan: Sequence[Action], sandbox: MobileSandbox) -> Verdict:
    return replay_plan(task, plan, sandbox)


def passing_prefixes(task: TaskSpec, sandbox: MobileSandbox) -> list[int]:
    """Lengths of proper prefixes of the reference plan that already pass the verifier."""
    plan = list(task.reference_plan)
    return [n for n in range(len(plan)) if _verdict(task, plan[:n], sandbox).passed]


def distractors(task: TaskSpec) -> int:
    """Candidate tools the reference plan does not call."""
    used = {a.tool for a in task.reference_plan if isinstance(a, ToolCall)}
    return len(set(task.tools) - used)


def _grounding(task: TaskSpec, sandbox: MobileSandbox) -> bool:
    return bool(grounded_arguments(task, sandbox))


def repeated_writes(task: TaskSpec, sandbox: MobileSandbox) -> list[str]:
    """Write tools the plan calls more than once, with different arguments each time."""
    calls: dict[str, set[str]] = {}
    for action in task.reference_plan:
        if isinstance(action, ToolCall) and _is_write(action, sandbox):
            calls.setdefault(action.tool, set()).add(action.describe())
    return sorted(tool for tool, distinct in calls.items() if len(distinct) > 1)


def _stateful(task: TaskSpec, sandbox: MobileSandbox) -> bool:
    return bool(repeated_writes(task, sandbox)) or bool(dependent_writes(task, sandbox))


def _recovery(task: TaskSpec, sandbox: MobileSandbox) -> bool:
    return bool(recoverable_slips(task, sandbox))


def _long_horizon(task: TaskSpec, sandbox: MobileSandbox) -> bool:
    return len(task.reference_plan) >= LONG_HORIZON_STEPS and not passing_prefixes(task, sandbox)


def _routing(task: TaskSpec, sandbox: MobileSandbox) -> bool:
    delegates = any(isinstance(a, SubAgentCall) for a in task.reference_plan)
    return delegates or distractors(task) >= ROUTING_DISTRACTORS


_CHECKS: dict[TaskPattern, Callable[[TaskSpec, MobileSandbox], bool]] = {
    TaskPattern.GROUNDING: _grounding,
    TaskPattern.STATEFUL: _stateful,
    TaskPattern.RECOVERY: _recovery,
    TaskPattern.LONG_HORIZON: _long_horizon,
    TaskPattern.ROUTING: _routing,
}
