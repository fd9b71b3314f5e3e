"""The client side of the model server, for flows: is it up, swap its model, prove it answers.

``base_url`` is the server's root (``http://127.0.0.1:8000``), not its ``/v1``. Health
and loads use the standard library with proxies bypassed (a proxy set in the environment
must never carry a local call); ``probe`` is one real chat completion through the
``openai`` client, as the trajectory collector makes them.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any, cast

from agents.completions import Completion, CompletionFailure, request_completion
from agents.policies.openai_policy import make_client
from contract import FlywheelError

__all__ = ["PROBE_MESSAGES", "PROBE_TOOL", "ServingError", "health", "load_model", "probe"]

_LOCAL_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))
FINISH_REASONS = ("stop", "length", "tool_calls")
PROBE_MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are the planner of a phone assistant."},
    {"role": "user", "content": "Say that you are ready."},
]
PROBE_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "finish",
        "description": "Declare the task complete and answer the user.",
        "parameters": {
            "type": "object",
            "properties": {"answer": {"type": "string"}},
            "required": ["answer"],
        },
    },
}
"""The probe's conversation and its one tool (the server probes a folder with them too)."""


class ServingError(FlywheelError):
    """The model server did not do what was asked: load a model, or answer a probe."""


def health(base_url: str, timeout_s: float = 2.0) -> dict[str, Any] | None:
    """What ``GET /health`` says (``model_id``, ``name``, ``path``, ``served_as``,
    ``requests``), or None when nothing answers 2xx. A server whose health is not a JSON
    object (vLLM's is empty) gives ``status`` and, when its ``/v1/models`` lists any,
    ``model_id``: the first name listed, the one its completions carry."""
    body = _get_json(_url(base_url, "/health"), timeout_s)
    if body is None:
        return None
    if isinstance(body, dict):
        return cast(dict[str, Any], body)
    status: dict[str, Any] = {"status": "ok"}
    models = _get_json(_url(base_url, "/v1/models"), timeout_s)
    data = models.get("data") if isinstance(models, dict) else None
    if isinstance(data, list) and data and isinstance(data[0], dict):
        status["model_id"] = data[0].get("id")
    return status


def load_model(
    base_url: str, path: str, model_id: str, name: str, timeout_s: float = 120.0
) -> dict[str, Any]:
    """Make the server serve the folder ``path`` as ``model_id`` (``POST /admin/load``);
    the new health on success. ``ServingError`` with the server's reason otherwise (the
    server then still serves its previous model)."""
    data = json.dumps({"path": path, "model_id": model_id, "name": name}).encode()
    request = urllib.request.Request(
        _url(base_url, "/admin/load"),
        data=data,
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    what = f"loading {path} as {model_id} on {base_url}"
    try:
        with _LOCAL_HTTP.open(request, timeout=timeout_s) as response:
            raw = response.read()
    except urllib.error.HTTPError as exc:
        raise ServingError(f"{what} failed (HTTP {exc.code}): {_reason(exc)}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ServingError(f"{what} failed: the server does not answer ({exc})") from None
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise ServingError(f"{what}: the server's answer is not a JSON object")
    return cast(dict[str, Any], body)


def probe(base_url: str, model: str = "champion", timeout_s: float = 60.0) -> str:
    """One chat completion with one tool through the ``openai`` client; the id of the
    model that answered (the completion's ``model``). ``ServingError`` naming what
    failed: the call, or a part of the completion that is not well formed."""
    client = make_client(_url(base_url, "/v1"), None, timeout_s)
    what = f"probing {model} on {base_url}"
    params: dict[str, Any] = {
        "model": model,
        "messages": PROBE_MESSAGES,
        "tools": [PROBE_TOOL],
        "tool_choice": "auto",
        "temperature": 0.0,
        "max_tokens": 8,
    }
    completion = request_completion(client, params)
    if isinstance(completion, CompletionFailure):
        raise ServingError(f"{what} failed: {completion.message}")
    problem = _malformed(completion)
    if problem:
        raise ServingError(f"{what}: the completion is not well formed: {problem}")
    return completion.model


def _malformed(completion: Completion) -> str:
    """What is wrong with a completion the boundary accepted; empty when nothing is."""
    if not completion.model:
        return "it names no model"
    reply = completion.reply
    if reply.finish_reason not in FINISH_REASONS:
        return f"finish_reason {reply.finish_reason!r} is none of {', '.join(FINISH_REASONS)}"
    usage = completion.usage
    if usage is None:
        return "it has no usage"
    if usage.total_tokens != usage.prompt_tokens + usage.completion_tokens:
        return "usage.total_tokens is not prompt_tokens + completion_tokens"
    if reply.malformed:
        return f"a tool call is not a named function call: {reply.malformed[0]}"
    return ""


def _get_json(url: str, timeout_s: float) -> object | None:
    """The JSON of a 2xx ``GET url`` (``""`` when it is not JSON, or null); None when
    nothing answers 2xx."""
    try:
        with _LOCAL_HTTP.open(url, timeout=timeout_s) as response:
            if not 200 <= int(response.status) < 300:
                return None
            raw = response.read()
    except (urllib.error.URLError, OSError, ValueError):
        return None
    try:
        value: object = json.loads(raw)
    except ValueError:
        return ""
    return "" if value is None else value


def _reason(exc: urllib.error.HTTPError) -> str:
    """The ``error.message`` of an OpenAI-style error body, else the body itself."""
    try:
        raw = exc.read().decode(errors="replace")
    except OSError:
        return str(exc.reason)
    try:
        message = json.loads(raw)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return raw.strip() or str(exc.reason)
    return str(message)


def _url(base_url: str, path: str) -> str:
    return base_url.rstrip("/") + path
