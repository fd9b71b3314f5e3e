"""Real trajectories for curation tests, and small rebuilds of them (ids recomputed)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from agents.policies.base import Decision, TaskView
from agents.policies.scripted import FaultConfig, ScriptedPolicy
from agents.runner import run_episode
from contract import (
    Action,
    FaultKind,
    Finish,
    InitialConditions,
    Outcome,
    PolicyInfo,
    StatePatch,
    Step,
    TaskSpec,
    Termination,
    ToolCall,
    Trajectory,
)
from curation.routing import SAFETY_SENSITIVE_TOOLS
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import instantiate, template_named


class FixedPolicy:
    """Plays the given actions in order, then finishes."""

    def __init__(self, actions: Sequence[Action]) -> None:
        self.actions = list(actions)
        self.turn = 0

    @property
    def info(self) -> PolicyInfo:
        return PolicyInfo(name="fixed", version="test")

    def start(self, task: TaskSpec, view: TaskView) -> FixedPolicy:
        self.turn = 0
        return self

    def act(self, history: Sequence[Step]) -> Decision:
        action = self.actions[self.turn] if self.turn < len(self.actions) else Finish()
        self.turn += 1
        return Decision(action=action, model_output=action.describe())


def rebuilt(trajectory: Trajectory, **updates: Any) -> Trajectory:
    """The trajectory with some fields replaced; its id is derived anew."""
    fields: dict[str, Any] = {
        "task": trajectory.task,
        "steps": trajectory.steps,
        "verdict": trajectory.verdict,
        "cost": trajectory.cost,
        "metadata": trajectory.metadata,
    }
    return Trajectory(**(fields | updates))


def with_round(trajectory: Trajectory, round_id: str) -> Trajectory:
    """The same episode recorded in another round: same content, another id."""
    return rebuilt(trajectory, metadata=trajectory.metadata.model_copy(update={"round": round_id}))


def with_outcome(trajectory: Trajectory, outcome: Outcome) -> Trajectory:
    termination = (
        Termination.BACKEND_ERROR
        if outcome is Outcome.BACKEND_ERROR
        else trajectory.metadata.termination
    )
    metadata = trajectory.metadata.model_copy(
        update={"outcome": outcome, "termination": termination}
    )
    return rebuilt(trajectory, metadata=metadata)


def pick(trajectories: Iterable[Trajectory], predicate: Callable[[Trajectory], bool]) -> Trajectory:
    """The first trajectory (by id) that satisfies ``predicate``."""
    return next(t for t in sorted(trajectories, key=lambda t: t.id) if predicate(t))


def is_clean_success(t: Trajectory) -> bool:
    return (
        t.metadata.outcome is Outcome.SUCCESS
        and not t.metadata.injected_faults
        and t.cost.tool_calls == len(t.task.reference_plan)
    )


def uses_sensitive_tool(t: Trajectory) -> bool:
    return any(
        isinstance(s.action, ToolCall) and s.action.tool in SAFETY_SENSITIVE_TOOLS for s in t.steps
    )


def fault_of(t: Trajectory) -> FaultKind | None:
    return t.metadata.injected_faults[0] if t.metadata.injected_faults else None


def redundant_pair(
    trajectories: Iterable[Trajectory], sandbox: MobileSandbox
) -> tuple[Trajectory, Trajectory]:
    """``(clean, redundant)``: the same task run cleanly and with one redundant call, both
    successes."""
    redundant = pick(
        trajectories,
        lambda t: fault_of(t) is FaultKind.REDUNDANT_CALL and t.metadata.outcome is Outcome.SUCCESS,
    )
    clean = run_episode(redundant.task, sandbox, ScriptedPolicy(FaultConfig(rate=0.0)))
    assert clean.metadata.outcome is Outcome.SUCCESS
    return clean, redundant


def already_satisfied(sandbox: MobileSandbox) -> Trajectory:
    """A task whose goal state holds before the episode, and a policy that only finishes:
    the verifier passes, though nothing was done."""
    task = instantiate(template_named("add_city_to_world_clock"), 3, sandbox)
    city = task.params["city"]
    patch = StatePatch(collection="clock.world_clocks", row={"id": "wc-pre", "city": city})
    conditions = InitialConditions(seed=task.initial_conditions.seed, setup=(patch,))
    primed = TaskSpec(**(task.model_dump(exclude={"id"}) | {"initial_conditions": conditions}))
    return run_episode(primed, sandbox, FixedPolicy([Finish(answer="It is already there.")]))
