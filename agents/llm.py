"""An optional LLM for the agents' nodes: one JSON answer per question.

Agents that can use an LLM take a ``JsonLLM`` (or None, and then use their deterministic
node). Any OpenAI-compatible chat-completions endpoint serves; tests use a scripted fake.
Every way an LLM can fail (the endpoint, or an answer that is not the JSON asked for) is
an ``LLMError``: an agent catches that one class and goes on without the LLM.
"""

from __future__ import annotations

from typing import Protocol

import openai
import orjson
from pydantic import JsonValue

from agents.completions import DEFAULT_MAX_RESPONSE_BYTES, CompletionFailure, request_completion
from contract import FlywheelError


class LLMError(FlywheelError):
    """The LLM gave no usable answer."""


class LLMEndpointError(LLMError):
    """The endpoint failed: unreachable, an HTTP error, or a body that is no completion."""


class LLMOutputError(LLMError):
    """The model answered, but not with the JSON object that was asked for."""


class JsonLLM(Protocol):
    def ask_json(self, system: str, user: str) -> dict[str, JsonValue]:
        """Ask one question; the answer is a JSON object (or an ``LLMError``)."""
        ...


class OpenAIJsonLLM:
    """``JsonLLM`` over an OpenAI-compatible endpoint (the client carries URL and key)."""

    def __init__(
        self,
        client: openai.OpenAI,
        model: str,
        temperature: float = 0.0,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        self._client = client
        self.model = model
        self._temperature = temperature
        self._max_bytes = max_response_bytes

    def ask_json(self, system: str, user: str) -> dict[str, JsonValue]:
        params = {
            "model": self.model,
            "temperature": self._temperature,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
        }
        completion = request_completion(self._client, params, max_bytes=self._max_bytes)
        if isinstance(completion, CompletionFailure):
            raise LLMEndpointError(completion.message)
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
