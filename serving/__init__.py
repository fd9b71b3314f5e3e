"""The model server: a registry model behind an OpenAI-compatible chat-completions API.

The trajectory collector reaches the champion as it reaches any hosted model, through
the ``openai`` client (``OpenAIPolicy``), asking for the alias ``champion``; the model
also answers to its registry id and its name, and every completion's ``model`` is the
registry id, so a trajectory records which model answered.

On a CPU (``python -m serving``, see ``serving.__main__`` for its options) a FastAPI
app serves one local Hugging Face folder on 127.0.0.1:

- ``GET /health``: ``status``, ``model_id``, ``name``, ``path``, ``served_as`` and
  ``requests`` (completions answered);
- ``GET /v1/models``: the names it answers to, in OpenAI's list format;
- ``POST /v1/chat/completions``: ``messages``, ``tools``, ``tool_choice`` (``auto`` or
  ``none``), ``temperature`` (0: greedy), ``max_tokens``/``max_completion_tokens``,
  ``seed``; no streaming, one choice. Rendered with the model's chat template; tool
  calls are parsed from its ``<tool_call>`` blocks, and anything else it writes comes
  back as content (the client records a typed error), never as a server error;
- ``POST /admin/load`` (``path``, ``model_id``, ``name``): load and probe another folder
  and serve it instead, atomically; on any failure the old model stays served. The
  deployment flow promotes and rolls back this way, without a restart
  (``serving.client.load_model``, then ``serving.client.probe``).

Errors are JSON bodies in OpenAI's shape, naming the field and its allowed values.

On a GPU machine ``vllm serve`` takes its place (``serving.vllm``): same API, but a
model swap restarts the process. Layer: imports ``training``, ``agents``, ``contract``.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from serving.client import ServingError, health, load_model, probe
from serving.vllm import model_names, vllm_argv, vllm_available

if TYPE_CHECKING:
    from serving.app import (
        LoadBusyError,
        LoadRequest,
        ServedModel,
        UnknownModelError,
        create_app,
    )
    from serving.generation import (
        ChatRequest,
        Generated,
        LoadedModel,
        ProbeError,
        check_request,
        completion_body,
        generate,
        load_folder,
        probe_model,
        respond,
    )

SERVED_AS = "champion"
"""The alias the served model answers to, whichever model it is."""
DEFAULT_MAX_NEW_TOKENS = 256
"""The default, and the ceiling, of a reply's tokens."""

_SERVER_SIDE = {
    **dict.fromkeys(
        (
            "LoadBusyError",
            "LoadRequest",
            "ServedModel",
            "UnknownModelError",
            "create_app",
        ),
        "serving.app",
    ),
    **dict.fromkeys(
        (
            "ChatRequest",
            "Generated",
            "LoadedModel",
            "ProbeError",
            "check_request",
            "completion_body",
            "generate",
            "load_folder",
            "probe_model",
            "respond",
        ),
        "serving.generation",
    ),
}
"""Names imported on first use: they need torch and transformers, which the client side
(``serving.client``, imported by flows) does not."""


def __getattr__(name: str) -> Any:
    module = _SERVER_SIDE.get(name)
    if module is None:
        raise AttributeError(f"module 'serving' has no attribute {name!r}")
    return getattr(import_module(module), name)


__all__ = [
    "DEFAULT_MAX_NEW_TOKENS",
    "SERVED_AS",
    "ChatRequest",
    "Generated",
    "LoadBusyError",
    "LoadRequest",
    "LoadedModel",
    "ProbeError",
    "ServedModel",
    "ServingError",
    "UnknownModelError",
    "check_request",
    "completion_body",
    "create_app",
    "generate",
    "health",
    "load_folder",
    "load_model",
    "model_names",
    "probe",
    "probe_model",
    "respond",
    "vllm_argv",
    "vllm_available",
]
