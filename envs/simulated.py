"""LLM-simulated tools: a backend for the long tail of tools no app implements.

A call of such a tool is answered by a chat model (``Simulator``; ``agents.llm.simulator``
asks any ``JsonLLM``): it is
given the tool's spec, the call's arguments and the episode's state document (the
task's collections of rows, as the sandbox keeps them) and answers one JSON object,
``ANSWER_SCHEMA``: the result the caller sees, the state document updated, or an error
the tool would give (a missing row, a refused value). The backend keeps the state it is
given back and reports what changed as the call's state changes, so verifiers read a
simulated world as they read the sandbox. A tool's app owns the collections named after
it (``parking.sessions`` for a tool of the ``parking`` domain): the simulator may start
one of those, no other.

What the model says is data: an endpoint that fails, an answer that is not that JSON, a
state that drops a collection or adds one of another app, rows without their id are all a typed
``backend_error`` (the episode ends as a backend error and is not trained on), never a
crash and never trusted. Arguments are checked against the tool's schema before the
model is asked, as the sandbox checks them. Every trajectory of this backend is
simulated; the curator's and the balancer's rules for it are the README's ("LLM-simulated
tools").
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from contract import (
    TERMINAL_KINDS,
    Action,
    ErrorKind,
    Feedback,
    InvalidInputError,
    StateChange,
    TaskSpec,
    ToolCall,
    ToolSpec,
)
from contract.argcheck import compile_schema
from envs.backend import PrivilegedEvidence, Row, StateSnapshot
from envs.state_diff import state_diff

BACKEND = "simulated"
SIMULATOR_PROMPT = (
    "You simulate one tool of a phone app that has no implementation. You get the tool's "
    "spec, the arguments of a call and the app's state (collections of rows by id). Answer "
    "with one JSON object and nothing else: "
    '{"result": <what the tool returns>, "state": <the whole state after the call>, '
    '"error": null} when the call succeeds, or {"result": null, "state": <the state '
    'unchanged>, "error": {"kind": "precondition_failed" or "invalid_arguments", '
    '"message": "..."}} when the tool would refuse it. Change only what the call changes; '
    "every row keeps its id."
)
ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["result", "state", "error"],
    "properties": {
        "state": {"type": "object"},
        "error": {"type": ["object", "null"]},
    },
}
"""The shape the simulator's answer must have (``SIMULATOR_PROMPT`` says it in words)."""
_ERROR_KINDS = {
    "precondition_failed": ErrorKind.PRECONDITION_FAILED,
    "invalid_arguments": ErrorKind.INVALID_ARGUMENTS,
}
_check_answer = compile_schema(ANSWER_SCHEMA)

Simulator = Callable[[str, str], Mapping[str, Any] | str]
"""Asks the simulating chat model (system prompt, question): its JSON answer, or why it
gave none (the endpoint failed, the answer was not JSON)."""


class SimulatedBackend:
    """Runs one episode at a time (``envs.backend.Backend``) over ``tools``, every call
    answered by ``simulator``."""

    name = BACKEND

    def __init__(
        self, simulator: Simulator, tools: Sequence[ToolSpec], device: str = "simulated-0"
    ):
        self.device = device
        self._simulator = simulator
        self._tools = {t.name: t for t in tools}
        self._checks = {t.name: compile_schema(t.parameters) for t in tools}
        self._offered: tuple[ToolSpec, ...] = ()
        self._initial: dict[str, dict[str, Row]] = {}
        self._state: dict[str, dict[str, Row]] = {}

    def reset(self, task: TaskSpec) -> None:
        unknown = [name for name in task.tools if name not in self._tools]
        if unknown:
            raise InvalidInputError("task", f"{task.id} offers tools this backend lacks: {unknown}")
        self._offered = tuple(self._tools[name] for name in task.tools)
        state: dict[str, dict[str, Row]] = {}
        for patch in task.initial_conditions.setup:
            row = dict(patch.row)
            if "id" not in row:
                raise InvalidInputError("setup", f"a row of {patch.collection} has no id")
            state.setdefault(patch.collection, {})[str(row["id"])] = row
        self._initial = state
        self._state = json.loads(json.dumps(state))

    def execute(self, action: Action) -> Feedback:
        if action.kind in TERMINAL_KINDS:
            return Feedback()
        if not isinstance(action, ToolCall) or action.tool not in {t.name for t in self._offered}:
            what = action.tool if isinstance(action, ToolCall) else action.kind
            return Feedback.failure(ErrorKind.UNKNOWN_TOOL, f"{what!r} is not offered")
        problem = self._checks[action.tool](action.arguments, "")
        if problem is not None:
            field, message = problem
            return Feedback.failure(ErrorKind.INVALID_ARGUMENTS, message, field=field or None)
        question = json.dumps(
            {
                "tool": self._tools[action.tool].openai_tool()["function"],
                "arguments": action.arguments,
                "state": self._state,
            }
        )
        answer = self._simulator(SIMULATOR_PROMPT, question)
        if isinstance(answer, str):
            return Feedback.failure(ErrorKind.BACKEND_ERROR, f"the simulator: {answer}")
        return self._apply(answer)

    def tool_specs(self) -> tuple[ToolSpec, ...]:
        return self._offered

    def subagent_specs(self) -> tuple[ToolSpec, ...]:
        return ()

    def evidence(self) -> PrivilegedEvidence:
        return PrivilegedEvidence(initial=self._initial, final=self._state)

    def _apply(self, answer: Mapping[str, Any]) -> Feedback:
        """The answer's feedback, its state kept; a malformed answer changes nothing."""
        problem = _check_answer(answer, "")
        state = answer.get("state")
        if problem is None and isinstance(state, dict):
            domains = {t.domain for t in self._offered}
            problem = _state_problem(state, self._state, domains)
        if problem is not None:
            where, message = problem
            return Feedback.failure(
                ErrorKind.BACKEND_ERROR, f"the simulator's answer: {where}: {message}"
            )
        error = answer["error"]
        if error is not None:
            kind = _ERROR_KINDS.get(str(error.get("kind")), ErrorKind.PRECONDITION_FAILED)
            return Feedback.failure(kind, str(error.get("message") or "refused"))
        before: StateSnapshot = self._state
        self._state = state  # type: ignore[assignment]
        changes = [
            StateChange(collection=c.collection, entity_id=c.entity_id, op=c.op)
            for c in state_diff(before, self._state)
        ]
        return Feedback(result=answer["result"], state_changes=changes)


def _state_problem(
    state: Mapping[str, Any], known: Mapping[str, Any], domains: set[str]
) -> tuple[str, str] | None:
    """Why ``state`` cannot be this episode's state, or None: it keeps every collection it
    had, adds only collections of the offered tools' apps (``parking.sessions`` for a
    ``parking`` tool), and each row carries its id."""
    for collection, rows in state.items():
        if collection not in known and collection.split(".")[0] not in domains:
            return "state", f"a collection of no offered app: {collection!r}"
        if not isinstance(rows, dict):
            return f"state.{collection}", "is not an object of rows by id"
        for key, row in rows.items():
            if not isinstance(row, dict) or str(row.get("id")) != key:
                return f"state.{collection}.{key}", "is not a row carrying its id"
    missing = [c for c in known if c not in state]
    if missing:
        return "state", f"collections left out: {missing}"
    return None
