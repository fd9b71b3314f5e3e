"""BFCL's world behind our backend interface, and its tasks as our task specs.

A BFCL task becomes a ``TaskSpec`` of several user turns (``follow_ups``) whose verifier
is one ``bfcl`` check (BFCL's semantics, ``envs.bfcl.verify``) and whose reference plan
is the ground truth's calls with a ``finish`` after each turn (a ``clarify`` after a
turn whose ground truth has no call: ``miss_param``'s request without its parameter).
The backend runs every call a policy makes on the task's classes, as BFCL's executor
does (also a function the task does not offer: it exists, so BFCL runs it), so what the
episode did is what verification replays.

``miss_func`` holds functions back until a later turn: they arrive with that turn
(``TaskSpec.arriving_tools``), whose user message, empty in BFCL's data, says so; the turn
before it asks for what needs them, and its reference answers it by asking the user for
a function that can do it (``clarify``; BFCL's ground truth makes no call there), as it
asks for the detail a ``miss_param`` turn leaves out.
"""

from __future__ import annotations

import json
from typing import Any

from contract import (
    TERMINAL_KINDS,
    Action,
    BfclCheck,
    Capability,
    Clarify,
    Difficulty,
    ErrorKind,
    Feedback,
    Finish,
    InitialConditions,
    InvalidInputError,
    Split,
    TaskSpec,
    ToolCall,
    ToolSpec,
    VerifierSpec,
    step_budget_for,
    task_fingerprint,
)
from envs.backend import PrivilegedEvidence, StateSnapshot
from envs.bfcl.tasks import BfclCall, BfclTask, class_docs, function_docs, task_by_id
from envs.bfcl.world import ERROR_PREFIX, BfclWorld

BACKEND = "bfcl"
TEMPLATE_PREFIX = "bfcl_"
"""A BFCL task's ``template``: ``bfcl_`` and its category (its parameter is its id)."""
CLARIFICATION = "Which one do you mean? Your request leaves out a detail I need."
NO_FUNCTION_YET = "None of my functions can do that yet. Can you make one available?"
ARRIVAL = "These functions are now available: {names}."
"""The user turn that brings held-back functions (BFCL's own is empty)."""
_TYPES = {"dict": "object", "float": "number", "tuple": "array"}


def task_spec(task: BfclTask, split: Split = Split.TRAIN) -> TaskSpec:
    """``task`` as our task spec (module docstring)."""
    turns = [
        "\n".join(messages) or ARRIVAL.format(names=", ".join(task.held_back.get(i, ())))
        for i, messages in enumerate(task.turns)
    ]
    template = TEMPLATE_PREFIX + task.category
    params: dict[str, Any] = {"id": task.id}
    calls = sum(len(turn) for turn in task.ground_truth)
    plan = _reference_plan(task)
    later = {name for names in task.held_back.values() for name in names}
    offered = [
        d["name"]
        for d in function_docs(task.classes)
        if d["name"] not in task.excluded and d["name"] not in later
    ]
    arriving = [task.held_back.get(turn, ()) for turn in range(1, len(turns))]
    while arriving and not arriving[-1]:
        arriving.pop()
    return TaskSpec(
        fingerprint=task_fingerprint(template, params, turns[0]),
        goal=turns[0],
        follow_ups=tuple(turns[1:]),
        arriving_tools=tuple(tuple(names) for names in arriving),
        capabilities=(Capability.TOOL_USE,),
        difficulty=_difficulty(calls),
        domains=tuple(name.lower() for name in task.classes),
        tools=tuple(offered),
        initial_conditions=InitialConditions(backend=BACKEND, seed=0),
        verifier=VerifierSpec(checks=(BfclCheck(task=task.id),)),
        reference_plan=plan,
        template=template,
        params=params,
        split=split,
        max_steps=step_budget_for(plan),
    )


def bfcl_task_of(task: TaskSpec) -> BfclTask:
    """The BFCL task a task spec of this backend stands for."""
    task_id = task.params.get("id")
    if task.initial_conditions.backend != BACKEND or not isinstance(task_id, str):
        raise InvalidInputError("task", f"{task.id} is not a BFCL task")
    return task_by_id(task_id)


class BfclBackend:
    """Runs one BFCL episode at a time (``envs.backend.Backend``)."""

    name = BACKEND

    def __init__(self, device: str = "bfcl-0") -> None:
        self.device = device
        self._world: BfclWorld | None = None
        self._initial: StateSnapshot = {}
        self._specs: tuple[ToolSpec, ...] = ()

    def reset(self, task: TaskSpec) -> None:
        bfcl = bfcl_task_of(task)
        self._world = BfclWorld(bfcl)
        self._initial = self._snapshot()
        specs = {d["name"]: tool_spec(d, name) for name in bfcl.classes for d in class_docs(name)}
        self._specs = tuple(specs[name] for name in task.tools)

    def execute(self, action: Action) -> Feedback:
        world = self._require()
        if isinstance(action, ToolCall):
            result = world.call(BfclCall(action.tool, action.arguments))
            if result.startswith(ERROR_PREFIX):
                kind = (
                    ErrorKind.UNKNOWN_TOOL
                    if action.tool not in world.functions
                    else ErrorKind.PRECONDITION_FAILED
                )
                return Feedback.failure(kind, result.removeprefix(ERROR_PREFIX))
            return Feedback(result=_result(result))
        if action.kind in TERMINAL_KINDS:
            return Feedback()
        return Feedback.failure(
            ErrorKind.UNKNOWN_TOOL, f"BFCL's world has no {action.kind.replace('_', ' ')}"
        )

    def tool_specs(self) -> tuple[ToolSpec, ...]:
        return self._specs

    def subagent_specs(self) -> tuple[ToolSpec, ...]:
        return ()

    def evidence(self) -> PrivilegedEvidence:
        return PrivilegedEvidence(initial=self._initial, final=self._snapshot())

    def _require(self) -> BfclWorld:
        if self._world is None:
            raise InvalidInputError("task", "the backend was not reset with a task")
        return self._world

    def _snapshot(self) -> StateSnapshot:
        """Each instance's public state as one row (``bfcl.<class>``), as JSON data."""
        state = self._require().state()
        return {
            f"bfcl.{name.lower()}": {"state": json.loads(json.dumps(attributes, default=str))}
            for name, attributes in state.items()
        }


def tool_spec(doc: dict[str, Any], owner: str) -> ToolSpec:
    """A BFCL function document as our tool spec (its types as JSON Schema's)."""
    return ToolSpec(
        name=doc["name"],
        domain=owner.lower(),
        description=doc["description"],
        parameters=_schema(doc["parameters"]),
    )


def _schema(value: Any) -> Any:
    if isinstance(value, dict):
        out = {k: _schema(v) for k, v in value.items()}
        kind = out.get("type")
        if kind == "any":
            out.pop("type")
        elif isinstance(kind, str):
            out["type"] = _TYPES.get(kind, kind)
        return out
    if isinstance(value, list):
        return [_schema(v) for v in value]
    return value


def _reference_plan(task: BfclTask) -> tuple[Action, ...]:
    plan: list[Action] = []
    last = len(task.ground_truth) - 1
    for index, calls in enumerate(task.ground_truth):
        plan += [ToolCall(tool=c.name, arguments=_json_data(c.arguments)) for c in calls]
        if calls or index == last:
            plan.append(Finish(answer="Done."))
        else:
            missing = NO_FUNCTION_YET if index + 1 in task.held_back else CLARIFICATION
            plan.append(Clarify(question=missing))
    return tuple(plan)


def _difficulty(calls: int) -> Difficulty:
    if calls <= 4:
        return Difficulty.EASY
    return Difficulty.MEDIUM if calls <= 8 else Difficulty.HARD


def _json_data(arguments: Any) -> dict[str, Any]:
    return dict(json.loads(json.dumps(arguments)))


def _result(text: str) -> Any:
    if text.startswith(("{", "[")):
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text
