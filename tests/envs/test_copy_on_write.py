"""Episodes share the cached world's collections until they write: whatever an episode
does, the cache, the next episode and the first one's initial snapshot see the world as
seeded."""

from __future__ import annotations

import copy

from contract import StatePatch, TaskSpec
from envs.sandbox import MobileSandbox
from envs.sandbox.state import Collections
from envs.sandbox.templates.catalog import instantiate, sample_tasks
from envs.sandbox.templates.registry import ALL_TEMPLATES

SEED = 11


def _tasks_of_every_template(sandbox: MobileSandbox) -> list[TaskSpec]:
    tasks = []
    for template in ALL_TEMPLATES:
        for variant in range(40):
            task = instantiate(template, SEED, sandbox, variant=variant)
            if task.initial_conditions.seed == SEED:
                tasks.append(task)
                break
    return tasks


def test_reference_plans_leave_the_cached_world_and_initial_states_as_seeded() -> None:
    sandbox = MobileSandbox()
    pristine = copy.deepcopy(sandbox.build_world(SEED))
    tasks = _tasks_of_every_template(sandbox)
    assert len(tasks) == len(ALL_TEMPLATES)
    wrote = 0
    for task in tasks:
        sandbox.reset(task)
        before = copy.deepcopy(sandbox.evidence().initial)
        for action in task.reference_plan:
            wrote += len(sandbox.execute(action).state_changes)
        evidence = sandbox.evidence()
        assert evidence.initial == before, task.template
        assert _patched(pristine, task) == before, task.template
    assert wrote > len(tasks)  # the plans did write
    assert sandbox.build_world(SEED) == pristine


def test_a_write_copies_only_the_collection_it_changes() -> None:
    sandbox = MobileSandbox()
    task = next(t for t in sample_tasks(60, 2, sandbox) if t.reference_plan)
    sandbox.reset(task)
    initial = sandbox.evidence().initial
    for action in task.reference_plan:
        sandbox.execute(action)
    final = sandbox.evidence().final
    changed = {name for name in final if final[name] is not initial[name]}
    assert changed, "the plan wrote nothing"
    assert all(final[name] != initial[name] for name in changed)
    assert len(changed) < len(final) // 2


def test_a_setup_patch_does_not_reach_the_world_cache() -> None:
    sandbox = MobileSandbox()
    world = sandbox.build_world(SEED)
    contact = next(iter(world["contacts.people"].values()))
    patched = {**contact, "name": "Patched Name"}
    task = instantiate(ALL_TEMPLATES[0], SEED, sandbox)
    conditions = task.initial_conditions.model_copy(
        update={"setup": (StatePatch(collection="contacts.people", row=patched),)}
    )
    sandbox.reset_to(conditions, task.tools)
    assert sandbox.state()["contacts.people"][contact["id"]]["name"] == "Patched Name"
    assert sandbox.build_world(SEED)["contacts.people"][contact["id"]] == contact


def _patched(world: Collections, task: TaskSpec) -> Collections:
    state = copy.deepcopy(world)
    for patch in task.initial_conditions.setup:
        state[patch.collection][str(patch.row["id"])] = dict(patch.row)
    return state
