"""``flywheel devices``: the device pool, its health, and a check of one device."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.output import emit_json, table

devices_app = typer.Typer(
    rich_markup_mode="markdown",
    help="The device pool ([[devices.pool]]): phones and emulators behind Appium servers.",
    no_args_is_help=True,
)
JsonFlag = Annotated[bool, typer.Option("--json", help="print JSON")]


@devices_app.command("list")
def list_devices(as_json: JsonFlag = False) -> None:
    """Each device of the pool, its Appium server and driver, and whether the server
    answers ready."""
    from envs.appium.pool import server_ready
    from flows.devices import device_specs
    from flows.settings import load_settings

    settings = load_settings()
    rows = [
        {
            "name": spec.name,
            "server": spec.server,
            "driver": spec.profile.name,
            "ready": server_ready(spec.server),
        }
        for spec in device_specs(settings)
    ]
    if as_json:
        emit_json({"route": settings.devices.route, "devices": rows})
        return
    typer.echo(f"route: {settings.devices.route}")
    typer.echo(table(["device", "server", "driver", "ready"], [list(r.values()) for r in rows]))


@devices_app.command("check")
def check_device(
    name: Annotated[str, typer.Argument(help="the pool entry to check")],
    as_json: JsonFlag = False,
) -> None:
    """Open a session on the device, read its screen and take a screenshot (kept in the
    artifact store): what a collector does first."""
    from contract import InvalidInputError, ReadScreen, Screenshot
    from envs.appium.device import session
    from flows.devices import device_specs
    from flows.settings import load_settings
    from storage import ArtifactStore

    settings = load_settings()
    specs = {spec.name: spec for spec in device_specs(settings)}
    spec = specs.get(name)
    if spec is None:
        raise InvalidInputError("device", f"no device named {name!r} in the pool", specs)
    store = ArtifactStore(settings.artifacts_location)
    with session(
        spec.server,
        spec.profile,
        store.put,
        settings.devices.command_timeout_s,
        dict(spec.capabilities),
    ) as device:
        screen = device.run(ReadScreen())
        shot = device.run(Screenshot())
    failures = [o.feedback.error for o in (screen, shot) if o.feedback.error is not None]
    artifacts = [*screen.artifacts, *shot.artifacts]
    report = {
        "device": name,
        "ok": not failures,
        "errors": [e.message for e in failures],
        "elements": len(screen.tree.elements) if screen.tree is not None else 0,
        "artifacts": artifacts,
    }
    if as_json:
        emit_json(report)
    else:
        typer.echo(screen.tree.render() if screen.tree is not None else "(no screen)")
        typer.echo(f"\nartifacts in {settings.artifacts_location}: {', '.join(artifacts)}")
    if failures:
        raise typer.Exit(1)
