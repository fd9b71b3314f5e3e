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
from contract import CurationRecord, Routing, Trajectory
from flows.curation_stage import curate_round
from flows.round_stages import gate
from flows.settings import CurationSettings, catalog_path
from human_gate import GateItem, GateResult, GateUnavailableError, Workplace
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
    desk = Workplace("the people's desk", "http://127.0.0.1:9/desk")

    def __init__(self, *, down: bool = False) -> None:
        self.submitted: list[list[str]] = []
        self.collected: list[list[str]] = []
        self.down = down

    def workplace(self, round_id: str) -> Workplace | None:
        if self.down:
            raise GateUnavailableError("the desk did not answer")
        return self.desk if self.submitted else None

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


def _curated_round(home: Path) -> Path:
    synthetic_round(catalog_path(home), ROUND, 400, seed=2)
    curate_round(home, ROUND, CurationSettings(audit_rate=0.2), home / "rounds")
    return home


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _curated_round(tmp_path_factory.mktemp("gate"))


def test_batches_then_only_the_undecided_are_waited_for(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(flows.round_stages, "GATE_BATCH", 10)
    monkeypatch.setattr(flows.round_stages, "PEOPLE_BATCH", 3)
    with Catalog.open(catalog_path(home), read_only=True) as catalog:
        kept = [c for c in catalog.reviews.curations_of_round(ROUND) if c.kept]
    human = sorted(c.trajectory_id for c in kept if c.routing is Routing.NEEDS_HUMAN)
    assert len(human) > 10 and len(human) < len(kept)  # the case this is about
    assert len({c.reason for c in kept if c.routing is not Routing.NEEDS_HUMAN}) > 1
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
    kept_suggestions = DuckDBReviewStore.kept_suggestions

    def kept_in_batches(self: DuckDBReviewStore, *args: Any, **kwargs: Any) -> list[Any]:
        found = kept_suggestions(self, *args, **kwargs)
        batches.append(len(found))
        return found

    records: list[list[str]] = []
    curations_of = DuckDBReviewStore.curations_of

    def records_of(self: DuckDBReviewStore, ids: Sequence[str]) -> list[CurationRecord]:
        records.append(list(ids))
        return curations_of(self, ids)

    monkeypatch.setattr(DuckDBReviewStore, "kept_suggestions", kept_in_batches)
    monkeypatch.setattr(DuckDBReviewStore, "curations_of", records_of)
    monkeypatch.delattr(DuckDBReviewStore, "curations_of_round")  # never the whole round

    gate(home, ROUND, people, wait_s=0.05, poll_s=0.01)

    assert set(read) == set(human)  # no trajectory read for the items no person gets
    assert max(batches) == 10 and sum(batches) == len(kept)  # suggestions: one pass
    # records only of the items people get: 3 at a time, then the undecided once more
    assert all(len(ids) <= 3 for ids in records[:-1])
    assert sorted(i for ids in records[:-1] for i in ids) == human
    assert sorted(records[-1]) == human
    first_pass = people.submitted[:-1]
    assert all(len(batch) <= 3 for batch in first_pass)
    assert sorted(i for batch in first_pass for i in batch) == human
    assert sorted(people.submitted[-1]) == human  # the wait: the undecided alone
    assert all(sorted(batch) == human for batch in people.collected[len(first_pass) :])
    with Catalog.open(catalog_path(home), read_only=True) as catalog:
        reviews = catalog.reviews.of_round(ROUND)
        carried = catalog.reviews.carried_out_of(ROUND)
    assert {r.trajectory_id for r in reviews} == {c.trajectory_id for c in kept} - set(human)
    suggested = {c.trajectory_id: c for c in kept}
    assert all(r == review_of_curation(ROUND, suggested[r.trajectory_id]) for r in reviews)
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


@pytest.mark.parametrize("down", [False, True])
def test_the_gate_says_where_people_decide_what_it_carries_over(
    home: Path, monkeypatch: pytest.MonkeyPatch, down: bool
) -> None:
    monkeypatch.setattr(flows.round_stages, "GATE_BATCH", 50)
    said: list[str] = []

    gate(home, ROUND, PeopleGate(down=down), log=said.append)

    with Catalog.open(catalog_path(home), read_only=True) as catalog:
        carried = catalog.reviews.carried_out_of(ROUND)
    assert carried > 0
    (waiting,) = [line for line in said if "wait for people" in line]
    assert waiting.startswith(f"{carried} item(s) wait for people")
    assert "flywheel gate sync" in waiting and "next round's dataset version" in waiting
    if down:
        assert "the desk did not answer" in waiting
    else:
        assert f"in {PeopleGate.desk.name}: {PeopleGate.desk.url}" in waiting


def test_sync_reads_only_the_undecided_items_a_batch_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cli.gate import undecided_items

    home = _curated_round(tmp_path)  # the module's round is decided by the tests above
    monkeypatch.setattr(flows.round_stages, "GATE_BATCH", 10)
    gate(home, ROUND, PeopleGate(), wait_s=0.0)
    with Catalog.open(catalog_path(home), read_only=True) as catalog:
        kept = [c for c in catalog.reviews.curations_of_round(ROUND) if c.kept]
    human = {c.trajectory_id for c in kept if c.routing is Routing.NEEDS_HUMAN}
    monkeypatch.delattr(DuckDBReviewStore, "curations_of_round")  # never the whole round
    monkeypatch.delattr(DuckDBTrajectoryStore, "of_round")

    with Catalog.open(catalog_path(home), read_only=True) as catalog:
        batches = list(undecided_items(catalog, ROUND))

    assert all(0 < len(batch) <= 10 for batch in batches)
    items = [item for batch in batches for item in batch]
    assert sorted(i.trajectory_id for i in items) == sorted(human)
    assert all(i.trajectory.id == i.curation.trajectory_id for i in items)
