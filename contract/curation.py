"""What curation, the human gate and the balancer decide about tasks and trajectories."""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar, NamedTuple

from pydantic import AwareDatetime, Field, JsonValue

from contract.base import IdentifiedRecord, LateFields, Record, content_hash
from contract.enums import FailureType


class RejectionReason(StrEnum):
    """Why the task-constructor refused a proposed task."""

    REFERENCE_FAILS = "reference_fails"
    """Its reference plan does not pass its own verifier on a fresh sandbox."""
    MALFORMED_GOAL = "malformed_goal"
    DUPLICATE = "duplicate"
    """Same fingerprint as a task already constructed."""
    NEAR_DUPLICATE = "near_duplicate"
    DEVELOPMENT_TASK = "development_task"
    """Its fingerprint belongs to the held-out development set."""
    INVALID = "invalid"
    """The proposal could not be built into a valid task spec."""


class RejectedTask(IdentifiedRecord):
    """A proposal the task-constructor refused, kept with the reason."""

    id_prefix: ClassVar[str] = "rej"

    round_id: str
    fingerprint: str | None
    template: str | None
    reason: RejectionReason
    detail: str
    goal: str | None = None


class DropReason(StrEnum):
    MALFORMED = "malformed"
    DUPLICATE = "duplicate"
    NEAR_DUPLICATE = "near_duplicate"
    BACKEND_ERROR = "backend_error"
    """The backend or endpoint failed: kept as evidence, never training data."""


class Routing(StrEnum):
    AUTO_APPROVE = "auto_approve"
    AUTO_REJECT = "auto_reject"
    NEEDS_HUMAN = "needs_human"


class ReviewDecision(StrEnum):
    APPROVE = "approve"
    CORRECT = "correct"
    REJECT = "reject"
    QUARANTINE = "quarantine"


class CurationRecord(Record):
    """The curator's judgement of one trajectory."""

    trajectory_id: str
    task_id: str
    round_id: str
    kept: bool
    drop_reason: DropReason | None = None
    duplicate_of: str | None = None
    supported: bool = Field(description="the outcome is backed by the verifier's evidence")
    support_detail: str = ""
    failure_attribution: FailureType | None = None
    quality: float = Field(ge=0.0, le=1.0)
    routing: Routing
    suggested: ReviewDecision = Field(description="the decision when no human overrides it")
    reason: str = Field(description="why it is routed so, for the annotator")
    judge: JsonValue = Field(default=None, description="the LLM judge's answer, when asked")


class KeptSuggestion(NamedTuple):
    """What the gate reads of a kept item's curation to decide it: the curator's routing,
    suggestion and reason (a ``CurationRecord``'s own fields), read as columns. A round's
    automatic reviews need nothing more, so the gate does not load the records."""

    trajectory_id: str
    routing: Routing
    suggested: ReviewDecision
    reason: str


CONSENSUS_REVIEWER_PREFIX = "consensus:"
"""Reviewer names of reviews that resolve several annotators (``consensus:<rule>``)."""
APPROVING = frozenset({ReviewDecision.APPROVE, ReviewDecision.CORRECT})
"""Decisions that let a trajectory into a dataset (a correction with its steps masked)."""


class Review(IdentifiedRecord):
    """A gate decision on a trajectory, by a person or automatically. The one that counts
    for a trajectory (``human_gate.final_decisions``): a consensus over a person's over an
    automatic review, the later recorded among equals."""

    id_prefix: ClassVar[str] = "rev"

    trajectory_id: str
    round_id: str
    decision: ReviewDecision
    reviewer: str
    automatic: bool
    reason: str = ""
    erroneous_steps: tuple[int, ...] = Field(
        default=(), description="steps an annotator marked wrong (masked out of SFT loss)"
    )
    note: str | None = None


class FinalReview(NamedTuple):
    """What a version reads of the review that counts for a trajectory (the ranking of
    :class:`Review`), without the record around it: balancing a round of any size holds
    one of these a trajectory, not every review."""

    trajectory_id: str
    decision: ReviewDecision
    reviewer: str
    automatic: bool
    reason: str = ""
    erroneous_steps: tuple[int, ...] = ()
    note: str | None = None


DEFAULT_SIMULATED_SHARE = 0.2
"""The most of a dataset version's weight trajectories on simulated tools hold by default."""


class MixTarget(LateFields, Record):
    """The composition a dataset version should have (shares in [0, 1]).

    An empty mapping means "no target" for that dimension. ``recovery_share`` is the share
    of verified recovery trajectories among the successes. ``simulated_share`` is the
    most of the version's weight that trajectories on simulated tools may hold (None: no
    cap); its default is left out of the record, so targets stored before it hash as
    they did.
    """

    late_fields: ClassVar[frozenset[str]] = frozenset({"simulated_share"})

    capability: dict[str, float] = Field(default_factory=dict)
    difficulty: dict[str, float] = Field(default_factory=dict)
    domain: dict[str, float] = Field(default_factory=dict)
    source: dict[str, float] = Field(default_factory=dict)
    recovery_share: float | None = Field(default=None, ge=0.0, le=1.0)
    simulated_share: float | None = Field(default=DEFAULT_SIMULATED_SHARE, ge=0.0, le=1.0)

    def model_post_init(self, context: object, /) -> None:
        from contract.errors import InvalidInputError

        for name in ("capability", "difficulty", "domain", "source"):
            shares: dict[str, float] = getattr(self, name)
            if any(v < 0 for v in shares.values()):
                raise InvalidInputError(f"target_mix.{name}", "shares must be >= 0")
            if shares and abs(sum(shares.values()) - 1.0) > 1e-3:
                raise InvalidInputError(
                    f"target_mix.{name}", f"shares sum to {sum(shares.values()):.4f}, not 1"
                )


class DatasetMember(Record):
    """A trajectory in a dataset version, with what the gate decided about it."""

    trajectory_id: str
    task_id: str
    weight: float = Field(gt=0.0, description="sampling weight towards the target mix")
    decision: ReviewDecision = Field(
        default=ReviewDecision.APPROVE, description="approve, or correct (with a correction)"
    )
    human: bool = Field(default=False, description="a person made the final decision")
    masked_steps: tuple[int, ...] = Field(
        default=(), description="steps a person marked erroneous: left out of the SFT loss"
    )
    correction: str | None = Field(
        default=None, description="a person's corrected final answer or note"
    )


class RemovalReason(StrEnum):
    """Why a member of the parent version is not a member of its child."""

    REJECTED = "rejected"
    """A later final review (a person's, or a consensus) no longer approves it."""
    VERDICT_NOW_FAILS = "verdict_now_fails"
    """Today's verifier fails it although its stored verdict passed (``flywheel verify``)."""
    NOT_TRAINABLE = "not_trainable"
    """Its task is now a development task, or its outcome is no longer a success."""
    SIMULATED_CAP = "simulated_cap"
    """It ran on simulated tools, and the cap on their share left it no room (no
    trajectory on real tools to weigh it against, or a cap of 0)."""


class RemovedMember(Record):
    """A member of the parent version left out of this one, with the reason."""

    trajectory_id: str
    task_id: str
    reason: RemovalReason
    detail: str = ""


class DatasetVersion(IdentifiedRecord, LateFields):
    """A frozen training set: members with sampling weights, and where they came from.

    A version *accumulates*: it holds its parent's members (reweighted towards the target
    mix with the new ones) except those ``removed``, each with its reason."""

    id_prefix: ClassVar[str] = "ds"
    late_fields: ClassVar[frozenset[str]] = frozenset({"removed", "inherited"})

    round_id: str
    parent: str | None
    content_hash: str = Field(description="digest of the members and weights only")
    members: tuple[DatasetMember, ...]
    target: MixTarget
    achieved: dict[str, dict[str, float]] = Field(
        description="weighted share per value, per dimension"
    )
    policies: tuple[str, ...] = Field(description="name@version of the generating policies")
    human_reviewed: int = Field(ge=0)
    inherited: int = Field(default=0, ge=0, description="members carried from the parent")
    removed: tuple[RemovedMember, ...] = Field(
        default=(), description="the parent's members left out, each with its reason"
    )

    def content_id(self) -> str:
        """Digest of the content, each member's fields left out where they hold their
        defaults: a version frozen before members carried their review keeps its id."""
        content = self.model_dump(mode="json", exclude={"id", "members"})
        content["members"] = [
            m.model_dump(mode="json", exclude_defaults=True) for m in self.members
        ]
        return content_hash(content)


class ApprovalDecision(StrEnum):
    APPROVE = "approve"
    REJECT = "reject"


class DatasetApproval(Record):
    """The decision to freeze a proposed dataset version, or not: by whom, when, on what.

    ``content_hash`` and ``target`` pin what was approved: the members with their weights,
    masks and corrections, and the sampling configuration that weighed them.
    """

    dataset_id: str
    round_id: str
    content_hash: str
    target: MixTarget
    decision: ApprovalDecision
    approver: str = Field(min_length=1, description="a person's name, or 'auto'")
    automatic: bool
    decided_at: AwareDatetime
    comment: str = ""
    flow_run_id: str | None = None

    @property
    def approved(self) -> bool:
        return self.decision is ApprovalDecision.APPROVE
