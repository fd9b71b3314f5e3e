"""The servers the flywheel knows by name, for ``flywheel server start|stop|status``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from contract import InvalidInputError
from flows.servers.appium import APPIUM_DEFAULT_PORT, appium_server
from flows.servers.label_studio import (
    LABEL_STUDIO_DEFAULT_PORT,
    _label_studio_from_settings,
)
from flows.servers.managed import ManagedServer
from flows.servers.model import MODEL_DEFAULT_PORT, model_server
from flows.servers.prefect import PREFECT_DEFAULT_PORT, PREFECT_START_TIMEOUT_S, prefect_server

if TYPE_CHECKING:
    from flows.settings import FlywheelSettings


@dataclass(frozen=True)
class ServerKind:
    """A server the flywheel knows by name: its title, default port and factory.

    The factory gets the settings for servers that need more than a port (accounts);
    ``section`` names the settings section that holds the port.
    """

    title: str
    default_port: int
    build: Callable[[Path, int, FlywheelSettings | None], ManagedServer]
    has_ui: bool = False
    section: str = ""


SERVERS: Mapping[str, ServerKind] = {
    "appium": ServerKind(
        "Appium",
        APPIUM_DEFAULT_PORT,
        lambda home, port, settings: appium_server(
            home, port, settings.appium if settings else None
        ),
        section="appium",
    ),
    "label-studio": ServerKind(
        "Label Studio",
        LABEL_STUDIO_DEFAULT_PORT,
        lambda home, port, settings: _label_studio_from_settings(
            home, port, settings.label_studio if settings else None
        ),
        has_ui=True,
    ),
    "model": ServerKind(
        "Model",
        MODEL_DEFAULT_PORT,
        lambda home, port, settings: model_server(
            home, port, settings.serving if settings else None
        ),
        section="serving",
    ),
    "prefect": ServerKind(
        "Prefect",
        PREFECT_DEFAULT_PORT,
        lambda home, port, settings: prefect_server(
            home, port, settings.prefect.start_timeout_s if settings else PREFECT_START_TIMEOUT_S
        ),
        True,
        section="prefect",
    ),
}


def known_server(
    name: str, home: Path, port: int | None = None, settings: FlywheelSettings | None = None
) -> ManagedServer:
    """The named server (see ``SERVERS``) on ``port`` or its default port.

    ``settings`` supplies what a server needs beyond its port (Label Studio's account);
    without them, defaults.
    """
    kind = SERVERS.get(name)
    if kind is None:
        raise InvalidInputError("server", f"unknown server {name!r}", SERVERS)
    return kind.build(home, kind.default_port if port is None else port, settings)
