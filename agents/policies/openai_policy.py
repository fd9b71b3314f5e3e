"""A chat-completions policy with tool calling, for any OpenAI-compatible server.

One turn is ``format_input`` (messages and tools, in the chat format of ``chat_format``)
→ one chat completion through ``agents/completions.py`` (the one boundary that reads and
checks what an endpoint returns, and retries its transient failures: only there) →
``format_output`` (the first tool call becomes an action, or a typed error when the
reply is unusable). The policy reads only the ``TaskView``; the API key stays inside the
client.

``ChatSession`` is the conversation side of that turn, over any ``ReplySource``: the
trainer's local model (``training/chat_model.py``) speaks through the same session, so
what it sees during online RL is exactly what the OpenAI-compatible policy sees.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol

import openai
import orjson

from agents.completions import (
    DEFAULT_MAX_RESPONSE_BYTES,
    Completion,
    CompletionFailure,
    capped_http_client,
    complete,
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
    TURN_ENDING_KINDS,
    Action,
    ErrorKind,
    ExecutionError,
    Feedback,
    PolicyInfo,
    RetryPolicy,
    Step,
    SubAgentCall,
    TaskSpec,
    ToolCall,
    canonical_json,
)
from contract.retry import LLM_RETRY

__all__ = [  # with what ``chat_format`` lends the policy's callers
    "HARNESS",
    "ChatSession",
    "OpenAIPolicy",
    "RawCall",
    "Reply",
    "ReplySource",
    "make_client",
    "parse_call",
]

NO_KEY = "not-needed"


def make_client(
    base_url: str,
    api_key: str | None,
    timeout_s: float,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
) -> openai.OpenAI:
    """A client with retries off (``OpenAIPolicy`` retries) whose responses stop past
    ``max_response_bytes`` (``capped_http_client``); local servers need no key."""
    return openai.OpenAI(
        base_url=base_url,
        api_key=api_key or NO_KEY,
        timeout=timeout_s,
        max_retries=0,
        http_client=capped_http_client(max_response_bytes),
    )


# -- format output ---------------------------------------------------------------------


def call_arguments(call: RawCall) -> dict[str, Any] | ExecutionError:
    """A function call's arguments as a JSON object (empty text: none), or why not.

    Read as strict JSON (``orjson``: no ``NaN`` or ``Infinity``, no number past a double's
    range, no lone surrogate, at most 1,024 levels; an integer past 64 bits is read as the
    double it is), and refused unless the canonical JSON that stores and describes an
    action can write it (at most 255 levels): a model's or a server's reply is data, so
    what the trajectory cannot hold is an invalid call, never a crash later on.
    """
    try:
        arguments = orjson.loads(call.arguments) if call.arguments.strip() else {}
    except orjson.JSONDecodeError as exc:
        return _invalid(call, f"arguments are not valid JSON ({exc.msg} at char {exc.pos})")
    if not isinstance(arguments, dict):
        return _invalid(call, f"arguments must be a JSON object, got {type(arguments).__name__}")
    try:
        canonical_json(arguments)
    except orjson.JSONEncodeError as exc:
        return _invalid(call, f"arguments cannot be stored as JSON ({exc}): nest them less deeply")
    return arguments


def _invalid(call: RawCall, why: str) -> ExecutionError:
    return ExecutionError(kind=ErrorKind.INVALID_ARGUMENTS, message=f"{call.name}: {why}")


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
    endpoint failures are tried again by ``complete`` as ``retry`` says (``[retries]
    llm``). A body over ``max_response_bytes`` is a failure of the endpoint.
    """

    def __init__(
        self,
        client: openai.OpenAI,
        model: str,
        *,
        temperature: float = 0.0,
        retry: RetryPolicy = LLM_RETRY,
        sleep: Callable[[float], None] = time.sleep,
        recorded_as: str | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        self._client = client
        self.model = model
        self.recorded_as = recorded_as or model
        """The model trajectories name: ``model``, or what an alias stands for (the
        registry id behind ``champion``)."""
        self.temperature = temperature
        self.retry = retry
        self.max_response_bytes = max_response_bytes
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
        completion, retries = self.complete(messages, tools)
        if isinstance(completion, CompletionFailure):
            attempts = retries + 1
            return None, retries, f"{completion.message} (after {attempts} attempt(s))"
        return completion.reply, retries, ""

    def complete(
        self, messages: list[Message], tools: list[dict[str, Any]]
    ) -> tuple[Completion | CompletionFailure, int]:
        """One completion, transient failures tried again: ``(completion or failure,
        retries)``."""
        params: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "tools": tools,
            "tool_choice": "auto",
            "temperature": self.temperature,
        }
        return complete(
            self._client,
            params,
            retry=self.retry,
            max_bytes=self.max_response_bytes,
            sleep=self._sleep,
        )


class ReplySource(Protocol):
    """Where a ``ChatSession``'s replies come from: an endpoint or a local model."""

    def reply(
        self, messages: list[Message], tools: list[dict[str, Any]]
    ) -> tuple[Reply | None, int, str]:
        """``(reply, retries, failure)``: ``reply`` is None when the source failed after
        ``retries`` retries, and ``failure`` then says why."""
        ...


class ChatSession:
    """One episode: the conversation so far, and the tool calls still owed an answer.

    A tool that arrives with a follow-up (``TaskView.arriving``) is described in that
    user turn; with ``tools_per_request`` (an endpoint, which takes the tools with every
    request) it is also offered in the requests from then on. A local model renders the
    tools into its opening turn once, so it reads the new ones where the turn says them,
    as its training rows do."""

    def __init__(self, source: ReplySource, view: TaskView, *, tools_per_request: bool = True):
        self._source = source
        self._tools_per_request = tools_per_request
        self._tools = format_tools(view)
        self._subagents = frozenset(s.name for s in view.subagents)
        self._messages: list[Message] = opening_messages(view)
        self._pending: list[tuple[str, str | None]] = []
        """Tool call ids still owed a tool message; None: the last step's feedback."""
        self._view = view
        self._finished = 0

    @property
    def messages(self) -> list[Message]:
        return list(self._messages)

    @property
    def offered(self) -> list[dict[str, Any]]:
        """The functions offered now, in the request format: the start's and those that
        arrived with the user turns so far."""
        if not self._view.arriving:
            return self._tools
        return format_tools(replace(self._view, tools=self._view.tools_after(self._finished)))

    def act(self, history: Sequence[Step]) -> Decision:
        last = history[-1].feedback if history else None
        self._answer_pending(last)
        ended = history[-1].action if history else None
        if ended is not None and ended.kind in TURN_ENDING_KINDS:
            self._finished += 1
            if (follow_up := self._view.follow_up(self._finished)) is not None:
                self._messages.append({"role": "user", "content": follow_up})
                if self._tools_per_request and self._view.arriving:
                    self._tools = self.offered
        reply, retries, failure = self._source.reply(self._messages, self._tools)
        if reply is None:
            return Decision(
                action=None,
                model_output="",
                error=ExecutionError(kind=ErrorKind.ENDPOINT_ERROR, message=failure),
                retries=retries,
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
        if reply.malformed:
            error = ExecutionError(
                kind=ErrorKind.MALFORMED_OUTPUT,
                message=f"the reply's function call is malformed: {'; '.join(reply.malformed)}",
            )
            self._fail_first(reply, error, NUDGE)
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
