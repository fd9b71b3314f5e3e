"""Re-verification: today's verifier on a stored trajectory, made with an older one.

The sandbox is deterministic, so a sandbox trajectory replays exactly: its task's initial
state is rebuilt from the seed, and every action that succeeded is executed again (one
that failed changed nothing). The replay must produce the state changes the trajectory
recorded; if it does not, the trajectory is *diverged* and keeps its stored verdict.
The verifier is today's: the template's current checks for the task's parameters (and
with them the collateral-damage check), or, for a task whose template is gone, its
stored checks plus a collateral check rehearsed from its reference plan. A trajectory of
another backend (a phone) cannot be replayed here and is reported as such.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import JsonValue

from contract import (
    CheckResult,
    CollateralCheck,
    InvalidInputError,
    Step,
    TaskSpec,
    Trajectory,
    Verdict,
    VerifierSpec,
)
from envs.sandbox.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import collateral_check, instantiate, template_named
from envs.verification import verify

Status = Literal["verified", "diverged", "not_replayable"]


@dataclass(frozen=True)
class Reverification:
    """What today's verifier says of one stored trajectory."""

    trajectory_id: str
    round_id: str | None
    template: str | None
    status: Status
    stored_passed: bool
    verdict: Verdict | None
    """Today's verdict (None unless ``verified``)."""
    note: str = ""

    @property
    def passed(self) -> bool | None:
        return self.verdict.passed if self.verdict is not None else None

    @property
    def changed(self) -> bool:
        return self.verdict is not None and self.verdict.passed != self.stored_passed

    @property
    def now_fails(self) -> bool:
        return self.changed and not self.passed

    def failing(self) -> tuple[CheckResult, ...]:
        return tuple(c for c in self.verdict.checks if not c.met) if self.verdict else ()

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "trajectory_id": self.trajectory_id,
            "round_id": self.round_id,
            "template": self.template,
            "status": self.status,
            "stored_passed": self.stored_passed,
            "passed": self.passed,
            "changed": self.changed,
            "failing_checks": [
                {"kind": c.kind, "description": c.description, "evidence": c.evidence}
                for c in self.failing()
            ],
            "note": self.note,
        }


def todays_verifier(task: TaskSpec, sandbox: MobileSandbox) -> tuple[VerifierSpec, str]:
    """The verifier today's code gives ``task``, and a note on where it came from."""
    if task.template is not None:
        try:
            template = template_named(task.template)
            current = instantiate(template, task.initial_conditions.seed, sandbox, task.params)
        except InvalidInputError as exc:
            note = f"template {task.template} no longer builds this task ({exc}); "
        else:
            note = "" if current.goal == task.goal else "the template's goal has changed; "
            return current.verifier, note + "today's template checks"
    else:
        note = ""
    checks = [c for c in task.verifier.checks if not isinstance(c, CollateralCheck)]
    collateral = collateral_check(sandbox, task.initial_conditions, task.tools, task.reference_plan)
    return VerifierSpec(checks=(*checks, collateral)), note + "stored checks, collateral rehearsed"


def reverify(trajectory: Trajectory, sandbox: MobileSandbox) -> Reverification:
    """Replay ``trajectory`` on ``sandbox`` and verify it with today's verifier."""
    task = trajectory.task
    meta = trajectory.metadata

    def result(status: Status, note: str, verdict: Verdict | None = None) -> Reverification:
        return Reverification(
            trajectory.id,
            meta.round,
            task.template,
            status,
            trajectory.verdict.passed,
            verdict,
            note,
        )

    if meta.backend != sandbox.name:
        return result("not_replayable", f"ran on the {meta.backend} backend, not the sandbox")
    try:
        spec, note = todays_verifier(task, sandbox)
        sandbox.reset(task.model_copy(update={"verifier": spec}))
    except InvalidInputError as exc:
        return result("not_replayable", f"its initial state cannot be rebuilt: {exc}")
    for step in trajectory.steps:
        if step.action is None or step.feedback.error is not None:
            continue
        replayed = sandbox.execute(step.action)
        if replayed.error is not None or replayed.state_changes != step.feedback.state_changes:
            why = replayed.error.message if replayed.error else "other state changes"
            return result("diverged", f"step {step.index} replays differently: {why}")
    steps: list[Step] = list(trajectory.steps)
    return result("verified", note, verify(spec, steps, sandbox.evidence()))
