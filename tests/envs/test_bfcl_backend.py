"""BFCL's tasks as our task specs behind the backend interface: the ground truth, replayed
by the scripted policy through our runner, passes every task of the categories we run;
what BFCL's world does not have is a typed error."""

from __future__ import annotations

import json

import pytest

from agents.policies.chat_format import task_view
from agents.policies.scripted import ScriptedPolicy
from agents.runner import run_episode
from contract import (
    Clarify,
    ErrorKind,
    Finish,
    MemoryRead,
    Termination,
    ToolCall,
    step_budget,
)
from envs.backends import tools_of
from envs.bfcl.backend import NO_FUNCTION_YET, BfclBackend, bfcl_task_of, task_spec
from envs.bfcl.tasks import CATEGORIES, load_tasks


@pytest.mark.parametrize("category", CATEGORIES)
def test_the_ground_truth_policy_passes_every_task_through_our_runner(category: str) -> None:
    backend, policy = BfclBackend(), ScriptedPolicy()
    failed = []
    for task in load_tasks(category):
        trajectory = run_episode(task_spec(task), backend, policy)
        if not trajectory.verdict.passed:
            failed.append(task.id)
        assert trajectory.metadata.termination is Termination.FINISHED
    assert failed == []


def test_a_bfcl_task_is_a_task_of_several_user_turns_with_one_bfcl_check() -> None:
    task = load_tasks("miss_param")[0]
    spec = task_spec(task)
    assert spec.goal == task.turns[0][0]
    assert spec.follow_ups == tuple(turn[0] for turn in task.turns[1:])
    assert [c.kind for c in spec.verifier.checks] == ["bfcl"]
    assert len(spec.tools) > 15 and "cp" not in spec.tools  # cp is excluded for this task
    ends = [a for a in spec.reference_plan if isinstance(a, Finish | Clarify)]
    assert len(ends) == len(task.turns)
    assert isinstance(ends[3], Clarify), "the turn without its parameter is answered by asking"
    assert bfcl_task_of(spec) is task
    assert spec.max_steps is not None and spec.max_steps >= len(spec.reference_plan)


def test_a_held_back_function_arrives_with_the_turn_that_brings_it() -> None:
    task = load_tasks("miss_func")[3]  # find and ls arrive with the second turn
    spec = task_spec(task)
    assert dict(task.held_back) == {1: ("find", "ls")} and task.turns[1] == ()
    assert not {"find", "ls"} & set(spec.tools)
    assert spec.arriving_tools == (("find", "ls"),)
    assert spec.follow_ups[0] == "These functions are now available: find, ls."
    first_turn = spec.reference_plan[
        : next(i for i, a in enumerate(spec.reference_plan) if isinstance(a, Finish | Clarify)) + 1
    ]
    assert first_turn == (Clarify(question=NO_FUNCTION_YET),)  # asks for a function
    view = task_view(spec, tools_of(spec), step_budget(spec))
    said = view.follow_up(1)
    assert said is not None and said.startswith(spec.follow_ups[0])
    described = [json.loads(line)["function"]["name"] for line in said.splitlines()[1:]]
    assert described == ["find", "ls"]
    assert [t.name for t in view.tools_after(1)][-2:] == ["find", "ls"]
    assert view.follow_up(2) == spec.follow_ups[1]  # nothing arrives with the last turn


def test_the_backend_speaks_our_contract() -> None:
    spec = task_spec(load_tasks("base")[90])  # vehicle control, travel and posting
    backend = BfclBackend()
    backend.reset(spec)
    names = {t.name for t in backend.tool_specs()}
    assert "fillFuelTank" in names, "a foreign backend keeps its functions' own names"
    assert all(t.parameters["type"] == "object" for t in backend.tool_specs())
    filled = backend.execute(ToolCall(tool="fillFuelTank", arguments={"fuelAmount": 5.0}))
    assert filled.error is None and isinstance(filled.result, dict)
    unknown = backend.execute(ToolCall(tool="teleport", arguments={}))
    assert unknown.error is not None and unknown.error.kind is ErrorKind.UNKNOWN_TOOL
    refused = backend.execute(ToolCall(tool="fillFuelTank", arguments={"litres": 5}))
    assert refused.error is not None and refused.error.kind is ErrorKind.PRECONDITION_FAILED
    memory = backend.execute(MemoryRead(key="user.car"))
    assert memory.error is not None and memory.error.kind is ErrorKind.UNKNOWN_TOOL
    evidence = backend.evidence()
    assert evidence.initial != evidence.final, "the fuel level changed"
    assert backend.subagent_specs() == ()
