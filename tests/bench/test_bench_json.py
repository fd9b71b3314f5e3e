"""``flywheel bench ... --json``: the figures the text shows, as JSON (small runs; no
figure is judged)."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from bench.machine import processor
from tests.cli.commands import FLYWHEEL


def _bench(*args: str) -> dict[str, Any]:
    run = subprocess.run(
        [FLYWHEEL, "bench", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    figures: dict[str, Any] = json.loads(run.stdout)
    return figures


def test_the_sandbox_benchmark_gives_its_figures_as_json() -> None:
    figures = _bench("sandbox", "--episodes", "10", "--seed", "3")
    assert (figures["episodes"], figures["seed"]) == (10, 3)
    calls = figures["tool_calls_in_plans"]
    assert calls["calls_per_s"] > 0 and calls["cpu_s"] > 0
    assert figures["tool_call_to_bare_ratio"] > 1
    assert set(figures["machine"]) == {"cores", "cpu", "load_average"}
    assert figures["machine"]["cpu"] == processor()


def test_the_ingest_benchmark_gives_every_run_as_json() -> None:
    figures = _bench("ingest", "--trajectories", "12")
    assert figures["trajectories"] == 12 and figures["steps"] > 12
    for kind in ("ingest_tasks_registered", "ingest_tasks_from_shards"):
        ingest = figures[kind]
        assert len(ingest["runs"]) == 5
        assert ingest["wall_s"] == min(r["wall_s"] for r in ingest["runs"])
        assert ingest["steps_per_s"] == figures["steps"] / ingest["wall_s"]
