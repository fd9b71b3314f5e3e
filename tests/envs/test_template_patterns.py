"""Template pattern metadata is true: every declared pattern shows in the reference run of
every task drawn from the template, and no undeclared one does."""

from __future__ import annotations

import pytest

from contract import (
    REPAIR_PATTERN,
    FailureType,
    Split,
    TaskPattern,
    TaskSpec,
    ToolCall,
)
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.base import TaskTemplate
from envs.sandbox.templates.catalog import instantiate, template_named
from envs.sandbox.templates.patterns import (
    LONG_HORIZON_STEPS,
    ROUTING_DISTRACTORS,
    dependent_writes,
    distractors,
    exhibits,
    grounded_arguments,
    passing_prefixes,
    recoverable_slips,
    repeated_writes,
)
from envs.sandbox.templates.registry import ALL_TEMPLATES

SANDBOX = MobileSandbox()
DRAWS = ((3, 0), (17, 1), (2024, 2))


def _tasks(template: TaskTemplate) -> list[TaskSpec]:
    return [instantiate(template, seed, SANDBOX, variant=v) for seed, v in DRAWS]


def test_every_failure_type_has_a_repair_pattern_with_train_templates() -> None:
    assert set(REPAIR_PATTERN) == set(FailureType)
    assert set(REPAIR_PATTERN.values()) == set(TaskPattern)
    for pattern in TaskPattern:
        train = [t for t in ALL_TEMPLATES if t.split is Split.TRAIN and pattern in t.patterns]
        assert len(train) >= 3, f"{pattern}: a repair set needs several train templates"


@pytest.mark.parametrize("template", ALL_TEMPLATES, ids=lambda t: t.name)
def test_declared_patterns_are_the_ones_the_reference_run_shows(template: TaskTemplate) -> None:
    for task in _tasks(template):
        shown = {p for p in TaskPattern if exhibits(task, p, SANDBOX)}
        assert shown == template.patterns, f"seed {task.initial_conditions.seed}"


def test_grounding_takes_an_argument_from_an_earlier_tool_result() -> None:
    task = instantiate(template_named("text_contact"), 5, SANDBOX)
    found = grounded_arguments(task, SANDBOX)
    search = next(a for a in task.reference_plan if isinstance(a, ToolCall))
    assert search.tool == "search_contacts"
    contact_id = task.params["contact_id"]
    assert (1, "contact_id", contact_id) in found
    assert str(contact_id) not in task.goal
    SANDBOX.reset(task)
    result = SANDBOX.execute(task.reference_plan[0]).result
    assert str(contact_id) in str(result)


@pytest.mark.parametrize(
    "template",
    [t for t in ALL_TEMPLATES if TaskPattern.GROUNDING in t.patterns],
    ids=lambda t: t.name,
)
def test_grounded_values_come_from_earlier_results_not_from_the_goal(
    template: TaskTemplate,
) -> None:
    for task in _tasks(template):
        found = grounded_arguments(task, SANDBOX)
        assert found
        SANDBOX.reset(task)
        results: list[str] = []
        for i, action in enumerate(task.reference_plan):
            for step, _, value in found:
                if step == i:
                    assert any(value in r for r in results), value
                    assert value.lower() not in task.goal.lower()
            feedback = SANDBOX.execute(action)
            if isinstance(action, ToolCall):
                results.append(str(feedback.result))


def test_stateful_recovery_long_horizon_and_routing_on_known_templates() -> None:
    buy = instantiate(template_named("buy_product"), 3, SANDBOX)
    # without add_to_cart, checkout fails: the cart is empty
    assert dependent_writes(buy, SANDBOX) == [(1, 2)]
    # checkout too early gets a typed error; carrying on still passes
    assert recoverable_slips(buy, SANDBOX)
    split = instantiate(template_named("split_bill_requests"), 3, SANDBOX)
    assert repeated_writes(split, SANDBOX) == ["request_money"]
    trip = instantiate(template_named("book_trip_and_tell"), 3, SANDBOX)
    assert len(trip.reference_plan) >= LONG_HORIZON_STEPS
    assert passing_prefixes(trip, SANDBOX) == []
    alarm = instantiate(template_named("set_labelled_alarm"), 3, SANDBOX)
    assert not exhibits(alarm, TaskPattern.LONG_HORIZON, SANDBOX)
    hard = instantiate(template_named("dinner_booking_with_friend"), 3, SANDBOX)
    assert distractors(hard) >= ROUTING_DISTRACTORS
    assert distractors(alarm) < ROUTING_DISTRACTORS
    gui = instantiate(template_named("grant_app_permission"), 3, SANDBOX)
    assert exhibits(gui, TaskPattern.ROUTING, SANDBOX)  # a sub-agent call
