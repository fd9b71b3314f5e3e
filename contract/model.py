"""The model record: one checkpoint the trainer made, with its lineage.

A model is identified by its content, like every record of the contract: ``id`` is
``model-`` and a digest of every other field (``created_at`` and ``path`` included), so
registering the same checkpoint twice stores it once, and two checkpoints of one run
(other weights, other time) never share an id.

Registry aliases name the models a deployment uses; every change of one is kept as an
``AliasChange``. Every deployment decision is kept as a ``DeploymentRecord``, with the trace
of how it was reached.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, ClassVar

from pydantic import AwareDatetime, ConfigDict, Field, JsonValue, model_validator

from contract.base import IdentifiedRecord, LateFields, Record
from contract.errors import InvalidInputError


class TrainingMethod(StrEnum):
    """How a checkpoint was trained."""

    SFT = "sft"
    """Supervised fine-tuning on a frozen dataset version."""
    RL = "rl"
    """Online RL (CARE) only."""
    SFT_RL = "sft+rl"
    """SFT cold start, then online RL, in one run."""


class ModelRecord(IdentifiedRecord):
    """A trained checkpoint: what it was trained on, from what, how, and how it scored."""

    model_config = ConfigDict(allow_inf_nan=False)
    id_prefix: ClassVar[str] = "model"

    id: str = Field(
        default="",
        description="model-<content hash>: derived from the content when left out; a given "
        "id that does not match the content is refused",
    )
    name: str = Field(min_length=1, description="a readable name (mobile-planner-r3)")
    dataset_id: str = Field(
        pattern=r"^ds-", description="the frozen dataset version trained on (ds-...)"
    )
    base: str = Field(
        min_length=1, description="the starting weights: 'tiny', or a local path or hub name"
    )
    parent: str | None = Field(
        default=None,
        pattern=r"^model-",
        description="the registered model it continued from (the SFT model an RL run "
        "started from), if any",
    )
    method: TrainingMethod = Field(description="sft, rl, or sft+rl")
    hyperparameters: dict[str, JsonValue] = Field(
        default_factory=dict, description="the training configuration, as JSON"
    )
    metrics: dict[str, float] = Field(
        default_factory=dict,
        description="final numbers (train loss, dev overall, per-capability success); finite",
    )
    path: str = Field(min_length=1, description="where the weights are")
    feedback_id: str | None = Field(
        default=None,
        pattern=r"^fb-",
        description="the feedback report of the checkpoint's evaluation (fb-...), if any",
    )
    created_at: AwareDatetime = Field(description="when the checkpoint was written")
    flow_run_id: str | None = Field(
        default=None, min_length=1, description="the orchestrator's run that trained it"
    )


class ModelAlias(StrEnum):
    """A registry alias: a name the deployment flow points at one registered model."""

    CHAMPION = "champion"
    """The model served."""
    CANDIDATE = "candidate"
    """The last model proposed for serving."""
    PREVIOUS = "previous"
    """The champion before the current one: what a rollback restores."""


class AliasChange(Record):
    """One change of a registry alias, as the append-only alias history keeps it."""

    alias: ModelAlias = Field(description="champion, candidate or previous")
    model_id: str | None = Field(
        pattern=r"^model-", description="the model the alias now names; None when cleared"
    )
    changed_at: AwareDatetime = Field(description="when the alias changed")
    reason: str = Field(
        min_length=1, pattern=r"\S", description="why it changed, for a person reading"
    )
    deployment_id: str | None = Field(
        default=None, min_length=1, description="the deployment that changed it, if any"
    )


class DeploymentDecision(StrEnum):
    """What a deployment decided."""

    PROMOTED = "promoted"
    """The candidate became the champion (and is served)."""
    REFUSED = "refused"
    """The promotion gate said no."""
    REJECTED = "rejected"
    """A person said no at the approval step."""
    FAILED = "failed"
    """Serving the candidate failed (health check, load); the champion is unchanged."""
    ROLLED_BACK = "rolled_back"
    """The previous champion was restored."""


_CHAMPION_CHANGED = frozenset({DeploymentDecision.PROMOTED, DeploymentDecision.ROLLED_BACK})

Reason = Annotated[str, Field(min_length=1, pattern=r"\S")]


class DeploymentRecord(IdentifiedRecord, LateFields):
    """One deployment decision and its trace: what was evaluated, against what, under which
    harness, served where, decided how."""

    model_config = ConfigDict(allow_inf_nan=False)
    id_prefix: ClassVar[str] = "dep"
    late_fields: ClassVar[frozenset[str]] = frozenset({"overall_interval"})

    id: str = Field(
        default="",
        description="dep-<content hash>: derived from the content when left out; a given id "
        "that does not match the content is refused",
    )
    decision: DeploymentDecision = Field(
        description="promoted, refused, rejected, failed or rolled_back"
    )
    candidate_id: str | None = Field(
        default=None,
        pattern=r"^model-",
        description="the model proposed for serving; for a rollback, the model restored",
    )
    champion_id: str | None = Field(
        default=None,
        pattern=r"^model-",
        description="the champion before this deployment; None when there was none",
    )
    served_id: str | None = Field(
        default=None,
        pattern=r"^model-",
        description="the champion after it: what the endpoint serves; None when nothing is",
    )
    reasons: tuple[Reason, ...] = Field(
        min_length=1,
        description="why, for a person reading (the gate's findings, first the main one)",
    )
    candidate_report_id: str | None = Field(
        default=None,
        pattern=r"^fb-",
        description="the feedback report of the candidate's evaluation (fb-...), if any",
    )
    champion_report_id: str | None = Field(
        default=None,
        pattern=r"^fb-",
        description="the feedback report of the champion's evaluation (fb-...), if any",
    )
    overall_gain: float | None = Field(
        default=None,
        description="the candidate's development Overall minus the champion's; finite",
    )
    overall_interval: tuple[float, float] | None = Field(
        default=None,
        description="the paired bootstrap interval of overall_gain over the development "
        "tasks (training/promotion.py), when there was a champion",
    )
    rule: dict[str, float] = Field(
        default_factory=dict,
        description="the promotion rule's bounds (min_overall_gain, max_capability_drop); "
        "finite; empty when no gate ran (a rollback)",
    )
    harness: dict[str, JsonValue] = Field(
        default_factory=dict,
        description="the evaluation harness's configuration, as JSON (max_steps, samples, "
        "max_new_tokens, chat format, development set size)",
    )
    endpoint: str | None = Field(
        default=None, min_length=1, description="the URL served at, when served"
    )
    approver: str | None = Field(
        default=None, min_length=1, description="who approved or rejected it, if a person did"
    )
    flow_run_id: str | None = Field(
        default=None, min_length=1, description="the orchestrator's run that decided it"
    )
    created_at: AwareDatetime = Field(description="when it was decided")

    @model_validator(mode="after")
    def _served_follows_the_decision(self) -> DeploymentRecord:
        """A promotion or rollback serves its candidate; anything else keeps the champion."""
        if self.decision in _CHAMPION_CHANGED:
            if self.candidate_id is None:
                raise InvalidInputError(
                    "candidate_id", f"is required when the decision is {self.decision.value}"
                )
            if self.served_id != self.candidate_id:
                raise InvalidInputError(
                    "served_id",
                    f"{self.served_id!r} is not the candidate {self.candidate_id!r}: "
                    f"a {self.decision.value} deployment serves its candidate",
                )
        elif self.served_id != self.champion_id:
            raise InvalidInputError(
                "served_id",
                f"{self.served_id!r} is not the champion {self.champion_id!r}: "
                f"when the decision is {self.decision.value} the champion is unchanged",
            )
        return self
