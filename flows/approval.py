"""Approving a proposed dataset version before it is frozen for training.

In ``auto`` mode the approval is recorded as automatic. In ``person`` mode the round pauses
(``pause_flow_run``) and the Prefect UI shows the proposal's composition above a typed
form; whoever resumes the run approves or rejects the version under their name. Either
way the decision, who made it and when are stored with the version.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from prefect.exceptions import FlowPauseTimeout
from prefect.flow_runs import pause_flow_run
from prefect.input import RunInput
from pydantic import Field

from agents.balancer import (
    DROPPED_NOT_APPROVED,
    DROPPED_NOW_FAILING,
    DROPPED_UNREVIEWED,
    BalancerState,
)
from contract import (
    ApprovalDecision,
    DatasetApproval,
    DatasetVersion,
    FlywheelError,
    MixTarget,
)
from curation.balance import DROPPED_DEV, DROPPED_NOT_SUCCESS, MixRow, Shortfall
from flows.settings import ApprovalMode

AUTOMATIC_APPROVER = "auto"


class ApprovalForm(RunInput):
    """The form in the Prefect UI: approve or reject the proposed dataset version."""

    approve: bool = Field(description="freeze this version for training (untick to reject)")
    approver: str = Field(pattern=r"\S", max_length=200, description="your name")
    comment: str = Field(default="", max_length=2000, description="why, for the team")


@dataclass(frozen=True)
class VersionOutline:
    """What the approval and a person read of a proposed version, without its members,
    so that it is small whatever the version's size: the version itself waits in the
    catalog under ``id`` (``DatasetStore.proposal``)."""

    id: str
    round_id: str
    parent: str | None
    content_hash: str
    target: MixTarget
    members: int
    lightest: float
    heaviest: float
    """The smallest and the largest member weight."""
    by_person: int
    corrected: int
    masked: int
    """Members with steps masked out of SFT."""

    @classmethod
    def of(cls, version: DatasetVersion) -> VersionOutline:
        members = version.members
        return cls(
            id=version.id,
            round_id=version.round_id,
            parent=version.parent,
            content_hash=version.content_hash,
            target=version.target,
            members=len(members),
            lightest=min(m.weight for m in members),
            heaviest=max(m.weight for m in members),
            by_person=sum(m.human for m in members),
            corrected=sum(m.correction is not None for m in members),
            masked=sum(bool(m.masked_steps) for m in members),
        )


@dataclass(frozen=True)
class Proposal:
    """A dataset version the balancer proposes, outlined, with what a person needs to
    judge it."""

    version: VersionOutline
    rows: tuple[MixRow, ...]
    shortfalls: tuple[Shortfall, ...]
    dropped: dict[str, int]
    rationale: str | None = None

    @classmethod
    def of(cls, state: BalancerState) -> Proposal | None:
        """The proposal in the balancer's final state; None when it proposes nothing."""
        version = state["version"]
        if version is None:
            return None
        return cls(
            version=VersionOutline.of(version),
            rows=tuple(state["report"]),
            shortfalls=tuple(state["shortfalls"]),
            dropped=dict(state["dropped"]),
            rationale=state.get("rationale"),
        )

    def markdown(self) -> str:
        """The composition, achieved against target, and what was left out."""
        version = self.version
        lines = [
            f"## Proposed dataset version `{version.id}`",
            "",
            f"Round `{version.round_id}`, parent `{version.parent or 'none'}`, "
            f"content hash `{version.content_hash}`.",
            "",
            f"- **{version.members} members**, weights "
            f"{version.lightest:.2f} to {version.heaviest:.2f}",
            f"- {version.by_person} decided by a person, {version.corrected} corrected, "
            f"{version.masked} with steps masked out of SFT",
            "",
            "| dimension | value | target | achieved | gap |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {r.dimension} | {r.value} | {r.target:.1%} | {r.achieved:.1%} | {r.gap:+.1%} |"
            for r in self.rows
        ]
        if self.shortfalls:
            lines += [
                "",
                "No candidate for: "
                + ", ".join(
                    f"{s.dimension}={s.value} ({s.requested:.0%} requested)"
                    for s in self.shortfalls
                )
                + ".",
            ]
        left_out = ", ".join(
            f"{n} {LEFT_OUT.get(reason, reason)}" for reason, n in sorted(self.dropped.items()) if n
        )
        lines += ["", f"Left out: {left_out or 'nothing'}."]
        if self.rationale:
            lines += ["", f"Balancer's note: {self.rationale}"]
        return "\n".join(lines)


LEFT_OUT = {
    DROPPED_UNREVIEWED: "without a review (dropped by the curator: backend errors, "
    "duplicates, malformed; or still with a person)",
    DROPPED_NOT_APPROVED: "rejected or quarantined at the gate",
    DROPPED_NOW_FAILING: "failed by today's verifier",
    DROPPED_DEV: "development tasks",
    DROPPED_NOT_SUCCESS: "not verified successes",
}
"""What each reason the balancer leaves an item out for says to a person."""


def automatic_approval(
    version: DatasetVersion | VersionOutline, flow_run_id: str | None
) -> DatasetApproval:
    """The approval the unattended mode records."""
    return _approval(
        version,
        ApprovalDecision.APPROVE,
        AUTOMATIC_APPROVER,
        automatic=True,
        comment="unattended: approval.mode is auto",
        flow_run_id=flow_run_id,
    )


def ask_a_person(
    proposal: Proposal, *, timeout_s: float, poll_s: float, flow_run_id: str | None
) -> DatasetApproval:
    """Pause the running flow until someone answers the form in the Prefect UI."""
    form = ApprovalForm.with_initial_data(
        description=proposal.markdown()
        + "\n\nApprove to freeze this version for training, or untick to reject it.",
        approve=True,
    )
    try:
        answer = pause_flow_run(
            wait_for_input=form,
            timeout=max(1, round(timeout_s)),
            poll_interval=max(1, round(poll_s)),
            key=f"approve-{proposal.version.id}",
        )
    except (FlowPauseTimeout, RuntimeError) as exc:  # timed out, or could not pause
        raise FlywheelError(
            f"dataset version {proposal.version.id} was not approved or rejected within "
            f"{timeout_s:.0f} s ({type(exc).__name__}): nothing was frozen; rerun the round "
            "to ask again"
        ) from exc
    decision = ApprovalDecision.APPROVE if answer.approve else ApprovalDecision.REJECT
    return _approval(
        proposal.version,
        decision,
        answer.approver.strip(),
        automatic=False,
        comment=answer.comment,
        flow_run_id=flow_run_id,
    )


def request_approval(
    proposal: Proposal,
    mode: ApprovalMode,
    *,
    timeout_s: float,
    poll_s: float,
    flow_run_id: str | None,
) -> DatasetApproval:
    """The decision on ``proposal`` in ``mode``."""
    if mode == "auto":
        return automatic_approval(proposal.version, flow_run_id)
    return ask_a_person(proposal, timeout_s=timeout_s, poll_s=poll_s, flow_run_id=flow_run_id)


def _approval(
    version: DatasetVersion | VersionOutline,
    decision: ApprovalDecision,
    approver: str,
    *,
    automatic: bool,
    comment: str,
    flow_run_id: str | None,
) -> DatasetApproval:
    return DatasetApproval(
        dataset_id=version.id,
        round_id=version.round_id,
        content_hash=version.content_hash,
        target=version.target,
        decision=decision,
        approver=approver,
        automatic=automatic,
        decided_at=datetime.now(UTC),
        comment=comment,
        flow_run_id=flow_run_id,
    )
