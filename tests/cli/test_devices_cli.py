"""``flywheel devices list|check`` against a real Appium server (fake driver)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from flows.servers import free_port
from storage import ArtifactStore
from tests.flows.commands import FLYWHEEL, command_env

pytestmark = pytest.mark.slow


def _devices(
    tmp_path: Path, pool: list[dict[str, str]], *args: str
) -> subprocess.CompletedProcess[str]:
    env = command_env(
        tmp_path / "home", "http://127.0.0.1:9/api", FLYWHEEL_DEVICES__POOL=json.dumps(pool)
    )
    return subprocess.run(
        [FLYWHEEL, "devices", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def test_list_says_which_servers_answer(appium_url: str, tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    pool = [{"name": "phone-a", "server": appium_url}, {"name": "phone-b", "server": dead}]
    result = _devices(tmp_path, pool, "list", "--json")
    assert result.returncode == 0, result.stderr
    listed = json.loads(result.stdout)
    assert listed["route"] == "none"
    assert [(d["name"], d["ready"]) for d in listed["devices"]] == [
        ("phone-a", True),
        ("phone-b", False),
    ]


def test_check_reads_the_screen_and_keeps_a_screenshot(appium_url: str, tmp_path: Path) -> None:
    result = _devices(tmp_path, [{"name": "phone-a", "server": appium_url}], "check", "phone-a")
    assert result.returncode == 0, result.stderr
    assert "[perm:transit:notifications]" in result.stdout
    report = json.loads(
        _devices(
            tmp_path, [{"name": "phone-a", "server": appium_url}], "check", "phone-a", "--json"
        ).stdout
    )
    assert report["ok"] is True and report["elements"] > 30
    store = ArtifactStore(tmp_path / "home" / "artifacts")
    [png] = [ref for ref in report["artifacts"] if ref.endswith(".png")]
    assert store.get(png)[:4] == b"\x89PNG"


def test_check_names_the_devices_and_says_why_a_session_failed(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    pool = [{"name": "phone-a", "server": dead}]
    unknown = _devices(tmp_path, pool, "check", "phone-z")
    assert unknown.returncode == 1
    assert "device: no device named 'phone-z' in the pool (allowed: phone-a)" in unknown.stderr
    down = _devices(tmp_path, pool, "check", "phone-a")
    assert down.returncode == 1
    assert f"error: no session on {dead}" in down.stderr and "Traceback" not in down.stderr
