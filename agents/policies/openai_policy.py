"""A chat-completions policy with tool calling, for any OpenAI-compatible server.

One turn is ``format_input`` (messages and tools) → one ``chat.completions.create``
call (retried here, and only here, on transient errors) → ``format_output`` (the first
tool call becomes an action, or a typed error when the reply is unusable). The policy
reads only the ``TaskView``; the API key stays inside the client.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import openai
import orjson
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionMessageParam,
    ChatCompletionToolUnionParam,
)

from agents.policies.base import Decision, TaskView
from contract import (
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
    PolicyInfo,
    Refuse,
    SkillLoad,
    Step,
    SubAgentCall,
    TaskSpec,
    ToolCall,
)
from envs.sandbox.state import WORLD_DATE

Message = dict[str, Any]
"""One chat message, as plain JSON (the wire shape)."""

NO_KEY = "not-needed"
SUBAGENT_PREFIX = "subagent_"
TRANSIENT_ERRORS = (
    openai.APIConnectionError,  # includes APITimeoutError
    openai.RateLimitError,
    openai.InternalServerError,
)
NUDGE = (
    "Your last reply contained no function call. Reply with exactly one function call; "
    "call finish(answer) when the task is done."
)
REFUSAL_NUDGE = (
    "Your last reply was withheld by the endpoint. Continue with exactly one function call, "
    "or call refuse(reason) if the task should not be done."
)
NOT_EXECUTED = "not executed: only the first function call of a reply is executed"


def make_client(base_url: str, api_key: str | None, timeout_s: float) -> openai.OpenAI:
    """A client with retries off (``OpenAIPolicy`` retries); local servers need no key."""
    return openai.OpenAI(
        base_url=base_url, api_key=api_key or NO_KEY, timeout=timeout_s, max_retries=0
    )


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
            "memory_read",
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
            "memory_search",
            "Search remembered facts about the user.",
            (("query", "words to look for"),),
            lambda a: MemorySearch(query=a["query"]),
        ),
        HarnessFunction(
            "load_skill",
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
    tools += [f.openai_tool() for f in HARNESS.values()]
    names = [t["function"]["name"] for t in tools]
    clashes = sorted({n for n in names if names.count(n) > 1})
    if clashes:
        raise InvalidInputError("tools", f"function names collide: {', '.join(clashes)}")
    return tools


def render_feedback(feedback: Feedback) -> str:
    """Feedback as the compact JSON of a tool message."""
    if feedback.error is not None:
        return render_error(feedback.error)
    payload: dict[str, Any] = {"result": feedback.result}
    if feedback.state_changes:
        payload["state_changes"] = [c.model_dump(mode="json") for c in feedback.state_changes]
    return orjson.dumps(payload).decode()


_NO_FEEDBACK = ExecutionError(kind=ErrorKind.BACKEND_ERROR, message="no feedback was recorded")


def render_error(error: ExecutionError) -> str:
    return orjson.dumps({"error": error.model_dump(mode="json", exclude_none=True)}).decode()


# -- format output ---------------------------------------------------------------------


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
        """A readable rendering for ``Step.model_output``: content, refusal, raw calls."""
        lines = [self.content] if self.content else []
        if self.refusal:
            lines.append(f"[refusal] {self.refusal}")
        lines += [f"[tool_call {c.id}] {c.name}({c.arguments})" for c in self.calls]
        if not lines:
            lines.append(f"[empty reply, finish_reason={self.finish_reason}]")
        return "\n".join(lines)


def reply_of(completion: ChatCompletion) -> Reply | None:
    """The first choice of ``completion``, or None when it has none."""
    if not completion.choices:
        return None
    choice = completion.choices[0]
    message = choice.message
    calls: list[RawCall] = []
    for call in message.tool_calls or ():
        if call.type == "function":
            calls.append(RawCall(call.id, call.function.name, call.function.arguments))
        else:  # a custom (free-text) tool call: never offered, kept as raw input
            calls.append(RawCall(call.id, call.custom.name, call.custom.input))
    usage = completion.usage
    return Reply(
        content=message.content,
        refusal=message.refusal,
        finish_reason=str(choice.finish_reason),
        calls=tuple(calls),
        input_tokens=usage.prompt_tokens if usage else 0,
        output_tokens=usage.completion_tokens if usage else 0,
    )


def parse_call(call: RawCall, subagents: frozenset[str]) -> Action | ExecutionError:
    """The action a function call asks for, or why it cannot be one.

    Unknown names become ``ToolCall``s: the backend answers them with ``unknown_tool``.
    """
    try:
        arguments = json.loads(call.arguments) if call.arguments.strip() else {}
    except json.JSONDecodeError as exc:
        return ExecutionError(
            kind=ErrorKind.INVALID_ARGUMENTS,
            message=f"{call.name}: arguments are not valid JSON ({exc.msg} at char {exc.pos})",
        )
    if not isinstance(arguments, dict):
        return ExecutionError(
            kind=ErrorKind.INVALID_ARGUMENTS,
            message=f"{call.name}: arguments must be a JSON object, got {type(arguments).__name__}",
        )
    harness = HARNESS.get(call.name)
    if harness is not None:
        for field, _ in harness.fields:
            if not isinstance(arguments.get(field), str):
                problem = "is missing" if field not in arguments else "must be a string"
                return ExecutionError(
                    kind=ErrorKind.INVALID_ARGUMENTS,
                    message=f"{call.name}: {field} {problem}",
                    field=field,
                )
        return harness.build(arguments)
    agent = call.name.removeprefix(SUBAGENT_PREFIX)
    if call.name.startswith(SUBAGENT_PREFIX) and agent in subagents:
        instruction = arguments.pop("instruction", None)
        if not isinstance(instruction, str):
            problem = "is missing" if instruction is None else "must be a string"
            return ExecutionError(
                kind=ErrorKind.INVALID_ARGUMENTS,
                message=f"{call.name}: instruction {problem}",
                field="instruction",
            )
        return SubAgentCall(agent=agent, instruction=instruction, arguments=arguments)
    return ToolCall(tool=call.name, arguments=arguments)


# -- the policy ------------------------------------------------------------------------


class OpenAIPolicy:
    """Plans with a chat model through an OpenAI-compatible endpoint.

    The caller builds ``client`` (see ``make_client``) with ``max_retries=0``: transient
    endpoint errors are retried here, ``max_attempts`` tries with exponential backoff.
    """

    def __init__(
        self,
        client: openai.OpenAI,
        model: str,
        *,
        temperature: float = 0.0,
        max_attempts: int = 4,
        backoff_s: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if max_attempts < 1:
            raise InvalidInputError("max_attempts", "must be at least 1")
        self._client = client
        self.model = model
        self.temperature = temperature
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self._sleep = sleep

    @property
    def info(self) -> PolicyInfo:
        return PolicyInfo(name="openai", version=self.model, model=self.model)

    def start(self, task: TaskSpec, view: TaskView) -> OpenAISession:
        """A session that sees ``view`` only (``task`` is not read)."""
        return OpenAISession(self, view)

    def complete(
        self, messages: list[Message], tools: list[dict[str, Any]]
    ) -> tuple[ChatCompletion | None, int, str]:
        """One completion, transient errors retried: ``(completion, retries, failure)``;
        ``completion`` is None when the endpoint failed, ``failure`` then says why."""
        retries = 0
        while True:
            try:
                completion = self._client.chat.completions.create(
                    model=self.model,
                    messages=cast("list[ChatCompletionMessageParam]", messages),
                    tools=cast("list[ChatCompletionToolUnionParam]", tools),
                    tool_choice="auto",
                    temperature=self.temperature,
                )
                return completion, retries, ""
            except TRANSIENT_ERRORS as exc:
                if retries + 1 >= self.max_attempts:
                    return None, retries, self._describe(exc, retries + 1)
                self._sleep(self.backoff_s * 2**retries)
                retries += 1
            except openai.OpenAIError as exc:  # not transient: bad request, auth, bad body
                return None, retries, self._describe(exc, retries + 1)

    def _describe(self, exc: Exception, attempts: int) -> str:
        text = f"{type(exc).__name__} after {attempts} attempt(s): {exc}"
        key = self._client.api_key
        if isinstance(key, str) and len(key) >= 8:  # never let a key into a record
            text = text.replace(key, "***")
        return text


class OpenAISession:
    """One episode: the conversation so far, and the tool calls still owed an answer."""

    def __init__(self, policy: OpenAIPolicy, view: TaskView) -> None:
        self._policy = policy
        self._tools = format_tools(view)
        self._subagents = frozenset(s.name for s in view.subagents)
        self._messages: list[Message] = [
            {"role": "system", "content": system_prompt(view)},
            {"role": "user", "content": view.goal},
        ]
        self._pending: list[tuple[str, str | None]] = []
        """Tool call ids still owed a tool message; None: the last step's feedback."""

    @property
    def messages(self) -> list[Message]:
        return list(self._messages)

    def act(self, history: Sequence[Step]) -> Decision:
        last = history[-1].feedback if history else None
        self._answer_pending(last)
        completion, retries, failure = self._policy.complete(self._messages, self._tools)
        if completion is None:
            return Decision(
                action=None,
                model_output="",
                error=ExecutionError(kind=ErrorKind.BACKEND_ERROR, message=failure),
                retries=retries,
                endpoint_failed=True,
            )
        reply = reply_of(completion)
        if reply is None:
            return Decision(
                action=None,
                model_output="",
                error=ExecutionError(
                    kind=ErrorKind.BACKEND_ERROR, message="the endpoint returned no choices"
                ),
                retries=retries,
                endpoint_failed=True,
            )
        action, error = self._take(reply)
        return Decision(
            action=action,
            model_output=reply.render(),
            input_tokens=reply.input_tokens,
            output_tokens=reply.output_tokens,
            error=error,
            retries=retries,
        )

    def _take(self, reply: Reply) -> tuple[Action | None, ExecutionError | None]:
        """Record ``reply`` in the conversation and turn it into an action or an error.

        Every tool call id is owed a tool message: the first its feedback (sent with the
        next request) or, when it yields no action, its error (sent at once); the others
        a note that they were not executed.
        """
        self._messages.append(reply.assistant_message())
        self._pending = [(c.id, NOT_EXECUTED) for c in reply.calls[1:]]
        if reply.refused:
            error = ExecutionError(
                kind=ErrorKind.ENDPOINT_REFUSAL,
                message=f"the endpoint refused: {reply.refusal or reply.finish_reason}",
            )
            self._fail_first(reply, error, REFUSAL_NUDGE)
            return None, error
        if not reply.calls:
            error = ExecutionError(
                kind=ErrorKind.MALFORMED_OUTPUT, message="the reply contained no function call"
            )
            self._fail_first(reply, error, NUDGE)
            return None, error
        parsed = parse_call(reply.calls[0], self._subagents)
        if isinstance(parsed, ExecutionError):
            self._fail_first(reply, parsed, None)
            return None, parsed
        self._pending.insert(0, (reply.calls[0].id, None))
        return parsed, None

    def _fail_first(self, reply: Reply, error: ExecutionError, nudge: str | None) -> None:
        """Answer every call of a reply that yields no action, then nudge if asked."""
        if reply.calls:
            self._pending.insert(0, (reply.calls[0].id, render_error(error)))
        self._answer_pending(None)
        if nudge is not None:
            self._messages.append({"role": "user", "content": nudge})

    def _answer_pending(self, feedback: Feedback | None) -> None:
        for call_id, content in self._pending:
            text = content
            if text is None:
                text = render_feedback(feedback) if feedback else render_error(_NO_FEEDBACK)
            self._messages.append({"role": "tool", "tool_call_id": call_id, "content": text})
        self._pending = []
