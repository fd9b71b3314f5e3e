"""Generation plans: what a round constructs and re-collects, and why.

A plan has quotas of new tasks per (capability, difficulty) cell. A plan built from
feedback (``curation.planning.plan_from_feedback``) adds repair sets (new tasks that
exercise the interaction pattern behind a failure type), stored tasks to re-collect
(``replays``: inconsistently solved; ``preserve``: a preservation set of mastered ones),
template weights (mastered templates are proposed less often), and tasks it sends back to
curation instead of using them (``recurate``). Every change explains itself
(``GenerationPlan.changes``).

The feedback fields default to empty and are left out of a plan's dumps while empty, so a
default plan serializes exactly as before they existed (round ids derive from it).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Any, TypeVar

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from contract.base import Record
from contract.enums import Capability, Difficulty, FailureType
from contract.errors import InvalidInputError


class TaskPattern(StrEnum):
    """Interaction patterns a task can exhibit (``envs.sandbox.templates.patterns``)."""

    GROUNDING = "grounding"
    """An argument must be taken from an earlier tool result."""
    STATEFUL = "stateful"
    """A later step depends on state an earlier step of the task changed."""
    RECOVERY = "recovery"
    """A plausible slip gets a typed error, and the task can still be completed."""
    LONG_HORIZON = "long_horizon"
    """Several steps are needed before finishing; finishing early always fails."""
    ROUTING = "routing"
    """Work goes to a sub-agent, or the right tool hides among many distractors."""


REPAIR_PATTERN: Mapping[FailureType, TaskPattern] = MappingProxyType(
    {
        FailureType.ROUTING: TaskPattern.ROUTING,
        FailureType.ARGUMENT_GROUNDING: TaskPattern.GROUNDING,
        FailureType.STATE_TRACKING: TaskPattern.STATEFUL,
        FailureType.RECOVERY: TaskPattern.RECOVERY,
        FailureType.PREMATURE_TERMINATION: TaskPattern.LONG_HORIZON,
    }
)
"""The pattern a repair set for each failure type exercises."""


class Quota(Record):
    """Construct ``count`` tasks whose primary capability is ``capability``."""

    capability: Capability
    difficulty: Difficulty
    count: int = Field(ge=0)
    reason: str = Field(default="", description="why the quota is what it is")


class RepairQuota(Record):
    """Construct ``count`` new tasks that exercise the pattern behind ``failure_type``."""

    failure_type: FailureType
    count: int = Field(ge=0)
    reason: str = Field(default="", description="why the repair set has this size")

    @property
    def pattern(self) -> TaskPattern:
        return REPAIR_PATTERN[self.failure_type]


class Replay(Record):
    """Re-collect the stored task ``fingerprint`` ``attempts`` more times."""

    fingerprint: str = Field(min_length=1)
    attempts: int = Field(ge=1)
    reason: str = ""


class Recurate(Record):
    """A task whose feedback is ambiguous: curation looks at it again; the plan uses it not."""

    fingerprint: str = Field(min_length=1)
    reason: str = Field(min_length=1)


class TemplateWeight(Record):
    """Propose tasks of ``template`` with this relative weight (1 when not listed)."""

    template: str = Field(min_length=1)
    weight: float = Field(gt=0.0, le=1.0)
    reason: str = ""


class PlanChange(Record):
    """One row of a plan's change table."""

    what: str
    before: int | float | None
    after: int | float | None
    reason: str


_FEEDBACK_FIELDS = ("repairs", "replays", "preserve", "recurate", "template_weights")


class GenerationPlan(Record):
    """Quotas per (capability, difficulty) cell (a cell appears at most once), repair sets
    per failure type, and stored tasks to re-collect or re-curate."""

    quotas: tuple[Quota, ...]
    source: str = Field(default="default", description="default, or the feedback it came from")
    repairs: tuple[RepairQuota, ...] = Field(
        default=(), description="new tasks per failure type, exercising its pattern"
    )
    replays: tuple[Replay, ...] = Field(
        default=(), description="stored tasks to re-collect: inconsistently solved ones"
    )
    preserve: tuple[Replay, ...] = Field(
        default=(), description="the preservation set: mastered tasks re-collected anyway"
    )
    recurate: tuple[Recurate, ...] = Field(
        default=(), description="ambiguous tasks sent back to curation, not used"
    )
    template_weights: tuple[TemplateWeight, ...] = Field(
        default=(), description="relative proposal weights of down-sampled templates"
    )

    def model_post_init(self, context: object, /) -> None:
        cells = [(q.capability, q.difficulty) for q in self.quotas]
        if len(cells) != len(set(cells)):
            raise InvalidInputError("quotas", "a (capability, difficulty) cell appears twice")
        _unique("repairs", [r.failure_type.value for r in self.repairs])
        _unique("replays", [r.fingerprint for r in self.replays])
        _unique("preserve", [r.fingerprint for r in self.preserve])
        _unique("recurate", [r.fingerprint for r in self.recurate])
        _unique("template_weights", [w.template for w in self.template_weights])
        replayed = {r.fingerprint for r in self.replays}
        both = sorted(replayed & {r.fingerprint for r in self.preserve})
        if both:
            raise InvalidInputError("preserve", f"{both[0]} is also in replays")
        used = replayed | {r.fingerprint for r in self.preserve}
        doubtful = sorted(used & {r.fingerprint for r in self.recurate})
        if doubtful:
            raise InvalidInputError(
                "recurate", f"{doubtful[0]} goes back to curation and cannot be re-collected"
            )

    @model_serializer(mode="wrap")
    def _omit_empty_feedback(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for name in _FEEDBACK_FIELDS:
            if name in data and not data[name]:
                del data[name]
        return data

    @property
    def quota_total(self) -> int:
        """New tasks for the capability quotas."""
        return sum(q.count for q in self.quotas)

    @property
    def repair_total(self) -> int:
        """New tasks for the repair sets."""
        return sum(r.count for r in self.repairs)

    @property
    def total(self) -> int:
        """New tasks to construct: quotas and repair sets."""
        return self.quota_total + self.repair_total

    @property
    def recollect_fingerprints(self) -> frozenset[str]:
        """Stored tasks the plan re-collects (replays and the preservation set)."""
        return frozenset(r.fingerprint for r in (*self.replays, *self.preserve))

    def changes(self) -> list[PlanChange]:
        """Every change against the even mix of the same number of new tasks, with its
        reason: quotas whose count differs, repair sets, replays, the preservation set,
        template weights and tasks sent back to curation. Empty for a default plan."""
        baseline = {(q.capability, q.difficulty): q.count for q in default_plan(self.total).quotas}
        rows = [
            PlanChange(
                what=f"quota {q.capability.value}/{q.difficulty.value}",
                before=baseline.get((q.capability, q.difficulty), 0),
                after=q.count,
                reason=q.reason,
            )
            for q in self.quotas
            if q.count != baseline.get((q.capability, q.difficulty), 0)
        ]
        rows += [
            PlanChange(
                what=f"repair {r.failure_type.value}", before=0, after=r.count, reason=r.reason
            )
            for r in self.repairs
        ]
        rows += [
            PlanChange(what=f"replay {r.fingerprint}", before=0, after=r.attempts, reason=r.reason)
            for r in self.replays
        ]
        rows += [
            PlanChange(
                what=f"preserve {r.fingerprint}", before=0, after=r.attempts, reason=r.reason
            )
            for r in self.preserve
        ]
        rows += [
            PlanChange(what=f"template {w.template}", before=1.0, after=w.weight, reason=w.reason)
            for w in self.template_weights
        ]
        rows += [
            PlanChange(what=f"recurate {r.fingerprint}", before=None, after=None, reason=r.reason)
            for r in self.recurate
        ]
        return rows


def _unique(field: str, keys: list[str]) -> None:
    seen: set[str] = set()
    for key in keys:
        if key in seen:
            raise InvalidInputError(field, f"{key} appears twice")
        seen.add(key)


def default_plan(n_tasks: int) -> GenerationPlan:
    """An even mix over the 4 capabilities x 3 difficulties; the remainder goes to the
    first cells in a fixed order, so the same ``n_tasks`` always gives the same plan."""
    if n_tasks < 0:
        raise InvalidInputError("tasks", f"must be >= 0, got {n_tasks}")
    cells = [(c, d) for c in Capability for d in Difficulty]
    base, extra = divmod(n_tasks, len(cells))
    return GenerationPlan(
        quotas=tuple(
            Quota(capability=c, difficulty=d, count=base + (i < extra), reason="even mix")
            for i, (c, d) in enumerate(cells)
        )
    )


K = TypeVar("K", bound=tuple[Any, ...] | str)


def apportion(total: int, weights: Mapping[K, float]) -> dict[K, int]:
    """``total`` split by weight with the largest remainders, deterministically (ties go
    to the smallest key); keys that get nothing are left out."""
    whole = sum(weights.values())
    if total <= 0 or whole <= 0:
        return {}
    shares = {key: total * w / whole for key, w in sorted(weights.items())}
    out = {key: int(v) for key, v in shares.items()}
    rest = total - sum(out.values())
    for key in sorted(shares, key=lambda k: (out[k] - shares[k], k))[:rest]:
        out[key] += 1
    return {key: n for key, n in out.items() if n}
