"""The feedback report: what training, evaluation or deployment reveal, for the next round.

A documented, versioned JSON format (``format_version``); ``docs/feedback-report.md``
describes it and ``docs/feedback-report.schema.json`` is its JSON Schema. Any trainer may
write one: ours, an evaluation run, deployment traces, or an external trainer.

Costs use one unit throughout: the normalized execution cost ``e`` of an attempt, in
[0, 1] (output tokens and tool calls against their budgets, as CARE defines it).
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar, Literal

from pydantic import AwareDatetime, Field, model_validator

from contract.base import IdentifiedRecord, Record
from contract.enums import Capability, FailureType

FEEDBACK_FORMAT_VERSION = 1
"""The version this code writes and reads (``format_version``)."""


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

    fingerprint: str = Field(min_length=1, description="the task's stable identity")
    attempts: int = Field(ge=1)
    successes: int = Field(ge=0)
    mean_cost: float = Field(ge=0.0, le=1.0, description="mean normalized execution cost")
    failures: dict[FailureType, int] = Field(
        default_factory=dict, description="failed attempts by attributed failure type"
    )

    @model_validator(mode="after")
    def _consistent(self) -> TaskStats:
        if self.successes > self.attempts:
            raise ValueError(f"successes ({self.successes}) exceed attempts ({self.attempts})")
        if any(n < 0 for n in self.failures.values()):
            raise ValueError("failure counts must be >= 0")
        if sum(self.failures.values()) > self.attempts - self.successes:
            raise ValueError("more attributed failures than failed attempts")
        return self

    @property
    def success_rate(self) -> float:
        return self.successes / self.attempts


class CostStats(Record):
    """Mean cost of an attempt over everything the report covers."""

    mean_cost: float = Field(ge=0.0, le=1.0, description="mean normalized execution cost")
    mean_steps: float = Field(ge=0.0)
    mean_tool_calls: float = Field(ge=0.0)
    mean_output_tokens: float = Field(ge=0.0)


class FeedbackReport(IdentifiedRecord):
    """What one training run, evaluation or deployment period says about the policy."""

    id_prefix: ClassVar[str] = "fb"

    format_version: Literal[1] = Field(description="this format's version")
    source: FeedbackSource
    produced_by: str = Field(min_length=1, description="the trainer, evaluator or service")
    model: str | None = Field(default=None, description="the model the report is about")
    created_at: AwareDatetime
    capability_scores: dict[Capability, float] = Field(
        description="development-set success rate per capability, in [0, 1]"
    )
    overall: float | None = Field(
        default=None, ge=0.0, le=1.0, description="MobilePA-style Overall, when computed"
    )
    tasks: tuple[TaskStats, ...] = Field(default=(), description="per-task statistics")
    failure_counts: dict[FailureType, int] = Field(
        default_factory=dict, description="attributed failures over everything covered"
    )
    cost: CostStats
    notes: str = ""

    @model_validator(mode="after")
    def _consistent(self) -> FeedbackReport:
        for capability, score in self.capability_scores.items():
            if not 0.0 <= score <= 1.0:
                raise ValueError(f"capability_scores.{capability.value}: {score} is not in [0, 1]")
        if any(n < 0 for n in self.failure_counts.values()):
            raise ValueError("failure_counts must be >= 0")
        seen: set[str] = set()
        for stats in self.tasks:
            if stats.fingerprint in seen:
                raise ValueError(f"tasks: fingerprint {stats.fingerprint} appears twice")
            seen.add(stats.fingerprint)
        return self
