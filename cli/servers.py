"""``flywheel server start|stop|status [NAME]``: the local servers, on 127.0.0.1 only."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from flows.servers import ManagedServer

server_app = typer.Typer(
    help="Local servers (Prefect): start, stop, status; state under <home>/servers/.",
    no_args_is_help=True,
)

NameArg = Annotated[str, typer.Argument(help="which server (prefect)")]
HomeOpt = Annotated[
    Path, typer.Option(envvar="FLYWHEEL_HOME", help="state folder [env FLYWHEEL_HOME]")
]
PortOpt = Annotated[
    int | None,
    typer.Option(
        min=1, max=65535, help="port [default: env FLYWHEEL_<NAME>_PORT, else 4200 for prefect]"
    ),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="print JSON")]


@server_app.command("start")
def server_start(
    name: NameArg = "prefect", home: HomeOpt = Path(".flywheel"), port: PortOpt = None
) -> None:
    """Start a server detached (no-op if it runs) and wait until it answers."""
    from flows.servers import SERVERS

    server = _server(name, home, port)
    status = server.start()
    kind = SERVERS[name]
    typer.echo(f"{kind.title} server running (pid {status.pid}), log {server.log_file}")
    typer.echo(f"{kind.title}{' UI' if kind.has_ui else ''}: {status.url}")


@server_app.command("stop")
def server_stop(
    name: NameArg = "prefect", home: HomeOpt = Path(".flywheel"), port: PortOpt = None
) -> None:
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
    home: HomeOpt = Path(".flywheel"),
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


def _server(name: str, home: Path, port: int | None) -> ManagedServer:
    from contract import InvalidInputError
    from flows.servers import SERVERS, known_server

    variable = f"FLYWHEEL_{name.upper()}_PORT"
    from_env = os.environ.get(variable) if name in SERVERS else None
    if port is None and from_env:
        if not from_env.isdigit():
            raise InvalidInputError(variable, f"{from_env!r} is not a port number")
        port = int(from_env)
    return known_server(name, home, port)
