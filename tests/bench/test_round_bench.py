"""The round benchmark: a server's CPU is read from every process of its session, children
included; the plain pipeline it compares with constructs and collects the round's tasks."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.machine import session_cpu_seconds
from bench.round import plain_pipeline
from flows.policies import build_policy
from flows.round_config import resolve_config
from flows.settings import HOME_ENV, load_settings

BURN = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"


def test_a_sessions_cpu_counts_its_processes_and_their_children() -> None:
    code = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {BURN!r}])\n"
        f"exec({BURN!r})\n"
        "time.sleep(30)\n"
    )
    leader = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        seen = 0.0
        while time.monotonic() < deadline and seen < 0.55:
            time.sleep(0.1)
            seen = session_cpu_seconds(leader.pid)
        assert seen >= 0.55  # the leader's 0.3 s and its child's 0.3 s
        assert session_cpu_seconds(leader.pid + 10**7) == 0.0  # no such session
    finally:
        leader.kill()
        leader.wait()


def test_the_plain_pipeline_constructs_the_rounds_tasks_and_collects_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(HOME_ENV, str(tmp_path))
    settings = load_settings()
    config = resolve_config(settings, tasks=40, seed=2)
    policy = build_policy(config.policy, settings, config.fault_rate, config.recovery_rate)

    counts, construction = plain_pipeline(config, settings, policy)

    assert counts["tasks"] == 40  # the graph's tasks: the round benchmark compares like with like
    assert counts["trajectories"] >= 40  # backend retries add attempts
    assert construction.wall_s > 0 and construction.cpu_s > 0
