"""Fixtures of the flows' tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty settings file, and no ``FLYWHEEL_`` variable but the one naming it."""
    for name in list(os.environ):
        if name.startswith("FLYWHEEL_"):
            monkeypatch.delenv(name)
    path = tmp_path / "flywheel.toml"
    path.write_text("")
    monkeypatch.setenv("FLYWHEEL_CONFIG", str(path))
    return path
