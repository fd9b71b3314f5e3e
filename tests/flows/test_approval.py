"""What a person sees before approving a dataset version, and the unattended approval."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agents.balancer import run_balancer
from contract import (
    ApprovalDecision,
    MixTarget,
    Outcome,
    Review,
    ReviewDecision,
    Split,
    Trajectory,
)
from flows.approval import AUTOMATIC_APPROVER, Proposal, request_approval
from human_gate import final_decisions

TARGET = MixTarget(
    capability={"tool_use": 0.25, "memory": 0.25, "skills": 0.25, "subagent": 0.25},
    recovery_share=0.2,
)


def _review(t: Trajectory, decision: ReviewDecision, **person: object) -> Review:
    return Review.model_validate(
        {
            "trajectory_id": t.id,
            "round_id": "r",
            "decision": decision,
            "reviewer": str(person.get("reviewer", "auto")),
            "automatic": "reviewer" not in person,
            "erroneous_steps": person.get("steps", ()),
            "note": person.get("note"),
        }
    )


@pytest.fixture(scope="module")
def proposal(faulty_trajectories: list[Trajectory]) -> Proposal:
    train = [t for t in faulty_trajectories if t.task.split is Split.TRAIN]
    successes = [t for t in train if t.metadata.outcome is Outcome.SUCCESS]
    runs, unreviewed = successes[:40], successes[40:41]
    fixed, marked, rejected = runs[:3]
    reviews = [_review(t, ReviewDecision.APPROVE) for t in runs] + [
        _review(fixed, ReviewDecision.CORRECT, reviewer="ana", steps=(0,), note="the 9:40"),
        _review(marked, ReviewDecision.APPROVE, reviewer="bo", steps=(1,)),
        _review(rejected, ReviewDecision.REJECT, reviewer="bo"),
    ]
    failures = [t for t in train if t.metadata.outcome is Outcome.FAILURE][:3]
    assert len(failures) == 3
    found = Proposal.of(
        run_balancer(
            "r",
            runs + failures + unreviewed,
            final_decisions(reviews + [_review(t, ReviewDecision.APPROVE) for t in failures]),
            TARGET,
        )
    )
    assert found is not None
    return found


def test_the_proposal_shows_its_composition_and_what_was_left_out(proposal: Proposal) -> None:
    text = proposal.markdown()
    version = proposal.version
    assert f"`{version.id}`" in text and f"`{version.content_hash}`" in text
    assert version.members == 40 - 1, "the approved runs, less the rejected one"
    assert f"**{version.members} members**" in text
    assert "2 decided by a person, 1 corrected, 2 with steps masked out of SFT" in text
    for row in proposal.rows:
        assert f"| {row.dimension} | {row.value} | {row.target:.1%} | {row.achieved:.1%} |" in text
    assert "1 rejected or quarantined at the gate" in text, "the rejected item"
    assert "3 not verified successes" in text, "failures never enter"
    assert "1 without a review (dropped by the curator" in text, "no review stored"


def test_nothing_approved_proposes_nothing(faulty_trajectories: list[Trajectory]) -> None:
    runs = faulty_trajectories[:10]
    rejected = [_review(t, ReviewDecision.REJECT, reviewer="ana") for t in runs]
    assert Proposal.of(run_balancer("r", runs, final_decisions(rejected), TARGET)) is None


def test_unattended_mode_records_an_automatic_approval_of_this_content(
    proposal: Proposal,
) -> None:
    before = datetime.now(UTC)
    approval = request_approval(proposal, "auto", timeout_s=1, poll_s=1, flow_run_id="run-1")
    version = proposal.version
    assert approval.decision is ApprovalDecision.APPROVE and approval.approved
    assert (approval.approver, approval.automatic) == (AUTOMATIC_APPROVER, True)
    assert (approval.dataset_id, approval.content_hash) == (version.id, version.content_hash)
    assert approval.target == version.target and approval.flow_run_id == "run-1"
    assert before <= approval.decided_at <= datetime.now(UTC)
