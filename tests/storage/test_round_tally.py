"""A round's summary, gate counts and the reviews that count, made by the catalog,
against the same made from the records with ``final_decisions`` (the rule a gate
applies)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from contract import (
    Capability,
    DropReason,
    FinalReview,
    Outcome,
    Review,
    ReviewDecision,
    Split,
    Trajectory,
)
from contract.curation import APPROVING, CONSENSUS_REVIEWER_PREFIX
from human_gate import final_decisions
from storage import Catalog
from storage.round_facts import CapabilityTally, RoundTally
from tests.storage.builders import ROUND, approved_curation, make_version

EARLIER = "round-earlier"


def _oracle(
    catalog: Catalog, round_id: str, carried_in: list[str], dataset_id: str | None
) -> RoundTally:
    """The counts as the summary made them from records."""
    kept = {c.trajectory_id for c in catalog.reviews.curations_of_round(round_id) if c.kept}
    reviews = catalog.reviews.of_round(round_id) + catalog.reviews.of_trajectories(carried_in)
    decisions = {t: r for t, r in final_decisions(reviews).items() if t in kept}
    approved = {t for t, r in decisions.items() if r.decision in APPROVING}
    carried = final_decisions(r for r in reviews if r.trajectory_id not in kept)
    episodes = catalog.trajectories.episode_facts(round_id)
    tasks = catalog.tasks.capabilities_of_round(round_id)
    members = (
        {m.trajectory_id for m in catalog.datasets.get(dataset_id).members} if dataset_id else set()
    )
    task_count = Counter(c for capabilities in tasks for c in capabilities)
    capabilities = {}
    for capability in Capability:
        mine = [e for e in episodes if capability.value in e.capabilities]
        if mine or task_count[capability.value]:
            capabilities[capability.value] = CapabilityTally(
                tasks=task_count[capability.value],
                trajectories=len(mine),
                successes=sum(e.outcome == Outcome.SUCCESS.value for e in mine),
                approved=sum(e.id in approved for e in mine),
                in_dataset=sum(e.id in members for e in mine),
            )
    return RoundTally(
        constructed=len(tasks),
        rejected_tasks=len(catalog.tasks.rejections_of_round(round_id)),
        collected=len(episodes),
        backend_errors=sum(e.outcome == Outcome.BACKEND_ERROR.value for e in episodes),
        curated=len(kept),
        approved=len(approved),
        rejected=len(decisions) - len(approved),
        pending=len(kept) - len(decisions),
        carried_in_approved=sum(r.decision in APPROVING for r in carried.values()),
        in_dataset=len(members),
        capabilities=capabilities,
    )


def _review(trajectory: str, round_id: str, kind: str, decision: ReviewDecision, n: int) -> Review:
    reviewer = {"auto": "auto", "person": f"annotator-{n % 3}"}.get(
        kind, f"{CONSENSUS_REVIEWER_PREFIX}majority"
    )
    return Review(
        trajectory_id=trajectory,
        round_id=round_id,
        decision=decision,
        reviewer=reviewer,
        automatic=kind == "auto",
        reason=f"review {n}",
    )


def _reviewed_round(
    catalog: Catalog, trajectories: list[Trajectory], seed: int
) -> tuple[list[str], str]:
    """Curations (two thirds kept), reviews of every kind in shuffled batches (some in an
    earlier round, of the items carried in), a frozen version; returns the carried-in ids
    and the version's id."""
    rng = random.Random(seed)
    ids = sorted({t.id for t in trajectories})
    dropped = set(rng.sample(ids, len(ids) // 3))
    catalog.reviews.add_curations(
        [
            approved_curation(t).model_copy(
                update={"kept": False, "drop_reason": DropReason.DUPLICATE}
            )
            if t.id in dropped
            else approved_curation(t)
            for t in {t.id: t for t in trajectories}.values()
        ]
    )
    carried_in = sorted(rng.sample(sorted(dropped), 4))
    reviews = []
    for n in range(3 * len(ids)):
        trajectory = rng.choice(ids)
        round_id = EARLIER if trajectory in carried_in and rng.random() < 0.5 else ROUND
        kind = rng.choice(["auto", "auto", "person", "consensus"])
        reviews.append(_review(trajectory, round_id, kind, rng.choice(list(ReviewDecision)), n))
    for start in range(0, len(reviews), 7):
        catalog.reviews.add(reviews[start : start + 7])
    trainable = [t for t in trajectories if t.task.split is not Split.DEV]
    version = make_version(rng.sample(trainable, len(trainable) // 2))
    catalog.datasets.freeze(version)
    return carried_in, version.id


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_tally_counts_what_the_records_count(
    ingested: Catalog, round_trajectories: list[Trajectory], seed: int
) -> None:
    carried_in, dataset_id = _reviewed_round(ingested, round_trajectories, seed)

    tally = ingested.rounds.tally(ROUND, carried_in, dataset_id)

    assert tally == _oracle(ingested, ROUND, carried_in, dataset_id)
    assert tally.approved and tally.rejected and tally.carried_in_approved
    assert tally.curated == tally.approved + tally.rejected + tally.pending


@pytest.mark.parametrize("seed", [6, 7])
def test_the_reviews_that_count_are_those_the_records_give(
    ingested: Catalog, round_trajectories: list[Trajectory], seed: int
) -> None:
    _reviewed_round(ingested, round_trajectories, seed)
    ids = sorted({t.id for t in round_trajectories})
    marked = [
        Review(
            trajectory_id=t,
            round_id=ROUND,
            decision=ReviewDecision.CORRECT,
            reviewer=f"{CONSENSUS_REVIEWER_PREFIX}majority",
            automatic=False,
            erroneous_steps=(3, 1),
            note=f"fix {n}",
        )
        for n, t in enumerate(ids[::5])
    ]
    ingested.reviews.add(marked)

    counted = ingested.reviews.final_reviews([*reversed(ids), "traj-unknown", ids[0]])

    records = final_decisions(ingested.reviews.of_trajectories(ids))
    assert counted == {
        t: FinalReview(t, r.decision, r.reviewer, r.automatic, r.reason, r.erroneous_steps, r.note)
        for t, r in records.items()
    }
    assert list(counted) == sorted(records)
    assert {counted[r.trajectory_id] for r in marked} == {
        FinalReview(r.trajectory_id, r.decision, r.reviewer, False, "", (3, 1), r.note)
        for r in marked
    }
    assert ingested.reviews.final_reviews([]) == {}


@pytest.mark.parametrize("seed", [4, 5])
def test_the_gate_counts_are_what_the_records_count(
    ingested: Catalog, round_trajectories: list[Trajectory], seed: int
) -> None:
    _reviewed_round(ingested, round_trajectories, seed)
    kept = {c.trajectory_id for c in ingested.reviews.curations_of_round(ROUND) if c.kept}
    final = {
        t: r for t, r in final_decisions(ingested.reviews.of_round(ROUND)).items() if t in kept
    }

    counts = ingested.rounds.gate_counts(ROUND)

    assert counts.kept == len(kept) and counts.undecided == len(kept) - len(final)
    assert counts.decisions == {
        d.value: sum(r.decision is d for r in final.values()) for d in ReviewDecision
    }
    assert counts.human == sum(not r.automatic for r in final.values()) > 0
    assert ingested.rounds.gate_counts("round-none") == (0, dict.fromkeys(counts.decisions, 0), 0)


def test_the_review_that_counts_is_a_consensus_then_a_person_then_the_latest(
    ingested: Catalog, round_trajectories: list[Trajectory]
) -> None:
    first, second, third = sorted({t.id for t in round_trajectories})[:3]
    ingested.reviews.add_curations(
        [approved_curation(t) for t in round_trajectories if t.id in {first, second, third}]
    )
    reject, approve = ReviewDecision.REJECT, ReviewDecision.APPROVE
    for review in [
        _review(first, ROUND, "person", reject, 0),
        _review(first, ROUND, "auto", approve, 1),
        _review(second, ROUND, "consensus", approve, 2),
        _review(second, ROUND, "person", reject, 3),
        _review(third, ROUND, "person", approve, 4),
        _review(third, ROUND, "person", reject, 5),
    ]:
        ingested.reviews.add([review])

    tally = ingested.rounds.tally(ROUND, [], None)

    assert (tally.curated, tally.approved, tally.rejected, tally.pending) == (3, 1, 2, 0)
    assert tally == _oracle(ingested, ROUND, [], None)
    gated = ingested.rounds.gate_counts(ROUND)
    assert (gated.decisions["approve"], gated.decisions["reject"], gated.human) == (1, 2, 3)


def test_a_round_without_records_counts_nothing(catalog: Catalog) -> None:
    tally = catalog.rounds.tally("round-none", ["traj-elsewhere"], "ds-none")
    assert tally == RoundTally(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, {})
