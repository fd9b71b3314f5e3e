"""The local Appium server: the device pool's endpoint (the fake driver in tests).

Appium 3 and its fake driver are npm packages pinned by ``appium-server/package-lock.json``
(``make appium`` runs ``npm ci`` there). The server runs as ``node .../appium/index.js``
directly, never through npx, so stopping its process group stops it; ``APPIUM_HOME`` is that
folder, where it finds its drivers. Real phones use a driver such as UiAutomator2 instead.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from flows.servers.label_studio import REPO_ROOT
from flows.servers.managed import HOST, ManagedServer, ServerError, ServerSpec, ServerStatus

if TYPE_CHECKING:
    from flows.settings import AppiumSettings

APPIUM_DEFAULT_PORT = 4723
APPIUM_HOME_ENV = "FLYWHEEL_APPIUM_HOME"
_INSTALL_HINT = "run `make appium` (npm ci in appium-server/)"


def appium_home() -> Path:
    """Appium's home (its ``node_modules``): ``$FLYWHEEL_APPIUM_HOME``, else the repo's."""
    named = os.environ.get(APPIUM_HOME_ENV)
    return Path(named) if named else REPO_ROOT / "appium-server"


class AppiumServer(ManagedServer):
    """Appium under node; ``start`` first checks that node and the packages are there."""

    def __init__(self, spec: ServerSpec, home: Path, appium_home: Path) -> None:
        super().__init__(spec, home)
        self.appium_home = appium_home

    @property
    def entry(self) -> Path:
        """The Appium script node runs."""
        return self.appium_home / "node_modules" / "appium" / "index.js"

    def start(self) -> ServerStatus:
        """Start as ``ManagedServer.start`` does, with a clear error when not installed."""
        if self._live_pid() is None:
            if shutil.which(self.spec.argv[0]) is None:
                raise ServerError(
                    f"{self.spec.name}: no `node` on PATH; install Node.js 20 or later, "
                    f"then {_INSTALL_HINT}"
                )
            if not self.entry.is_file():
                raise ServerError(
                    f"{self.spec.name}: Appium is not installed in {self.appium_home} "
                    f"(no {self.entry}); {_INSTALL_HINT} (or point {APPIUM_HOME_ENV} at one)"
                )
        return super().start()


def appium_server(
    home: Path, port: int = APPIUM_DEFAULT_PORT, settings: AppiumSettings | None = None
) -> AppiumServer:
    """Appium on 127.0.0.1 from ``appium_home()``, its PID file and log under ``home``.

    The log stays at info level: at warn, a failed session request leaves no trace in it.
    """
    root = appium_home().absolute()
    spec = ServerSpec(
        name="appium",
        argv=(
            shutil.which("node") or "node",
            str(root / "node_modules" / "appium" / "index.js"),
            "server",
            "--address",
            HOST,
            "--port",
            str(port),
            "--log-no-colors",
            "--log-timestamp",
        ),
        port=port,
        health_path="/status",
        env={"APPIUM_HOME": str(root)},
        start_timeout_s=settings.start_timeout_s if settings else 60.0,
    )
    return AppiumServer(spec, home, root)
