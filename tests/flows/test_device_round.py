"""Hybrid rounds on the device pool, against real Prefect and Appium (fake driver) servers.

The second test kills the Appium server in the middle of a round and starts it again:
the round must complete, the attempt the crash broke must be kept as a backend error,
and no trajectory may be lost or stored twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from contract import ErrorKind, Outcome, SubAgentCall, Trajectory
from envs.appium.backend import needs_gui
from flows.servers import free_port
from flows.servers.appium import appium_server
from storage import ArtifactStore, Catalog
from tests.flows.commands import FLYWHEEL, command_env, run_round

pytestmark = pytest.mark.slow
ROUND = ("--tasks", "48", "--seed", "5", "--devices", "gui", "--backend-fault-rate", "0")
"""Without simulated app faults, every backend error on a device is the device's own."""


def _pool(server: str, *names: str) -> dict[str, str]:
    """Settings (as environment) for a pool of fake devices on ``server``."""
    pool = [{"name": name, "server": server} for name in names]
    return {"FLYWHEEL_DEVICES__POOL": json.dumps(pool), "FLYWHEEL_DEVICES__LEASE_TIMEOUT_S": "60"}


def _stored(home: Path, round_id: str) -> tuple[list[Any], list[Trajectory]]:
    with Catalog.open(home / "catalog.duckdb", read_only=True) as catalog:
        return catalog.tasks.of_round(round_id), catalog.trajectories.of_round(round_id)


def _assert_routed(home: Path, round_id: str) -> list[Trajectory]:
    """GUI tasks ran on devices with screenshots; the others in the sandbox. Returns the
    device trajectories."""
    tasks, trajectories = _stored(home, round_id)
    gui = {t.id for t in tasks if needs_gui(t)}
    assert gui and len(gui) < len(tasks)
    for t in trajectories:
        assert (t.metadata.backend == "device") == (t.task.id in gui), t.task.id
    on_device = [t for t in trajectories if t.metadata.backend == "device"]
    store = ArtifactStore(home / "artifacts")
    delegated = [
        (t, s)
        for t in on_device
        for s in t.steps
        if isinstance(s.action, SubAgentCall) and s.action.agent == "gui" and s.feedback.ok
    ]
    assert delegated
    for t, step in delegated:
        assert step.observation is not None
        assert step.observation.startswith(f"GUI agent on {t.metadata.device}:")
        assert {Path(ref).suffix for ref in step.artifacts} >= {".png", ".xml"}
        assert all(ref in store for ref in step.artifacts)
        screenshot = next(r for r in step.artifacts if r.endswith(".png"))
        assert store.get(screenshot)[:4] == b"\x89PNG"
    return on_device


def test_a_hybrid_round_runs_gui_tasks_on_the_device_pool(
    prefect_api_url: str, appium_url: str, tmp_path: Path
) -> None:
    out = run_round(tmp_path, prefect_api_url, *ROUND, **_pool(appium_url, "fake-0"))
    on_device = _assert_routed(tmp_path, out["round_id"])
    assert {t.metadata.device for t in on_device} == {"fake-0"}
    assert all(t.metadata.outcome is not Outcome.BACKEND_ERROR for t in on_device)
    assert out["dataset_version"] is not None

    from prefect import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    from flows.servers import prefect_api

    run_filter = ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[out["flow_run_id"]]))
    with prefect_api(prefect_api_url), get_client(sync_client=True) as client:
        limit = client.read_global_concurrency_limit_by_name("device-fake-0")
        artifacts = client.read_artifacts(artifact_filter=run_filter)
    assert limit.limit == 1 and limit.active_slots == 0
    [table] = [a for a in artifacts if a.key == "round-devices"]
    [row] = json.loads(str(table.data))
    assert row["device"] == "fake-0" and row["attempts"] == len(on_device)
    assert row["artifacts"] > 0 and row["backend_error"] == 0


def test_a_round_refuses_a_pool_where_nothing_answers(prefect_api_url: str, tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    result = subprocess.run(
        [FLYWHEEL, "round", *ROUND, "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        env=command_env(tmp_path, prefect_api_url, **_pool(dead, "fake-0")),
        check=False,
    )
    assert result.returncode == 1
    assert f"no device of the pool answers (fake-0 at {dead})" in result.stderr
    assert "flywheel server start appium" in result.stderr


def _sessions(log: Path) -> int:
    return log.read_text(errors="replace").count("session created successfully")


def test_killing_appium_mid_round_keeps_the_broken_attempt_and_loses_nothing(
    prefect_api_url: str, tmp_path: Path
) -> None:
    port = free_port()
    server = appium_server(tmp_path / "appium-home", port)
    server.start()
    env = command_env(
        tmp_path / "home",
        prefect_api_url,
        **_pool(f"http://127.0.0.1:{port}", "fake-0", "fake-1"),
    )
    round_run = subprocess.Popen(
        [FLYWHEEL, "round", *ROUND, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 240
        while _sessions(server.log_file) < 3:
            assert round_run.poll() is None, round_run.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no device session was created"
            time.sleep(0.05)
        pid = int(server.pid_file.read_text())
        os.killpg(pid, signal.SIGKILL)  # a crash: no session is ended cleanly
        os.waitpid(pid, 0)
        time.sleep(1.0)
        server.start()
        stdout, stderr = round_run.communicate(timeout=300)
    finally:
        if round_run.poll() is None:
            round_run.kill()
        server.stop()
    assert round_run.returncode == 0, stderr[-3000:]
    out = json.loads(stdout)
    home = tmp_path / "home"
    on_device = _assert_routed(home, out["round_id"])

    broken = [t for t in on_device if t.metadata.outcome is Outcome.BACKEND_ERROR]
    assert broken, "the crash broke no attempt"
    for t in broken:
        error = t.steps[-1].feedback.error
        assert error is not None and error.kind in {ErrorKind.BACKEND_ERROR, ErrorKind.TIMEOUT}
    tasks, trajectories = _stored(home, out["round_id"])
    tries: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        tries[t.task.id].append(t)
    # Nothing lost: every task has a final attempt that is not a backend error.
    assert set(tries) == {t.id for t in tasks}
    for task_id, attempts in tries.items():
        numbers = sorted(t.metadata.attempt for t in attempts)
        assert numbers == list(range(len(numbers))), task_id  # nothing stored twice
        last = max(attempts, key=lambda t: t.metadata.attempt)
        assert last.metadata.outcome is not Outcome.BACKEND_ERROR, task_id
    assert len({t.id for t in trajectories}) == len(trajectories)
    retried = {t.task.id for t in broken}
    devices = Counter(
        t.metadata.device for t in on_device if t.task.id in retried and t.metadata.attempt > 0
    )
    assert devices, "no broken attempt was tried again"

    assert out["dataset_version"] is not None
    with Catalog.open(home / "catalog.duckdb", read_only=True) as catalog:
        members = catalog.datasets.get(out["dataset_version"]).members
    assert not {t.id for t in broken} & {m.trajectory_id for m in members}
