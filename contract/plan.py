"""Generation plans: how many tasks of each capability and difficulty a round constructs."""

from __future__ import annotations

from pydantic import Field

from contract.base import Record
from contract.enums import Capability, Difficulty
from contract.errors import InvalidInputError


class Quota(Record):
    """Construct ``count`` tasks whose primary capability is ``capability``."""

    capability: Capability
    difficulty: Difficulty
    count: int = Field(ge=0)
    reason: str = Field(default="", description="why the quota is what it is")


class GenerationPlan(Record):
    """Quotas per (capability, difficulty) cell; a cell appears at most once."""

    quotas: tuple[Quota, ...]
    source: str = Field(default="default", description="default, or the feedback it came from")

    def model_post_init(self, context: object, /) -> None:
        cells = [(q.capability, q.difficulty) for q in self.quotas]
        if len(cells) != len(set(cells)):
            raise InvalidInputError("quotas", "a (capability, difficulty) cell appears twice")

    @property
    def total(self) -> int:
        return sum(q.count for q in self.quotas)


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
