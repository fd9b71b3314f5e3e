"""The local Prefect server, and which Prefect API flows run against.

Code that runs flows must do so inside ``prefect_api(url)`` (with ``url`` from
``resolve_prefect_api``): otherwise Prefect runs them on a temporary in-process server, or
fails when ``PREFECT_SERVER_ALLOW_EPHEMERAL_MODE=false``, and the runs never reach the
server the UI shows.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from contract.retry import PREFECT_API_ATTEMPTS
from flows.environment import scoped_environ
from flows.servers.managed import HOST, ManagedServer, Progress, ServerError, ServerSpec

PREFECT_DEFAULT_PORT = 4200
PREFECT_START_TIMEOUT_S = 180.0
"""As ``[prefect] start_timeout_s``: a new database on a loaded machine took 63 s."""


def prefect_server(
    home: Path, port: int = PREFECT_DEFAULT_PORT, start_timeout_s: float = PREFECT_START_TIMEOUT_S
) -> ManagedServer:
    """The Prefect 3 server (API and UI) on 127.0.0.1, its database under ``home/prefect``."""
    prefect = Path(sys.executable).parent / "prefect"
    url = f"http://{HOST}:{port}"
    spec = ServerSpec(
        name="prefect",
        argv=(str(prefect), "server", "start", "--host", HOST, "--port", str(port)),
        port=port,
        health_path="/api/health",
        env={
            "PREFECT_HOME": str((home / "prefect").absolute()),
            "PREFECT_API_URL": f"{url}/api",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_SERVER_ALLOW_EPHEMERAL_MODE": "false",
            "PREFECT_UI_ENABLED": "true",
            "PYTHONUNBUFFERED": "1",
        },
        start_timeout_s=start_timeout_s,
    )
    return ManagedServer(spec, home)


def local_prefect_api(port: int) -> str:
    """The API URL of the local Prefect server on ``port``."""
    return f"http://{HOST}:{port}/api"


def resolve_prefect_api(
    home: Path,
    port: int,
    *,
    start: bool = True,
    start_timeout_s: float = PREFECT_START_TIMEOUT_S,
    progress: Progress | None = None,
) -> str:
    """The Prefect API to use: ``PREFECT_API_URL`` when set, else the local server's.

    The local server is started when needed if ``start`` (waited for up to
    ``start_timeout_s``, ``progress`` hearing that it still waits); otherwise a server
    that is not running raises ``ServerError``.
    """
    from_env = os.environ.get("PREFECT_API_URL")
    if from_env:
        return from_env
    server = prefect_server(home, port, start_timeout_s)
    server.progress = progress
    if start:
        server.start()
    elif not server.status().healthy:
        raise ServerError(
            f"no Prefect server answers on {server.spec.url} and PREFECT_API_URL is not set; "
            "start one with `flywheel server start prefect`"
        )
    return local_prefect_api(port)


@contextlib.contextmanager
def prefect_api(url: str, attempts: int = PREFECT_API_ATTEMPTS) -> Iterator[None]:
    """Point Prefect (flows, tasks, clients) at ``url`` for the duration of the block; a
    request to it is tried ``attempts`` times (``[retries] prefect_api``), by Prefect's own
    client: the one layer that retries the Prefect API. Both hold in the processes the
    block starts too (a served deployment's or a worker's flow runs), through the
    environment."""
    from prefect.settings import temporary_settings

    updates = {"api.url": url, "client.max_retries": attempts - 1}
    variables = {"PREFECT_API_URL": url, "PREFECT_CLIENT_MAX_RETRIES": str(attempts - 1)}
    with scoped_environ(variables), temporary_settings(updates=updates):
        yield
