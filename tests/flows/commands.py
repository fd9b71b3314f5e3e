"""Running ``flywheel`` as a user does, against a given state folder and Prefect API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

FLYWHEEL = str(Path(sys.executable).parent / "flywheel")


def command_env(home: Path, api: str, **extra: str) -> dict[str, str]:
    """This environment without its ``FLYWHEEL_`` settings, then ``home``, ``api``, ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYWHEEL_")}
    return env | {"FLYWHEEL_HOME": str(home), "PREFECT_API_URL": api} | extra


def flywheel_json(home: Path, api: str, *args: str, **extra: str) -> Any:
    """``flywheel ARGS --json``: it must succeed; its output, parsed."""
    result = _run(home, api, args, extra)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def run_round(home: Path, api: str, *args: str, **extra: str) -> dict[str, Any]:
    """``flywheel round ARGS --json``."""
    out: dict[str, Any] = flywheel_json(home, api, "round", *args, **extra)
    return out


def refused(home: Path, api: str, *args: str, **extra: str) -> dict[str, Any]:
    """``flywheel ARGS --json``: it must fail; the error it reports (field, problem)."""
    result = _run(home, api, args, extra)
    assert result.returncode != 0, result.stdout[-3000:]
    error: dict[str, Any] = json.loads(result.stdout)["error"]
    return error


def _run(
    home: Path, api: str, args: tuple[str, ...], extra: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [FLYWHEEL, *args, "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env=command_env(home, api, **extra),
        check=False,
    )
