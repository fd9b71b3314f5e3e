"""The episode runner ends episodes for the right reasons and records what happened."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from agents.policies.base import Decision, TaskView
from agents.policies.chat_format import system_prompt
from agents.policies.scripted import FaultConfig, ScriptedPolicy
from agents.runner import run_episode
from contract import (
    DEFAULT_MAX_STEPS,
    Action,
    Clarify,
    FaultKind,
    Finish,
    Outcome,
    PolicyInfo,
    Refuse,
    Step,
    TaskSpec,
    Termination,
    ToolCall,
    Trajectory,
    step_budget,
)
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import instantiate, template_named


class FixedPolicy:
    """Plays the given actions, then repeats the last one."""

    def __init__(self, actions: Sequence[Action]) -> None:
        self.actions = list(actions)
        self.views: list[TaskView] = []

    @property
    def info(self) -> PolicyInfo:
        return PolicyInfo(name="fixed", version="test")

    def start(self, task: TaskSpec, view: TaskView) -> FixedPolicy:
        self.views.append(view)
        self.turn = 0
        return self

    def act(self, history: Sequence[Step]) -> Decision:
        action = self.actions[min(self.turn, len(self.actions) - 1)]
        self.turn += 1
        return Decision(action=action, model_output=action.describe(), output_tokens=7)


def _task(sandbox: MobileSandbox, name: str = "text_contact", seed: int = 5) -> TaskSpec:
    return instantiate(template_named(name), seed, sandbox)


def test_reference_plan_ends_verified(sandbox: MobileSandbox) -> None:
    task = _task(sandbox)
    trajectory = run_episode(task, sandbox, ScriptedPolicy())
    assert trajectory.metadata.termination is Termination.VERIFIED
    assert trajectory.metadata.outcome is Outcome.SUCCESS
    assert trajectory.verdict.passed and trajectory.metadata.failure_attribution is None
    assert trajectory.cost.steps == len(task.reference_plan)


def test_budget_runs_out(sandbox: MobileSandbox) -> None:
    task = _task(sandbox)
    looping = FixedPolicy([ToolCall(tool="search_contacts", arguments={"query": "a"})])
    trajectory = run_episode(task, sandbox, looping, max_steps=6)
    assert trajectory.metadata.termination is Termination.BUDGET_EXHAUSTED
    assert trajectory.cost.steps == 6 and trajectory.cost.tool_calls == 6
    assert trajectory.cost.output_tokens == 42
    assert trajectory.metadata.outcome is Outcome.FAILURE
    assert trajectory.metadata.failure_attribution == "state_tracking"


@pytest.mark.parametrize("name", ["text_contact", "book_trip_and_tell"])
def test_the_task_budget_is_told_enforced_and_recorded(sandbox: MobileSandbox, name: str) -> None:
    task = _task(sandbox, name)
    assert task.max_steps == max(8, 2 * len(task.reference_plan))
    looping = FixedPolicy([ToolCall(tool="search_contacts", arguments={"query": "a"})])
    trajectory = run_episode(task, sandbox, looping)
    assert looping.views[-1].max_steps == task.max_steps
    assert f"at most {task.max_steps} function calls" in system_prompt(looping.views[-1])
    assert trajectory.cost.steps == task.max_steps == trajectory.metadata.max_steps
    overridden = run_episode(task, sandbox, looping, max_steps=3)
    assert overridden.cost.steps == overridden.metadata.max_steps == 3


def test_a_task_stored_without_a_budget_keeps_its_id_and_gets_the_default() -> None:
    task = _task(MobileSandbox())
    stored = task.model_dump(mode="json") | {"max_steps": None}
    del stored["max_steps"], stored["id"]
    old = TaskSpec.model_validate(stored)
    assert "max_steps" not in old.model_dump(mode="json")
    assert TaskSpec.model_validate_json(old.to_json()).id == old.id
    assert step_budget(old) == DEFAULT_MAX_STEPS and step_budget(old, 4) == 4


def test_clarify_refuse_and_finish_end_the_episode(sandbox: MobileSandbox) -> None:
    task = _task(sandbox)
    for action, termination in (
        (Clarify(question="Which Dana?"), Termination.CLARIFIED),
        (Refuse(reason="no"), Termination.REFUSED),
        (Finish(answer="done"), Termination.FINISHED),
    ):
        trajectory = run_episode(task, sandbox, FixedPolicy([action]))
        assert trajectory.metadata.termination is termination
        assert trajectory.cost.steps == 1 and trajectory.cost.tool_calls == 0
        assert not trajectory.verdict.passed
        assert trajectory.metadata.failure_attribution == "premature_termination"


def test_policy_sees_no_privileged_information(sandbox: MobileSandbox) -> None:
    task = _task(sandbox)
    policy = FixedPolicy([Finish(answer="x")])
    run_episode(task, sandbox, policy)
    view = policy.views[0]
    assert view.goal == task.goal
    assert [t.name for t in view.tools] == list(task.tools)
    assert set(vars(view)) == {"goal", "tools", "subagents", "max_steps", "follow_ups", "arriving"}


@pytest.mark.parametrize(
    "template",
    [
        "text_contact",  # tool calls
        "grant_app_permission",  # the GUI agent alone: it works the same device
        "museum_visit_via_search",  # the search agent first
    ],
)
def test_backend_faults_end_the_episode_as_backend_error(template: str) -> None:
    flaky = MobileSandbox(backend_fault_rate=1.0)
    trajectory = run_episode(_task(flaky, template), flaky, ScriptedPolicy())
    assert trajectory.metadata.termination is Termination.BACKEND_ERROR
    assert trajectory.metadata.outcome is Outcome.BACKEND_ERROR
    assert trajectory.metadata.failure_attribution is None
    assert trajectory.steps[-1].feedback.error is not None


def test_same_task_and_policy_give_identical_trajectories(sandbox: MobileSandbox) -> None:
    policy = ScriptedPolicy(FaultConfig(rate=1.0))
    task = _task(sandbox, seed=9)
    assert (
        run_episode(task, sandbox, policy).to_json() == run_episode(task, sandbox, policy).to_json()
    )


def test_injected_faults_are_recorded(faulty_trajectories: list[Trajectory]) -> None:
    faulted = [t for t in faulty_trajectories if t.metadata.injected_faults]
    assert len(faulted) > len(faulty_trajectories) // 2
    kinds = {t.metadata.injected_faults[0] for t in faulted}
    assert kinds == set(FaultKind)
    for t in faulted:
        assert any(s.injected_fault is not None for s in t.steps)
    clean = [t for t in faulty_trajectories if not t.metadata.injected_faults]
    assert all(t.metadata.outcome is Outcome.SUCCESS for t in clean)


def test_recovery_trajectories_exist_and_are_verified(
    faulty_trajectories: list[Trajectory],
) -> None:
    recovered = [t for t in faulty_trajectories if t.metadata.recovered]
    assert recovered
    for t in recovered:
        assert t.verdict.passed
        assert any(s.feedback.error is not None for s in t.steps)
