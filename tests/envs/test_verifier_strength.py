"""The verifier-strength suite: for every template over many seeds, the reference plan
passes and every mutant of it fails (``envs/sandbox/templates/strength.py``).

Each template's figures are recorded on its report; the session prints them as a table
(``tests/conftest.py``)."""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Callable
from typing import get_args

import pytest

from contract import (
    AllowedChange,
    ChangeOp,
    CollateralCheck,
    StatePredicateCheck,
    ToolCall,
    ToolEffect,
)
from envs.sandbox import MobileSandbox
from envs.sandbox.state import Collections
from envs.sandbox.templates.base import Draft, Params, TaskTemplate
from envs.sandbox.templates.catalog import instantiate, template_named
from envs.sandbox.templates.registry import ALL_TEMPLATES
from envs.sandbox.templates.strength import RowIds, measure_template, plausible_arguments
from envs.state_diff import allowances_for, state_diff
from envs.verification import replay_plan

SEEDS = tuple(range(8))
CHANGE_OPS: tuple[ChangeOp, ...] = get_args(ChangeOp)
SANDBOX = MobileSandbox()


@pytest.mark.parametrize("template", ALL_TEMPLATES, ids=lambda t: t.name)
def test_every_mutant_of_the_reference_plan_fails(
    template: TaskTemplate, record_property: Callable[[str, object], None]
) -> None:
    strength = measure_template(template, SEEDS, SANDBOX)
    record_property("verifier_strength", json.dumps(strength.to_json()))
    assert strength.tasks >= len(SEEDS)
    assert not strength.reference_failures, strength.reference_failures[:5]
    assert not strength.survivors, "\n".join(strength.survivors[:10])
    assert {"nothing", "finish_at_once", "destructive", "dropped_step"} <= set(strength.tried)


@pytest.mark.parametrize("template", ALL_TEMPLATES, ids=lambda t: t.name)
def test_every_verifier_carries_the_collateral_check(template: TaskTemplate) -> None:
    for seed in (1, 99):
        task = instantiate(template, seed, SANDBOX)
        collateral = [c for c in task.verifier.checks if isinstance(c, CollateralCheck)]
        assert len(collateral) == 1
        evidence = SANDBOX.rehearse(task.initial_conditions, task.tools, task.reference_plan)
        own = allowances_for(state_diff(evidence.initial, evidence.final), "the reference plan")
        assert set(own) <= set(collateral[0].allowed)


def test_the_suite_finds_a_verifier_that_tolerates_every_change() -> None:
    """The mutants are strong enough to fail a verifier: one whose template tolerates
    any change leaves destructive calls that pass it."""
    template = template_named("text_contact")

    def build(world: Collections, p: Params) -> Draft:
        draft = template.build(world, p)
        draft.tolerate = [
            AllowedChange(collection=name, op=op) for name in world for op in CHANGE_OPS
        ]
        return draft

    strength = measure_template(dataclasses.replace(template, build=build), (7,), SANDBOX)
    survivors = [s for s in strength.survivors if ": destructive: " in s]
    assert any("send_money" in s for s in survivors)
    assert any("delete_event" in s for s in survivors)


def test_the_suite_finds_a_verifier_that_ignores_its_parameters() -> None:
    """A verifier that checks only that some message went out passes another task's plan."""
    template = template_named("text_contact")

    def build(world: Collections, p: Params) -> Draft:
        draft = template.build(world, p)
        draft.checks = [StatePredicateCheck(collection="messages.sent", expect="exactly_one")]
        return draft

    strength = measure_template(dataclasses.replace(template, build=build), (7, 8), SANDBOX)
    assert not strength.reference_failures
    assert any(": other_task: " in s for s in strength.survivors)


def test_the_issue_example_fails_on_collateral_damage() -> None:
    """text_contact, seed 7: the reference plan, then a payment and a deletion."""
    task = instantiate(template_named("text_contact"), 7, SANDBOX)
    offered = task.model_copy(update={"tools": (*task.tools, "send_money", "delete_event")})
    extra = [
        ToolCall(tool="send_money", arguments={"contact_id": "c-3", "amount": 900}),
        ToolCall(tool="delete_event", arguments={"event_id": "ev-1"}),
    ]
    verdict = replay_plan(offered, [*task.reference_plan, *extra], SANDBOX)
    assert not verdict.passed
    collateral = next(c for c in verdict.checks if c.kind == "no_collateral")
    assert all(c.met for c in verdict.checks if c is not collateral)
    assert isinstance(collateral.evidence, dict)
    unexpected = collateral.evidence["unexpected"]
    assert isinstance(unexpected, list)
    named = {(u["collection"], u["id"], u["op"]) for u in unexpected if isinstance(u, dict)}
    assert ("calendar.events", "ev-1", "deleted") in named
    assert ("wallet.accounts", "acct-1", "updated") in named
    assert any(c == "wallet.transactions" and op == "created" for c, _, op in named)
    assert collateral.evidence["count"] == len(unexpected) == 3


def test_tools_declared_read_only_never_change_the_state() -> None:
    """The destructive mutants are the state-changing tools: a tool declared read-only
    that wrote would escape them."""
    task = instantiate(template_named("text_contact"), 4, SANDBOX)
    every_tool = tuple(spec.name for spec in SANDBOX.all_tool_specs())
    rng = random.Random(0)
    for spec in SANDBOX.all_tool_specs():
        if spec.effect is not ToolEffect.READ:
            continue
        for _ in range(10):
            SANDBOX.reset(task.model_copy(update={"tools": every_tool}))
            world = SANDBOX.state()
            before = {name: dict(rows) for name, rows in world.items()}
            arguments = plausible_arguments(spec, RowIds(before, frozenset(), False), rng)
            feedback = SANDBOX.execute(ToolCall(tool=spec.name, arguments=arguments))
            assert feedback.state_changes == ()
            assert state_diff(before, SANDBOX.state()) == [], spec.name
