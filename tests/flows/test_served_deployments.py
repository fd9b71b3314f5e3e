"""Deployments served from this machine, run as the Prefect UI runs them.

Every test that serves a deployment lives in this file, so that they run one after the
other (``--dist loadfile``): ``flywheel serve`` and ``flywheel train --serve`` both serve
``trainer/train``, and two runners of one deployment would take each other's runs.
"""

from __future__ import annotations

import subprocess
import time
import urllib.error
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from flows.servers import ModelServer, free_port
from storage import Catalog
from tests.flows.commands import FLYWHEEL, command_env
from tests.flows.prefect_api import get, post
from tests.training.builders import frozen_dataset, train_tasks

FINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}
SERVED = {
    "flywheel_round": "scheduled",
    "trainer": "train",
    "deployment": "deploy",
    "rollback": "rollback",
    "loop": "loop",
}


@contextmanager
def _serving(
    argv: list[str], env: dict[str, str], cwd: Path | None = None
) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        yield process
    finally:
        process.terminate()
        process.wait(timeout=60)


def _deployment(
    api: str, flow: str, name: str, process: subprocess.Popen[str], since: datetime
) -> Any:
    """``flow/name`` once ``process`` has registered it (an earlier test may have left a
    deployment of that name on the shared server: only one updated ``since`` counts)."""
    for _ in range(240):
        assert process.poll() is None, process.communicate()[1][-3000:]
        try:
            found = get(api, f"/deployments/name/{flow}/{name}")
        except urllib.error.HTTPError:
            found = None
        if found is not None and datetime.fromisoformat(found["updated"]) >= since:
            return found
        time.sleep(0.5)
    raise AssertionError(f"{flow}/{name} was never registered")


def _run(api: str, deployment: Any, parameters: dict[str, Any], timeout_s: int = 600) -> Any:
    """A flow run of ``deployment``, as the UI's Run button creates it; its final state."""
    run = post(api, f"/deployments/{deployment['id']}/create_flow_run", {"parameters": parameters})
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        current = get(api, f"/flow_runs/{run['id']}")
        if current["state"]["type"] in FINAL:
            return current
        time.sleep(1)
    raise AssertionError(f"flow run {run['id']} did not finish within {timeout_s} s")


@pytest.mark.slow
def test_a_run_started_from_the_served_trainer_registers_a_model(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """What the Prefect UI's Run button does: a flow run of the served deployment, its
    parameters given as the form sends them (plain JSON objects for the settings)."""
    dataset = frozen_dataset(tmp_path, train_tasks("toggle_phone_setting", 2)).version.id
    env = command_env(
        tmp_path, prefect_api_url, PREFECT_RUNNER_POLL_FREQUENCY="1", OMP_NUM_THREADS="1"
    )
    since = datetime.now(UTC) - timedelta(seconds=1)
    with _serving([FLYWHEEL, "train", "--serve"], env) as process:
        deployment = _deployment(prefect_api_url, "trainer", "train", process, since)
        schema = deployment["parameter_openapi_schema"]
        assert not schema.get("required")
        parameters = {
            "dataset_id": "latest",  # the form's default: the newest version, this one
            "method": "sft",
            "sft": {"max_steps": 2, "batch_size": 1},
            "rl": {"max_steps": 1, "max_new_tokens": 8},
            "dev_tasks": 2,
        }
        run = _run(prefect_api_url, deployment, parameters)
        assert run["state"]["type"] == "COMPLETED", run["state"]
    with Catalog.open(tmp_path / "catalog.duckdb", read_only=True) as catalog:
        (model,) = catalog.models.every()
    assert model.dataset_id == dataset and model.method.value == "sft"
    assert model.flow_run_id == run["id"]
    sft = model.hyperparameters["sft"]
    assert isinstance(sft, dict) and sft["max_steps"] == 2


@pytest.mark.slow
def test_flywheel_serve_registers_the_deployments_the_ui_lists_and_runs(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """``flywheel serve``: five deployments with typed forms and the round's schedule; a
    scheduled-round run and a training run (which chains into the deployment flow) started
    through the API complete; headless Chromium finds them on the UI's deployments page."""
    port = free_port()
    env = command_env(
        tmp_path,
        prefect_api_url,
        PREFECT_RUNNER_POLL_FREQUENCY="1",
        OMP_NUM_THREADS="1",
        FLYWHEEL_SCHEDULE__CRON="30 4 1 1 *",
        FLYWHEEL_SCHEDULE__TIMEZONE="Europe/Paris",
        FLYWHEEL_SERVING__PORT=str(port),
        FLYWHEEL_SERVING__THREADS="1",
        FLYWHEEL_SERVING__MAX_NEW_TOKENS="8",
        FLYWHEEL_SERVING__ENGINE="local",
    )
    try:
        since = datetime.now(UTC) - timedelta(seconds=1)
        with _serving([FLYWHEEL, "serve"], env) as process:
            found = {
                f: _deployment(prefect_api_url, f, n, process, since) for f, n in SERVED.items()
            }

            (schedule,) = found["flywheel_round"]["schedules"]
            assert schedule["schedule"]["cron"] == "30 4 1 1 *"
            assert schedule["schedule"]["timezone"] == "Europe/Paris" and schedule["active"]
            for flow, deployment in found.items():
                properties = deployment["parameter_openapi_schema"]["properties"]
                assert properties, f"{flow} has no form"
                assert deployment["global_concurrency_limit"]["limit"] == 1, flow
            assert found["trainer"]["parameters"] == {"deploy": True}
            assert (
                "min_overall_gain" in found["deployment"]["parameter_openapi_schema"]["properties"]
            )

            round_run = _run(prefect_api_url, found["flywheel_round"], {"tasks": 8, "seed": 3})
            assert round_run["state"]["type"] == "COMPLETED", round_run["state"]
            with Catalog.open(tmp_path / "catalog.duckdb", read_only=True) as catalog:
                dataset = catalog.datasets.latest_id()
            assert dataset is not None

            training = {
                "dataset_id": dataset,
                "method": "sft",
                "sft": {"max_steps": 2, "batch_size": 1},
                "rl": {"max_steps": 1, "max_new_tokens": 8},
                "dev_tasks": 2,
            }
            trained = _run(prefect_api_url, found["trainer"], training)
            assert trained["state"]["type"] == "COMPLETED", trained["state"]

            page = _dom(prefect_api_url.removesuffix("/api") + "/deployments")
    finally:
        ModelServer(tmp_path, port).stop()

    # The finished training chained into the deployment flow: the model is the champion.
    with Catalog.open(tmp_path / "catalog.duckdb", read_only=True) as catalog:
        (model,) = catalog.models.every()
        (record,) = catalog.models.deployments()
    assert model.flow_run_id == trained["id"]
    assert record.candidate_id == model.id and record.decision.value == "promoted"
    assert record.endpoint == f"http://127.0.0.1:{port}/v1"

    for flow, name in SERVED.items():
        assert flow in page and name in page, (flow, name)


def _dom(url: str) -> str:
    """The page at ``url`` as headless Chromium renders it (scripts run, API calls made)."""
    result = subprocess.run(
        [
            "chromium",
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=20000",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return result.stdout


@pytest.mark.slow
@pytest.mark.cluster
def test_a_worker_of_the_work_pool_runs_the_registered_round(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """``flywheel serve --to-pool`` registers the deployments in a process work pool and
    returns; ``flywheel worker``, started elsewhere with a relative state folder, runs a
    round from it in a subprocess, and the round lands in that folder's catalog."""
    pool = f"flywheel-test-{uuid.uuid4().hex[:8]}"
    env = command_env(tmp_path / "home", prefect_api_url, FLYWHEEL_SCHEDULE__ACTIVE="false")
    since = datetime.now(UTC) - timedelta(seconds=1)
    registered = subprocess.run(
        [FLYWHEEL, "serve", "--pool", pool],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert registered.returncode == 0, registered.stderr[-3000:]
    assert f"flywheel worker --pool {pool}" in registered.stdout
    deployment = get(prefect_api_url, "/deployments/name/flywheel_round/scheduled")
    assert deployment["work_pool_name"] == pool
    assert deployment["entrypoint"] == "flows.round.flywheel_round"
    assert datetime.fromisoformat(deployment["updated"]) >= since
    assert get(prefect_api_url, f"/work_pools/{pool}")["type"] == "process"

    elsewhere = tmp_path / "worker"
    elsewhere.mkdir()
    worker_env = env | {"FLYWHEEL_HOME": "state"}  # relative to where the worker starts
    with _serving([FLYWHEEL, "worker", "--pool", pool], worker_env, cwd=elsewhere) as worker:
        run = _run(prefect_api_url, deployment, {"tasks": 8, "seed": 5, "round_id": "pooled"})
        assert worker.poll() is None
    assert run["state"]["type"] == "COMPLETED", run["state"]
    with Catalog.open(elsewhere / "state" / "catalog.duckdb", read_only=True) as catalog:
        assert catalog.datasets.latest_id() is not None
        assert catalog.rounds.get("pooled") is not None
