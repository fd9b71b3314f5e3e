"""The deployment flow against the real Prefect server, a real model server (``python -m
serving``) and a real DuckDB file: promotion, the gate refusing a worse model, a candidate
that fails to serve, rollback, and the collector calling the served champion through the
``openai`` client. Model scores: see ``tests/flows/registry_builders.py``."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from prefect import get_client
from prefect.client.schemas.filters import (
    FlowFilter,
    FlowFilterName,
    FlowRunFilter,
    FlowRunFilterState,
    FlowRunFilterStateType,
)
from prefect.client.schemas.objects import FlowRun, StateType
from prefect.flow_runs import resume_flow_run
from prefect.input.actions import read_flow_run_input
from prefect.input.run_input import keyset_from_paused_state

from agents.runner import run_episode
from contract import DeploymentDecision, ModelAlias
from envs.sandbox import MobileSandbox
from flows.deployment import deployment, rollback
from flows.policies import build_policy
from flows.servers import ModelServer, free_port, prefect_api
from flows.settings import load_settings
from serving.client import health
from storage import Catalog
from storage.model_registry import DuckDBModelRegistry
from tests.flows.commands import FLYWHEEL, command_env
from tests.flows.registry_builders import Registry, register_tiny, registry_home

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Registry:
    return registry_home(tmp_path_factory.mktemp("deployment-home"))


@pytest.fixture(scope="module")
def served_settings(registry: Registry) -> Iterator[dict[str, str]]:
    """Settings of the flows run here: the registry's home, a model server of our own."""
    env = {
        "FLYWHEEL_HOME": str(registry.home),
        "FLYWHEEL_SERVING__PORT": str(free_port()),
        "FLYWHEEL_SERVING__THREADS": "1",
        "FLYWHEEL_SERVING__MAX_NEW_TOKENS": "8",
        "FLYWHEEL_SERVING__ENGINE": "local",
    }
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        try:
            yield env
        finally:
            settings = load_settings()
            ModelServer(settings.home, settings.serving.port).stop()


def _champion(registry: Registry) -> str | None:
    with Catalog.open(registry.catalog_path, read_only=True) as catalog:
        champion = catalog.models.alias(ModelAlias.CHAMPION)
    return champion.id if champion else None


def _served() -> str | None:
    settings = load_settings()
    status = health(f"http://127.0.0.1:{settings.serving.port}")
    return None if status is None else str(status["model_id"])


def test_promote_refuse_fail_to_serve_and_roll_back(
    prefect_api_url: str, registry: Registry, served_settings: dict[str, str]
) -> None:
    first = register_tiny(registry, "first", overall=0.5, seed=1)
    worse = register_tiny(registry, "worse", overall=0.3, seed=2)
    better = register_tiny(registry, "better", overall=0.7, seed=3)
    broken = register_tiny(registry, "broken", overall=0.9, seed=4)
    for weights in Path(broken.path).glob("*.safetensors"):
        weights.write_bytes(b"not a tensor file")

    with prefect_api(prefect_api_url):
        # No champion yet: the first model is promoted and served.
        promoted = deployment(model=first.id)
        assert promoted["decision"] == DeploymentDecision.PROMOTED
        assert promoted["served_id"] == first.id and promoted["endpoint"].endswith("/v1")
        assert _champion(registry) == _served() == first.id

        # The collector's policy calls the served champion through the openai client.
        before = health(promoted["endpoint"].removesuffix("/v1"))
        assert before is not None
        policy = build_policy("champion", load_settings())
        trajectory = run_episode(registry.dev[0], MobileSandbox(), policy, max_steps=2)
        after = health(promoted["endpoint"].removesuffix("/v1"))
        assert after is not None
        assert trajectory.metadata.policy.model == first.id
        assert after["requests"] - before["requests"] == len(trajectory.steps) >= 1

        # A worse candidate is refused by the gate: nothing changes.
        refused = deployment(model=worse.id)
        assert refused["decision"] == DeploymentDecision.REFUSED
        assert refused["served_id"] == first.id and refused["overall_gain"] == pytest.approx(-0.2)
        assert any("Overall 0.500 -> 0.300" in r for r in refused["reasons"])
        assert _champion(registry) == _served() == first.id

        # A better candidate whose weights do not load fails to serve: the champion stays.
        failed = deployment(model=broken.id)
        assert failed["decision"] == DeploymentDecision.FAILED
        assert failed["served_id"] == first.id
        assert any("not served" in r for r in failed["reasons"])
        assert _champion(registry) == _served() == first.id

        # A better candidate is promoted and swapped in without a restart.
        pid = ModelServer(registry.home, int(served_settings["FLYWHEEL_SERVING__PORT"])).status()
        swapped = deployment(model=better.id)
        assert swapped["decision"] == DeploymentDecision.PROMOTED
        assert _champion(registry) == _served() == better.id
        server = ModelServer(registry.home, int(served_settings["FLYWHEEL_SERVING__PORT"]))
        assert server.status().pid == pid.pid

        # Rollback restores the previous champion, in the registry and behind the endpoint.
        restored = rollback(reason="the better model misbehaves")
        assert restored["decision"] == DeploymentDecision.ROLLED_BACK
        assert _champion(registry) == _served() == first.id

    with Catalog.open(registry.catalog_path, read_only=True) as catalog:
        records = catalog.models.deployments()
        history = catalog.models.alias_history(ModelAlias.CHAMPION)
    assert [r.decision for r in records] == [
        DeploymentDecision.ROLLED_BACK,
        DeploymentDecision.PROMOTED,
        DeploymentDecision.FAILED,
        DeploymentDecision.REFUSED,
        DeploymentDecision.PROMOTED,
    ]
    # Every record carries its trace: the harness, the reports and the flow run.
    promotion = records[1]
    assert promotion.harness["max_steps"] == 2 and promotion.harness["development_tasks"] == 4
    assert promotion.candidate_report_id == better.feedback_id
    assert promotion.champion_report_id == first.feedback_id
    assert promotion.flow_run_id and promotion.approver == "auto"
    assert [c.model_id for c in history] == [first.id, better.id, first.id]
    assert {c.deployment_id for c in history} == {records[0].id, records[1].id, records[4].id}


def test_the_cli_names_an_unregistered_model_and_lists_the_records(
    prefect_api_url: str, registry: Registry, served_settings: dict[str, str]
) -> None:
    env = command_env(registry.home, prefect_api_url, **served_settings)
    result = subprocess.run(
        [FLYWHEEL, "deploy", "--model", "model-nope"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert result.returncode == 1
    assert "model" in result.stderr and "'model-nope' is not a registered model" in result.stderr

    listed = subprocess.run(
        [FLYWHEEL, "deploy", "list", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=True,
    )
    records = json.loads(listed.stdout)
    with Catalog.open(registry.catalog_path, read_only=True) as catalog:
        assert [r["id"] for r in records] == [r.id for r in catalog.models.deployments()]


def test_a_failed_record_puts_the_old_champion_back_behind_the_endpoint(
    prefect_api_url: str,
    registry: Registry,
    served_settings: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    champion = _champion(registry) or deployment_of(registry, prefect_api_url)
    candidate = register_tiny(registry, "great", overall=0.99, seed=9)

    def disk_full(self: DuckDBModelRegistry, record: object) -> None:
        raise OSError("No space left on device")

    monkeypatch.setattr(DuckDBModelRegistry, "record_deployment", disk_full)
    with prefect_api(prefect_api_url), pytest.raises(OSError, match="No space left"):
        deployment(model=candidate.id)
    assert _champion(registry) == _served() == champion


def deployment_of(registry: Registry, api: str) -> str:
    """A champion, promoted now (when this test runs alone)."""
    model = register_tiny(registry, "alone", overall=0.5, seed=8)
    with prefect_api(api):
        deployment(model=model.id)
    return model.id


def test_the_model_server_command_serves_the_champion(
    registry: Registry, served_settings: dict[str, str], prefect_api_url: str
) -> None:
    champion = _champion(registry) or deployment_of(registry, prefect_api_url)
    env = command_env(registry.home, prefect_api_url, **served_settings)
    run = subprocess.run(
        [FLYWHEEL, "server", "status", "model", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=True,
    )
    assert json.loads(run.stdout)["healthy"] is True
    stopped = subprocess.run([FLYWHEEL, "server", "stop", "model"], env=env, timeout=60, check=True)
    assert stopped.returncode == 0 and _served() is None
    started = subprocess.run(
        [FLYWHEEL, "server", "start", "model"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env | {"OMP_NUM_THREADS": "1"},
        check=False,
    )
    assert started.returncode == 0, started.stderr
    assert f"model 'champion' = {champion}" in started.stdout
    assert _served() == champion


def _paused_deployment(api: str, model_id: str, process: subprocess.Popen[str]) -> FlowRun:
    """The deployment flow run of ``model_id`` once it is paused for a person."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[1][-3000:]
        with prefect_api(api), get_client(sync_client=True) as client:
            runs = client.read_flow_runs(
                flow_filter=FlowFilter(name=FlowFilterName(any_=["deployment"])),
                flow_run_filter=FlowRunFilter(
                    state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.PAUSED]))
                ),
            )
        for run in runs:
            if run.parameters.get("model") == model_id:
                return run
        time.sleep(0.5)
    raise AssertionError("the deployment did not pause for a person within 300 s")


def test_a_person_refuses_a_promotion_the_gate_allows(
    prefect_api_url: str, registry: Registry, served_settings: dict[str, str]
) -> None:
    champion = _champion(registry) or deployment_of(registry, prefect_api_url)
    candidate = register_tiny(registry, "tempting", overall=0.999, seed=10)
    env = command_env(registry.home, prefect_api_url, **served_settings)
    env |= {"FLYWHEEL_APPROVAL__POLL_S": "1"}
    process = subprocess.Popen(
        [FLYWHEEL, "deploy", "--model", candidate.id, "--approval", "person", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        paused = _paused_deployment(prefect_api_url, candidate.id, process)
        assert paused.state is not None
        keys = keyset_from_paused_state(paused.state)
        with prefect_api(prefect_api_url):
            description = cast(str, read_flow_run_input(keys["description"], paused.id))
            resume_flow_run(
                paused.id,
                run_input={"approve": False, "approver": "Grace Hopper", "comment": "not today"},
            )
        out, err = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err[-3000:]
    record = json.loads(out)

    # The form showed the comparison; the refusal is recorded with its author.
    assert "| capability | candidate | champion |" in description and candidate.name in description
    assert record["decision"] == DeploymentDecision.REJECTED
    assert record["approver"] == "Grace Hopper"
    assert any("rejected by Grace Hopper: not today" in r for r in record["reasons"])
    assert _champion(registry) == _served() == champion


def test_a_running_server_follows_the_champion_even_without_serve(
    prefect_api_url: str, registry: Registry, served_settings: dict[str, str]
) -> None:
    _champion(registry) or deployment_of(registry, prefect_api_url)
    if _served() is None:  # this test alone, after a champion was promoted elsewhere
        settings = load_settings()
        ModelServer(settings.home, settings.serving.port, settings.serving).start()
    best = register_tiny(registry, "best", overall=1.0, seed=11)
    with prefect_api(prefect_api_url):
        record = deployment(model=best.id, serve=False)
    assert record["decision"] == DeploymentDecision.PROMOTED
    assert _champion(registry) == _served() == best.id
