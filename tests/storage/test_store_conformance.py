"""One conformance suite for every implementation of the catalog's stores.

Each implementation is opened by a factory in ``IMPLEMENTATIONS``; the tests reach it only
through the narrow protocols of ``storage.stores``. They hold every implementation to what
the protocols promise: the same methods and parameters, writes that are idempotent by
content-derived ids, reads that give back what was written, unknown ids named in the
error, and a read-only catalog that refuses every write with nothing changed. (The other
modules of ``tests/storage`` test each subject in depth through the ``catalog`` fixture,
which is parametrized over the same factories.)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from contract import (
    ApprovalDecision,
    CurationRecord,
    DatasetApproval,
    DatasetVersion,
    DeploymentDecision,
    DeploymentRecord,
    FeedbackReport,
    InvalidInputError,
    KeptSuggestion,
    ModelAlias,
    ModelRecord,
    RejectedTask,
    RejectionReason,
    Review,
    ReviewDecision,
    Split,
    TrainingMethod,
    Trajectory,
    parse_feedback_report,
)
from storage import (
    BalanceRow,
    Catalog,
    CatalogError,
    DatasetStore,
    FeedbackStore,
    ModelRegistry,
    ReviewStore,
    RoundStore,
    TaskStore,
    TrajectoryStore,
    UnknownIdError,
)
from storage.curation_files import read_curation_file, write_curation_file
from storage.dataset_diff import DatasetDiff
from storage.datasets import DatasetDescription
from storage.stores import GoalSketch
from tests.storage.builders import ROUND, approved_curation, curations_in, make_version
from tests.storage.conftest import IMPLEMENTATIONS

EXAMPLE_REPORT = Path(__file__).resolve().parents[2] / "docs" / "examples" / "feedback-report.json"
LATER = "round-b"
NOPE = "id-nope"
PROTOCOLS: dict[str, type] = {
    "rounds": RoundStore,
    "tasks": TaskStore,
    "trajectories": TrajectoryStore,
    "reviews": ReviewStore,
    "datasets": DatasetStore,
    "feedback": FeedbackStore,
    "models": ModelRegistry,
}


@dataclass(frozen=True)
class World:
    """One of every record, written to a fresh catalog."""

    folder: Path
    shards: Path
    trajectories: list[Trajectory]
    rejection: RejectedTask
    curations: list[CurationRecord]
    curation_file: Path
    """More curations, as a curated partition's file."""
    reviews: list[Review]
    carried: list[str]
    version: DatasetVersion
    proposal: DatasetVersion
    approval: DatasetApproval
    report: FeedbackReport
    model: ModelRecord
    deployment: DeploymentRecord


Write = Callable[[Catalog, World], Any]
WRITES: dict[str, Write] = {
    "rounds.begin": lambda c, w: c.rounds.begin(ROUND, {"seed": 7}).started_at,
    "tasks.add": lambda c, w: c.tasks.add(ROUND, [t.task for t in w.trajectories]),
    "tasks.add_rejections": lambda c, w: c.tasks.add_rejections([w.rejection]),
    "tasks.add_goal_sketches": lambda c, w: c.tasks.add_goal_sketches(
        {t.task.id: GoalSketch([n] * 64, [n]) for n, t in enumerate(w.trajectories)}
    ),
    "trajectories.ingest": lambda c, w: c.trajectories.ingest([w.shards]).trajectories,
    "reviews.add_curations": lambda c, w: c.reviews.add_curations(w.curations),
    "reviews.add_curation_file": lambda c, w: c.reviews.add_curation_file(w.curation_file),
    "reviews.add": lambda c, w: c.reviews.add(w.reviews),
    "reviews.carry_over": lambda c, w: c.reviews.carry_over(ROUND, "people", w.carried),
    "reviews.settle_carry_over": lambda c, w: c.reviews.settle_carry_over(LATER, w.carried[:1]),
    "datasets.freeze": lambda c, w: c.datasets.freeze(w.version),
    "datasets.propose": lambda c, w: c.datasets.propose(w.proposal),
    "datasets.decide": lambda c, w: c.datasets.decide(w.proposal, w.approval).decided_at,
    "feedback.add": lambda c, w: c.feedback.add(w.report),
    "models.register": lambda c, w: c.models.register(w.model, w.report),
    "models.record_deployment": lambda c, w: c.models.record_deployment(w.deployment),
}
"""Every kind of write, in an order that satisfies the references between records."""
NOTHING_NEW = {
    "trajectories.ingest": 0,
    "tasks.add": 0,
    "tasks.add_rejections": 0,
    "tasks.add_goal_sketches": 0,
    "reviews.add_curations": 0,
    "reviews.add_curation_file": 0,
    "reviews.add": 0,
    "reviews.carry_over": 0,
    "reviews.settle_carry_over": 0,
    "datasets.freeze": False,
    "datasets.propose": False,
    "feedback.add": False,
    "models.register": False,
    "models.record_deployment": (),
}
"""What each write returns when it is repeated ("rounds.begin" and "datasets.decide" return
the first call's record instead: checked separately)."""


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def implementation(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def world(
    tmp_path: Path, shard_folder: Path, round_trajectories: list[Trajectory]
) -> Iterator[World]:
    train = sorted(
        (t for t in round_trajectories if t.task.split is Split.TRAIN), key=lambda t: t.id
    )
    version = make_version(train[:6])
    proposal = make_version(train[6:9], round_id=LATER, parent=version.id)
    curation_file = tmp_path / "curations" / "partition-00000.parquet"
    write_curation_file([approved_curation(t) for t in train[8:11]], curation_file)
    model = ModelRecord(
        name="mobile-planner-r1",
        dataset_id=version.id,
        base="tiny",
        method=TrainingMethod.SFT,
        path="/state/models/r1",
        created_at=datetime(2026, 12, 1, 9, 0, tzinfo=UTC),
    )
    yield World(
        folder=tmp_path,
        shards=shard_folder,
        trajectories=round_trajectories,
        rejection=RejectedTask(
            round_id=ROUND,
            fingerprint="fp-1",
            template="send_message",
            reason=RejectionReason.DUPLICATE,
            detail="seen before",
        ),
        curations=[approved_curation(t) for t in train[:8]],
        curation_file=curation_file,
        reviews=[_review(t, n) for n, t in enumerate(train[:5])],
        carried=[t.id for t in train[9:12]],
        version=version,
        proposal=proposal,
        approval=DatasetApproval(
            dataset_id=proposal.id,
            round_id=LATER,
            content_hash=proposal.content_hash,
            target=proposal.target,
            decision=ApprovalDecision.APPROVE,
            approver="ann",
            automatic=False,
            decided_at=datetime(2026, 12, 2, 10, 0, tzinfo=UTC),
        ),
        report=parse_feedback_report(EXAMPLE_REPORT.read_bytes()),
        model=model,
        deployment=_deployment(model),
    )


@pytest.fixture
def written(implementation: str, world: World) -> Iterator[Catalog]:
    """A catalog of ``implementation`` holding one of every record of ``world``."""
    with IMPLEMENTATIONS[implementation](world.folder / "state", read_only=False) as catalog:
        for write in WRITES.values():
            write(catalog, world)
        yield catalog


@pytest.mark.parametrize("store", sorted(PROTOCOLS))
def test_each_store_offers_every_method_of_its_protocol_with_the_same_parameters(
    implementation: str, tmp_path: Path, store: str
) -> None:
    protocol = PROTOCOLS[store]
    with IMPLEMENTATIONS[implementation](tmp_path, read_only=False) as catalog:
        found = getattr(catalog, store)
    methods = [n for n, v in vars(protocol).items() if inspect.isfunction(v) and n[0] != "_"]
    assert methods
    for name in methods:
        wanted = inspect.signature(getattr(protocol, name))
        offered = inspect.signature(getattr(type(found), name))
        assert list(offered.parameters.values()) == list(wanted.parameters.values()), name
        assert offered.return_annotation == wanted.return_annotation, name


def test_every_write_again_changes_nothing(written: Catalog, world: World) -> None:
    before = written.stats()
    assert all(before[table] > 0 for table in ("tasks", "curations", "deployments"))
    first_round = written.rounds.get(ROUND)
    first_decision = written.datasets.approval(world.proposal.id)

    for name, write in WRITES.items():
        again = write(written, world)
        if name in NOTHING_NEW:
            assert again == NOTHING_NEW[name], name
    assert written.stats() == before
    assert written.rounds.get(ROUND) == first_round
    assert written.datasets.approval(world.proposal.id) == first_decision


def test_reads_give_back_what_was_written(written: Catalog, world: World) -> None:
    of_round = sorted(world.trajectories, key=lambda t: t.id)
    train = [t for t in of_round if t.task.split is Split.TRAIN]

    assert written.tasks.of_round(ROUND) == sorted(
        {t.task.id: t.task for t in of_round}.values(), key=lambda t: t.id
    )
    assert written.tasks.rejections_of_round(ROUND) == [world.rejection]
    assert written.tasks.ids_of_round(ROUND) == [t.id for t in written.tasks.of_round(ROUND)]
    assert written.tasks.ids_except_round(ROUND) == []
    assert written.tasks.ids_except_round(LATER) == written.tasks.ids_of_round(ROUND)
    tasks = [of_round[4].task, of_round[1].task, of_round[4].task]
    assert written.tasks.by_ids([t.id for t in tasks]) == tasks
    assert written.trajectories.of_round(ROUND) == of_round
    assert written.trajectories.count(ROUND) == len(of_round)
    picked = [of_round[3].id, of_round[0].id, of_round[3].id]
    assert [t.id for t in written.trajectories.by_ids(picked)] == picked
    assert written.reviews.curations_of_round(ROUND) == sorted(
        [*world.curations, *curations_in(read_curation_file(world.curation_file))],
        key=lambda c: c.trajectory_id,
    )
    curations = written.reviews.curations_of_round(ROUND)
    kept = [c for c in curations if c.kept]
    first = written.reviews.kept_suggestions(ROUND, limit=4)
    rest = written.reviews.kept_suggestions(ROUND, after=first[-1].trajectory_id, limit=100)
    assert [*first, *rest] == [
        KeptSuggestion(c.trajectory_id, c.routing, c.suggested, c.reason) for c in kept
    ]
    assert len(first) == 4
    assert written.reviews.kept_suggestions(ROUND, after=rest[-1].trajectory_id, limit=4) == []
    assert written.reviews.kept_suggestions(LATER, limit=4) == []
    asked = [kept[2].trajectory_id, NOPE, curations[0].trajectory_id, kept[2].trajectory_id]
    assert written.reviews.curations_of(asked) == sorted(
        [kept[2], curations[0]], key=lambda c: c.trajectory_id
    )
    assert written.reviews.curations_of([]) == []
    assert written.reviews.of_round(ROUND) == world.reviews  # recorded order
    reviewed = sorted({r.trajectory_id for r in world.reviews})
    assert list(written.reviews.final_reviews([NOPE, *reversed(reviewed)])) == reviewed
    assert written.reviews.settled_ids(LATER) == world.carried[:1]
    assert written.reviews.carried_out_of(ROUND, open_only=True) == len(world.carried) - 1
    assert written.datasets.get(world.version.id) == world.version
    assert written.datasets.get(world.proposal.id) == world.proposal  # approved: frozen
    assert written.datasets.proposal(world.proposal.id) == world.proposal
    assert written.datasets.member_ids(world.version.id) == [
        m.trajectory_id for m in world.version.members
    ]
    assert written.datasets.latest_id() == world.proposal.id
    assert [s.id for s in written.datasets.summaries()] == [world.version.id, world.proposal.id]
    assert written.feedback.get(world.report.id) == world.report
    assert written.feedback.latest() == world.report
    assert written.models.get(world.model.id) == world.model
    assert written.models.every() == [world.model]
    assert written.models.aliases() == {ModelAlias.CHAMPION: world.model}
    assert written.models.deployment(world.deployment.id) == world.deployment
    assert written.models.latest_deployment() == world.deployment
    assert [row.trajectory_id for row in written.trajectories.balance_rows(picked)] == [
        of_round[3].id,
        of_round[0].id,
    ]
    assert written.trajectories.member_tasks([train[0].id])[0].task_id == train[0].task.id


def test_typed_descriptions_have_exactly_their_declared_keys(
    written: Catalog, world: World
) -> None:
    described = written.datasets.describe(world.proposal.id)
    diff = written.datasets.diff(world.version.id, world.proposal.id)
    balance = written.trajectories.balance_rows([world.version.members[0].trajectory_id])

    assert set(described) == set(DatasetDescription.__annotations__)
    assert set(diff) == set(DatasetDiff.__annotations__)
    assert type(balance[0]) is BalanceRow
    assert diff["lineage"]["b_descends_from_a"] is True
    assert diff["members"]["added"] == sorted(m.trajectory_id for m in world.proposal.members)


LOOKUPS: dict[str, Callable[[Catalog], Any]] = {
    "tasks.get": lambda c: c.tasks.get(NOPE),
    "tasks.by_ids": lambda c: c.tasks.by_ids([c.tasks.ids_of_round(ROUND)[0], NOPE]),
    "trajectories.get": lambda c: c.trajectories.get(NOPE),
    "trajectories.by_ids": lambda c: c.trajectories.by_ids([NOPE]),
    "trajectories.member_tasks": lambda c: c.trajectories.member_tasks([NOPE]),
    "trajectories.curation_columns": lambda c: c.trajectories.curation_columns([NOPE]),
    "rounds.set_stage": lambda c: c.rounds.set_stage(NOPE, "curate"),
    "datasets.get": lambda c: c.datasets.get(NOPE),
    "datasets.describe": lambda c: c.datasets.describe(NOPE),
    "datasets.proposal": lambda c: c.datasets.proposal(NOPE),
    "datasets.member_ids": lambda c: c.datasets.member_ids(NOPE),
    "feedback.get": lambda c: c.feedback.get(NOPE),
    "models.get": lambda c: c.models.get(NOPE),
}


@pytest.mark.parametrize("lookup", sorted(LOOKUPS))
def test_an_unknown_id_is_named_in_the_error(written: Catalog, lookup: str) -> None:
    with pytest.raises(UnknownIdError, match=NOPE):
        LOOKUPS[lookup](written)


def test_absent_things_read_as_none_or_empty(implementation: str, tmp_path: Path) -> None:
    with IMPLEMENTATIONS[implementation](tmp_path, read_only=False) as empty:
        assert empty.rounds.get(ROUND) is None
        assert empty.rounds.every() == []
        assert empty.datasets.latest_id() is None
        assert empty.feedback.latest() is None
        assert empty.models.latest() is None
        assert empty.models.alias(ModelAlias.CHAMPION) is None
        assert empty.models.latest_deployment() is None
        assert empty.trajectories.by_ids([]) == []
        assert empty.tasks.by_ids([]) == []
        assert empty.tasks.ids_of_round(ROUND) == []
        assert empty.trajectories.balance_rows([]) == []
        assert empty.reviews.final_reviews(["traj-nope"]) == {}
        with pytest.raises(InvalidInputError, match="deployment_id"):
            empty.models.deployment("dep-nope")


def test_a_read_only_catalog_refuses_every_write_and_keeps_what_it_holds(
    implementation: str, written: Catalog, world: World
) -> None:
    before = written.stats()
    written.close()
    with IMPLEMENTATIONS[implementation](world.folder / "state", read_only=True) as reader:
        for name, write in WRITES.items():
            with pytest.raises(CatalogError, match="read-only"):
                write(reader, world)
                pytest.fail(f"{name} wrote to a read-only catalog")
        assert reader.stats() == before


def _review(trajectory: Trajectory, n: int) -> Review:
    return Review(
        trajectory_id=trajectory.id,
        round_id=ROUND,
        decision=ReviewDecision.APPROVE if n % 2 else ReviewDecision.REJECT,
        reviewer="auto",
        automatic=True,
    )


def _deployment(model: ModelRecord) -> DeploymentRecord:
    return DeploymentRecord(
        decision=DeploymentDecision.PROMOTED,
        candidate_id=model.id,
        champion_id=None,
        served_id=model.id,
        reasons=("promoted: no champion yet",),
        overall_gain=None,
        rule={"min_overall_gain": 0.0, "max_capability_drop": 0.05},
        harness={"max_steps": 15, "samples": 2, "backend": {"kind": "sandbox", "seed": 7}},
        endpoint="http://127.0.0.1:8000/v1",
        flow_run_id="flow-run-1",
        created_at=datetime(2026, 12, 2, 9, 0, tzinfo=UTC),
    )
