"""The chat format of the planner: what an OpenAI-compatible policy sends and receives.

Pure functions, shared by the policy (``openai_policy.py``), which formats its requests
with them, and by training, which rebuilds the same conversation from a stored trajectory
(``trajectory_conversation``): a model is trained on exactly the context it sees at
inference.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, NamedTuple

import orjson

from agents.policies.base import TaskView
from contract import (
    TERMINAL_KINDS,
    TURN_ENDING_KINDS,
    Action,
    Clarify,
    ErrorKind,
    ExecutionError,
    Feedback,
    Finish,
    InvalidInputError,
    MemoryRead,
    MemorySearch,
    MemoryWrite,
    Refuse,
    SkillLoad,
    StateChange,
    Step,
    TaskSpec,
    Trajectory,
    canonical_json,
)
from envs.backends import ToolSource, arriving_specs
from envs.sandbox.state import WORLD_DATE

Message = dict[str, Any]
"""One chat message, as plain JSON (the wire shape)."""

OPENAI_POLICY = "openai"
"""The policy name of ``OpenAIPolicy``: its steps record the model's raw replies."""
SUBAGENT_PREFIX = "subagent_"
SKILL_FUNCTION = "load_skill"
"""The harness function that loads a skill: its result is a routine the user wrote."""
MEMORY_READ = "memory_read"
MEMORY_SEARCH = "memory_search"
"""The harness functions that read remembered facts: each fact's value the user told."""
NUDGE = (
    "Your last reply contained no usable function call. Reply with exactly one function "
    "call; call finish(answer) when the task is done."
)
REFUSAL_NUDGE = (
    "Your last reply was withheld by the endpoint. Continue with exactly one function call, "
    "or call refuse(reason) if the task should not be done."
)
NOT_EXECUTED = "not executed: only the first function call of a reply is executed"
MALFORMED_CALL = "[malformed tool_call] "
"""Starts the line that stands for a tool call the endpoint sent malformed (no name,
arguments of the wrong type): such a reply yields no action (``agents/completions.py``)."""


# -- harness functions -----------------------------------------------------------------


@dataclass(frozen=True)
class HarnessFunction:
    """A function the planner calls that is not an app tool: memory, skills, terminals."""

    name: str
    description: str
    fields: tuple[tuple[str, str], ...]
    """``(name, description)`` of its string arguments, all required."""
    build: Callable[[Mapping[str, str]], Action]

    def openai_tool(self) -> dict[str, Any]:
        properties = {name: {"type": "string", "description": d} for name, d in self.fields}
        parameters = {
            "type": "object",
            "properties": properties,
            "required": [name for name, _ in self.fields],
        }
        return _function(self.name, self.description, parameters)


HARNESS: dict[str, HarnessFunction] = {
    f.name: f
    for f in (
        HarnessFunction(
            MEMORY_READ,
            "Read one remembered fact about the user by its key.",
            (("key", "the fact's key, e.g. user.best_friend"),),
            lambda a: MemoryRead(key=a["key"]),
        ),
        HarnessFunction(
            "memory_write",
            "Remember a fact about the user under a key.",
            (("key", "the fact's key"), ("value", "the fact")),
            lambda a: MemoryWrite(key=a["key"], value=a["value"]),
        ),
        HarnessFunction(
            MEMORY_SEARCH,
            "Search remembered facts about the user.",
            (("query", "words to look for"),),
            lambda a: MemorySearch(query=a["query"]),
        ),
        HarnessFunction(
            SKILL_FUNCTION,
            "Load a documented multi-step routine from the skills library by name.",
            (("name", "the skill's name"),),
            lambda a: SkillLoad(name=a["name"]),
        ),
        HarnessFunction(
            "ask_user",
            "Ask the user a clarifying question (ends the task until they answer).",
            (("question", "the question"),),
            lambda a: Clarify(question=a["question"]),
        ),
        HarnessFunction(
            "refuse",
            "Decline the task, saying why.",
            (("reason", "why the task should not be done"),),
            lambda a: Refuse(reason=a["reason"]),
        ),
        HarnessFunction(
            "finish",
            "Declare the task complete and answer the user.",
            (("answer", "the answer or confirmation for the user"),),
            lambda a: Finish(answer=a["answer"]),
        ),
    )
}


def _function(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


# -- format input ----------------------------------------------------------------------


def task_view(task: TaskSpec, source: ToolSource, max_steps: int) -> TaskView:
    """The view the runner gives a policy for ``task``: its user turns, its candidate
    tools in the task's order, the sub-agents and the step budget; nothing privileged."""
    return TaskView(
        goal=task.goal,
        tools=tuple(source.tool_spec(name) for name in task.tools),
        subagents=source.subagent_specs(),
        max_steps=max_steps,
        follow_ups=task.follow_ups,
        arriving=arriving_specs(task.arriving_tools, source),
    )


def system_prompt(view: TaskView) -> str:
    return (
        "You are the planner of a phone assistant. You complete the user's request by "
        "calling the functions you are given: app tools, the user's memory, the skills "
        "library and sub-agents.\n"
        f"Today's date is {WORLD_DATE}.\n"
        "Call exactly one function per reply, then wait for its result. Look up ids "
        "instead of guessing them. Ask the user only when the request is ambiguous.\n"
        f"You have at most {view.max_steps} function calls. When the task is done, "
        "call finish(answer) with a short answer for the user."
    )


def opening_messages(view: TaskView) -> list[Message]:
    """The conversation before the first reply: the system prompt and the user's goal."""
    return [
        {"role": "system", "content": system_prompt(view)},
        {"role": "user", "content": view.goal},
    ]


def subagent_tool(
    spec_name: str, description: str, parameters: Mapping[str, Any]
) -> dict[str, Any]:
    """A sub-agent as a function: its own parameters plus a required ``instruction``."""
    properties = dict(parameters.get("properties", {}))
    if "instruction" in properties:
        raise InvalidInputError(f"subagents.{spec_name}", "already has a parameter 'instruction'")
    properties["instruction"] = {
        "type": "string",
        "description": "what the sub-agent is asked, in natural language",
    }
    schema = {
        **parameters,
        "properties": properties,
        "required": [*parameters.get("required", []), "instruction"],
    }
    return _function(SUBAGENT_PREFIX + spec_name, description, schema)


def format_tools(view: TaskView) -> list[dict[str, Any]]:
    """App tools, then sub-agents, then harness functions; names must be unique."""
    tools = [spec.openai_tool() for spec in view.tools]
    tools += [subagent_tool(s.name, s.description, s.parameters) for s in view.subagents]
    tools += _harness_tools()
    names = Counter(t["function"]["name"] for t in tools)
    clashes = sorted(n for n, count in names.items() if count > 1)
    if clashes:
        raise InvalidInputError("tools", f"function names collide: {', '.join(clashes)}")
    return tools


@cache
def _harness_tools() -> tuple[dict[str, Any], ...]:
    return tuple(f.openai_tool() for f in HARNESS.values())


def render_feedback(feedback: Feedback) -> str:
    """Feedback as the compact JSON of a tool message, every object's keys sorted: the
    catalog stores feedback as canonical JSON, so a result read back (what a training row
    shows) has its keys sorted whatever order the tool wrote them in, and a live episode
    must show the model the same text (``{"key":..,"source":..,"value":..}`` from memory,
    not ``{"key":..,"value":..,"source":..}``), or what it learned is laid out otherwise
    at inference, its values' references numbered otherwise too."""
    if feedback.error is not None:
        return render_error(feedback.error)
    payload: dict[str, Any] = {"result": feedback.result}
    if feedback.state_changes:
        payload["state_changes"] = [c.model_dump(mode="json") for c in feedback.state_changes]
    return canonical_json(payload).decode()


NO_FEEDBACK = ExecutionError(kind=ErrorKind.BACKEND_ERROR, message="no feedback was recorded")


def render_error(error: ExecutionError) -> str:
    return orjson.dumps({"error": error.model_dump(mode="json", exclude_none=True)}).decode()


# -- the model's reply -----------------------------------------------------------------


@dataclass(frozen=True)
class RawCall:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Reply:
    """The first choice of a completion, reduced to what the policy uses."""

    content: str | None
    refusal: str | None
    finish_reason: str
    calls: tuple[RawCall, ...]
    input_tokens: int
    output_tokens: int
    malformed: tuple[str, ...] = ()
    """What was wrong with each malformed tool call; ``content`` ends with a
    ``MALFORMED_CALL`` line for each, and ``calls`` is empty."""

    @property
    def refused(self) -> bool:
        return bool(self.refusal) or self.finish_reason == "content_filter"

    def assistant_message(self) -> Message:
        """The reply as the assistant message appended to the conversation."""
        message: Message = {"role": "assistant", "content": self.content or self.refusal or ""}
        if self.calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in self.calls
            ]
            if not self.content:
                message["content"] = None
        return message

    def render(self) -> str:
        """A readable rendering for ``Step.model_output``: content, refusal, raw calls.

        ``parse_rendered`` reads it back."""
        lines = [self.content] if self.content else []
        if self.refusal:
            lines.append(f"{_REFUSAL_MARK}{self.refusal}")
        lines += [f"[tool_call {c.id}] {c.name}({c.arguments})" for c in self.calls]
        if not lines:
            lines.append(f"[empty reply, finish_reason={self.finish_reason}]")
        return "\n".join(lines)


_REFUSAL_MARK = "[refusal] "
_CALL_HEADER = re.compile(r"^\[tool_call ([^\]\n]*)\] ([^\n(]*)\(", re.MULTILINE)
_EMPTY = re.compile(r"\[empty reply, finish_reason=([^\]\n]*)\]")


def parse_rendered(text: str) -> Reply:
    """The reply that ``Reply.render`` wrote as ``text`` (token counts are not kept).

    A call runs from its ``[tool_call ID] NAME(`` header at the start of a line to the
    ``)`` before the next header or the end; text before the first header is the content,
    then the refusal. Content that itself holds such a header at the start of a line is
    read as a call: models do not write the policy's rendering.
    """
    headers = list(_CALL_HEADER.finditer(text))
    calls = []
    for i, header in enumerate(headers):
        end = headers[i + 1].start() - 1 if i + 1 < len(headers) else len(text)
        body = text[header.end() : end]
        calls.append(RawCall(header.group(1), header.group(2), body.removesuffix(")")))
    head = text[: headers[0].start()].removesuffix("\n") if headers else text
    if not calls and (empty := _EMPTY.fullmatch(head)):
        return Reply(None, None, empty.group(1), (), 0, 0)
    content: str | None = head
    refusal = None
    if head.startswith(_REFUSAL_MARK):
        content, refusal = None, head.removeprefix(_REFUSAL_MARK)
    elif (at := head.rfind("\n" + _REFUSAL_MARK)) >= 0:
        content, refusal = head[:at], head[at + 1 + len(_REFUSAL_MARK) :]
    return Reply(content or None, refusal, "stop", tuple(calls), 0, 0)


def action_call(action: Action) -> tuple[str, dict[str, Any]]:
    """The function call (name, arguments) a policy makes for ``action``: the inverse of
    ``parse_call`` in ``openai_policy``."""
    return json_action_call(action.model_dump())


def json_action_call(action: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """``action_call`` of an action given as the JSON ``to_json`` wrote (every field
    present), without validating it: the export reads actions from the catalog's column."""
    kind = action["kind"]
    if kind == "tool_call":
        return action["tool"], dict(action["arguments"])
    if kind == "subagent_call":
        arguments = {**action["arguments"], "instruction": action["instruction"]}
        return SUBAGENT_PREFIX + action["agent"], arguments
    name = _HARNESS_OF[kind]
    return name, {field: action[field] for field, _ in HARNESS[name].fields}


_HARNESS_OF = {
    "memory_read": MEMORY_READ,
    "memory_write": "memory_write",
    "memory_search": MEMORY_SEARCH,
    "skill_load": SKILL_FUNCTION,
    "clarify": "ask_user",
    "refuse": "refuse",
    "finish": "finish",
}
_ANSWER_FIELD = {"finish": "answer", "clarify": "question", "refuse": "reason"}
"""The text a terminal action says to the user: what a correction replaces."""


# -- a stored trajectory as a conversation ---------------------------------------------


@dataclass(frozen=True)
class Conversation:
    """A trajectory as the chat the policy had, with a training flag per message."""

    messages: list[Message]
    view: TaskView
    trained: list[bool]
    """Aligned with ``messages``: True for the assistant turns a model is trained on."""
    steps: list[int | None]
    """Aligned with ``messages``: the step each message belongs to; None for the system
    prompt, the goal, and an appended corrected answer."""

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The functions offered (``format_tools``), rendered when asked: the export
        renders each function once per export instead."""
        return format_tools(self.view)


class ChatStep(NamedTuple):
    """What the conversation needs of one step, as plain values: made from a ``Step``
    (``of``) or from the catalog's stored JSON (``from_json``, no record rebuilt), so
    that the export and a trajectory in memory give the same messages. (A tuple: the
    export makes millions, and a frozen dataclass is several times slower to make.)"""

    position: int
    """The step's index in its trajectory (``Step.index``)."""
    kind: str | None
    """The action's kind; None when the output gave no action."""
    call: tuple[str, dict[str, Any]] | None
    """The function call a policy makes for the action (``action_call``)."""
    model_output: str
    tool_text: str
    """The tool message of the feedback (``render_feedback``)."""
    error_kind: str | None
    error_text: str | None
    """The feedback's error as its tool message (``render_error``)."""

    @classmethod
    def of(cls, step: Step) -> ChatStep:
        action, error = step.action, step.feedback.error
        return cls(
            position=step.index,
            kind=action.kind if action is not None else None,
            call=action_call(action) if action is not None else None,
            model_output=step.model_output,
            tool_text=render_feedback(step.feedback),
            error_kind=error.kind.value if error is not None else None,
            error_text=render_error(error) if error is not None else None,
        )

    @classmethod
    def from_json(
        cls, index: int, action: str | None, model_output: str, feedback: str
    ) -> ChatStep:
        """The step from its stored columns: ``action`` and ``feedback`` as ``to_json``
        wrote them (canonical JSON, every field present)."""
        parsed = orjson.loads(action) if action is not None else None
        stored = orjson.loads(feedback)
        error = stored["error"]
        error_text = json_render_error(error) if error is not None else None
        return cls(
            position=index,
            kind=parsed["kind"] if parsed is not None else None,
            call=json_action_call(parsed) if parsed is not None else None,
            model_output=model_output,
            tool_text=error_text or _json_render_result(stored),
            error_kind=error["kind"] if error is not None else None,
            error_text=error_text,
        )


_ERROR_FIELDS = tuple(ExecutionError.model_fields)
_CHANGE_FIELDS = tuple(StateChange.model_fields)


def json_render_error(error: Mapping[str, Any]) -> str:
    """``render_error`` of an error given as JSON: its fields in the model's order, those
    that are None left out."""
    fields = {name: error[name] for name in _ERROR_FIELDS if error.get(name) is not None}
    return orjson.dumps({"error": fields}).decode()


def _json_render_result(feedback: Mapping[str, Any]) -> str:
    """``render_feedback`` of error-free feedback given as JSON."""
    payload: dict[str, Any] = {"result": feedback["result"]}
    if changes := feedback["state_changes"]:
        payload["state_changes"] = [{name: c[name] for name in _CHANGE_FIELDS} for c in changes]
    return canonical_json(payload).decode()


def trajectory_conversation(
    trajectory: Trajectory,
    view: TaskView,
    *,
    masked_steps: Collection[int] = (),
    correction: str | None = None,
) -> Conversation:
    """The conversation of ``trajectory`` as an ``ChatSession`` holds it at the end of
    the episode: ``conversation`` of its steps."""
    return conversation(
        [ChatStep.of(step) for step in trajectory.steps],
        view,
        recorded=trajectory.metadata.policy.name == OPENAI_POLICY,
        masked_steps=masked_steps,
        correction=correction,
    )


def conversation(
    steps: Sequence[ChatStep],
    view: TaskView,
    *,
    recorded: bool,
    masked_steps: Collection[int] = (),
    correction: str | None = None,
) -> Conversation:
    """The conversation of a trajectory's ``steps`` as an ``ChatSession`` holds it at the
    end of the episode: the messages it sent, and the last reply.

    Steps of the OpenAI policy (``recorded``) keep the model's raw reply in
    ``model_output``; it is read back (``parse_rendered``). Other policies (the scripted
    one) record no reply, so each action becomes the assistant tool call the OpenAI policy
    would have made for it. Tool messages, error answers and nudges follow the session's
    rules.

    ``trained`` is True for every assistant turn except those of ``masked_steps``.
    ``correction`` replaces what the final terminal action (finish, clarify, refuse) says
    to the user, or, when the episode ended otherwise, is appended as a ``finish`` call
    after the last feedback; that turn is trained whatever the masks.
    """
    out = _Builder(opening_messages(view))
    last = steps[-1] if steps else None
    terminal = last if last is not None and last.kind in TERMINAL_KINDS else None
    previous: ChatStep | None = None
    finished = 0
    for step in steps:
        out.answer_pending(previous)
        if previous is not None and previous.kind in TURN_ENDING_KINDS:
            finished += 1
            if (follow_up := view.follow_up(finished)) is not None:
                out.add({"role": "user", "content": follow_up}, False, previous.position)
        reply = _reply_of(step, recorded)
        if reply is None:  # the endpoint failed: the session appended nothing
            continue
        trained = step.position not in masked_steps
        if correction is not None and terminal is not None and step is last:
            reply = _corrected(reply, terminal, correction)
            trained = True
        out.add(reply.assistant_message(), trained, step.position)
        out.pending = [(c.id, NOT_EXECUTED) for c in reply.calls[1:]]
        if step.kind is not None:
            out.pending.insert(0, (reply.calls[0].id, None))
        elif step.error_kind == ErrorKind.ENDPOINT_REFUSAL.value:
            out.fail_first(reply, step.error_text, REFUSAL_NUDGE, step.position)
        elif not reply.calls:
            out.fail_first(reply, step.error_text, NUDGE, step.position)
        else:
            out.fail_first(reply, step.error_text, None, step.position)
        previous = step
    if correction is not None and terminal is None:
        out.answer_pending(previous)
        call = RawCall(f"call_{len(steps)}", "finish", json.dumps({"answer": correction}))
        out.add(Reply(None, None, "tool_calls", (call,), 0, 0).assistant_message(), True, None)
    return Conversation(out.messages, view, out.trained, out.steps)


def template_messages(messages: Sequence[Message]) -> list[Message]:
    """``messages`` as chat templates read them: tool-call arguments as JSON objects
    (the wire format sends them as JSON text; serving stacks parse them before rendering
    a template). Arguments that are not a JSON object stay text."""
    return [
        {**m, "tool_calls": [_object_arguments(c) for c in m["tool_calls"]]}
        if m.get("tool_calls")
        else m
        for m in messages
    ]


def _object_arguments(call: dict[str, Any]) -> dict[str, Any]:
    function = call["function"]
    arguments = function["arguments"]
    if isinstance(arguments, str):
        try:
            parsed = json_value(arguments) if arguments.strip() else {}
        except ValueError:
            return call
        if isinstance(parsed, dict):
            return {**call, "function": {**function, "arguments": parsed}}
    return call


def json_value(text: str) -> Any:
    """``json.loads(text)`` for stored call arguments: by orjson where it can (strict JSON,
    ten times faster), by ``json`` where orjson refuses what ``json`` reads (``NaN``); a
    ``ValueError`` for text neither reads, nesting past ``json``'s depth included."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        try:
            return json.loads(text)
        except RecursionError as exc:
            raise ValueError("nested past the JSON parser's depth") from exc


class _Builder:
    """The session's bookkeeping, replayed: messages, and the calls owed an answer."""

    def __init__(self, opening: list[Message]) -> None:
        self.messages = opening
        self.trained = [False] * len(opening)
        self.steps: list[int | None] = [None] * len(opening)
        self.pending: list[tuple[str, str | None]] = []
        self._step: int | None = None

    def add(self, message: Message, trained: bool, step: int | None) -> None:
        self.messages.append(message)
        self.trained.append(trained)
        self.steps.append(step)
        self._step = step

    def answer_pending(self, previous: ChatStep | None) -> None:
        for call_id, content in self.pending:
            text = content
            if text is None:
                text = previous.tool_text if previous is not None else _NO_FEEDBACK_TEXT
            self.add({"role": "tool", "tool_call_id": call_id, "content": text}, False, self._step)
        self.pending = []

    def fail_first(self, reply: Reply, error: str | None, nudge: str | None, step: int) -> None:
        """Answer the reply's first call with ``error`` (a rendered error; None: no
        feedback was recorded) and the others as not executed; then ``nudge``, if any."""
        if reply.calls:
            self.pending.insert(0, (reply.calls[0].id, error or _NO_FEEDBACK_TEXT))
        self.answer_pending(None)
        if nudge is not None:
            self.add({"role": "user", "content": nudge}, False, step)


_NO_FEEDBACK_TEXT = render_error(NO_FEEDBACK)


def _reply_of(step: ChatStep, recorded: bool) -> Reply | None:
    """The model's reply at ``step``; None when the endpoint gave none."""
    if recorded:
        if step.call is None and not step.model_output:
            return None
        reply = parse_rendered(step.model_output)
        if step.call is None or reply.calls:
            return reply
    if step.call is None:
        return Reply(step.model_output or None, None, "stop", (), 0, 0)
    name, arguments = step.call
    call = RawCall(f"call_{step.position}", name, orjson.dumps(arguments).decode())
    return Reply(None, None, "tool_calls", (call,), 0, 0)


def _corrected(reply: Reply, terminal: ChatStep, correction: str) -> Reply:
    """``reply`` with its terminal call saying ``correction`` to the user."""
    assert terminal.call is not None and terminal.kind is not None
    arguments = json.dumps({_ANSWER_FIELD[terminal.kind]: correction})
    call = RawCall(reply.calls[0].id, terminal.call[0], arguments)
    return Reply(reply.content, None, "tool_calls", (call, *reply.calls[1:]), 0, 0)
