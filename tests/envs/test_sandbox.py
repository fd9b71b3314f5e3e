"""The sandbox is deterministic, never crashes on a tool call, and hides its state."""

from __future__ import annotations

import random
from typing import Any

import pytest

from contract import (
    ErrorKind,
    Feedback,
    InitialConditions,
    InvalidInputError,
    MemoryRead,
    MemorySearch,
    MemoryWrite,
    SkillLoad,
    StatePatch,
    SubAgentCall,
    ToolCall,
)
from envs.sandbox import MobileSandbox

JUNK: list[Any] = [None, True, -1, 0, 10**9, 2.5, "", "x", "c-999", "2026-02-30", [], {}, [None]]


def test_worlds_are_deterministic_per_seed(sandbox: MobileSandbox) -> None:
    assert sandbox.build_world(7) == sandbox.build_world(7)
    assert sandbox.build_world(7) != sandbox.build_world(8)


def test_no_tool_call_crashes_the_episode(sandbox: MobileSandbox) -> None:
    specs = sandbox.all_tool_specs()
    sandbox.reset_to(InitialConditions(seed=1), [s.name for s in specs])
    rng = random.Random(0)
    for spec in specs:
        names = [*list(spec.parameters["properties"]), "bogus"]
        for _ in range(40):
            args = {
                name: rng.choice(JUNK) for name in rng.sample(names, rng.randint(0, len(names)))
            }
            feedback = sandbox.execute(ToolCall(tool=spec.name, arguments=args))
            assert Feedback.model_validate_json(feedback.to_json()) == feedback
            if feedback.error is not None:
                assert feedback.error.kind is not ErrorKind.BACKEND_ERROR, (spec.name, args)


def test_invalid_arguments_name_the_field(sandbox: MobileSandbox) -> None:
    sandbox.reset_to(InitialConditions(seed=1), ["send_message"])
    feedback = sandbox.execute(ToolCall(tool="send_message", arguments={"contact_id": "c-1"}))
    assert feedback.error is not None
    assert feedback.error.kind is ErrorKind.INVALID_ARGUMENTS and feedback.error.field == "text"


def test_tools_not_offered_are_unknown(sandbox: MobileSandbox) -> None:
    sandbox.reset_to(InitialConditions(seed=1), ["search_contacts"])
    feedback = sandbox.execute(ToolCall(tool="send_message", arguments={}))
    assert feedback.error is not None and feedback.error.kind is ErrorKind.UNKNOWN_TOOL
    assert "not offered" in feedback.error.message and "search_contacts" in feedback.error.message


def test_memory_skills_and_subagents(sandbox: MobileSandbox) -> None:
    sandbox.reset_to(InitialConditions(seed=2), [])
    assert sandbox.execute(MemoryRead(key="user.name")).result == {
        "key": "user.name",
        "value": "Sam Rivera",
        "source": "onboarding profile",
    }
    missing = sandbox.execute(MemoryRead(key="user.nothing"))
    assert missing.error is not None and missing.error.kind is ErrorKind.PRECONDITION_FAILED
    wrote = sandbox.execute(MemoryWrite(key="user.coffee", value="flat white"))
    assert wrote.state_changes and wrote.state_changes[0].op == "created"
    found = sandbox.execute(MemorySearch(query="coffee"))
    assert isinstance(found.result, list)
    first = found.result[0]
    assert isinstance(first, dict) and first["value"] == "flat white"
    skill = sandbox.execute(SkillLoad(name="nope"))
    assert skill.error is not None and "share_location" in skill.error.message
    gui = sandbox.execute(
        SubAgentCall(
            agent="gui",
            instruction="allow location for parking",
            arguments={"app": "parking", "operation": "grant_permission", "target": "location"},
        )
    )
    assert gui.ok and sandbox.state()["gui.permissions"]["parking:location"]["granted"] is True
    bad = sandbox.execute(
        SubAgentCall(agent="gui", instruction="x", arguments={"app": "bank", "operation": "fly"})
    )
    assert bad.error is not None and bad.error.kind is ErrorKind.INVALID_ARGUMENTS
    unknown = sandbox.execute(SubAgentCall(agent="oracle", instruction="x"))
    assert unknown.error is not None and unknown.error.kind is ErrorKind.UNKNOWN_TOOL


def test_reset_restores_the_seeded_state(sandbox: MobileSandbox) -> None:
    conditions = InitialConditions(seed=4)
    sandbox.reset_to(conditions, ["send_message"])
    before = sandbox.build_world(4)
    sandbox.execute(ToolCall(tool="send_message", arguments={"contact_id": "c-1", "text": "hi"}))
    assert sandbox.state() != before
    assert sandbox.evidence().initial == before
    sandbox.reset_to(conditions, ["send_message"])
    assert sandbox.state() == before


def test_setup_patches_are_validated(sandbox: MobileSandbox) -> None:
    patch = StatePatch(collection="nowhere.table", row={"id": "x"})
    with pytest.raises(InvalidInputError, match=r"setup\.collection.*allowed: .*contacts\.people"):
        sandbox.reset_to(InitialConditions(seed=1, setup=(patch,)), [])
    with pytest.raises(InvalidInputError, match="unknown tool"):
        sandbox.reset_to(InitialConditions(seed=1), ["teleport"])


def test_episodes_never_change_the_cached_pristine_worlds(
    sandbox: MobileSandbox, faulty_trajectories: list[Any]
) -> None:
    """Handlers replace values instead of mutating them, so cached worlds stay pristine."""
    fresh = MobileSandbox()
    for trajectory in faulty_trajectories[-60:]:  # still in the cache
        seed = trajectory.task.initial_conditions.seed
        assert sandbox.build_world(seed) == fresh.build_world(seed)
