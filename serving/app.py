"""The HTTP side of serving: ``create_app`` over a ``ServedModel``.

``ServedModel`` holds the model being served and swaps it: a new folder is loaded and
probed beside the old one, and only then replaces it, in one assignment under a lock;
requests already running finish on the model they started with. Generation is
serialized (one reply at a time; the CPU has no room for two). Errors are OpenAI-style
JSON bodies (``{"error": {"message", "type", "param", "code"}}``) naming the field at
fault and its allowed values; what the model generates never makes one.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

from contract import FlywheelError, InvalidInputError
from serving import DEFAULT_MAX_NEW_TOKENS, SERVED_AS
from serving.generation import (
    ChatRequest,
    LoadedModel,
    ProbeError,
    check_request,
    load_folder,
    probe_model,
    respond,
)

__all__ = [
    "DEFAULT_MAX_NEW_TOKENS",
    "SERVED_AS",
    "LoadBusyError",
    "LoadRequest",
    "ServedModel",
    "UnknownModelError",
    "create_app",
]

OWNER = "mobile-flywheel"


class UnknownModelError(InvalidInputError):
    """A request for a model this server does not serve (HTTP 404)."""


class LoadBusyError(FlywheelError):
    """A load asked for while another one runs (HTTP 409)."""


class LoadRequest(BaseModel):
    """The body of ``POST /admin/load``."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, description="the model folder")
    model_id: str = Field(min_length=1, description="its registry id")
    name: str = Field(min_length=1, description="its readable name")


class ServedModel:
    """The model a server answers with, under ``served_as``, its registry id and its name.

    Thread-safe: the current model is read and replaced under a short lock, generation
    runs under its own lock (one at a time), and only one load runs at a time.
    """

    def __init__(
        self,
        model: LoadedModel,
        *,
        served_as: str = SERVED_AS,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    ) -> None:
        if not served_as.strip():
            raise InvalidInputError("served_as", "must not be empty")
        if max_new_tokens < 1:
            raise InvalidInputError("max_new_tokens", f"{max_new_tokens} is below 1")
        self.served_as = served_as
        self.max_new_tokens = max_new_tokens
        self._model = model
        self._requests = 0
        self._state = threading.Lock()
        self._generation = threading.Lock()
        self._loading = threading.Lock()

    @classmethod
    def open(
        cls,
        path: str | Path,
        model_id: str,
        name: str,
        *,
        served_as: str = SERVED_AS,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    ) -> ServedModel:
        """Load and probe the folder ``path``; ``InvalidInputError`` or ``ProbeError``
        when it cannot serve."""
        model = load_folder(path, model_id, name)
        probe_model(model)
        return cls(model, served_as=served_as, max_new_tokens=max_new_tokens)

    @property
    def current(self) -> LoadedModel:
        with self._state:
            return self._model

    def names(self, model: LoadedModel | None = None) -> tuple[str, ...]:
        """What ``model`` (default: the current one) answers to: alias, id, name."""
        model = model or self.current
        return tuple(dict.fromkeys((self.served_as, model.model_id, model.name)))

    def health(self) -> dict[str, Any]:
        with self._state:
            model, requests = self._model, self._requests
        return {
            "status": "ok",
            "model_id": model.model_id,
            "name": model.name,
            "path": str(model.path),
            "served_as": self.served_as,
            "requests": requests,
        }

    def models(self) -> dict[str, Any]:
        """``GET /v1/models``: one entry per name the model answers to."""
        model = self.current
        data = [
            {"id": name, "object": "model", "created": model.loaded_at, "owned_by": OWNER}
            for name in self.names(model)
        ]
        return {"object": "list", "data": data}

    def complete(self, request: ChatRequest) -> dict[str, Any]:
        """One chat completion by the current model (``UnknownModelError`` when the
        request names another)."""
        model = self.current
        allowed = self.names(model)
        if request.model not in allowed:
            raise UnknownModelError("model", f"{request.model!r} is not served here", allowed)
        check_request(request)
        with self._generation:
            body = respond(model, request, max_new_tokens=self.max_new_tokens)
        with self._state:
            self._requests += 1
        return body

    def swap(self, path: str | Path, model_id: str, name: str) -> dict[str, Any]:
        """Load and probe ``path``, then serve it instead of the current model. On any
        failure the current model stays served; ``LoadBusyError`` while another load
        runs. Returns the new health, with the id it replaced as ``replaced``."""
        if not self._loading.acquire(blocking=False):
            raise LoadBusyError("another model is being loaded; try again when it is served")
        try:
            model = load_folder(path, model_id, name)
            probe_model(model)
            with self._state:
                replaced, self._model = self._model, model
        finally:
            self._loading.release()
        return {**self.health(), "replaced": replaced.model_id}


def create_app(served: ServedModel) -> FastAPI:
    """The server's routes over ``served`` (see the ``serving`` package docstring)."""
    app = FastAPI(title="mobile-flywheel model server", docs_url=None, redoc_url=None)
    _handle_errors(app)

    @app.get("/health")
    def health() -> dict[str, Any]:
        return served.health()

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return served.models()

    @app.post("/v1/chat/completions")
    def chat_completions(request: ChatRequest) -> dict[str, Any]:
        return served.complete(request)

    @app.post("/admin/load")
    def load(request: LoadRequest) -> dict[str, Any]:
        return served.swap(request.path, request.model_id, request.name)

    return app


# -- errors as OpenAI-style bodies -----------------------------------------------------


def _error_response(
    status: int, message: str, kind: str, param: str | None = None, code: str | None = None
) -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return JSONResponse(status_code=status, content=body)


def _handle_errors(app: FastAPI) -> None:
    @app.exception_handler(InvalidInputError)
    async def invalid(_: Request, exc: InvalidInputError) -> JSONResponse:
        if isinstance(exc, UnknownModelError):
            return _error_response(
                404, str(exc), "invalid_request_error", exc.field, "model_not_found"
            )
        return _error_response(400, str(exc), "invalid_request_error", exc.field)

    @app.exception_handler(ProbeError)
    async def unservable(_: Request, exc: ProbeError) -> JSONResponse:
        return _error_response(409, str(exc), "model_load_error", "path", "probe_failed")

    @app.exception_handler(LoadBusyError)
    async def busy(_: Request, exc: LoadBusyError) -> JSONResponse:
        return _error_response(409, str(exc), "model_load_error", None, "load_in_progress")

    @app.exception_handler(RequestValidationError)
    async def malformed(_: Request, exc: RequestValidationError) -> JSONResponse:
        param, message = _first_problem(exc)
        return _error_response(400, message, "invalid_request_error", param)

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        return _error_response(exc.status_code, str(exc.detail), "invalid_request_error")

    @app.exception_handler(Exception)
    async def fault(_: Request, exc: Exception) -> JSONResponse:
        return _error_response(500, f"{type(exc).__name__}: {exc}", "server_error")


def _first_problem(exc: RequestValidationError) -> tuple[str | None, str]:
    """The field of the first validation error (``messages[0].role``) and a message."""
    errors = exc.errors()
    if not errors:
        return None, "the request body is not valid"
    error = errors[0]
    loc = [part for part in error.get("loc", ()) if part != "body"]
    if error.get("type") == "json_invalid":
        return None, f"the request body is not valid JSON ({error.get('msg', '')})"
    param = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    problem = str(error.get("msg", "is not valid")).removeprefix("Value error, ")
    if not param:
        return None, f"the request body: {problem}"
    return param, f"{param}: {problem}"
