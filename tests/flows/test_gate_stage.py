"""The gate stage gives the curator's suggestion to the kept items routed to no person
without reading their trajectories, reads the items for people from the catalog a batch
at a time, sends each batch once without waiting, then waits only for the items people
still have."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import flows.round_stages
from bench.synthetic import synthetic_round
from contract import Routing, Trajectory
from flows.curation_stage import curate_round
from flows.round_stages import gate
from flows.settings import CurationSettings, catalog_path
from human_gate import GateItem, GateResult
from human_gate.auto import AutoGate, review_of_curation
from storage import Catalog
from storage.review_store import DuckDBReviewStore
from storage.trajectory_store import DuckDBTrajectoryStore

ROUND = "round-gate"


class PeopleGate:
    """A fake of Label Studio: the curator's suggestion stands for items routed to no
    person; people never answer the others (they stay pending)."""

    name = "people"
    asks_people = True

    def __init__(self) -> None:
        self.submitted: list[list[str]] = []
        self.collected: list[list[str]] = []

    def submit(self, round_id: str, items: Sequence[GateItem]) -> None:
        assert all(i.trajectory.id == i.curation.trajectory_id for i in items)
        self.submitted.append([i.trajectory_id for i in items])

    def collect(self, round_id: str, items: Sequence[GateItem]) -> GateResult:
        self.collected.append([i.trajectory_id for i in items])
        human = [i for i in items if i.curation.routing is Routing.NEEDS_HUMAN]
        decided = [i for i in items if i.curation.routing is not Routing.NEEDS_HUMAN]
        return GateResult(
            reviews=tuple(review_of_curation(round_id, i.curation) for i in decided),
            pending=tuple(i.trajectory_id for i in human),
        )


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("gate")
    synthetic_round(catalog_path(home), ROUND, 400, seed=2)
    curate_round(home, ROUND, CurationSettings(audit_rate=0.2), home / "rounds")
    return home


def test_batches_then_only_the_undecided_are_waited_for(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(flows.round_stages, "GATE_BATCH", 10)
    with Catalog.open(catalog_path(home), read_only=True) as catalog:
        kept = [c for c in catalog.reviews.curations_of_round(ROUND) if c.kept]
    human = sorted(c.trajectory_id for c in kept if c.routing is Routing.NEEDS_HUMAN)
    assert len(human) > 10 and len(human) < len(kept)  # the case this is about
    people = PeopleGate()
    read: list[str] = []
    by_ids = DuckDBTrajectoryStore.by_ids

    def reading(
        self: DuckDBTrajectoryStore, ids: Sequence[str], **kwargs: bool
    ) -> list[Trajectory]:
        read.extend(ids)
        return by_ids(self, ids, **kwargs)

    monkeypatch.setattr(DuckDBTrajectoryStore, "by_ids", reading)
    batches: list[int] = []
    kept_curations = DuckDBReviewStore.kept_curations

    def kept_in_batches(self: DuckDBReviewStore, *args: Any, **kwargs: Any) -> list[Any]:
        found = kept_curations(self, *args, **kwargs)
        batches.append(len(found))
        return found

    monkeypatch.setattr(DuckDBReviewStore, "kept_curations", kept_in_batches)
    monkeypatch.delattr(DuckDBReviewStore, "curations_of_round")  # never the whole round

    gate(home, ROUND, people, wait_s=0.05, poll_s=0.01)

    assert set(read) == set(human)  # no trajectory read for the items no person gets
    assert max(batches) == 10 and sum(batches) == 2 * len(kept)  # the pass, then the wait
    first_pass = people.submitted[:-1]
    assert all(len(batch) <= 10 for batch in first_pass)
    assert sorted(i for batch in first_pass for i in batch) == human
    assert sorted(people.submitted[-1]) == human  # the wait: the undecided alone
    assert all(sorted(batch) == human for batch in people.collected[len(first_pass) :])
    with Catalog.open(catalog_path(home), read_only=True) as catalog:
        reviews = catalog.reviews.of_round(ROUND)
        carried = catalog.reviews.carried_out_of(ROUND)
    assert {r.trajectory_id for r in reviews} == {c.trajectory_id for c in kept} - set(human)
    suggested = {c.trajectory_id: c.suggested for c in kept}
    assert all(r.automatic and r.decision == suggested[r.trajectory_id] for r in reviews)
    assert carried == len(human)  # undecided: carried over, never approved


def test_a_gate_that_asks_no_people_decides_every_item_without_reading_trajectories(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_reading(*args: object, **kwargs: object) -> list[Trajectory]:
        raise AssertionError("the gate read trajectories that nobody is shown")

    monkeypatch.setattr(DuckDBTrajectoryStore, "by_ids", no_reading)
    monkeypatch.setattr(flows.round_stages, "GATE_BATCH", 7)

    gate(home, ROUND, AutoGate())

    with Catalog.open(catalog_path(home), read_only=True) as catalog:
        kept = [c for c in catalog.reviews.curations_of_round(ROUND) if c.kept]
        reviews = catalog.reviews.of_round(ROUND)
    assert any(c.routing is Routing.NEEDS_HUMAN for c in kept)
    assert {review_of_curation(ROUND, c) for c in kept} <= set(reviews)
