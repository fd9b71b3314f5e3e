"""Task specs: a goal with its resources, initial conditions and checker."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from pydantic import Field, JsonValue, model_validator

from contract.actions import Action
from contract.base import IdentifiedRecord, LateFields, Record, content_hash
from contract.enums import Capability, Difficulty, Split, TaskSource
from contract.verifier import VerifierSpec

MAX_CANDIDATE_TOOLS = 15
"""Candidate tools the sandbox recalls for a task at most."""
MAX_OFFERED_TOOLS = 64
"""Functions a task may offer: a foreign backend's task offers all of its classes'
(a BFCL task, 20 to 50)."""
DEFAULT_MAX_STEPS = 15
"""The step budget of a task that records none (tasks stored before budgets were)."""
MAX_STEP_BUDGET = 100
MIN_STEP_BUDGET = 8
MAX_GOAL_WORDS = 80
"""A goal longer than this is not one request."""


def goal_problem(goal: str) -> str | None:
    """Why ``goal`` is not a well-formed request (too short or long, a placeholder left
    in it, no capital first), or None. A round refuses such a task, and the development
    set never holds one, so every task a model is scored on could have been trained on."""
    words = goal.split()
    if len(words) < 3:
        return "fewer than 3 words"
    if len(words) > MAX_GOAL_WORDS:
        return f"more than {MAX_GOAL_WORDS} words"
    if any(mark in goal for mark in ("{", "}", "<", ">", "None", "TODO")):
        return "contains an unfilled placeholder"
    if not goal[0].isupper():
        return "does not start with a capital letter"
    return None


class StatePatch(Record):
    """Upsert one row into a state collection before the episode starts."""

    collection: str = Field(pattern=r"^[a-z_]+\.[a-z_]+$")
    row: dict[str, JsonValue]


class InitialConditions(Record):
    """How the backend state is built: a seed, then patches applied in order."""

    backend: str = "sandbox"
    seed: int = Field(ge=0)
    setup: tuple[StatePatch, ...] = ()


def task_fingerprint(template: str | None, params: dict[str, Any], goal: str) -> str:
    """Stable identity of what a task asks, whatever its wording or tool order.

    Template tasks are identified by template and parameters; other tasks by their
    whitespace- and case-normalized goal.
    """
    if template is not None:
        return "fp-" + content_hash({"template": template, "params": params})
    return "fp-" + content_hash({"goal": " ".join(goal.lower().split())})


class TaskSpec(IdentifiedRecord, LateFields):
    """A task with everything needed to run and check it.

    ``verifier`` and ``reference_plan`` are privileged: policies never see them.
    ``max_steps`` is the task's step budget: every harness (collection, export,
    evaluation, RL, a served policy's prompt) renders and enforces this one number, over
    all of its user turns (``goal``, then ``follow_ups``).
    """

    id_prefix: ClassVar[str] = "task"
    late_fields: ClassVar[frozenset[str]] = frozenset({"max_steps", "follow_ups", "arriving_tools"})

    fingerprint: str
    goal: str = Field(min_length=1)
    follow_ups: tuple[str, ...] = Field(
        default=(),
        description="the user's later turns, in order: each is said when the policy "
        "ends the turn before (finish or clarify); the last turn's end ends the episode",
    )
    capabilities: tuple[Capability, ...] = Field(min_length=1)
    difficulty: Difficulty
    domains: tuple[str, ...] = Field(min_length=1)
    tools: tuple[str, ...] = Field(
        max_length=MAX_OFFERED_TOOLS, description="candidate tools offered for the task"
    )
    arriving_tools: tuple[tuple[str, ...], ...] = Field(
        default=(),
        description="tools offered only from a later turn on: the n-th names those that "
        "arrive with the n-th follow-up (a function the user's app gains mid-conversation)",
    )
    initial_conditions: InitialConditions
    verifier: VerifierSpec
    reference_plan: tuple[Action, ...] = Field(min_length=1)
    source: TaskSource = TaskSource.TEMPLATE
    template: str | None = None
    params: dict[str, JsonValue] = Field(default_factory=dict)
    split: Split = Split.TRAIN
    max_steps: int | None = Field(
        default=None, ge=1, le=MAX_STEP_BUDGET, description="actions an episode may take"
    )

    @model_validator(mode="after")
    def _arrivals_fit(self) -> TaskSpec:
        if len(self.arriving_tools) > len(self.follow_ups):
            raise ValueError(
                f"arriving_tools: {len(self.arriving_tools)} arrivals for "
                f"{len(self.follow_ups)} follow-ups (at most one per follow-up)"
            )
        later = [name for names in self.arriving_tools for name in names]
        offered = [*self.tools, *later]
        if len(set(offered)) != len(offered):
            raise ValueError("arriving_tools: a tool arrives twice, or is offered already")
        if len(offered) > MAX_OFFERED_TOOLS:
            raise ValueError(f"arriving_tools: {len(offered)} tools, above {MAX_OFFERED_TOOLS}")
        return self


def step_budget(task: TaskSpec, override: int | None = None) -> int:
    """The actions an episode of ``task`` may take: ``override`` when a harness sets one,
    else the task's own budget (``DEFAULT_MAX_STEPS`` for a task that records none)."""
    if override is not None:
        return override
    return task.max_steps if task.max_steps is not None else DEFAULT_MAX_STEPS


def step_budget_for(plan: Sequence[Action]) -> int:
    """The budget a task records for its reference ``plan``: twice its actions, at least
    ``MIN_STEP_BUDGET`` and at most ``MAX_STEP_BUDGET``: room to look things up, recover
    from an error and finish, without room to wander."""
    return min(MAX_STEP_BUDGET, max(MIN_STEP_BUDGET, 2 * len(plan)))
