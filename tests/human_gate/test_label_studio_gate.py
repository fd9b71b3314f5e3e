"""The Label Studio gate against a real Label Studio server (fixture ``label_studio``).

Each test uses its own round id (so its own project) and its own annotators, so tests
can share one server and run in parallel.
"""

from __future__ import annotations

import http.server
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from label_studio_sdk import ImportApiRequest, LabelStudio

from agents.curator import curate
from agents.policies.scripted import FaultConfig, ScriptedPolicy
from agents.runner import run_episode
from contract import RetryPolicy, Review, ReviewDecision, Routing
from curation.routing import CuratorConfig
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks
from flows.servers import LabelStudioAccess, free_port
from human_gate import (
    GateError,
    GateItem,
    GateUnavailableError,
    HumanGate,
    auto_review,
    final_decisions,
)
from human_gate.label_studio.gate import LabelStudioGate, LabelStudioGateConfig
from human_gate.label_studio.labeling import LABEL_CONFIG, VERDICT, RejectReason
from human_gate.label_studio.view import task_data
from storage.catalog import Catalog
from tests.human_gate.annotations import new_annotator, project_of, result, tasks_by_trajectory

pytestmark = pytest.mark.slow

APPROVE = ReviewDecision.APPROVE
REJECT = ReviewDecision.REJECT
QUARANTINE = ReviewDecision.QUARANTINE
FAST = LabelStudioGateConfig(retry=RetryPolicy(attempts=3, backoff_s=0.01, max_backoff_s=0.04))


# -- fixtures and helpers ----------------------------------------------------------------


@pytest.fixture
def round_id() -> str:
    return f"gate-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def client(label_studio: LabelStudioAccess) -> LabelStudio:
    url, token = label_studio
    return LabelStudio(base_url=url, api_key=token)  # type: ignore[no-untyped-call]


@pytest.fixture
def make_gate(label_studio: LabelStudioAccess) -> Callable[..., LabelStudioGate]:
    def make(**config: Any) -> LabelStudioGate:
        url, token = label_studio
        return LabelStudioGate.connect(url, token, LabelStudioGateConfig(**config))

    return make


def gate_items(
    sandbox: MobileSandbox, round_id: str, n: int = 8, automatic: int = 2
) -> list[GateItem]:
    """Real episodes, curated with every kept item routed to a person, except the first
    ``automatic`` ones, which are turned back into automatic decisions."""
    policy = ScriptedPolicy(FaultConfig(rate=0.5))
    trajectories = [
        run_episode(t, sandbox, policy, round_id=round_id) for t in sample_tasks(n, 7, sandbox)
    ]
    records = curate(trajectories, round_id, CuratorConfig(audit_rate=1.0))
    by_id = {t.id: t for t in trajectories}
    items = [GateItem(by_id[r.trajectory_id], r) for r in records if r.kept]
    assert all(i.curation.routing is Routing.NEEDS_HUMAN for i in items)
    for k in range(automatic):
        routing = (
            Routing.AUTO_REJECT if items[k].curation.suggested is REJECT else Routing.AUTO_APPROVE
        )
        items[k] = GateItem(
            items[k].trajectory, items[k].curation.model_copy(update={"routing": routing})
        )
    return items


def by_reviewer(reviews: tuple[Review, ...], trajectory_id: str) -> dict[str, Review]:
    return {r.reviewer: r for r in reviews if r.trajectory_id == trajectory_id}


# -- submit ------------------------------------------------------------------------------


def test_the_gate_is_a_human_gate(make_gate: Callable[..., LabelStudioGate]) -> None:
    gate: HumanGate = make_gate()
    assert gate.name == "label-studio"


def test_submit_imports_each_human_item_once_with_the_curators_prediction(
    sandbox: MobileSandbox,
    label_studio: LabelStudioAccess,
    client: LabelStudio,
    make_gate: Callable[..., LabelStudioGate],
    round_id: str,
) -> None:
    items = gate_items(sandbox, round_id)
    human = {i.trajectory_id: i for i in items[2:]}
    gate = make_gate(import_batch=4, page_size=5)

    gate.submit(round_id, items)
    gate.submit(round_id, items)
    make_gate().submit(round_id, items[:4])

    (project,) = project_of(client, f"flywheel {round_id}")
    assert gate.project_id(round_id) == project
    where = gate.workplace(round_id)
    assert where is not None and f"'flywheel {round_id}'" in where.name
    assert where.url == f"{gate.url.rstrip('/')}/projects/{project}/data"
    views: list[Any] = list(client.views.list(project=project))
    (view,) = [v for v in views if v.data.get("title") == "To review"]
    assert view.data["ordering"] == ["tasks:data.quality"], "the most doubtful first"
    hidden = set(view.data["hiddenColumns"]["explore"])
    assert {"tasks:data.html", "tasks:data.step_options"} <= hidden
    shown = {f"tasks:data.{f}" for f in ("goal", "suggested", "reason", "routing", "outcome")}
    assert not shown & hidden
    url, token = label_studio
    columns = httpx.get(
        f"{url}/api/dm/columns",
        params={"project": project},
        headers={"Authorization": f"Token {token}"},
    ).json()["columns"]
    own = {f"tasks:{c['id']}" for c in columns if c.get("parent") is None} - {"tasks:data"}
    assert own - hidden == {
        "tasks:id",
        "tasks:completed_at",
        "tasks:total_annotations",
        "tasks:annotators",
    }, "Label Studio's bookkeeping columns push the data columns off the screen"
    tasks = tasks_by_trajectory(client, project)
    assert len(list(client.tasks.list(project=project))) == len(human)
    assert set(tasks) == set(human)
    for trajectory_id, task in tasks.items():
        item = human[trajectory_id]
        assert task.data["round_id"] == round_id
        assert task.data["steps"] == len(item.trajectory.steps)
        (pred,) = task.predictions
        assert pred.model_version == "curator-1"
        assert pred.score == pytest.approx(item.curation.quality)
        verdict = next(r for r in pred.result if r["from_name"] == VERDICT)
        assert verdict["value"]["choices"] == [item.curation.suggested.value]


def test_submit_repairs_what_a_rerun_request_left_behind(
    sandbox: MobileSandbox,
    client: LabelStudio,
    make_gate: Callable[..., LabelStudioGate],
    round_id: str,
) -> None:
    # Label Studio on SQLite re-runs requests that met a locked database: a project
    # created twice, a task imported twice or without its prediction.
    items = gate_items(sandbox, round_id, n=6, automatic=0)
    gate = make_gate()
    gate.submit(round_id, items[:3])
    title = f"flywheel {round_id}"
    (project,) = project_of(client, title)
    client.projects.create(title=title, label_config=LABEL_CONFIG)
    original = tasks_by_trajectory(client, project)[items[0].trajectory_id].id

    def import_bare(item: GateItem) -> int:
        data = {"data": task_data(item, round_id)}
        imported = client.projects.import_tasks(
            id=project, request=cast("list[ImportApiRequest]", [data]), return_task_ids=True
        )
        # The typed response has no task_ids; the server sends them when asked.
        (task,) = getattr(imported, "task_ids")  # noqa: B009
        return int(task)

    import_bare(items[0])
    import_bare(items[3])
    annotated = import_bare(items[1])  # annotated: it stays, the unannotated one goes
    ana_id, _ = new_annotator(client, "ana")
    client.annotations.create(id=annotated, result=result(APPROVE), completed_by=ana_id)

    gate.submit(round_id, items[:4])

    assert project_of(client, title) == [project]
    tasks: list[Any] = list(client.tasks.list(project=project, fields="all"))
    assert Counter(t.data["trajectory_id"] for t in tasks) == Counter(
        i.trajectory_id for i in items[:4]
    )
    assert {original, annotated} <= {t.id for t in tasks}
    assert all(len(t.predictions) == 1 for t in tasks)
    assert gate.collect(round_id, items[:4]).pending == tuple(
        i.trajectory_id for i in items[:4] if i is not items[1]
    )


def test_nothing_for_a_person_creates_no_project(
    sandbox: MobileSandbox,
    client: LabelStudio,
    make_gate: Callable[..., LabelStudioGate],
    round_id: str,
) -> None:
    items = gate_items(sandbox, round_id, n=3, automatic=3)
    gate = make_gate()
    gate.submit(round_id, items[:0])
    gate.submit(round_id, items)
    assert project_of(client, f"flywheel {round_id}") == []
    assert gate.project_id(round_id) is None
    assert gate.workplace(round_id) is None
    result = gate.collect(round_id, items)
    assert result.reviews == tuple(auto_review(round_id, i) for i in items)
    assert result.pending == ()


def test_collect_before_anyone_annotates_leaves_human_items_pending(
    sandbox: MobileSandbox, make_gate: Callable[..., LabelStudioGate], round_id: str
) -> None:
    items = gate_items(sandbox, round_id)
    gate = make_gate()
    assert gate.collect(round_id, items).pending == tuple(i.trajectory_id for i in items[2:])
    gate.submit(round_id, items)
    result = gate.collect(round_id, items)
    assert result.reviews == tuple(auto_review(round_id, i) for i in items[:2])
    assert result.pending == tuple(i.trajectory_id for i in items[2:])


# -- annotations, consensus and sync ---------------------------------------------------------


@dataclass
class Annotated:
    """A round whose items two annotators have annotated (``min_annotations=2``)."""

    round_id: str
    items: list[GateItem]
    gate: LabelStudioGate
    ana: str
    bo: str
    agreed: str
    """Both approve."""
    rejected: str
    """Both reject, marking different steps."""
    split: str
    """Ana approves, Bo rejects (annotation ``bo_split``)."""
    half: str
    """Ana approves; Bo's annotation has no verdict."""
    bo_split: int

    @property
    def human(self) -> list[str]:
        return [i.trajectory_id for i in self.items[2:]]


@pytest.fixture
def annotated(
    sandbox: MobileSandbox,
    client: LabelStudio,
    make_gate: Callable[..., LabelStudioGate],
    round_id: str,
) -> Annotated:
    items = gate_items(sandbox, round_id)
    gate = make_gate(min_annotations=2, page_size=4)
    gate.submit(round_id, items)
    (project,) = project_of(client, f"flywheel {round_id}")
    tasks = tasks_by_trajectory(client, project)
    ana_id, ana = new_annotator(client, "ana")
    bo_id, bo = new_annotator(client, "bo")
    rejected = next(i.trajectory_id for i in items[2:] if len(i.trajectory.steps) >= 2)
    agreed, split, half, *_ = (i.trajectory_id for i in items[2:] if i.trajectory_id != rejected)

    def annotate(trajectory_id: str, user: int, regions: list[dict[str, Any]]) -> int:
        created = client.annotations.create(
            id=tasks[trajectory_id].id, result=regions, completed_by=user
        )
        assert created.id is not None
        return int(created.id)

    annotate(agreed, ana_id, result(APPROVE))
    annotate(agreed, bo_id, result(APPROVE))
    annotate(rejected, ana_id, result(REJECT, (0, 1), reason=RejectReason.WRONG_OUTCOME))
    annotate(rejected, bo_id, result(REJECT, (1,), "loops", RejectReason.LOW_QUALITY))
    annotate(split, ana_id, result(APPROVE))
    bo_split = annotate(split, bo_id, result(REJECT, (0,), reason=RejectReason.UNSAFE))
    annotate(half, ana_id, result(APPROVE))
    annotate(half, bo_id, result(None))
    return Annotated(round_id, items, gate, ana, bo, agreed, rejected, split, half, bo_split)


CONSENSUS = "consensus:majority"


def test_annotations_become_reviews_and_a_consensus(annotated: Annotated) -> None:
    a = annotated
    result = a.gate.collect(a.round_id, a.items)

    assert result.reviews[:2] == tuple(auto_review(a.round_id, i) for i in a.items[:2])
    assert result.pending == tuple(t for t in a.human if t not in {a.agreed, a.rejected, a.split})
    assert a.half in result.pending
    assert not by_reviewer(result.reviews, a.half)

    reviews = by_reviewer(result.reviews, a.agreed)
    assert set(reviews) == {a.ana, a.bo, CONSENSUS}
    assert {r.decision for r in reviews.values()} == {APPROVE}
    assert not any(r.automatic for r in reviews.values())

    reviews = by_reviewer(result.reviews, a.rejected)
    assert (reviews[a.ana].erroneous_steps, reviews[a.bo].erroneous_steps) == ((0, 1), (1,))
    assert (reviews[a.ana].note, reviews[a.bo].note) == ("wrong_outcome", "low_quality: loops")
    assert reviews[CONSENSUS].decision is REJECT
    assert reviews[CONSENSUS].erroneous_steps == (0, 1)
    assert reviews[CONSENSUS].note == "low_quality: loops; wrong_outcome"

    reviews = by_reviewer(result.reviews, a.split)
    assert (reviews[a.ana].decision, reviews[a.bo].decision) == (APPROVE, REJECT)
    assert reviews[CONSENSUS].decision is QUARANTINE
    assert reviews[CONSENSUS].erroneous_steps == (0,)

    final = final_decisions(result.reviews)
    assert {t: (final[t].reviewer, final[t].decision) for t in (a.agreed, a.rejected, a.split)} == {
        a.agreed: (CONSENSUS, APPROVE),
        a.rejected: (CONSENSUS, REJECT),
        a.split: (CONSENSUS, QUARANTINE),
    }


def test_the_agreement_of_the_annotators_is_reported(annotated: Annotated) -> None:
    a = annotated
    report = a.gate.agreement(a.round_id)

    assert {i.item: (i.decision, i.agreeing) for i in report.items} == {
        a.agreed: (APPROVE, 1.0),
        a.rejected: (REJECT, 1.0),
        a.split: (QUARANTINE, 0.0),
        a.half: (None, None),
    }
    assert report.multiply_annotated == 3
    assert report.percent_agreement == pytest.approx(2 / 3)
    (pair,) = report.pairs
    assert pair.annotators == tuple(sorted((a.ana, a.bo)))
    assert pair.items == 3
    assert pair.percent_agreement == pytest.approx(2 / 3)


def test_sync_is_idempotent_and_an_edit_updates_the_review(
    annotated: Annotated, client: LabelStudio, tmp_path: Path
) -> None:
    a = annotated
    first = a.gate.collect(a.round_id, a.items)
    assert a.gate.collect(a.round_id, a.items) == first

    client.annotations.update(a.bo_split, result=result(APPROVE))
    second = a.gate.collect(a.round_id, a.items)

    changed = set(second.reviews) - set(first.reviews)
    assert {(r.trajectory_id, r.reviewer) for r in changed} == {
        (a.split, a.bo),
        (a.split, CONSENSUS),
    }
    assert by_reviewer(second.reviews, a.split)[CONSENSUS].decision is APPROVE
    assert by_reviewer(second.reviews, a.split)[a.ana] == by_reviewer(first.reviews, a.split)[a.ana]

    with Catalog.open(tmp_path / "catalog.duckdb") as catalog:
        catalog.reviews.add(first.reviews)
        assert catalog.reviews.add(second.reviews) == 2
        assert catalog.reviews.add(a.gate.collect(a.round_id, a.items).reviews) == 0
        final = final_decisions(catalog.reviews.of_round(a.round_id))
    assert (final[a.split].reviewer, final[a.split].decision) == (CONSENSUS, APPROVE)


def test_an_annotators_latest_annotation_counts(
    sandbox: MobileSandbox,
    client: LabelStudio,
    make_gate: Callable[..., LabelStudioGate],
    round_id: str,
) -> None:
    items = gate_items(sandbox, round_id, n=6, automatic=0)
    item = next(i for i in items if len(i.trajectory.steps) >= 3)
    gate = make_gate(rule="unanimous")
    gate.submit(round_id, items)
    (project,) = project_of(client, f"flywheel {round_id}")
    task = tasks_by_trajectory(client, project)[item.trajectory_id]
    ana_id, ana = new_annotator(client, "ana")

    client.annotations.create(id=task.id, result=result(REJECT), completed_by=ana_id)
    client.annotations.create(
        id=task.id, result=result(ReviewDecision.CORRECT, (2,), "42"), completed_by=ana_id
    )
    reviews = by_reviewer(gate.collect(round_id, items).reviews, item.trajectory_id)

    assert set(reviews) == {ana, "consensus:unanimous"}
    assert {r.decision for r in reviews.values()} == {ReviewDecision.CORRECT}
    assert {r.note for r in reviews.values()} == {"42"}
    assert {r.erroneous_steps for r in reviews.values()} == {(2,)}


# -- errors --------------------------------------------------------------------------------


def test_an_unreachable_server_is_retried_then_named_without_the_token(
    sandbox: MobileSandbox,
) -> None:
    url, token = f"http://127.0.0.1:{free_port()}", "f" * 40
    waits: list[float] = []
    config = LabelStudioGateConfig(retry=RetryPolicy(attempts=4, backoff_s=0.5, max_backoff_s=1.0))
    gate = LabelStudioGate.connect(url, token, config)
    gate = LabelStudioGate(gate.client, url, config, sleep=waits.append)
    items = gate_items(sandbox, "unreachable", n=2, automatic=0)

    with pytest.raises(GateUnavailableError) as caught:
        gate.submit("unreachable", items)

    assert url in str(caught.value)
    assert token not in str(caught.value)
    assert caught.value.__cause__ is None
    assert "ConnectError" in str(caught.value)
    assert waits == [0.5, 1.0, 1.0]


class _Failing(http.server.BaseHTTPRequestHandler):
    """Answers every request with 503, like a server that is restarting."""

    requests = 0

    def do_GET(self) -> None:
        type(self).requests += 1
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Set-Cookie", "sessionid=secret-session")
        self.end_headers()
        self.wfile.write(b'{"detail": "restarting"}')

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def failing_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Failing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_5xx_answer_is_retried_then_reported(failing_server: str) -> None:
    _Failing.requests = 0
    gate = LabelStudioGate.connect(failing_server, "t" * 40, FAST)
    with pytest.raises(GateUnavailableError, match="HTTP 503") as caught:
        gate.agreement("any")
    assert _Failing.requests == 3
    assert failing_server in str(caught.value)
    assert "secret-session" not in str(caught.value)


def test_a_wrong_token_is_refused_at_once(label_studio: LabelStudioAccess) -> None:
    url, _ = label_studio
    waits: list[float] = []
    gate = LabelStudioGate.connect(url, "0" * 40)
    gate = LabelStudioGate(gate.client, url, sleep=waits.append)
    with pytest.raises(GateError, match="HTTP 401") as caught:
        gate.agreement("any")
    assert not isinstance(caught.value, GateUnavailableError)
    assert "0" * 40 not in str(caught.value)
    assert waits == []


def test_config_is_checked() -> None:
    with pytest.raises(ValueError, match="overlap"):
        LabelStudioGateConfig(min_annotations=3, overlap=2)
    with pytest.raises(ValueError, match="project_prefix"):
        LabelStudioGateConfig(project_prefix=" ")
