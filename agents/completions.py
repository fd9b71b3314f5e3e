"""The one boundary between a chat-completions endpoint and the agents.

Whatever an endpoint sends back (an HTML page with status 200, JSON of the wrong shape,
a tool call with an empty ``function``, a body of a gigabyte, a body that trickles in
forever), ``request_completion`` returns a ``Completion`` or a ``CompletionFailure``;
it never raises. The planner, the GUI agent, the judge, goal rewording and the serving
probe all ask through it, so a reply is checked in one place.

The body is read by this module, not parsed by the ``openai`` client: the client builds
its models without validating them (a string ``choices`` surfaces later as an
``AttributeError``), and it reads a body of any size. Here the body is read up to
``max_bytes`` and within the client's timeout, parsed as JSON, and checked field by
field; a problem names the field's path (``choices[0].message.content``). A client built
by ``capped_http_client`` also stops reading any response, an error's body included,
past its limit as the bytes arrive (``ResponseTooLarge``).

Two kinds of problem are told apart:

- the endpoint failed (not JSON, not a completion, too large, too slow, an HTTP error):
  a ``CompletionFailure``; the episode ends as a backend error;
- one tool call of an otherwise well-formed reply is malformed (no name, arguments of
  the wrong type, an unknown call type): the model's fault, so the ``Reply`` carries it
  in ``malformed`` and yields no action; the episode goes on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx2
import openai
import orjson
from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from agents.policies.chat_format import MALFORMED_CALL, RawCall, Reply
from contract import ErrorKind, RetryPolicy
from contract.retry import LLM_RETRY
from contract.validation import invalid_input

__all__ = [
    "DEFAULT_MAX_RESPONSE_BYTES",
    "TRANSIENT_ERRORS",
    "Completion",
    "CompletionFailure",
    "ResponseTooLarge",
    "Usage",
    "capped_http_client",
    "complete",
    "parse_completion",
    "request_completion",
]

DEFAULT_MAX_RESPONSE_BYTES = 4 * 1024 * 1024
"""The largest completion body read (4 MiB): a planner's reply is a few kilobytes."""
TRANSIENT_ERRORS = (
    openai.APIConnectionError,  # includes APITimeoutError
    openai.RateLimitError,
    openai.InternalServerError,
)
_SHOWN = 300
"""Characters of a bad body or call quoted in a message."""


class ResponseTooLarge(httpx2.HTTPError):
    """A response's body grew past the client's limit while it arrived."""


class _CappedStream(httpx2.SyncByteStream):
    def __init__(self, stream: httpx2.SyncByteStream, limit: int) -> None:
        self._stream = stream
        self._limit = limit

    def __iter__(self) -> Iterator[bytes]:
        size = 0
        for chunk in self._stream:
            size += len(chunk)
            if size > self._limit:
                raise ResponseTooLarge(f"the body is larger than {self._limit} bytes")
            yield chunk

    def close(self) -> None:
        self._stream.close()


def capped_http_client(max_bytes: int) -> httpx2.Client:
    """The ``openai`` client's own HTTP client, whose responses stop past ``max_bytes``
    as they arrive: also the bodies of HTTP errors, which the ``openai`` client reads
    whole before ``request_completion`` sees them."""

    def cap(response: httpx2.Response) -> None:
        stream = response.stream
        if isinstance(stream, httpx2.SyncByteStream):
            response.stream = _CappedStream(stream, max_bytes)

    client: httpx2.Client = openai.DefaultHttpxClient(event_hooks={"response": [cap]})
    return client


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int | None


@dataclass(frozen=True)
class Completion:
    """A well-formed completion: its first choice as a ``Reply``, and what it says of
    itself (``model`` is empty when the endpoint named none)."""

    reply: Reply
    model: str
    usage: Usage | None


@dataclass(frozen=True)
class CompletionFailure:
    """Why no completion came back. ``kind`` is ``backend_error`` or ``timeout``;
    ``transient`` failures (connection, 429, 5xx, timeouts) may succeed when tried again."""

    kind: ErrorKind
    message: str
    transient: bool


def request_completion(
    client: openai.OpenAI,
    params: dict[str, Any],
    *,
    max_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
) -> Completion | CompletionFailure:
    """``POST /chat/completions`` with ``params`` (model, messages, tools, ...), read and
    checked. The client's API key never appears in a failure's message."""
    key = client.api_key
    secret = key if isinstance(key, str) else None
    deadline = time.monotonic() + _timeout_s(client)
    try:
        with client.chat.completions.with_streaming_response.create(**params) as response:
            body = _read(response.iter_bytes(), max_bytes, deadline)
    except ResponseTooLarge as exc:  # raised while the body arrived, an error's too
        return _malformed(str(exc))
    except TRANSIENT_ERRORS as exc:
        return _failure(exc, secret, transient=True)
    except openai.OpenAIError as exc:  # bad request, authentication, not found, ...
        return _failure(exc, secret, transient=False)
    except httpx2.TimeoutException as exc:
        return _failure(exc, secret, transient=True, kind=ErrorKind.TIMEOUT)
    except (httpx2.HTTPError, OSError) as exc:  # the connection broke while reading
        return _failure(exc, secret, transient=True)
    if isinstance(body, CompletionFailure):
        return body
    return parse_completion(body)


def complete(
    client: openai.OpenAI,
    params: dict[str, Any],
    *,
    retry: RetryPolicy = LLM_RETRY,
    max_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[Completion | CompletionFailure, int]:
    """``request_completion``, a transient failure tried again as ``retry`` says:
    ``(completion or failure, retries)``. The one place an endpoint is retried: a failure
    returned here is final for the policy, the GUI agent and the agents' LLM (the client
    is built with ``max_retries=0``, and the collector never reruns an episode for it)."""
    return retry.until(
        lambda: request_completion(client, params, max_bytes=max_bytes),
        again=lambda result: isinstance(result, CompletionFailure) and result.transient,
        sleep=sleep,
    )


def parse_completion(body: bytes) -> Completion | CompletionFailure:
    """The completion in ``body``, or why it is none (a pure function of the bytes)."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return _malformed(f"the body is not JSON ({exc}): {_shown(body)}")
    if not isinstance(data, dict):
        return _malformed(f"the body is JSON but not an object: {_shown(body)}")
    try:
        envelope = _Envelope.model_validate(data)
    except ValidationError as exc:
        return _malformed(str(invalid_input(exc, root="completion")))
    if not envelope.choices:
        return _malformed("the endpoint returned no choices")
    choice = envelope.choices[0]
    message = choice.message
    calls, malformed = _calls(message.tool_calls or [])
    usage = envelope.usage
    reply = Reply(
        content=_with_malformed(message.content, malformed),
        refusal=message.refusal,
        finish_reason=choice.finish_reason or "",
        calls=() if malformed else calls,
        input_tokens=usage.prompt_tokens if usage else 0,
        output_tokens=usage.completion_tokens if usage else 0,
        malformed=malformed,
    )
    return Completion(
        reply=reply,
        model=envelope.model or "",
        usage=(
            Usage(usage.prompt_tokens, usage.completion_tokens, usage.total_tokens)
            if usage
            else None
        ),
    )


# -- the shape of a completion -----------------------------------------------------------

_CHECKED = ConfigDict(strict=True, extra="ignore", frozen=True)
"""Strict types (no "3" for 3, no true for 1); fields we do not read are ignored."""


class _Usage(BaseModel):
    model_config = _CHECKED
    prompt_tokens: int = Field(ge=0)
    completion_tokens: int = Field(ge=0)
    total_tokens: int | None = Field(default=None, ge=0)


class _Message(BaseModel):
    model_config = _CHECKED
    content: str | None = None
    refusal: str | None = None
    tool_calls: list[JsonValue] | None = None
    """Checked one by one (``_Call``): one bad call does not hide the rest of the reply."""


class _Choice(BaseModel):
    model_config = _CHECKED
    message: _Message
    finish_reason: str | None = None


class _Envelope(BaseModel):
    model_config = _CHECKED
    choices: list[_Choice]
    model: str | None = None
    usage: _Usage | None = None


class _Function(BaseModel):
    model_config = _CHECKED
    name: str = Field(min_length=1)
    arguments: str | dict[str, JsonValue] = ""
    """JSON text, as OpenAI sends it; some servers send the object itself."""


class _Call(BaseModel):
    model_config = _CHECKED
    id: str | None = None
    function: _Function


def _calls(raw: list[JsonValue]) -> tuple[tuple[RawCall, ...], tuple[str, ...]]:
    """The well-formed function calls, and a description of each malformed one."""
    calls: list[RawCall] = []
    malformed: list[str] = []
    for i, item in enumerate(raw):
        where = f"tool_calls[{i}]"
        if not isinstance(item, dict):
            malformed.append(f"{where}: must be an object (got {_shown(item)})")
            continue
        kind = item.get("type", "function")
        if kind != "function":  # a custom (free-text) call: such tools are never offered
            malformed.append(f"{where}.type: {_shown(kind)} is not a function call")
            continue
        try:
            call = _Call.model_validate(item)
        except ValidationError as exc:
            malformed.append(f"{where}.{invalid_input(exc, root='call')} in {_shown(item)}")
            continue
        arguments = call.function.arguments
        text = arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()
        calls.append(RawCall(call.id or "", call.function.name, text))
    return _unique_ids(calls), tuple(malformed)


def _unique_ids(calls: list[RawCall]) -> tuple[RawCall, ...]:
    """The calls, each with an id of its own: a missing or repeated one is made up
    (``call_<position>``), since every call is answered by its id."""
    seen: set[str] = set()
    unique = []
    for i, call in enumerate(calls):
        call_id, n = call.id, 0
        while not call_id or call_id in seen:
            call_id = f"call_{i}_{n}" if n else f"call_{i}"
            n += 1
        seen.add(call_id)
        unique.append(RawCall(call_id, call.name, call.arguments))
    return tuple(unique)


def _with_malformed(content: str | None, malformed: tuple[str, ...]) -> str | None:
    """The reply's text, followed by a line for each malformed call: what the
    conversation and the trajectory show of a reply that yields no action."""
    if not malformed:
        return content
    lines = [content] if content else []
    lines += [f"{MALFORMED_CALL}{problem}" for problem in malformed]
    return "\n".join(lines)


# -- reading -----------------------------------------------------------------------------


def _read(chunks: Any, max_bytes: int, deadline: float) -> bytes | CompletionFailure:
    """The body, unless it grows past ``max_bytes`` or is still arriving at ``deadline``."""
    parts: list[bytes] = []
    size = 0
    for chunk in chunks:
        size += len(chunk)
        if size > max_bytes:  # decoded: a compressed body may grow past the client's cap
            return _malformed(f"the body is larger than {max_bytes} bytes")
        if time.monotonic() > deadline:
            return CompletionFailure(
                ErrorKind.TIMEOUT, "the completion's body was still arriving at the timeout", True
            )
        parts.append(chunk)
    return b"".join(parts)


def _timeout_s(client: openai.OpenAI) -> float:
    """The client's timeout as one number of seconds: the whole body must come within it."""
    timeout = client.timeout
    if isinstance(timeout, int | float):
        return float(timeout)
    if isinstance(timeout, httpx2.Timeout) and timeout.read is not None:
        return float(timeout.read)
    return 600.0


def _malformed(problem: str) -> CompletionFailure:
    return CompletionFailure(
        ErrorKind.BACKEND_ERROR, f"malformed completion: {problem}", transient=False
    )


def _failure(
    exc: Exception,
    secret: str | None,
    *,
    transient: bool,
    kind: ErrorKind = ErrorKind.BACKEND_ERROR,
) -> CompletionFailure:
    if isinstance(exc, openai.APITimeoutError):
        kind = ErrorKind.TIMEOUT
    text = f"{type(exc).__name__}: {exc}"
    if secret and len(secret) >= 8:  # never let a key into a record
        text = text.replace(secret, "***")
    return CompletionFailure(kind, text, transient)


def _shown(value: object) -> str:
    text = value.decode(errors="replace") if isinstance(value, bytes) else repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."
