"""Our BFCL verdicts agree with ``bfcl_eval``'s own ``multi_turn_checker`` on every task of
the base category: the ground truth, corrupted ground truths, and our runner's episodes of
a scripted policy with injected faults."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from agents.policies.scripted import FaultConfig, ScriptedPolicy
from agents.runner import run_episode
from envs.bfcl.backend import BfclBackend, task_spec
from envs.bfcl.tasks import CATEGORIES, BfclCall, BfclTask, load_tasks
from envs.bfcl.verify import bfcl_checker_valid, turns_of, verify_episode

Turns = list[list[BfclCall]]


def _ground_truth(task: BfclTask, rng: random.Random) -> Turns:
    return [list(turn) for turn in task.ground_truth]


def _drop_one(task: BfclTask, rng: random.Random) -> Turns:
    turns = _ground_truth(task, rng)
    turn = rng.choice([t for t in turns if t])
    del turn[rng.randrange(len(turn))]
    return turns


def _wrong_value(task: BfclTask, rng: random.Random) -> Turns:
    turns = _ground_truth(task, rng)
    calls = [(t, i) for t in turns for i, c in enumerate(t) if c.arguments]
    turn, index = rng.choice(calls)
    call = turn[index]
    key = rng.choice(sorted(call.arguments))
    value = call.arguments[key]
    changed = (
        not value
        if isinstance(value, bool)
        else value + 1
        if isinstance(value, int | float)
        else value + "_x"
        if isinstance(value, str)
        else None
    )
    turn[index] = BfclCall(call.name, {**call.arguments, key: changed})
    return turns


def _swap_order(task: BfclTask, rng: random.Random) -> Turns:
    turns = _ground_truth(task, rng)
    longer = [t for t in turns if len(t) > 1]
    if longer:
        turn = rng.choice(longer)
        i = rng.randrange(len(turn) - 1)
        turn[i], turn[i + 1] = turn[i + 1], turn[i]
    return turns


def _repeat_one(task: BfclTask, rng: random.Random) -> Turns:
    turns = _ground_truth(task, rng)
    turn = rng.choice([t for t in turns if t])
    turn.insert(0, rng.choice(turn))
    return turns


def _unknown_call(task: BfclTask, rng: random.Random) -> Turns:
    turns = _ground_truth(task, rng)
    rng.choice([t for t in turns if t]).append(BfclCall("no_such_function", {"x": 1}))
    return turns


def _late_call(task: BfclTask, rng: random.Random) -> Turns:
    """A call made one turn late."""
    turns = _ground_truth(task, rng)
    early = [i for i in range(len(turns) - 1) if turns[i]]
    if early:
        i = rng.choice(early)
        turns[i + 1].insert(0, turns[i].pop())
    return turns


def _a_turn_short(task: BfclTask, rng: random.Random) -> Turns:
    return _ground_truth(task, rng)[:-1]


FAULTS: dict[str, Callable[[BfclTask, random.Random], Turns]] = {
    "ground truth": _ground_truth,
    "a call dropped": _drop_one,
    "a wrong argument value": _wrong_value,
    "two calls swapped": _swap_order,
    "a call repeated": _repeat_one,
    "an unknown function called": _unknown_call,
    "a call one turn late": _late_call,
    "the last turn unanswered": _a_turn_short,
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_our_verdicts_agree_with_bfcls_checker_on_every_base_task(fault: str) -> None:
    rng = random.Random(fault)
    disagreements = []
    passed = 0
    for task in load_tasks("base"):
        turns = FAULTS[fault](task, rng)
        ours = verify_episode(task, turns).passed
        passed += ours
        if ours != bfcl_checker_valid(task, turns):
            disagreements.append(task.id)
    assert disagreements == []
    if fault in ("ground truth", "an unknown function called"):
        assert passed == 200  # an extra call that fails changes nothing BFCL checks
    elif fault in ("a call dropped", "the last turn unanswered"):
        assert passed == 0
    else:
        assert 0 < passed < 200, "the fault is caught on some tasks, harmless on others"


@pytest.mark.parametrize("category", CATEGORIES)
def test_our_runner_s_verdicts_agree_with_bfcls_checker_for_a_faulty_scripted_policy(
    category: str,
) -> None:
    """Episodes of our runner on every task of a category, the scripted policy injecting a
    fault (and recovering from half of them): the verdict the runner recorded and BFCL's
    checker on the episode's calls agree."""
    backend, policy = BfclBackend(), ScriptedPolicy(FaultConfig(rate=1.0, recovery_rate=0.5))
    disagreements, passed = [], 0
    for task in load_tasks(category):
        trajectory = run_episode(task_spec(task), backend, policy)
        ours = trajectory.verdict.passed
        passed += ours
        if ours != bfcl_checker_valid(task, turns_of(trajectory.steps)):
            disagreements.append(task.id)
    assert disagreements == []
    assert 0 < passed < 200
