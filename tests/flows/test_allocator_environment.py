"""Arrow and rensa load with mimalloc told to return freed pages (``flows/__init__``),
unless a person chose otherwise."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = """
import importlib.abc, os, sys
seen = {}
class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name in ("pyarrow", "rensa") and name not in seen:
            seen[name] = os.environ.get("MIMALLOC_PURGE_DELAY")
        return None
sys.meta_path.insert(0, Watch())
import MODULE
import pyarrow, rensa
print(seen.get("pyarrow"), seen.get("rensa"))
"""


def _probe(module: str, env: dict[str, str]) -> list[str]:
    run = subprocess.run(
        [sys.executable, "-c", PROBE.replace("MODULE", module)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return run.stdout.split()


@pytest.mark.parametrize("module", ["cli.main", "flows.round"])
def test_arrow_and_rensa_load_with_mimalloc_returning_freed_pages(module: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "MIMALLOC_PURGE_DELAY"}
    assert _probe(module, env) == ["0", "0"]
    assert _probe("os", env) == ["None", "None"], "without us, mimalloc keeps its default"


def test_a_purge_delay_a_person_set_stands() -> None:
    env = {**os.environ, "MIMALLOC_PURGE_DELAY": "250"}
    assert _probe("cli.main", env) == ["250", "250"]
