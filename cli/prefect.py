"""The Prefect API the CLI's flow runs go to."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from flows.settings import FlywheelSettings


def live_prefect_api(settings: FlywheelSettings, *, announce: bool = True) -> str:
    """``PREFECT_API_URL``, else the local server's (started when needed); a server that
    does not answer is a ``ServerError`` before any flow run exists."""
    from flows.servers import ServerError, http_ok, resolve_prefect_api

    api = resolve_prefect_api(settings.home, settings.prefect.port)
    if not http_ok(api.rstrip("/") + "/health"):
        raise ServerError(
            f"the Prefect API at {api} does not answer: start it, or unset PREFECT_API_URL "
            "to use the local server (flywheel server start)"
        )
    if announce:
        typer.echo(f"Prefect API: {api}", err=True)
    return api


def run_url(api: str, flow_run_id: str | None) -> str:
    """The Prefect UI page of a flow run (the UI's home without one)."""
    ui = api.removesuffix("/api")
    return f"{ui}/runs/flow-run/{flow_run_id}" if flow_run_id else ui
