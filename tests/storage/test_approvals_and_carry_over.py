"""Dataset approvals (frozen only when approved, the first decision stands) and items
carried over from one round's gate to a later round's."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pytest

from contract import (
    ApprovalDecision,
    CurationRecord,
    DatasetApproval,
    DatasetMember,
    DatasetVersion,
    InvalidInputError,
    MixTarget,
    Review,
    ReviewDecision,
    Routing,
    Split,
    Trajectory,
    content_hash,
)
from curation.balance import dataset_content_hash
from storage import Catalog, UnknownIdError
from storage.migrations import migrate
from tests.storage.builders import ROUND, make_version, write_shards

GATE = "label_studio"
ROUND_B = "round-b"
ROUND_C = "round-c"
TARGET = MixTarget(recovery_share=0.25)
DECIDED_AT = datetime(2026, 11, 30, 14, 5, 6, tzinfo=timezone(timedelta(hours=2)))
CORRECTION = "Open the alarm list before adding the alarm."


def _train(trajectories: Sequence[Trajectory]) -> list[Trajectory]:
    return [t for t in trajectories if t.task.split is Split.TRAIN]


def _by_id(trajectories: Sequence[Trajectory]) -> list[Trajectory]:
    return sorted(trajectories, key=lambda t: t.id)


def reviewed_version(trajectories: Sequence[Trajectory], round_id: str = ROUND) -> DatasetVersion:
    """A version whose first member a person corrected (two masked steps and a note),
    whose second a person approved with one step marked, the rest approved automatically."""
    corrected, marked, *rest = trajectories
    members = [
        DatasetMember(
            trajectory_id=corrected.id,
            task_id=corrected.task.id,
            weight=2.5,
            decision=ReviewDecision.CORRECT,
            human=True,
            masked_steps=(0, 2),
            correction=CORRECTION,
        ),
        DatasetMember(
            trajectory_id=marked.id,
            task_id=marked.task.id,
            weight=1.0,
            decision=ReviewDecision.APPROVE,
            human=True,
            masked_steps=(1,),
        ),
        *(DatasetMember(trajectory_id=t.id, task_id=t.task.id, weight=1.25) for t in rest),
    ]
    members.sort(key=lambda m: m.trajectory_id)
    return DatasetVersion(
        round_id=round_id,
        parent=None,
        content_hash=dataset_content_hash(members),
        members=tuple(members),
        target=TARGET,
        achieved={},
        policies=("scripted@1",),
        human_reviewed=2,
    )


def decision_on(
    version: DatasetVersion,
    decision: ApprovalDecision = ApprovalDecision.APPROVE,
    *,
    approver: str = "ann",
    automatic: bool = False,
    **updates: Any,
) -> DatasetApproval:
    approval = DatasetApproval(
        dataset_id=version.id,
        round_id=version.round_id,
        content_hash=version.content_hash,
        target=version.target,
        decision=decision,
        approver=approver,
        automatic=automatic,
        decided_at=DECIDED_AT,
        comment="looks balanced",
        flow_run_id="flow-run-1",
    )
    return approval.model_copy(update=updates) if updates else approval


def _stored(catalog: Catalog) -> tuple[int, int, int]:
    stats = catalog.stats()
    return stats["dataset_versions"], stats["dataset_members"], stats["dataset_approvals"]


# -- approvals ---------------------------------------------------------------------------


@pytest.mark.parametrize(("approver", "automatic"), [("ann", False), ("auto", True)])
def test_an_approved_version_is_frozen_with_its_members_review_fields(
    ingested: Catalog, round_trajectories: list[Trajectory], approver: str, automatic: bool
) -> None:
    version = reviewed_version(_train(round_trajectories)[:6])
    approval = decision_on(version, approver=approver, automatic=automatic)

    assert ingested.datasets.decide(version, approval) == approval

    assert _stored(ingested) == (1, 6, 1)
    assert ingested.datasets.latest_id() == version.id
    stored = ingested.datasets.get(version.id)
    assert stored == version
    fields = {
        m.trajectory_id: (m.decision, m.human, m.masked_steps, m.correction) for m in stored.members
    }
    corrected, marked, *rest = _train(round_trajectories)[:6]
    assert fields[corrected.id] == (ReviewDecision.CORRECT, True, (0, 2), CORRECTION)
    assert fields[marked.id] == (ReviewDecision.APPROVE, True, (1,), None)
    assert all(fields[t.id] == (ReviewDecision.APPROVE, False, (), None) for t in rest)
    assert ingested.datasets.approval(version.id) == approval
    assert ingested.datasets.round_approval(ROUND) == approval
    assert ingested.datasets.round_approval(ROUND_B) is None

    summary = ingested.datasets.describe(version.id)
    assert summary["approval"] == {
        "decision": "approve",
        "approver": approver,
        "automatic": automatic,
        "decided_at": "2026-11-30T14:05:06+02:00",
        "comment": "looks balanced",
        "flow_run_id": "flow-run-1",
    }
    assert datetime.fromisoformat(summary["approval"]["decided_at"]) == DECIDED_AT
    assert summary["review"] == {
        "corrected": 1,
        "human": 2,
        "with_masked_steps": 2,
        "with_correction": 1,
    }
    assert summary["human_reviewed"] == 2
    assert summary["target"] == TARGET.model_dump(mode="json")
    assert orjson.loads(orjson.dumps(summary)) == summary


def test_a_version_frozen_without_a_decision_has_no_approval_in_its_summary(
    ingested: Catalog, round_trajectories: list[Trajectory]
) -> None:
    version = reviewed_version(_train(round_trajectories)[:3])
    ingested.datasets.freeze(version)
    summary = ingested.datasets.describe(version.id)
    assert summary["approval"] is None
    assert summary["review"] == {
        "corrected": 1,
        "human": 2,
        "with_masked_steps": 2,
        "with_correction": 1,
    }
    assert ingested.datasets.approval(version.id) is None


def test_a_rejected_version_is_not_frozen_but_the_rejection_is_kept(
    ingested: Catalog, round_trajectories: list[Trajectory]
) -> None:
    version = reviewed_version(_train(round_trajectories)[:4])
    rejection = decision_on(version, ApprovalDecision.REJECT, comment="too few recoveries")

    assert ingested.datasets.decide(version, rejection) == rejection

    assert _stored(ingested) == (0, 0, 1)
    with pytest.raises(UnknownIdError, match="unknown dataset id"):
        ingested.datasets.get(version.id)
    with pytest.raises(UnknownIdError, match="unknown dataset id"):
        ingested.datasets.describe(version.id)
    assert ingested.datasets.latest_id() is None
    assert ingested.datasets.summaries() == []
    stored = ingested.datasets.approval(version.id)
    assert stored == rejection
    assert stored is not None and not stored.approved
    assert ingested.datasets.round_approval(ROUND) == rejection
    assert ingested.datasets.approval("ds-nope") is None


def test_the_first_decision_on_a_version_stands(
    ingested: Catalog, round_trajectories: list[Trajectory]
) -> None:
    train = _train(round_trajectories)
    rejected = reviewed_version(train[:4])
    rejection = decision_on(rejected, ApprovalDecision.REJECT)
    ingested.datasets.decide(rejected, rejection)
    later = decision_on(rejected, approver="bob", decided_at=DECIDED_AT + timedelta(hours=1))

    assert ingested.datasets.decide(rejected, later) == rejection
    assert _stored(ingested) == (0, 0, 1)
    assert ingested.datasets.approval(rejected.id) == rejection
    with pytest.raises(UnknownIdError):
        ingested.datasets.get(rejected.id)

    approved = reviewed_version(train[4:9])
    approval = decision_on(approved, approver="carol", automatic=False)
    ingested.datasets.decide(approved, approval)
    before = ingested.datasets.describe(approved.id)
    again = decision_on(approved, ApprovalDecision.REJECT, approver="auto", automatic=True)

    assert ingested.datasets.decide(approved, again) == approval
    assert ingested.datasets.decide(approved, approval) == approval
    assert _stored(ingested) == (1, 5, 2)
    assert ingested.datasets.approval(approved.id) == approval
    assert ingested.datasets.describe(approved.id) == before
    assert ingested.datasets.get(approved.id) == approved


@pytest.mark.parametrize(
    "mismatch",
    [
        {"content_hash": "0" * 20},
        {"dataset_id": "ds-other"},
        {"round_id": ROUND_B},
        {"target": MixTarget()},
    ],
    ids=["content-hash", "dataset-id", "round", "target"],
)
@pytest.mark.parametrize("decision", list(ApprovalDecision))
def test_an_approval_of_other_content_is_refused_and_nothing_is_stored(
    ingested: Catalog,
    round_trajectories: list[Trajectory],
    mismatch: dict[str, Any],
    decision: ApprovalDecision,
) -> None:
    version = reviewed_version(_train(round_trajectories)[:4])
    wrong = decision_on(version, decision, **mismatch)

    with pytest.raises(InvalidInputError, match=r"^approval: ") as raised:
        ingested.datasets.decide(version, wrong)

    assert raised.value.field == "approval"
    assert _stored(ingested) == (0, 0, 0)
    assert ingested.datasets.approval(version.id) is None
    assert ingested.datasets.round_approval(ROUND) is None
    # the refusal left no decision behind: the right one is still the first
    right = decision_on(version, decision)
    assert ingested.datasets.decide(version, right) == right


def test_a_version_with_a_development_member_stores_no_approval(
    ingested: Catalog, round_trajectories: list[Trajectory]
) -> None:
    dev = next(t for t in round_trajectories if t.task.split is Split.DEV)
    version = reviewed_version([*_train(round_trajectories)[:3], dev])

    with pytest.raises(InvalidInputError, match=rf"development tasks.*{dev.id}"):
        ingested.datasets.decide(version, decision_on(version))

    assert _stored(ingested) == (0, 0, 0)
    assert ingested.datasets.approval(version.id) is None
    assert ingested.datasets.round_approval(ROUND) is None
    # no decision stood, so the version can still be rejected
    rejection = decision_on(version, ApprovalDecision.REJECT)
    assert ingested.datasets.decide(version, rejection) == rejection
    assert _stored(ingested) == (0, 0, 1)


def test_the_latest_decision_of_a_round_is_its_approval(
    ingested: Catalog, round_trajectories: list[Trajectory]
) -> None:
    train = _train(round_trajectories)
    first = reviewed_version(train[:4])
    second = reviewed_version(train[4:8])
    rejection = decision_on(first, ApprovalDecision.REJECT)
    approval = decision_on(second, decided_at=DECIDED_AT + timedelta(minutes=5))
    ingested.datasets.decide(second, approval)
    ingested.datasets.decide(first, rejection)

    assert ingested.datasets.round_approval(ROUND) == approval
    assert ingested.datasets.approval(first.id) == rejection


def test_approvals_survive_reopening(tmp_path: Path, round_trajectories: list[Trajectory]) -> None:
    path = tmp_path / "catalog.duckdb"
    train = _train(round_trajectories)
    approved, rejected = reviewed_version(train[:3]), reviewed_version(train[3:6], ROUND_B)
    approval = decision_on(approved)
    rejection = decision_on(rejected, ApprovalDecision.REJECT)
    with Catalog.open(path) as catalog:
        catalog.trajectories.ingest(write_shards(round_trajectories, tmp_path / "shards"))
        catalog.datasets.decide(approved, approval)
        catalog.datasets.decide(rejected, rejection)
    with Catalog.open(path, read_only=True) as reader:
        assert reader.datasets.get(approved.id) == approved
        assert reader.datasets.approval(approved.id) == approval
        assert reader.datasets.round_approval(ROUND_B) == rejection
        described = reader.datasets.describe(approved.id)["approval"]
        assert described is not None and described["approver"] == "ann"


def test_a_version_frozen_before_members_carried_reviews_still_loads(
    tmp_path: Path, round_trajectories: list[Trajectory]
) -> None:
    """A catalog of schema version 2 (members: trajectory, task, weight) is upgraded; its
    versions keep their ids, so they load and can be told apart from reviewed ones."""
    version = make_version(_train(round_trajectories)[:3])
    before_v3 = version.model_dump(mode="json", exclude={"id"})
    before_v3["members"] = [
        {"trajectory_id": m.trajectory_id, "task_id": m.task_id, "weight": m.weight}
        for m in version.members
    ]
    old_id = f"ds-{content_hash(before_v3)}"
    assert version.id == old_id
    explicit = version.model_copy(
        update={
            "members": tuple(
                DatasetMember(
                    trajectory_id=m.trajectory_id,
                    task_id=m.task_id,
                    weight=m.weight,
                    decision=ReviewDecision.APPROVE,
                    human=False,
                    masked_steps=(),
                    correction=None,
                )
                for m in version.members
            ),
            "id": "",
        }
    )
    assert DatasetVersion.model_validate(explicit.model_dump()).id == old_id

    path = tmp_path / "catalog.duckdb"
    record = version.model_dump(mode="json", exclude={"members"})
    with duckdb.connect(str(path)) as con:
        migrate(con, 0, target=2)
        con.execute(
            "INSERT INTO dataset_versions VALUES (?, ?, NULL, ?, 3, 0, ?, now())",
            [old_id, ROUND, version.content_hash, orjson.dumps(record).decode()],
        )
        for i, m in enumerate(version.members):
            con.execute(
                "INSERT INTO dataset_members VALUES (?, ?, ?, ?, ?)",
                [old_id, m.trajectory_id, m.task_id, m.weight, i],
            )

    with Catalog.open(path) as catalog:
        assert catalog.datasets.get(old_id) == version
        assert catalog.datasets.describe(old_id)["review"]["human"] == 0
        assert catalog.datasets.approval(old_id) is None
    reviewed = reviewed_version(_train(round_trajectories)[:3])
    assert reviewed.id != version.id


# -- carried-over items ------------------------------------------------------------------


def curation(t: Trajectory) -> CurationRecord:
    return CurationRecord(
        trajectory_id=t.id,
        task_id=t.task.id,
        round_id=ROUND,
        kept=True,
        supported=True,
        quality=0.6,
        routing=Routing.NEEDS_HUMAN,
        suggested=ReviewDecision.APPROVE,
        reason="a person should look",
    )


@pytest.fixture
def pending(ingested: Catalog, round_trajectories: list[Trajectory]) -> list[Trajectory]:
    """Five trajectories of round A (by id) whose curation is stored, as is the curation
    of three that are not carried over."""
    chosen = _by_id(round_trajectories)[:8]
    ingested.reviews.add_curations([curation(t) for t in chosen])
    return chosen[:5]


def _ids(trajectories: Sequence[Trajectory]) -> list[str]:
    return [t.id for t in trajectories]


def test_carried_items_are_taken_up_by_a_later_round_through_the_same_gate(
    ingested: Catalog, pending: list[Trajectory]
) -> None:
    ids = _ids(pending)
    assert ingested.reviews.carry_over(ROUND, GATE, list(reversed(ids))) == 5
    assert ingested.reviews.carry_over(ROUND, GATE, ids) == 0
    assert ingested.reviews.carry_over(ROUND, GATE, [ids[0], ids[0], ids[3]]) == 0
    assert ingested.stats()["carry_over"] == 5

    carried = ingested.reviews.carried_into(ROUND_B, GATE)
    assert carried.trajectories == pending
    assert carried.curations == [curation(t) for t in pending]
    assert carried.from_round == dict.fromkeys(ids, ROUND)

    for round_id, gate in [(ROUND_B, "auto"), (ROUND, GATE)]:
        nothing = ingested.reviews.carried_into(round_id, gate)
        assert (nothing.trajectories, nothing.curations, nothing.from_round) == ([], [], {})

    assert (
        ingested.reviews.carried_out_of(ROUND)
        == ingested.reviews.carried_out_of(ROUND, open_only=True)
        == 5
    )
    assert ingested.reviews.carried_out_of(ROUND_B) == 0
    assert ingested.reviews.settled_into(ROUND_B) == []


def test_settled_items_stay_with_the_round_that_settled_them(
    ingested: Catalog, pending: list[Trajectory]
) -> None:
    a, b, c, d, e = pending
    ingested.reviews.carry_over(ROUND, GATE, _ids(pending))

    assert ingested.reviews.settle_carry_over(ROUND_B, [b.id, a.id, a.id]) == 2

    assert ingested.reviews.settled_into(ROUND_B) == [a, b]
    assert ingested.reviews.settled_into(ROUND) == []
    assert ingested.reviews.settled_into(ROUND_C) == []
    rerun = ingested.reviews.carried_into(ROUND_B, GATE)
    assert rerun.trajectories == pending
    assert rerun.from_round == dict.fromkeys(_ids(pending), ROUND)
    later = ingested.reviews.carried_into(ROUND_C, GATE)
    assert later.trajectories == [c, d, e]
    assert later.curations == [curation(t) for t in (c, d, e)]
    assert later.from_round == dict.fromkeys(_ids([c, d, e]), ROUND)
    assert ingested.reviews.carried_out_of(ROUND) == 5
    assert ingested.reviews.carried_out_of(ROUND, open_only=True) == 3

    assert ingested.reviews.settle_carry_over(ROUND_B, [a.id, b.id]) == 0
    assert ingested.reviews.settle_carry_over(ROUND_C, [a.id, c.id]) == 1
    assert ingested.reviews.settle_carry_over(ROUND_C, ["traj-never-carried"]) == 0

    assert ingested.reviews.settled_into(ROUND_B) == [a, b]
    assert ingested.reviews.settled_into(ROUND_C) == [c]
    assert ingested.reviews.carried_into(ROUND_B, GATE).trajectories == [a, b, d, e]
    assert ingested.reviews.carried_into(ROUND_C, GATE).trajectories == [c, d, e]
    assert ingested.reviews.carried_into("round-d", GATE).trajectories == [d, e]
    assert ingested.reviews.carried_out_of(ROUND) == 5
    assert ingested.reviews.carried_out_of(ROUND, open_only=True) == 2
    assert ingested.reviews.carry_over(ROUND_B, GATE, [a.id, c.id]) == 0
    assert ingested.reviews.settled_into(ROUND_B) == [a, b]


def test_decisions_made_since_items_were_carried_wait_until_a_round_settles_them(
    ingested: Catalog, pending: list[Trajectory], round_trajectories: list[Trajectory]
) -> None:
    a, b, c, _, _ = pending
    ingested.reviews.carry_over(ROUND, GATE, _ids(pending))
    assert ingested.reviews.decided_since_carried() == 0, "carried, decided by nobody yet"

    def by_person(t: Trajectory) -> Review:
        return Review(
            trajectory_id=t.id,
            round_id=ROUND,
            decision=ReviewDecision.APPROVE,
            reviewer="ann",
            automatic=False,
        )

    never_carried = next(t for t in round_trajectories if t.id not in _ids(pending))
    ingested.reviews.add([by_person(a), by_person(b), by_person(never_carried)])
    assert ingested.reviews.decided_since_carried() == 2
    assert ingested.reviews.decided_since_carried(ROUND) == 2
    assert ingested.reviews.decided_since_carried(ROUND_B) == 0

    ingested.reviews.settle_carry_over(ROUND_B, [a.id])
    assert ingested.reviews.decided_since_carried(ROUND) == 1, "a joined round B's version"
    ingested.reviews.carry_over(ROUND_B, GATE, [c.id])  # already carried by ROUND: no row
    ingested.reviews.add([by_person(c)])
    assert ingested.reviews.decided_since_carried() == 2
    assert ingested.reviews.decided_since_carried(ROUND_B) == 0


def test_reviews_of_trajectories_come_across_rounds_in_recorded_order(
    ingested: Catalog, round_trajectories: list[Trajectory]
) -> None:
    first, second, other = _by_id(round_trajectories)[:3]

    def review(t: Trajectory, round_id: str, decision: ReviewDecision, who: str) -> Review:
        return Review(
            trajectory_id=t.id,
            round_id=round_id,
            decision=decision,
            reviewer=who,
            automatic=who == "auto",
        )

    pending_b = review(second, ROUND_B, ReviewDecision.QUARANTINE, "ann")
    auto_first = review(first, ROUND, ReviewDecision.APPROVE, "auto")
    person_first = review(first, ROUND_C, ReviewDecision.CORRECT, "bob")
    unrelated = review(other, ROUND, ReviewDecision.REJECT, "auto")
    ingested.reviews.add([pending_b])
    ingested.reviews.add([auto_first, unrelated])
    ingested.reviews.add([person_first])

    recorded = ingested.reviews.of_trajectories([first.id, second.id, first.id])
    assert recorded == [pending_b, auto_first, person_first]
    assert ingested.reviews.of_trajectories([first.id]) == [auto_first, person_first]
    assert ingested.reviews.of_trajectories(["traj-unknown"]) == []


def test_an_empty_id_list_works_everywhere(ingested: Catalog, pending: list[Trajectory]) -> None:
    assert ingested.reviews.carry_over(ROUND, GATE, []) == 0
    assert ingested.reviews.settle_carry_over(ROUND_B, []) == 0
    assert ingested.reviews.of_trajectories([]) == []
    assert ingested.reviews.settled_into(ROUND_B) == []
    nothing = ingested.reviews.carried_into(ROUND_B, GATE)
    assert (nothing.trajectories, nothing.curations, nothing.from_round) == ([], [], {})
    assert (
        ingested.reviews.carried_out_of(ROUND)
        == ingested.reviews.carried_out_of(ROUND, open_only=True)
        == 0
    )

    ingested.reviews.carry_over(ROUND, GATE, _ids(pending))
    assert ingested.reviews.settle_carry_over(ROUND_B, []) == 0
    assert ingested.reviews.carried_out_of(ROUND, open_only=True) == 5
    assert ingested.stats()["carry_over"] == 5


def test_carried_items_survive_reopening(
    tmp_path: Path, round_trajectories: list[Trajectory]
) -> None:
    path = tmp_path / "catalog.duckdb"
    chosen = _by_id(round_trajectories)[:3]
    with Catalog.open(path) as catalog:
        catalog.trajectories.ingest(write_shards(round_trajectories, tmp_path / "shards"))
        catalog.reviews.add_curations([curation(t) for t in chosen])
        catalog.reviews.carry_over(ROUND, GATE, _ids(chosen))
        catalog.reviews.settle_carry_over(ROUND_B, [chosen[0].id])
    with Catalog.open(path, read_only=True) as reader:
        assert reader.reviews.settled_into(ROUND_B) == chosen[:1]
        carried = reader.reviews.carried_into(ROUND_C, GATE)
        assert carried.trajectories == chosen[1:]
        assert carried.curations == [curation(t) for t in chosen[1:]]


def test_decided_at_is_stored_as_utc(
    ingested: Catalog, round_trajectories: list[Trajectory]
) -> None:
    """Two rounds decided at the same instant in different zones order by instant."""
    train = _train(round_trajectories)
    early = reviewed_version(train[:3])
    late = reviewed_version(train[3:6])
    # 12:30 in UTC+2 is 10:30 UTC; 11:00 UTC is later although its wall clock is earlier
    first = decision_on(early, decided_at=datetime(2026, 11, 30, 12, 30, tzinfo=DECIDED_AT.tzinfo))
    second = decision_on(late, decided_at=datetime(2026, 11, 30, 11, 0, tzinfo=UTC))
    ingested.datasets.decide(late, second)
    ingested.datasets.decide(early, first)
    assert ingested.datasets.round_approval(ROUND) == second
