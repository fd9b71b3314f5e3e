"""Shared fixtures: a sandbox, trajectories from real scripted episodes, a Prefect server,
a Label Studio server, an Appium server."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator

import pytest
from _pytest.terminal import TerminalReporter
from pydantic import JsonValue

from agents.policies.scripted import FaultConfig, ScriptedPolicy
from agents.runner import run_episode
from contract import Trajectory
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks
from envs.sandbox.templates.strength import strength_table
from flows.servers import (
    LabelStudioAccess,
    free_port,
    http_ok,
    label_studio_server,
    local_prefect_api,
    prefect_server,
)


@pytest.fixture(scope="session")
def sandbox() -> MobileSandbox:
    return MobileSandbox()


@pytest.fixture(scope="session")
def faulty_trajectories(sandbox: MobileSandbox) -> list[Trajectory]:
    """Episodes over every kind of template, most with an injected fault."""
    policy = ScriptedPolicy(FaultConfig(rate=0.8, recovery_rate=0.5))
    return [run_episode(t, sandbox, policy) for t in sample_tasks(240, 11, sandbox)]


@pytest.fixture(scope="session")
def prefect_api_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The API URL of a real Prefect server: ``PREFECT_API_URL`` (as ``make test`` sets it).

    Without it a developer's run starts a private server (each xdist worker its own) and
    stops it at the end; in CI (``CI=true``) a missing server is a failure.
    """
    url = os.environ.get("PREFECT_API_URL")
    if url:
        if not http_ok(url.rstrip("/") + "/health"):
            pytest.fail(f"PREFECT_API_URL={url} does not answer its /health")
        yield url
        return
    if os.environ.get("CI") == "true":
        pytest.fail(
            "PREFECT_API_URL is not set: "
            "run the suite through make test, which starts the Prefect server"
        )
    port = free_port()
    server = prefect_server(tmp_path_factory.mktemp("servers"), port)
    server.start()
    try:
        yield local_prefect_api(port)
    finally:
        _drain_prefect_workers()
        server.stop()


@pytest.fixture(scope="session")
def label_studio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabelStudioAccess]:
    """A real Label Studio server and its API token: ``FLYWHEEL_LABEL_STUDIO__URL`` and
    ``FLYWHEEL_LABEL_STUDIO__TOKEN`` (as ``make test`` sets them).

    Without them a developer's run starts a private server (each xdist worker its own; about
    30 s on a new database) and stops it at the end; in CI (``CI=true``) a missing server is
    a failure.
    """
    url = os.environ.get("FLYWHEEL_LABEL_STUDIO__URL")
    if url:
        token = os.environ.get("FLYWHEEL_LABEL_STUDIO__TOKEN")
        if not token:
            pytest.fail("FLYWHEEL_LABEL_STUDIO__URL is set but FLYWHEEL_LABEL_STUDIO__TOKEN is not")
        if not http_ok(url.rstrip("/") + "/health"):
            pytest.fail(f"FLYWHEEL_LABEL_STUDIO__URL={url} does not answer its /health")
        yield LabelStudioAccess(url.rstrip("/"), token)
        return
    if os.environ.get("CI") == "true":
        pytest.fail(
            "FLYWHEEL_LABEL_STUDIO__URL is not set: "
            "run the suite through make test, which starts the Label Studio server"
        )
    home = tmp_path_factory.mktemp("label-studio")
    server = label_studio_server(home, free_port(), token=secrets.token_hex(20))
    server.start()
    try:
        yield server.access
    finally:
        server.stop()


@pytest.fixture(scope="session")
def appium_url() -> str:
    """The URL of a running Appium server (with the fake driver): ``FLYWHEEL_APPIUM__PORT``
    on 127.0.0.1, as ``scripts/with-servers.sh`` (``make test``) sets it.

    Without one that answers, tests that need it skip; in CI (``CI=true``) they fail.
    """
    port = os.environ.get("FLYWHEEL_APPIUM__PORT")
    url = f"http://127.0.0.1:{port}" if port else None
    if url is not None and http_ok(url + "/status"):
        return url
    problem = (
        f"FLYWHEEL_APPIUM__PORT={port}: no Appium answers {url}/status"
        if url
        else "FLYWHEEL_APPIUM__PORT is not set"
    )
    advice = "run the tests under scripts/with-servers.sh (as make test does), which starts Appium"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{problem}; {advice}")
    pytest.skip(f"{problem}; {advice}")


def _drain_prefect_workers() -> None:
    """Send queued logs and events while the server still listens, not at interpreter exit."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=10)
    EventsWorker.drain_all(timeout=10)


_STRENGTH: list[dict[str, JsonValue]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Collect the verifier-strength figures (xdist sends user properties to the controller)."""
    if report.when != "call":
        return
    for name, value in report.user_properties:
        if name == "verifier_strength" and isinstance(value, str):
            _STRENGTH.append(json.loads(value))


def pytest_terminal_summary(terminalreporter: TerminalReporter) -> None:
    if _STRENGTH:
        terminalreporter.section("verifier strength")
        terminalreporter.write_line(strength_table(_STRENGTH))
