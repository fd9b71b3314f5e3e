"""The Prefect API the CLI's flow runs go to."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from flows.settings import FlywheelSettings

EXIT_SERVER_LOST = 75
"""The exit status when the Prefect API went away during a flow run (EX_TEMPFAIL: run
the same command again once the server is back)."""


def live_prefect_api(settings: FlywheelSettings, *, announce: bool = True) -> str:
    """``PREFECT_API_URL``, else the local server's (started when needed); a server that
    does not answer is a ``ServerError`` before any flow run exists."""
    from flows.servers import ServerError, http_ok, resolve_prefect_api

    api = resolve_prefect_api(
        settings.home,
        settings.prefect.port,
        start_timeout_s=settings.prefect.start_timeout_s,
        progress=lambda line: typer.echo(line, err=True),
    )
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


@contextmanager
def flow_runs(settings: FlywheelSettings, api: str) -> Iterator[None]:
    """Flow runs in this block go to ``api``; if it stops answering for
    ``[prefect] dead_after_s``, the process says how to resume and exits with
    ``EXIT_SERVER_LOST`` (what the run finished is kept: rerunning resumes it). The
    terminal's progress bars stop with the block, so what the command prints after it
    is not drawn over."""
    from flows.progress_bars import TERMINAL
    from flows.servers import prefect_api
    from flows.servers.watch import watch_api

    try:
        with (
            prefect_api(api, settings.retries.prefect_api),
            watch_api(api, settings.prefect.dead_after_s, _give_up),
        ):
            yield
    finally:
        TERMINAL.stop()


def _give_up(why: str) -> None:
    """Stop the process at once: Prefect's engine would go on waiting for the server."""
    sys.stderr.write(
        f"error: {why}: the flow run cannot go on, and stops here. What it finished is kept "
        "in the catalog. Start the server again (flywheel server start prefect, or the one "
        "PREFECT_API_URL names) and run the same command again: it resumes where it stopped.\n"
    )
    sys.stderr.flush()
    os._exit(EXIT_SERVER_LOST)
