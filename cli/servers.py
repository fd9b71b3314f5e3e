"""``flywheel server start|stop|status [NAME]``: the local servers, on 127.0.0.1 only."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from flows.servers import ManagedServer

server_app = typer.Typer(
    rich_markup_mode="markdown",
    help="Local servers (Prefect, Label Studio, the model): start, stop, status; "
    "state under the state folder's servers/ (FLYWHEEL_HOME).",
    no_args_is_help=True,
)

NameArg = Annotated[str, typer.Argument(help="which server (prefect, label-studio, model, appium)")]
AnyNameArg = Annotated[
    str | None,
    typer.Argument(help="which server (prefect, label-studio, model, appium); default: every one"),
]
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
    as_json: JsonFlag = False,
) -> None:
    """Start a server detached (no-op if it runs) and wait until it answers, saying so
    every few seconds; one that does not answer in time is stopped."""
    from cli.output import emit_json
    from flows.servers import SERVERS

    server = _server(name, home, port)
    if timeout is not None:
        server.with_timeout(timeout)
    server.progress = lambda line: typer.echo(line, err=True)
    status = server.start()
    if as_json:
        emit_json({**asdict(status), "log": str(server.log_file)})
        return
    kind = SERVERS[name]
    typer.echo(f"{kind.title} server running (pid {status.pid}), log {server.log_file}")
    typer.echo(f"{kind.title}{' UI' if kind.has_ui else ''}: {status.url}")
    for line in server.access_notes():
        typer.echo(line)


@server_app.command("stop")
def server_stop(
    name: AnyNameArg = None, home: HomeOpt = None, port: PortOpt = None, as_json: JsonFlag = False
) -> None:
    """Stop a server started with start, by the PID in its PID file; without a name,
    every server of this state folder that runs, each named."""
    from cli.output import emit_json

    stopped: list[dict[str, object]] = []
    idle: list[str] = []
    for each in _names(name, port):
        server = _server(each, home, port)
        pid = server.status().pid
        if server.stop():
            stopped.append({"name": each, "pid": pid})
        else:
            idle.append(each)
    if as_json:
        emit_json({"stopped": stopped, "not_running": idle})
        return
    for entry in stopped:
        typer.echo(f"stopped {entry['name']} (pid {entry['pid']})")
    if name is not None and idle:
        typer.echo(f"{name} was not running")
    elif not stopped:
        typer.echo("no server of this state folder was running")


@server_app.command("status")
def server_status(
    name: AnyNameArg = None,
    home: HomeOpt = None,
    port: PortOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Whether a server runs and answers its health URL; without a name, every server
    of this state folder (its port from the settings)."""
    from cli.output import emit_json, table

    statuses = [_server(each, home, port).status() for each in _names(name, port)]
    if as_json:
        emit_json(asdict(statuses[0]) if name is not None else [asdict(s) for s in statuses])
        return
    rows = [(s.name, s.running, s.pid or "-", s.healthy, s.url) for s in statuses]
    typer.echo(table(("server", "running", "pid", "healthy", "url"), rows))


def _names(name: str | None, port: int | None) -> list[str]:
    """``[name]``, or every server's name; a port belongs to one named server."""
    from contract import InvalidInputError
    from flows.servers import SERVERS

    if name is not None:
        return [name]
    if port is not None:
        raise InvalidInputError("--port", "is one server's port: name the server too", SERVERS)
    return sorted(SERVERS)


def _server(name: str, home: Path | None, port: int | None) -> ManagedServer:
    """The named server, with home and port from the options or else from settings."""
    from flows.servers import SERVERS, known_server
    from flows.settings import load_settings

    settings = load_settings()
    kind = SERVERS.get(name)
    section = getattr(settings, (kind.section if kind else "") or name.replace("-", "_"), None)
    port = port or getattr(section, "port", None)
    return known_server(name, home or settings.home, port, settings)
