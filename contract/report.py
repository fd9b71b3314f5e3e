"""The feedback report: what training, evaluation or deployment reveal, for the next round.

A documented, versioned JSON format (``format_version``); ``docs/feedback-report.md``
describes it and ``docs/feedback-report.schema.json`` is its JSON Schema. Any trainer may
write one: ours, an evaluation run, deployment traces, or an external trainer.

Costs use one unit throughout: the normalized execution cost ``e`` of an attempt, in
[0, 1] (output tokens and tool calls against their budgets, as CARE defines it).

A reader refuses a ``format_version`` it does not know before it looks at anything else:
a field of another version may mean something else.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AwareDatetime,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from contract.base import IdentifiedRecord, LateFields, Record
from contract.enums import Capability, FailureType
from contract.errors import InvalidInputError
from contract.ids import FINGERPRINT
from contract.validation import invalid_input

FEEDBACK_FORMAT_VERSION = 1
"""The version this code writes and reads (``format_version``)."""

FEEDBACK_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
DEFAULT_MAX_REPORT_BYTES = 16 * 1024 * 1024
"""The largest report read (16 MiB; ``[feedback] max_report_bytes``)."""
DEFAULT_MAX_REPORT_TASKS = 100_000
"""The most ``tasks`` entries a report may have (``[feedback] max_tasks``)."""
MAX_TASKS_CONTEXT = "max_tasks"

OVERALL_WEIGHTS: Mapping[Capability, float] = MappingProxyType(
    {
        Capability.TOOL_USE: 0.5,
        Capability.MEMORY: 0.2,
        Capability.SKILLS: 0.2,
        Capability.SUBAGENT: 0.1,
    }
)
"""MobilePA-style weights of the Overall score."""
DEFAULT_DEV_TASKS = 120
"""The development set's default size; a report on a smaller one says so in its notes."""
LOOP_DEV_TASKS = 8 * DEFAULT_DEV_TASKS
"""The development set a loop of the ``nano`` base wants (``flywheel bench loop``'s): over
it the gate's paired interval resolves a turn's gain of a few hundredths."""

Share = Annotated[float, Field(strict=True, ge=0.0, le=1.0)]
Count = Annotated[int, Field(strict=True, ge=0)]
"""Strict: a JSON number, never a string (``"0.5"``) or a boolean (``true`` as 1)."""

_FINITE = ConfigDict(allow_inf_nan=False)
"""No NaN or infinity: JSON has neither, so such a report could not be stored and read back."""


class FeedbackSource(StrEnum):
    """Who measured what a report says."""

    TRAINER = "trainer"
    """Our trainer flow (its training report)."""
    EVALUATION = "evaluation"
    """An evaluation on the development set."""
    DEPLOYMENT = "deployment"
    """Traces of the deployed model serving real requests."""
    EXTERNAL = "external"
    """Another team's or another framework's trainer."""


class TaskStats(Record):
    """How one task fared: attempts, successes, cost, and why the failures failed."""

    model_config = _FINITE

    fingerprint: str = Field(
        pattern=f"^{FINGERPRINT.pattern}$",
        description="the task's stable identity (TaskSpec.fingerprint: fp- and 20 hex digits)",
    )
    attempts: int = Field(strict=True, ge=1, description="episodes run on the task")
    successes: int = Field(strict=True, ge=0, description="attempts the task's verifier passed")
    mean_cost: float = Field(
        strict=True,
        ge=0.0,
        le=1.0,
        description="mean normalized execution cost of an attempt, in [0, 1]",
    )
    failures: dict[FailureType, Count] = Field(
        default_factory=dict,
        description="failed attempts by attributed failure type; at most attempts - successes "
        "in all (a failure may be left unattributed)",
    )

    @field_validator("successes")
    @classmethod
    def _at_most_attempts(cls, successes: int, info: ValidationInfo) -> int:
        attempts = info.data.get("attempts")
        if attempts is not None and successes > attempts:
            raise ValueError(f"{successes} successes exceed the {attempts} attempts")
        return successes

    @field_validator("failures")
    @classmethod
    def _at_most_failed(
        cls, failures: dict[FailureType, int], info: ValidationInfo
    ) -> dict[FailureType, int]:
        attempts, successes = info.data.get("attempts"), info.data.get("successes")
        if attempts is not None and successes is not None:
            failed = attempts - successes
            if sum(failures.values()) > failed:
                raise ValueError(
                    f"{sum(failures.values())} attributed failures exceed the {failed} "
                    "failed attempts"
                )
        return failures

    @property
    def success_rate(self) -> float:
        return self.successes / self.attempts


class CostStats(Record):
    """Mean cost of an attempt over everything the report covers."""

    model_config = _FINITE

    mean_cost: float = Field(
        strict=True,
        ge=0.0,
        le=1.0,
        description="mean normalized execution cost of an attempt, in [0, 1]",
    )
    mean_steps: float = Field(strict=True, ge=0.0, description="mean steps (actions) per attempt")
    mean_tool_calls: float = Field(strict=True, ge=0.0, description="mean tool calls per attempt")
    mean_output_tokens: float = Field(
        strict=True, ge=0.0, description="mean tokens the policy generated per attempt"
    )


DevelopmentPart = Literal["seen", "unseen"]
"""``seen``: held-out parameter draws of training templates (reachable by imitation);
``unseen``: held-out templates (generalisation)."""


class PartScores(Record):
    """The scores of one labelled part of the development set."""

    model_config = _FINITE

    tasks: Count = Field(description="measured tasks of the part")
    capability_scores: dict[Capability, Share] = Field(
        default_factory=dict, description="success rate per capability, as for the whole set"
    )
    overall: float | None = Field(
        strict=True, default=None, ge=0.0, le=1.0, description="the part's Overall"
    )


class FeedbackReport(IdentifiedRecord, LateFields):
    """What one training run, evaluation or deployment period says about the policy."""

    model_config = _FINITE
    id_prefix: ClassVar[str] = "fb"
    late_fields: ClassVar[frozenset[str]] = frozenset({"parts"})

    id: str = Field(
        default="",
        description="fb-<content hash>: derived from the content when left out; a given id "
        "that does not match the content is refused",
    )

    format_version: Literal[1] = Field(
        description="this format's version; a reader refuses one it does not know"
    )
    source: FeedbackSource = Field(description="who measured what the report says")
    produced_by: str = Field(
        min_length=1, max_length=200, description="the trainer, evaluator or service"
    )
    model: str | None = Field(
        default=None, min_length=1, max_length=200, description="the model the report is about"
    )
    created_at: AwareDatetime = Field(
        description="when the measurement ended (ISO 8601 with a time zone)"
    )
    capability_scores: dict[Capability, Share] = Field(
        description="development-set success rate per capability, in [0, 1]; capabilities "
        "that were not measured are left out"
    )
    overall: float | None = Field(
        strict=True,
        default=None,
        ge=0.0,
        le=1.0,
        description="MobilePA-style Overall (0.5 tool_use + 0.2 memory + 0.2 skills + "
        "0.1 subagent), when computed",
    )
    tasks: tuple[TaskStats, ...] = Field(
        default=(), description="per-task statistics, one entry per task fingerprint"
    )
    failure_counts: dict[FailureType, Count] = Field(
        default_factory=dict,
        description="attributed failures by type over everything the report covers",
    )
    cost: CostStats = Field(description="mean cost of an attempt over everything covered")
    parts: dict[DevelopmentPart, PartScores] = Field(
        default_factory=dict,
        description="the development set's labelled parts (seen: held-out draws of training "
        "templates; unseen: held-out templates), each scored on its own",
    )
    notes: str = Field(default="", max_length=10_000, description="free text for people")

    @model_validator(mode="before")
    @classmethod
    def _known_version(cls, data: Any) -> Any:
        """Refuse an unknown version before any other field is read."""
        if isinstance(data, dict):
            version = data.get("format_version")
            if version is None:
                raise InvalidInputError(
                    "format_version", "is required", allowed=[FEEDBACK_FORMAT_VERSION]
                )
            if type(version) is not int or version != FEEDBACK_FORMAT_VERSION:
                raise InvalidInputError(
                    "format_version",
                    f"{version!r} is not supported by this reader",
                    allowed=[FEEDBACK_FORMAT_VERSION],
                )
        return data

    @field_validator("created_at", mode="before")
    @classmethod
    def _a_time_not_a_number(cls, value: Any) -> Any:
        """A number would be read as seconds since 1970: a report names its time."""
        if isinstance(value, int | float):
            raise ValueError(
                f"must be ISO 8601 text with a time zone, like 2026-12-01T09:30:00Z (got {value!r})"
            )
        return value

    @field_validator("tasks", mode="before")
    @classmethod
    def _not_too_many(cls, tasks: Any, info: ValidationInfo) -> Any:
        """Counted before any entry is validated: a huge list costs nothing to refuse."""
        limit = (info.context or {}).get(MAX_TASKS_CONTEXT)
        if limit is not None and isinstance(tasks, list | tuple) and len(tasks) > limit:
            raise InvalidInputError(
                "", f"has {len(tasks)} entries; at most {limit} are accepted (feedback.max_tasks)"
            )
        return tasks

    @model_validator(mode="after")
    def _unique_tasks(self) -> FeedbackReport:
        first: dict[str, int] = {}
        for i, stats in enumerate(self.tasks):
            earlier = first.setdefault(stats.fingerprint, i)
            if earlier != i:
                raise InvalidInputError(
                    f"tasks[{i}].fingerprint",
                    f"{stats.fingerprint!r} appears twice (first at tasks[{earlier}])",
                )
        return self


def parse_feedback_report(
    text: bytes | str,
    *,
    max_bytes: int = DEFAULT_MAX_REPORT_BYTES,
    max_tasks: int = DEFAULT_MAX_REPORT_TASKS,
) -> FeedbackReport:
    """Read a feedback report from JSON text, strictly: a number is a JSON number (not
    ``"0.5"``), a count an integer (not ``true``), every number finite (``NaN``,
    ``Infinity`` and ``1e400`` are refused by field). Raises ``InvalidInputError``
    naming the field (``tasks[2].successes``, ``capability_scores.memory``,
    ``format_version``; a document that is not JSON, not an object or too large is named
    ``report``), with the allowed values where they are few. An ``id``, when given, must
    match the content. At most ``max_bytes`` of text and ``max_tasks`` task entries."""
    size = len(text.encode() if isinstance(text, str) else text)
    if size > max_bytes:
        raise InvalidInputError(
            "report",
            f"is larger than {max_bytes} bytes, the most that is read (feedback.max_report_bytes)",
        )
    try:
        return FeedbackReport.model_validate_json(text, context={MAX_TASKS_CONTEXT: max_tasks})
    except ValidationError as exc:
        raise invalid_input(exc, root="report") from None


def feedback_report_schema() -> dict[str, Any]:
    """The JSON Schema of the format (``docs/feedback-report.schema.json``)."""
    return {"$schema": FEEDBACK_SCHEMA_DIALECT, **FeedbackReport.model_json_schema()}
