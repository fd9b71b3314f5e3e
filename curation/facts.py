"""What the curator reads of a trajectory, as plain values: its facts.

The curator's rules (dedup, support, quality, routing) read a few things of each step and
of the verdict, never the whole record. :class:`TrajectoryFacts` holds just those, built
either from the catalog's columns (:func:`facts_from_columns`: what a round's curate stage
does, with no ``Trajectory`` rebuilt or validated) or from a ``Trajectory`` in memory
(:meth:`TrajectoryFacts.of`); both give equal facts for the same trajectory, which a test
checks on a synthetic round. Actions are described from their canonical JSON (sorted
arguments, as the catalog stores them), so both ways describe a call alike.

The failure attribution is the one the episode runner stored: computed once, from the
same evidence, when the trajectory was made.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa
import xxhash

from contract import (
    TERMINAL_KINDS,
    ErrorKind,
    FailureType,
    Outcome,
    Step,
    Trajectory,
    describe_json,
)
from contract.verifier import GATE_KINDS
from storage.curation_columns import CurationColumns

_SEP = b"\x1f"


@dataclass(frozen=True, slots=True)
class StepFacts:
    """One step: its action (described), what it addressed, its error, its changes."""

    index: int
    call: str | None
    """The action's ``describe()`` line; None: the model's output was no action."""
    kind: str | None
    target: str | None
    error: ErrorKind | None
    changes: tuple[tuple[str, str, str], ...] = ()
    """``(op, collection, entity id)`` of each state change."""

    @property
    def is_call(self) -> bool:
        """An executed non-terminal action (a tool, memory, skill or sub-agent)."""
        return self.kind is not None and self.kind not in TERMINAL_KINDS

    @property
    def tool(self) -> str | None:
        return self.target if self.kind == "tool_call" else None

    @property
    def token(self) -> str:
        """The normalized token dedup compares: the call, case-folded and single-spaced,
        or the error of output that was no action."""
        if self.call is not None:
            return " ".join(self.call.casefold().split())
        return f"<no action: {self.error if self.error is not None else 'none'}>"


@dataclass(frozen=True, slots=True)
class CheckFacts:
    """One check of the verdict, with what its spec says the curator needs."""

    kind: str
    description: str
    met: bool
    evidence: Any
    collection: str | None = None
    """The spec's collection, for a state check."""
    expect: str | None = None
    """The spec's expectation, for a state check."""


@dataclass(frozen=True, slots=True)
class TrajectoryFacts:
    """What the curator reads of one trajectory."""

    id: str
    task_id: str
    fingerprint: str
    outcome: Outcome
    attribution: FailureType | None
    passed: bool
    score: float
    progress: float
    checks: tuple[CheckFacts, ...]
    """The verdict's check results (met or not, evidence)."""
    verifier: tuple[CheckFacts, ...]
    """The task's verifier checks (kind, collection, expectation; never met)."""
    reference_calls: int
    """Non-terminal actions of the task's reference plan."""
    cost_steps: int
    steps: tuple[StepFacts, ...]
    exact_key: int
    """A hash of the fingerprint, the outcome and every action's canonical JSON: equal
    for exact duplicates."""
    simulated: bool = False
    """A chat model answered its tools (``envs.simulated``)."""

    @property
    def harmed(self) -> bool:
        """A gate check failed: the episode changed what its task does not allow."""
        return any(c.kind in GATE_KINDS and not c.met for c in self.checks)

    @property
    def has_rubric(self) -> bool:
        return any(c.kind == "rubric" for c in self.verifier)

    @classmethod
    def of(cls, trajectory: Trajectory) -> TrajectoryFacts:
        """The facts of a trajectory in memory."""
        actions = [s.action.to_json().decode() if s.action else None for s in trajectory.steps]
        verdict = trajectory.verdict
        specs = [c.model_dump(mode="json") for c in trajectory.task.verifier.checks]
        return cls(
            id=trajectory.id,
            task_id=trajectory.task.id,
            fingerprint=trajectory.task.fingerprint,
            outcome=trajectory.metadata.outcome,
            attribution=trajectory.metadata.failure_attribution,
            passed=verdict.passed,
            score=verdict.score,
            progress=verdict.progress,
            checks=tuple(_result(c.model_dump(mode="json")) for c in verdict.checks),
            verifier=tuple(_spec(c) for c in specs),
            reference_calls=_calls(a.kind for a in trajectory.task.reference_plan),
            cost_steps=trajectory.cost.steps,
            steps=tuple(_step_of(s, a) for s, a in zip(trajectory.steps, actions, strict=True)),
            exact_key=exact_key(trajectory.task.fingerprint, trajectory.metadata.outcome, actions),
            simulated=trajectory.metadata.simulated,
        )


def facts_of(trajectory: Trajectory | TrajectoryFacts) -> TrajectoryFacts:
    """The facts of ``trajectory`` (facts are returned as they are)."""
    if isinstance(trajectory, TrajectoryFacts):
        return trajectory
    return TrajectoryFacts.of(trajectory)


def exact_key(fingerprint: str, outcome: Outcome, actions: Sequence[str | None]) -> int:
    """The exact-duplicate key of a trajectory from its actions' canonical JSON."""
    body = _SEP.join(
        [fingerprint.encode(), outcome.value.encode()]
        + [a.encode() if a is not None else b"null" for a in actions]
    )
    return xxhash.xxh3_128_intdigest(body)


def facts_from_columns(columns: CurationColumns) -> list[TrajectoryFacts]:
    """The facts of every trajectory in ``columns`` (``storage.curation_columns``), in
    trajectory id order."""
    rows = columns.trajectories.to_pydict()
    steps = _steps_by_trajectory(columns.steps)
    specs: dict[str, tuple[CheckFacts, ...]] = {}
    facts = []
    for i, tid in enumerate(rows["id"]):
        task_id = rows["task_id"][i]
        verifier = specs.get(task_id)
        if verifier is None:
            verifier = specs[task_id] = tuple(
                _spec(c) for c in orjson.loads(rows["verifier_checks"][i] or "[]")
            )
        outcome = Outcome(rows["outcome"][i])
        attribution = rows["failure_attribution"][i]
        actions, step_facts = steps.get(tid, ((), ()))
        facts.append(
            TrajectoryFacts(
                id=tid,
                task_id=task_id,
                fingerprint=rows["fingerprint"][i],
                outcome=outcome,
                attribution=FailureType(attribution) if attribution is not None else None,
                passed=rows["passed"][i],
                score=rows["score"][i],
                progress=rows["progress"][i],
                checks=tuple(_result(c) for c in orjson.loads(rows["checks"][i])),
                verifier=verifier,
                reference_calls=_calls(rows["reference_kinds"][i] or ()),
                cost_steps=rows["cost_steps"][i],
                steps=step_facts,
                exact_key=exact_key(rows["fingerprint"][i], outcome, actions),
                simulated=bool(rows["simulated"][i]),
            )
        )
    return facts


def _steps_by_trajectory(
    table: pa.Table,
) -> dict[str, tuple[tuple[str | None, ...], tuple[StepFacts, ...]]]:
    """Each trajectory's actions (canonical JSON) and step facts, from rows sorted by
    (trajectory, index)."""
    columns = table.to_pydict()
    found: dict[str, tuple[tuple[str | None, ...], tuple[StepFacts, ...]]] = {}
    for tid, start, end in _runs(columns["trajectory_id"]):
        actions = tuple(columns["action"][start:end])
        found[tid] = (
            actions,
            tuple(
                _step(
                    columns["idx"][i],
                    actions[i - start],
                    columns["action_kind"][i],
                    columns["target"][i],
                    columns["error_kind"][i],
                    columns["state_changes"][i],
                )
                for i in range(start, end)
            ),
        )
    return found


def _runs(keys: Sequence[str]) -> Iterator[tuple[str, int, int]]:
    """``(key, start, end)`` of each run of equal keys."""
    start = 0
    for i in range(1, len(keys) + 1):
        if i == len(keys) or keys[i] != keys[start]:
            yield keys[start], start, i
            start = i


def _step(
    index: int,
    action: str | None,
    kind: str | None,
    target: str | None,
    error: str | None,
    changes: str | None,
) -> StepFacts:
    listed = orjson.loads(changes) if changes else ()
    return StepFacts(
        index=index,
        call=describe_json(orjson.loads(action)) if action is not None else None,
        kind=kind,
        target=target,
        error=ErrorKind(error) if error is not None else None,
        changes=tuple((c["op"], c["collection"], c["entity_id"]) for c in listed),
    )


def _step_of(step: Step, action: str | None) -> StepFacts:
    error = step.feedback.error
    return _step(
        step.index,
        action,
        step.action.kind if step.action is not None else None,
        step.action.target if step.action is not None else None,
        error.kind.value if error is not None else None,
        orjson.dumps([c.model_dump(mode="json") for c in step.feedback.state_changes]).decode(),
    )


def _result(check: dict[str, Any]) -> CheckFacts:
    return CheckFacts(
        kind=check["kind"],
        description=check["description"],
        met=check["met"],
        evidence=check.get("evidence"),
    )


def _spec(check: dict[str, Any]) -> CheckFacts:
    return CheckFacts(
        kind=check["kind"],
        description="",
        met=False,
        evidence=None,
        collection=check.get("collection") if check["kind"] == "state" else None,
        expect=check.get("expect") if check["kind"] == "state" else None,
    )


def _calls(kinds: Any) -> int:
    return sum(1 for kind in kinds if kind not in TERMINAL_KINDS)
