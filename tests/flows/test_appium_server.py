"""The local Appium server: its command, the CLI lifecycle, and a fake-driver session on it."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from appium import webdriver
from appium.options.common import AppiumOptions
from appium.webdriver.common.appiumby import AppiumBy

from cli.servers import _server
from flows.servers import (
    APPIUM_DEFAULT_PORT,
    APPIUM_HOME_ENV,
    SERVERS,
    AppiumServer,
    ServerError,
    appium_home,
    appium_server,
    free_port,
    http_ok,
    port_in_use,
)
from flows.servers.managed import _LOCAL_HTTP
from flows.settings import AppiumSettings
from tests.flows.commands import FLYWHEEL

APP_XML = '<app width="1080" height="2400">\n  <MockButton id="ok" text="OK"/>\n</app>\n'


def _flywheel_server(home: Path, port: int, *args: str) -> str:
    """``flywheel server ARGS appium`` as a user runs it: home and port from the environment
    (``FLYWHEEL_HOME``, ``[appium] port``); it must succeed; its stdout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYWHEEL_")}
    env |= {"FLYWHEEL_HOME": str(home), "FLYWHEEL_APPIUM__PORT": str(port)}
    result = subprocess.run(
        [FLYWHEEL, "server", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    return result.stdout


def _group_gone(pgid: int, timeout_s: float = 5.0) -> bool:
    """True once every process of group ``pgid`` has exited. Zombies count as gone: the PID 1
    of a container may never reap the orphans it inherits."""
    deadline = time.monotonic() + timeout_s
    while any(state != "Z" for state in _states(pgid)):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _states(pgid: int) -> list[str]:
    """The states (R, S, Z, ...) of the processes in group ``pgid``, from ``/proc``."""
    states = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _ppid, group = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue  # exited while we looked
        if group == str(pgid):
            states.append(state)
    return states


def _fake_session(url: str, app: Path) -> webdriver.Remote:
    options = AppiumOptions()
    options.load_capabilities(
        {
            "platformName": "Fake",
            "appium:automationName": "Fake",
            "appium:deviceName": "Fake",
            "appium:app": str(app.absolute()),
        }
    )
    return webdriver.Remote(url, options=options)


def test_the_command_runs_node_on_127_0_0_1_with_its_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(APPIUM_HOME_ENV, raising=False)
    server = appium_server(tmp_path, 4999, AppiumSettings(start_timeout_s=7.5))
    root = appium_home().absolute()
    assert root.name == "appium-server"
    assert Path(server.spec.argv[0]).name == "node"
    assert server.spec.argv[1:] == (
        str(root / "node_modules" / "appium" / "index.js"),
        "server",
        "--address",
        "127.0.0.1",
        "--port",
        "4999",
        "--log-no-colors",
        "--log-timestamp",
    )
    assert server.spec.env == {"APPIUM_HOME": str(root)}
    assert server.health_url == "http://127.0.0.1:4999/status"
    assert server.spec.start_timeout_s == 7.5

    kind = SERVERS["appium"]
    assert (kind.title, kind.default_port, kind.section) == ("Appium", 4723, "appium")
    assert APPIUM_DEFAULT_PORT == AppiumSettings().port == 4723


def test_the_cli_takes_the_port_from_the_appium_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLYWHEEL_APPIUM__PORT", "4791")
    monkeypatch.setenv("FLYWHEEL_APPIUM__START_TIMEOUT_S", "9")
    server = _server("appium", tmp_path, None)
    assert isinstance(server, AppiumServer)
    assert (server.spec.port, server.spec.start_timeout_s) == (4791, 9.0)
    assert _server("appium", tmp_path, 4792).spec.port == 4792


def test_start_without_node_modules_says_to_run_make_appium(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(APPIUM_HOME_ENV, str(tmp_path / "empty"))
    server = appium_server(tmp_path / "home", free_port())
    with pytest.raises(ServerError, match=r"run `make appium` \(npm ci in appium-server/\)"):
        server.start()
    assert not server.pid_file.exists()
    assert server.stop() is False  # status and stop need no installation


def test_start_without_node_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    server = appium_server(tmp_path / "home", free_port())
    with pytest.raises(ServerError, match=r"no `node` on PATH.*make appium"):
        server.start()


@pytest.mark.slow
def test_start_a_fake_driver_session_and_stop_through_the_cli(tmp_path: Path) -> None:
    home, port = tmp_path / "home", free_port()
    url = f"http://127.0.0.1:{port}"

    out = _flywheel_server(home, port, "start", "appium")
    try:
        assert f"Appium: {url}" in out
        status = json.loads(_flywheel_server(home, port, "status", "appium", "--json"))
        pid = status["pid"]
        assert isinstance(pid, int)
        assert status == {
            "name": "appium",
            "running": True,
            "pid": pid,
            "url": url,
            "healthy": True,
        }
        with _LOCAL_HTTP.open(url + "/status", timeout=5) as response:
            assert json.load(response)["value"]["ready"] is True

        app = tmp_path / "app.xml"
        app.write_text(APP_XML)
        driver = _fake_session(url, app)
        try:
            button = driver.find_element(AppiumBy.ID, "ok")
            # The fake driver answers attributes set at run time (clicks, value) only: read
            # the XML's own (text) through XPath or the page source.
            assert button == driver.find_element(AppiumBy.XPATH, '//MockButton[@text="OK"]')
            assert 'text="OK"' in driver.page_source
            button.click()
            assert button.get_attribute("clicks") == "1"
        finally:
            driver.quit()
    finally:
        out = _flywheel_server(home, port, "stop", "appium")
    assert f"stopped appium (pid {pid})" in out
    assert not http_ok(url + "/status")
    assert not port_in_use(port)
    assert _group_gone(pid)
    assert not (home / "servers" / "appium" / "server.pid").exists()
    log = (home / "servers" / "appium" / "server.log").read_text()
    assert "fake@" in log and "\x1b[" not in log  # the fake driver was found; no colour codes


def test_the_shared_server_runs_fake_driver_sessions(appium_url: str, tmp_path: Path) -> None:
    app = tmp_path / "app.xml"
    app.write_text(APP_XML)
    driver = _fake_session(appium_url, app)
    try:
        driver.find_element(AppiumBy.ID, "ok").click()
        assert driver.find_element(AppiumBy.ID, "ok").get_attribute("clicks") == "1"
    finally:
        driver.quit()
