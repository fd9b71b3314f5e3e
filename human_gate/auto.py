"""The automatic gate: the curator's suggestion is the decision."""

from __future__ import annotations

from collections.abc import Sequence

from contract import CurationRecord, KeptSuggestion, Review
from human_gate.base import GateItem, GateResult, Workplace

AUTO_REVIEWER = "auto"


class AutoGate:
    """Applies each item's suggested decision at once; nothing is left pending.

    For rounds without annotators (tests, smoke runs): every review says ``automatic``.
    """

    name: str = "auto"
    asks_people: bool = False

    def submit(self, round_id: str, items: Sequence[GateItem]) -> None:
        """Nothing to send: no person is asked."""

    def collect(self, round_id: str, items: Sequence[GateItem]) -> GateResult:
        return GateResult(reviews=tuple(auto_review(round_id, item) for item in items))

    def workplace(self, round_id: str) -> Workplace | None:
        """None: no person is asked."""
        return None


def auto_review(round_id: str, item: GateItem) -> Review:
    """The automatic review of ``item``: the curator's suggestion and reason."""
    return review_of_curation(round_id, item.curation)


def review_of_curation(round_id: str, curation: CurationRecord | KeptSuggestion) -> Review:
    """The automatic review a curation suggests (the trajectory is not needed): from its
    record, or from the columns the gate reads of it (``KeptSuggestion``)."""
    return Review(
        trajectory_id=curation.trajectory_id,
        round_id=round_id,
        decision=curation.suggested,
        reviewer=AUTO_REVIEWER,
        automatic=True,
        reason=curation.reason,
    )
