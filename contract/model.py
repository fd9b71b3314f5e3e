"""The model record: one checkpoint the trainer made, with its lineage.

A model is identified by its content, like every record of the contract: ``id`` is
``model-`` and a digest of every other field (``created_at`` and ``path`` included), so
registering the same checkpoint twice stores it once, and two checkpoints of one run
(other weights, other time) never share an id.

Registry aliases name the models a deployment uses; every change of one is kept as an
``AliasChange``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

from pydantic import AwareDatetime, ConfigDict, Field, JsonValue

from contract.base import IdentifiedRecord, Record


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
