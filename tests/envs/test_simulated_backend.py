"""LLM-simulated tools against the project's fake chat server: a simulated call changes
the state verifiers read; whatever else the simulator says is a typed error, never a
crash."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agents.llm import OpenAIJsonLLM, simulator
from agents.policies.openai_policy import make_client
from agents.policies.scripted import ScriptedPolicy
from agents.runner import run_episode
from contract import (
    Condition,
    ErrorKind,
    Finish,
    InitialConditions,
    InvalidInputError,
    Outcome,
    StatePatch,
    StatePredicateCheck,
    TaskSpec,
    Termination,
    ToolCall,
    ToolSpec,
    VerifierSpec,
    task_fingerprint,
)
from envs.simulated import BACKEND, SimulatedBackend
from tests.fakes import ScriptedChatServer, refusing_url, text_reply
from tests.serving.builders import SERVED_ID, SERVED_NAME, model_folders, running_server

PARKING = ToolSpec(
    name="book_parking",
    domain="parking",
    description="Book a parking session in a zone for some hours.",
    parameters={
        "type": "object",
        "properties": {"zone": {"type": "string"}, "hours": {"type": "integer", "minimum": 1}},
        "required": ["zone", "hours"],
        "additionalProperties": False,
    },
)
ZONE = {"id": "z-1", "name": "Baixa", "rate": 2.5}
GOAL = "Park me in Baixa for 2 hours."


def parking_task() -> TaskSpec:
    return TaskSpec(
        fingerprint=task_fingerprint(None, {}, GOAL),
        goal=GOAL,
        capabilities=("tool_use",),
        difficulty="easy",
        domains=("parking",),
        tools=("book_parking",),
        initial_conditions=InitialConditions(
            backend=BACKEND, seed=0, setup=(StatePatch(collection="parking.zones", row=ZONE),)
        ),
        verifier=VerifierSpec(
            checks=(
                StatePredicateCheck(
                    collection="parking.sessions",
                    where=(Condition(field="zone", value="z-1"), Condition(field="hours", value=2)),
                ),
            )
        ),
        reference_plan=(
            ToolCall(tool="book_parking", arguments={"zone": "z-1", "hours": 2}),
            Finish(answer="Parked."),
        ),
    )


def booked(state_extra: dict[str, Any] | None = None) -> str:
    state = {
        "parking.zones": {"z-1": ZONE},
        "parking.sessions": {"ps-1": {"id": "ps-1", "zone": "z-1", "hours": 2}},
        **(state_extra or {}),
    }
    return json.dumps(
        {"result": {"session_id": "ps-1", "cost": 5.0}, "state": state, "error": None}
    )


def backend_for(server_url: str) -> SimulatedBackend:
    llm = OpenAIJsonLLM(make_client(server_url, None, 5.0), "simulator")
    return SimulatedBackend(simulator(llm), [PARKING])


def test_a_simulated_call_changes_the_state_the_verifier_reads() -> None:
    with ScriptedChatServer([text_reply(booked())]) as server:
        trajectory = run_episode(parking_task(), backend_for(server.base_url), ScriptedPolicy())
        (request,) = server.requests
    assert trajectory.verdict.passed and trajectory.metadata.outcome is Outcome.SUCCESS
    assert trajectory.metadata.simulated  # weaker evidence: the curator's rules know it
    call = trajectory.steps[0].feedback
    assert call.result == {"session_id": "ps-1", "cost": 5.0}
    assert [(c.collection, c.entity_id, c.op) for c in call.state_changes] == [
        ("parking.sessions", "ps-1", "created")
    ]
    asked = json.loads(request["messages"][1]["content"])
    assert asked["tool"]["name"] == "book_parking"
    assert asked["arguments"] == {"zone": "z-1", "hours": 2}
    assert asked["state"] == {"parking.zones": {"z-1": ZONE}}


@pytest.mark.parametrize(
    "answer",
    [
        "The parking is booked!",  # not JSON
        json.dumps({"result": 1}),  # no state, no error
        booked({"wallet.accounts": {}}),  # a collection of an app no tool is of
        json.dumps(
            {"result": None, "state": {"parking.zones": {"z-1": {"name": "no id"}}}, "error": None}
        ),
        json.dumps({"result": None, "state": {}, "error": None}),  # the zones left out
    ],
)
def test_whatever_else_the_simulator_says_is_a_backend_error(answer: str) -> None:
    with ScriptedChatServer([text_reply(answer)]) as server:
        backend = backend_for(server.base_url)
        trajectory = run_episode(parking_task(), backend, ScriptedPolicy())
    assert trajectory.metadata.termination is Termination.BACKEND_ERROR
    assert trajectory.metadata.outcome is Outcome.BACKEND_ERROR
    error = trajectory.steps[0].feedback.error
    assert error is not None and error.kind is ErrorKind.BACKEND_ERROR
    assert backend.evidence().final == {"parking.zones": {"z-1": ZONE}}, "nothing was kept"


def test_a_refusal_is_the_tool_s_error_and_bad_arguments_never_reach_the_model() -> None:
    refusal = {"kind": "precondition_failed", "message": "zone z-1 is full"}
    unchanged = {"parking.zones": {"z-1": ZONE}}
    reply = json.dumps({"result": None, "state": unchanged, "error": refusal})
    with ScriptedChatServer([text_reply(reply)]) as server:
        backend = backend_for(server.base_url)
        backend.reset(parking_task())
        bad = backend.execute(ToolCall(tool="book_parking", arguments={"zone": "z-1", "hours": 0}))
        assert bad.error is not None and bad.error.kind is ErrorKind.INVALID_ARGUMENTS
        assert server.requests == []
        full = backend.execute(ToolCall(tool="book_parking", arguments={"zone": "z-1", "hours": 2}))
    assert full.error is not None and full.error.kind is ErrorKind.PRECONDITION_FAILED
    assert full.error.message == "zone z-1 is full"
    unreachable = OpenAIJsonLLM(make_client(refusing_url(), None, 5.0), "simulator")
    down = SimulatedBackend(simulator(unreachable), [PARKING])
    down.reset(parking_task())
    failed = down.execute(ToolCall(tool="book_parking", arguments={"zone": "z-1", "hours": 2}))
    assert failed.error is not None and failed.error.kind is ErrorKind.BACKEND_ERROR
    with pytest.raises(InvalidInputError, match="lacks"):
        SimulatedBackend(simulator(unreachable), []).reset(parking_task())


@pytest.mark.slow
def test_the_local_model_server_can_stand_in_as_the_simulator(tmp_path: Path) -> None:
    """An untrained tiny model served by ``python -m serving``: whatever it answers, the
    episode runs and ends as data (quality is not asserted)."""
    (folder,) = model_folders(tmp_path / "models", (0,))
    with running_server(folder, SERVED_ID, SERVED_NAME, tmp_path / "serving.log") as server:
        llm = OpenAIJsonLLM(make_client(f"{server.base_url}/v1", None, 120.0), SERVED_NAME)
        backend = SimulatedBackend(simulator(llm), [PARKING])
        trajectory = run_episode(parking_task(), backend, ScriptedPolicy())
    assert trajectory.metadata.simulated
    assert trajectory.metadata.outcome in {Outcome.SUCCESS, Outcome.BACKEND_ERROR}
    error = trajectory.steps[0].feedback.error
    if error is not None:
        assert error.kind is ErrorKind.BACKEND_ERROR and error.message.startswith("the simulator")
        assert backend.evidence().final == {"parking.zones": {"z-1": ZONE}}
