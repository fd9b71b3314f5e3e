"""Label Studio stops and starts again while a round waits on it (issue 4).

The gate waits with backoff while the server is down, the round resumes by itself when it
is back, no annotation is lost and none is stored twice. The test restarts a real server,
so it runs alone (``restarts_servers``): ``make test`` runs it after the parallel suite.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from label_studio_sdk import LabelStudio

from contract import Review, ReviewDecision
from curation.balance import trainable
from flows.servers import LabelStudioAccess, free_port, http_ok, label_studio_server
from flows.settings import catalog_path
from human_gate import final_decisions, is_consensus
from human_gate.label_studio import RejectReason
from human_gate.label_studio.labeling import OBJECT_NAME, REJECT_REASON, VERDICT
from storage import Catalog
from tests.flows.commands import FLYWHEEL, command_env, flywheel_json

# What ``flows.gates.sync_until`` logs: after a sync that left items pending, and when a
# sync found the gate unavailable.
WAITING = re.compile(r"item\(s\) wait for a person")
UNAVAILABLE = re.compile(r"the gate is unavailable")
ANNOTATION = re.compile(r"^label-studio annotation #(\d+) ")
DOWN_POLLS = 2  # syncs the round must fail while the server is down
DEADLINE_S = 600.0  # for each condition polled; only reached when something is wrong


class RestartableLabelStudio:
    """A real Label Studio that a test may stop and start again on its port and database."""

    def __init__(
        self, access: LabelStudioAccess, stop: Callable[[], None], start: Callable[[], None]
    ) -> None:
        self.access = access
        self._stop = stop
        self._start = start

    @property
    def health_url(self) -> str:
        return self.access.url + "/health"

    def stop(self) -> None:
        """Stop the server for real: afterwards it does not answer."""
        self._stop()
        assert not http_ok(self.health_url), "Label Studio still answers after its stop"

    def start(self) -> None:
        """Start the server again (a no-op when it runs): afterwards it answers."""
        self._start()
        assert http_ok(self.health_url), "Label Studio does not answer after its start"


@pytest.fixture
def restartable_label_studio(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[RestartableLabelStudio]:
    """The shared server of ``scripts/with-servers.sh`` (restarted through ``flywheel
    server``), else a private one; in CI (``CI=true``) a missing shared server fails.

    The server runs again after the test, also when the test failed while it was down.
    """
    url = os.environ.get("FLYWHEEL_LABEL_STUDIO__URL")
    if url:
        server = _shared_server(url.rstrip("/"))
    elif os.environ.get("CI") == "true":
        pytest.fail(
            "FLYWHEEL_LABEL_STUDIO__URL is not set: "
            "run the suite through make test, which starts the Label Studio server"
        )
    else:
        private = label_studio_server(
            tmp_path_factory.mktemp("label-studio"), free_port(), token=secrets.token_hex(20)
        )
        private.start()

        def stop() -> None:
            assert private.stop(), "the private Label Studio was not running"

        def start() -> None:
            private.start()

        server = RestartableLabelStudio(private.access, stop, start)
    try:
        yield server
    finally:
        if url:
            server.start()
        else:
            private.stop()


def _shared_server(url: str) -> RestartableLabelStudio:
    """The server at ``url``, which ``with-servers.sh`` started under ``$FLYWHEEL_HOME``."""
    token = os.environ.get("FLYWHEEL_LABEL_STUDIO__TOKEN")
    home = os.environ.get("FLYWHEEL_HOME")
    port = urlsplit(url).port
    if not token or not home or port is None:
        pytest.fail(
            f"cannot restart the Label Studio at {url}: FLYWHEEL_LABEL_STUDIO__TOKEN, "
            "FLYWHEEL_HOME and a port in the URL are needed (scripts/with-servers.sh sets "
            "them); unset FLYWHEEL_LABEL_STUDIO__URL to use a private server"
        )
    # The token comes from the environment; the URL would only name the server to use.
    env = {k: v for k, v in os.environ.items() if k != "FLYWHEEL_LABEL_STUDIO__URL"}

    def server(command: str, *options: str) -> str:
        argv = [FLYWHEEL, "server", command, "label-studio", "--home", home, "--port", str(port)]
        result = subprocess.run(
            [*argv, *options], env=env, capture_output=True, text=True, timeout=300, check=False
        )
        assert result.returncode == 0, f"flywheel server {command}: {result.stderr[-3000:]}"
        return result.stdout

    status = json.loads(server("status", "--json"))
    if not (status["running"] and status["healthy"] and status["url"] == url):
        pytest.fail(f"no Label Studio of $FLYWHEEL_HOME={home} answers at {url}: {status}")

    def stop() -> None:
        assert server("stop").startswith("stopped label-studio"), "it was not running"

    def start() -> None:
        server("start")

    return RestartableLabelStudio(LabelStudioAccess(url, token), stop, start)


@pytest.mark.slow
@pytest.mark.restarts_servers
def test_a_waiting_round_survives_a_label_studio_restart(
    prefect_api_url: str, restartable_label_studio: RestartableLabelStudio, tmp_path: Path
) -> None:
    label_studio = restartable_label_studio
    home = tmp_path / "home"
    prefix = f"restart-{uuid.uuid4().hex[:8]}"
    settings = {
        "FLYWHEEL_CURATION__AUDIT_RATE": "1.0",  # every kept item goes to a person
        "FLYWHEEL_GATE__PROJECT_PREFIX": prefix,
        "FLYWHEEL_GATE__WAIT_S": "300",  # only reached if the round never resumes
        "FLYWHEEL_GATE__POLL_S": "1",
        "FLYWHEEL_GATE__MAX_POLL_S": "2",
        "FLYWHEEL_LABEL_STUDIO__URL": label_studio.access.url,
        "FLYWHEEL_LABEL_STUDIO__TOKEN": label_studio.access.token,
    }
    client = LabelStudio(  # type: ignore[no-untyped-call]
        base_url=label_studio.access.url, api_key=label_studio.access.token
    )
    log, output = tmp_path / "round.log", tmp_path / "round.json"
    argv = [FLYWHEEL, "round", "--gate", "label-studio", "--tasks", "10", "--json"]
    with output.open("w") as stdout, log.open("w") as stderr:
        process = subprocess.Popen(
            argv, stdout=stdout, stderr=stderr, env=command_env(home, prefect_api_url, **settings)
        )
    try:
        round_ = _Round(process, log)
        round_.until(lambda: round_.logged(WAITING) > 0, "the round waiting for people")
        items = _items(home, client, prefix)
        assert len(items.trainable) >= 2, "the round needs two successes to approve and reject"
        approved, rejected = items.trainable[:2]
        annotations = {
            approved: _annotate(client, items.tasks[approved], ReviewDecision.APPROVE),
            rejected: _annotate(client, items.tasks[rejected], ReviewDecision.REJECT),
        }
        round_.until(
            lambda: {approved, rejected} <= _decided(home, items.round_id),
            "the round storing the first two decisions",
        )

        unavailable = round_.logged(UNAVAILABLE)
        label_studio.stop()
        round_.until(
            lambda: round_.logged(UNAVAILABLE) >= unavailable + DOWN_POLLS,
            f"{DOWN_POLLS} syncs of the round failing while Label Studio is down",
        )
        assert process.poll() is None, "the round still waits"
        label_studio.start()

        for trajectory_id in sorted(items.tasks.keys() - annotations.keys()):
            annotations[trajectory_id] = _annotate(
                client, items.tasks[trajectory_id], ReviewDecision.APPROVE
            )
        assert round_.finish() == 0, round_.tail()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()

    reviews = _check_outcome(home, json.loads(output.read_text()), items, annotations, rejected)
    # Syncing again finds the same annotations: nothing changes.
    status = flywheel_json(home, prefect_api_url, "gate", "status", **settings)
    assert flywheel_json(home, prefect_api_url, "gate", "sync", **settings) == status
    with Catalog.open(catalog_path(home), read_only=True) as catalog:
        assert catalog.reviews.of_round(items.round_id) == reviews


@dataclass(frozen=True)
class _Items:
    """The round's items in Label Studio."""

    round_id: str
    tasks: dict[str, int]  # task id by trajectory id, one per kept item
    trainable: list[str]  # kept successes: an approval puts them in the dataset


def _items(home: Path, client: LabelStudio, prefix: str) -> _Items:
    """The round's kept items, each of which has one task in the round's project."""
    with Catalog.open(catalog_path(home), read_only=True) as catalog:
        (info,) = catalog.rounds.every()
        kept = {c.trajectory_id for c in catalog.reviews.curations_of_round(info.id) if c.kept}
        trajectories = catalog.trajectories.of_round(info.id)
    title = f"{prefix} {info.id}"
    listed: list[Any] = list(client.projects.list(title=title))
    (project,) = [p for p in listed if p.title == title]
    found: list[Any] = list(client.tasks.list(project=project.id, fields="all"))
    tasks = {str(t.data["trajectory_id"]): int(t.id) for t in found}
    assert len(tasks) == len(found) and tasks.keys() == kept, "one task per kept item"
    successes, _ = trainable(t for t in trajectories if t.id in kept)
    return _Items(info.id, tasks, [c.trajectory_id for c in successes])


def _check_outcome(
    home: Path,
    out: dict[str, Any],
    items: _Items,
    annotations: dict[str, int],
    rejected: str,
) -> list[Review]:
    """The round decided every item once, by its annotation; the round's reviews."""
    counts, kept = out["counts"], items.tasks.keys()
    assert counts["curated"] == len(kept) and counts["pending"] == 0
    assert (counts["approved"], counts["rejected"]) == (len(kept) - 1, 1)
    with Catalog.open(catalog_path(home), read_only=True) as catalog:
        reviews = catalog.reviews.of_round(items.round_id)
        dataset = catalog.datasets.get(out["dataset_version"])
    # Every annotation stored exactly once, one consensus review per item, nothing else.
    stored = Counter(
        int(m.group(1))
        for r in reviews
        if not r.automatic and not is_consensus(r) and (m := ANNOTATION.match(r.reason))
    )
    assert stored == Counter(annotations.values())
    assert Counter(r.trajectory_id for r in reviews if is_consensus(r)) == Counter(kept)
    assert len(reviews) == 2 * len(kept) == len({r.id for r in reviews})
    decisions = {t: r.decision for t, r in final_decisions(reviews).items()}
    assert decisions == {
        t: ReviewDecision.REJECT if t == rejected else ReviewDecision.APPROVE for t in kept
    }
    assert {m.trajectory_id for m in dataset.members} == set(items.trainable) - {rejected}
    return reviews


class _Round:
    """The round's process and its log, polled until a condition holds."""

    def __init__(self, process: subprocess.Popen[bytes], log: Path) -> None:
        self.process = process
        self.log = log

    def logged(self, pattern: re.Pattern[str]) -> int:
        """How many lines of the round's log match ``pattern`` so far."""
        return sum(1 for line in self.log.read_text().splitlines() if pattern.search(line))

    def tail(self) -> str:
        return "round log:\n" + self.log.read_text()[-4000:]

    def until(self, condition: Callable[[], bool], what: str) -> None:
        """Poll ``condition`` while the round runs; fail if the round ends first."""
        deadline = time.monotonic() + DEADLINE_S
        while not condition():
            assert self.process.poll() is None, f"the round ended before {what}; {self.tail()}"
            assert time.monotonic() < deadline, f"no {what} within {DEADLINE_S} s; {self.tail()}"
            time.sleep(0.5)

    def finish(self) -> int:
        """The round's exit code, once it ends by itself."""
        try:
            return self.process.wait(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the round did not end within {DEADLINE_S} s; {self.tail()}")


def _annotate(client: LabelStudio, task_id: int, decision: ReviewDecision) -> int:
    """Annotate one task as the admin; the annotation's id."""
    regions = [_choices(VERDICT, decision.value)]
    if decision is ReviewDecision.REJECT:
        regions.append(_choices(REJECT_REASON, RejectReason.LOW_QUALITY.value))
    annotation = client.annotations.create(id=task_id, result=regions)
    assert annotation.id is not None
    return int(annotation.id)


def _choices(control: str, value: str) -> dict[str, Any]:
    region = {"from_name": control, "to_name": OBJECT_NAME, "type": "choices"}
    return region | {"value": {"choices": [value]}}


def _decided(home: Path, round_id: str) -> set[str]:
    """The trajectories whose consensus review the round has stored so far."""
    with Catalog.open(catalog_path(home), read_only=True) as catalog:
        reviews = catalog.reviews.of_round(round_id)
    return {r.trajectory_id for r in reviews if is_consensus(r)}
