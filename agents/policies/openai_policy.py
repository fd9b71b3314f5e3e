"""A chat-completions policy with tool calling, for any OpenAI-compatible server.

One turn is ``format_input`` (messages and tools, in the chat format of ``chat_format``)
→ one ``chat.completions.create`` call (retried here, and only here, on transient errors)
→ ``format_output`` (the first tool call becomes an action, or a typed error when the
reply is unusable). The policy reads only the ``TaskView``; the API key stays inside the
client.

``ChatSession`` is the conversation side of that turn, over any ``ReplySource``: the
trainer's local model (``training/chat_model.py``) speaks through the same session, so
what it sees during online RL is exactly what the OpenAI-compatible policy sees.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast

import openai
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionMessageParam,
    ChatCompletionToolUnionParam,
)

from agents.policies.base import Decision, TaskView
from agents.policies.chat_format import (
    HARNESS,
    NO_FEEDBACK,
    NOT_EXECUTED,
    NUDGE,
    OPENAI_POLICY,
    REFUSAL_NUDGE,
    SUBAGENT_PREFIX,
    Message,
    RawCall,
    Reply,
    format_tools,
    opening_messages,
    render_error,
    render_feedback,
)
from contract import (
    Action,
    ErrorKind,
    ExecutionError,
    Feedback,
    InvalidInputError,
    PolicyInfo,
    Step,
    SubAgentCall,
    TaskSpec,
    ToolCall,
)

__all__ = [  # with what ``chat_format`` lends the policy's callers
    "HARNESS",
    "TRANSIENT_ERRORS",
    "ChatSession",
    "OpenAIPolicy",
    "RawCall",
    "Reply",
    "ReplySource",
    "make_client",
    "parse_call",
    "reply_of",
]

NO_KEY = "not-needed"
TRANSIENT_ERRORS = (
    openai.APIConnectionError,  # includes APITimeoutError
    openai.RateLimitError,
    openai.InternalServerError,
)


def make_client(base_url: str, api_key: str | None, timeout_s: float) -> openai.OpenAI:
    """A client with retries off (``OpenAIPolicy`` retries); local servers need no key."""
    return openai.OpenAI(
        base_url=base_url, api_key=api_key or NO_KEY, timeout=timeout_s, max_retries=0
    )


# -- format output ---------------------------------------------------------------------


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


def call_arguments(call: RawCall) -> dict[str, Any] | ExecutionError:
    """A function call's arguments as a JSON object (empty text: none), or why not."""
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
    return arguments


def parse_call(call: RawCall, subagents: frozenset[str]) -> Action | ExecutionError:
    """The action a function call asks for, or why it cannot be one.

    Unknown names become ``ToolCall``s: the backend answers them with ``unknown_tool``.
    """
    arguments = call_arguments(call)
    if isinstance(arguments, ExecutionError):
        return arguments
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
        recorded_as: str | None = None,
    ) -> None:
        if max_attempts < 1:
            raise InvalidInputError("max_attempts", "must be at least 1")
        self._client = client
        self.model = model
        self.recorded_as = recorded_as or model
        """The model trajectories name: ``model``, or what an alias stands for (the
        registry id behind ``champion``)."""
        self.temperature = temperature
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self._sleep = sleep

    @property
    def info(self) -> PolicyInfo:
        return PolicyInfo(name=OPENAI_POLICY, version=self.recorded_as, model=self.recorded_as)

    def start(self, task: TaskSpec, view: TaskView) -> ChatSession:
        """A session that sees ``view`` only (``task`` is not read)."""
        return ChatSession(self, view)

    def reply(
        self, messages: list[Message], tools: list[dict[str, Any]]
    ) -> tuple[Reply | None, int, str]:
        """One completion as a ``Reply`` (see ``ReplySource``)."""
        completion, retries, failure = self.complete(messages, tools)
        if completion is None:
            return None, retries, failure
        reply = reply_of(completion)
        if reply is None:
            return None, retries, "the endpoint returned no choices"
        return reply, retries, ""

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


class ReplySource(Protocol):
    """Where a ``ChatSession``'s replies come from: an endpoint or a local model."""

    def reply(
        self, messages: list[Message], tools: list[dict[str, Any]]
    ) -> tuple[Reply | None, int, str]:
        """``(reply, retries, failure)``: ``reply`` is None when the source failed after
        ``retries`` retries, and ``failure`` then says why."""
        ...


class ChatSession:
    """One episode: the conversation so far, and the tool calls still owed an answer."""

    def __init__(self, source: ReplySource, view: TaskView) -> None:
        self._source = source
        self._tools = format_tools(view)
        self._subagents = frozenset(s.name for s in view.subagents)
        self._messages: list[Message] = opening_messages(view)
        self._pending: list[tuple[str, str | None]] = []
        """Tool call ids still owed a tool message; None: the last step's feedback."""

    @property
    def messages(self) -> list[Message]:
        return list(self._messages)

    def act(self, history: Sequence[Step]) -> Decision:
        last = history[-1].feedback if history else None
        self._answer_pending(last)
        reply, retries, failure = self._source.reply(self._messages, self._tools)
        if reply is None:
            return Decision(
                action=None,
                model_output="",
                error=ExecutionError(kind=ErrorKind.BACKEND_ERROR, message=failure),
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
                text = render_feedback(feedback) if feedback else render_error(NO_FEEDBACK)
            self._messages.append({"role": "tool", "tool_call_id": call_id, "content": text})
        self._pending = []
