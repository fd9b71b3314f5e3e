"""``flywheel server start|stop|status [NAME]``: the local servers, on 127.0.0.1 only."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from flows.servers import ManagedServer

server_app = typer.Typer(
    help="Local servers (Prefect, Label Studio, the model): start, stop, status; "
    "state under <home>/servers/.",
    no_args_is_help=True,
)

NameArg = Annotated[str, typer.Argument(help="which server (prefect, label-studio, model, appium)")]
HomeOpt = Annotated[
    Path | None, typer.Option(help="state folder [default: settings, FLYWHEEL_HOME]")
]
PortOpt = Annotated[
    int | None,
    typer.Option(
        min=1, max=65535, help="port [default: settings, e.g. FLYWHEEL_PREFECT__PORT=4200]"
    ),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="print JSON")]
TimeoutOpt = Annotated[
    float | None,
    typer.Option(
        min=1.0,
        max=3600.0,
        help="seconds the server may take to answer [default: settings, e.g. "
        "FLYWHEEL_PREFECT__START_TIMEOUT_S]",
    ),
]


@server_app.command("start")
def server_start(
    name: NameArg = "prefect",
    home: HomeOpt = None,
    port: PortOpt = None,
    timeout: TimeoutOpt = None,
) -> None:
    """Start a server detached (no-op if it runs) and wait until it answers, saying so
    every few seconds; one that does not answer in time is stopped."""
    from flows.servers import SERVERS

    server = _server(name, home, port)
    if timeout is not None:
        server.with_timeout(timeout)
    server.progress = lambda line: typer.echo(line, err=True)
    status = server.start()
    kind = SERVERS[name]
    typer.echo(f"{kind.title} server running (pid {status.pid}), log {server.log_file}")
    typer.echo(f"{kind.title}{' UI' if kind.has_ui else ''}: {status.url}")
    for line in server.access_notes():
        typer.echo(line)


@server_app.command("stop")
def server_stop(name: NameArg = "prefect", home: HomeOpt = None, port: PortOpt = None) -> None:
    """Stop a server started with start, by the PID in its PID file."""
    server = _server(name, home, port)
    pid = server.status().pid
    if server.stop():
        typer.echo(f"stopped {name} (pid {pid})")
    else:
        typer.echo(f"{name} was not running")


@server_app.command("status")
def server_status(
    name: NameArg = "prefect",
    home: HomeOpt = None,
    port: PortOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Whether a server runs and answers its health URL."""
    from cli.output import emit_json, table

    status = _server(name, home, port).status()
    if as_json:
        emit_json(asdict(status))
        return
    row = (status.name, status.running, status.pid or "-", status.healthy, status.url)
    typer.echo(table(("server", "running", "pid", "healthy", "url"), [row]))


def _server(name: str, home: Path | None, port: int | None) -> ManagedServer:
    """The named server, with home and port from the options or else from settings."""
    from flows.servers import SERVERS, known_server
    from flows.settings import load_settings

    settings = load_settings()
    kind = SERVERS.get(name)
    section = getattr(settings, (kind.section if kind else "") or name.replace("-", "_"), None)
    port = port or getattr(section, "port", None)
    return known_server(name, home or settings.home, port, settings)
