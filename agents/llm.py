"""An optional LLM for the agents' nodes: one JSON answer per question.

Agents that can use an LLM take a ``JsonLLM`` (or None, and then use their deterministic
node). Any OpenAI-compatible chat-completions endpoint serves; tests use a scripted fake.
Agents ask only through ``consult``: every way an LLM can fail (the endpoint after its
retries, an answer that is not the JSON asked for, a client's own exception) comes back
as an ``LLMFailure`` value, and the node goes on along its deterministic path.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import httpx2
import openai
import orjson
from pydantic import JsonValue

from agents.completions import (
    DEFAULT_MAX_RESPONSE_BYTES,
    CompletionFailure,
    complete,
)
from contract import FlywheelError, RetryPolicy
from contract.retry import LLM_RETRY


class LLMError(FlywheelError):
    """The LLM gave no usable answer."""


class LLMEndpointError(LLMError):
    """The endpoint failed: unreachable, an HTTP error, or a body that is no completion."""


class LLMOutputError(LLMError):
    """The model answered, but not with the JSON object that was asked for."""


@dataclass(frozen=True)
class LLMFailure:
    """Why an agent's LLM gave no usable answer; ``endpoint``: the endpoint itself failed
    (its retries are spent, so asking again now is pointless), not just this answer."""

    reason: str
    endpoint: bool


_CLIENT_ERRORS = (openai.OpenAIError, httpx2.HTTPError, OSError)
"""What a ``JsonLLM`` of one's own may let out of its client (connection refused, ...)."""


def consult(llm: JsonLLM, system: str, user: str) -> dict[str, JsonValue] | LLMFailure:
    """The one way agents ask their LLM: its JSON answer, or an ``LLMFailure``."""
    try:
        return llm.ask_json(system, user)
    except LLMEndpointError as exc:
        return LLMFailure(str(exc), endpoint=True)
    except LLMError as exc:
        return LLMFailure(str(exc), endpoint=False)
    except _CLIENT_ERRORS as exc:
        return LLMFailure(f"{type(exc).__name__}: {exc}", endpoint=True)


def simulator(llm: JsonLLM) -> Callable[[str, str], dict[str, JsonValue] | str]:
    """``llm`` as a tool simulator (``envs.simulated.Simulator``): its JSON answer, or
    the reason it gave none."""

    def ask(system: str, user: str) -> dict[str, JsonValue] | str:
        answer = consult(llm, system, user)
        return answer.reason if isinstance(answer, LLMFailure) else answer

    return ask


class JsonLLM(Protocol):
    def ask_json(self, system: str, user: str) -> dict[str, JsonValue]:
        """Ask one question; the answer is a JSON object (or an ``LLMError``)."""
        ...


class OpenAIJsonLLM:
    """``JsonLLM`` over an OpenAI-compatible endpoint (the client carries URL and key);
    transient failures are tried again as ``retry`` says (``[retries] llm``)."""

    def __init__(
        self,
        client: openai.OpenAI,
        model: str,
        temperature: float = 0.0,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        *,
        retry: RetryPolicy = LLM_RETRY,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._client = client
        self.model = model
        self._temperature = temperature
        self._max_bytes = max_response_bytes
        self._retry = retry
        self._sleep = sleep

    def ask_json(self, system: str, user: str) -> dict[str, JsonValue]:
        params = {
            "model": self.model,
            "temperature": self._temperature,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
        }
        completion, retries = complete(
            self._client, params, retry=self._retry, max_bytes=self._max_bytes, sleep=self._sleep
        )
        if isinstance(completion, CompletionFailure):
            raise LLMEndpointError(f"{completion.message} (after {retries + 1} attempt(s))")
        return parse_json_object(completion.reply.content or "")


def parse_json_object(text: str) -> dict[str, JsonValue]:
    """The JSON object in ``text``, tolerating a Markdown code fence around it."""
    body = text.strip()
    if body.startswith("```"):
        body = body.strip("`").removeprefix("json").strip()
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise LLMOutputError(f"the model did not answer with JSON: {text[:200]!r}") from exc
    if not isinstance(value, dict):
        raise LLMOutputError(f"the model answered JSON that is not an object: {text[:200]!r}")
    return value
