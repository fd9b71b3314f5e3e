"""Running ``flywheel`` as a user does: a process of its own, a home of its own, none of
the caller's ``FLYWHEEL_`` settings, and a working folder without a ``flywheel.toml``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

FLYWHEEL = str(Path(sys.executable).parent / "flywheel")


def run_in(
    home: Path, *args: str, timeout: float = 120, in_home: bool = True, **env: str
) -> subprocess.CompletedProcess[str]:
    """``flywheel *args`` with ``FLYWHEEL_HOME=home`` and ``env``; run inside ``home``
    unless ``in_home`` is False (a home that does not exist)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("FLYWHEEL_")}
    base["FLYWHEEL_HOME"] = str(home)
    return subprocess.run(
        [FLYWHEEL, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=base | env,
        cwd=home if in_home else None,
        check=False,
    )
