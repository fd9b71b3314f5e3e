"""The gate interface: what needs a person goes out, decisions come back.

A gate never approves silently: an item a person has not decided yet stays pending and is
carried over to the next collection.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from contract import CurationRecord, FlywheelError, InvalidInputError, Review, Trajectory
from contract.curation import CONSENSUS_REVIEWER_PREFIX


class GateError(FlywheelError):
    """A gate's service refused a request (bad token, bad configuration)."""


class GateUnavailableError(GateError):
    """A gate's service did not answer, or kept failing, after bounded retries.

    Transient by nature: the round can wait and try again later.
    """


@dataclass(frozen=True)
class GateItem:
    """A trajectory with the curator's judgement of it."""

    trajectory: Trajectory
    curation: CurationRecord

    def __post_init__(self) -> None:
        if self.curation.trajectory_id != self.trajectory.id:
            raise InvalidInputError(
                "gate item",
                f"curation record is for {self.curation.trajectory_id}, not {self.trajectory.id}",
            )

    @property
    def trajectory_id(self) -> str:
        return self.trajectory.id


@dataclass(frozen=True)
class Workplace:
    """Where people decide a round's items: what it is called and the link that opens it."""

    name: str
    url: str


@dataclass(frozen=True)
class GateResult:
    """What a collection gave: decisions made, and trajectory ids still waiting."""

    reviews: tuple[Review, ...] = ()
    pending: tuple[str, ...] = ()


class HumanGate(Protocol):
    """Where curated items are approved, corrected, rejected or quarantined."""

    name: str
    asks_people: bool
    """False: the gate decides every item from its curation record alone (the gate
    stage then reads no trajectory for it and stores the curator's suggestion)."""

    def submit(self, round_id: str, items: Sequence[GateItem]) -> None:
        """Send the items that need a person (Label Studio: import them as tasks)."""
        ...

    def collect(self, round_id: str, items: Sequence[GateItem]) -> GateResult:
        """Decisions on ``items`` so far; undecided ones are pending, never approved."""
        ...

    def workplace(self, round_id: str) -> Workplace | None:
        """Where people decide the round's items; None when this gate asks no people or
        none of the round's items reached them. Raises GateUnavailableError when the
        gate's service does not answer."""
        ...


def is_consensus(review: Review) -> bool:
    """Whether ``review`` resolves several annotators' reviews of its trajectory."""
    return not review.automatic and review.reviewer.startswith(CONSENSUS_REVIEWER_PREFIX)


def _rank(review: Review) -> int:
    return 0 if review.automatic else 2 if is_consensus(review) else 1


def final_decisions(reviews: Iterable[Review]) -> dict[str, Review]:
    """The review that counts for each trajectory id.

    A consensus review wins over the single annotators' reviews it resolves, a person's
    review over an automatic one; among reviews of the same kind the later one in
    ``reviews`` wins. The result is sorted by trajectory id.
    """
    final: dict[str, Review] = {}
    for review in reviews:
        current = final.get(review.trajectory_id)
        if current is None or _rank(review) >= _rank(current):
            final[review.trajectory_id] = review
    return dict(sorted(final.items()))
