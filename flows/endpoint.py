"""Put a registered model behind the model server, proven to answer, with a way back.

``serve_model`` makes the local model server serve a model: it starts the server when
none answers, swaps the model of a running CPU server in place (``/admin/load``, which
keeps the old model on any failure), or restarts a vLLM server. Then one real chat
completion through the ``openai`` client must come back from that very model. When any
of it fails, what was served before is served again (or, when nothing was, the server is
stopped) and ``ServingError`` says why: the previous champion stays served.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract import ModelRecord
from flows.servers.managed import ServerError
from flows.servers.model import ModelServer
from flows.settings import ServingSettings
from serving import SERVED_AS
from serving.client import ServingError, load_model, probe


@dataclass(frozen=True)
class Served:
    """What the model server serves after ``serve_model``."""

    endpoint: str
    """The OpenAI-compatible base URL (``.../v1``)."""
    model_id: str
    swapped: bool
    """False when it served that model already."""


def serve_model(
    home: Path, settings: ServingSettings, record: ModelRecord, *, fallback: ModelRecord | None
) -> Served:
    """Serve ``record`` (module docstring). ``fallback`` is served again after a failure
    when the server cannot say what it served before (vLLM)."""
    server = ModelServer(home, settings.port, settings, model=record)
    before = server.served()
    endpoint = server.spec.url + "/v1"
    if before is not None and before.get("model_id") == record.id:
        _check(server, record)
        return Served(endpoint, record.id, swapped=False)
    try:
        if before is None:
            server.start()
        elif server.engine == "local":
            load_model(server.spec.url, record.path, record.id, record.name)
        else:
            server.stop()
            server.start()
        _check(server, record)
    except (ServingError, ServerError) as exc:
        restored = _restore(server, before, fallback)
        raise ServingError(
            f"serving {record.id} failed, so it is not served: {exc}; {restored}"
        ) from exc
    return Served(endpoint, record.id, swapped=True)


def _check(server: ModelServer, record: ModelRecord) -> None:
    answered = probe(server.spec.url, SERVED_AS)
    if answered != record.id:
        raise ServingError(f"the server answered as {answered}, not as {record.id}")


def _restore(
    server: ModelServer, before: dict[str, Any] | None, fallback: ModelRecord | None
) -> str:
    """Serve again what was served before; say what now runs."""
    if before is None:
        server.stop()
        return "no model server runs (none did before)"
    now = server.served()
    if now is not None and now.get("model_id") == before.get("model_id"):
        return f"the server still serves {before.get('model_id')}"
    try:
        if server.engine == "local" and now is not None and before.get("path"):
            load_model(
                server.spec.url, str(before["path"]), str(before["model_id"]), str(before["name"])
            )
        elif fallback is not None:
            server.stop()
            server.model = fallback
            server.start()
        served = server.served()
        return f"the server serves {served.get('model_id') if served else 'nothing'}"
    except (ServingError, ServerError) as exc:
        return f"restoring {before.get('model_id')} failed too ({exc})"
