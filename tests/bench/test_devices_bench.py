"""The device benchmark starts its own Appium server, measures the fake driver and
reports consistent figures. No timing is asserted."""

from __future__ import annotations

import pytest

from bench.devices import gui_tasks, measure_devices, report
from envs.appium.backend import needs_gui

pytestmark = pytest.mark.slow  # an Appium server of its own


def test_the_benchmark_runs_gui_episodes_on_devices_and_in_the_sandbox() -> None:
    bench = measure_devices(episodes=4, calls=2, seed=1)
    assert bench.episodes == 4 and bench.successes == 4  # the scripted plans pass on devices
    figures = (bench.session_ms, bench.read_screen_ms, bench.screenshot_ms, bench.tap_ms)
    assert all(f > 0 for f in figures)
    assert bench.sandbox_eps > 0 and bench.device_eps > 0 and bench.pool_eps > 0
    own, appium = bench.device_cpu_s
    assert own > 0 and appium > 0  # the episodes drive the node server too
    text = report(bench)
    assert "4 GUI episodes" in text and "4/4 verified" in text
    assert f"{bench.sandbox_eps / bench.device_eps:.0f}x slower" in text


def test_the_tasks_all_delegate_to_the_gui_agent() -> None:
    tasks = gui_tasks(6, seed=2)
    assert len(tasks) == 6 and all(needs_gui(t) for t in tasks)
    assert gui_tasks(6, seed=2) == tasks
