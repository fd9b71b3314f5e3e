"""Resolve several annotators' decisions on one item, and measure how well they agree.

Rules (``ConsensusRule``):

- ``majority``: the decision more than half of the annotations give. A tie, or a mere
  plurality, **quarantines** the item: a contested item never reaches training, is counted
  as quarantined where a person sees it, and is resolved anew when someone adds a
  tie-breaking annotation (waiting instead would keep the round pending indefinitely).
- ``unanimous``: every annotation gives the same decision; otherwise quarantine.
- ``any_reject``: one reject rejects; else one quarantine quarantines; else the item is
  accepted: ``correct`` when anyone corrected it, ``approve`` otherwise.

An item with fewer than ``min_annotations`` annotations stays **pending** (no decision).
Erroneous-step marks are the **union** over all annotations: a step any annotator found
wrong stays out of the SFT loss. A ``correct`` consensus needs the correcting annotators to
agree on the corrected answer; different answers quarantine the item.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from contract import InvalidInputError, ReviewDecision

ACCEPTED = frozenset({ReviewDecision.APPROVE, ReviewDecision.CORRECT})


class ConsensusRule(StrEnum):
    MAJORITY = "majority"
    UNANIMOUS = "unanimous"
    ANY_REJECT = "any_reject"


def consensus_rule(name: str) -> ConsensusRule:
    """The rule called ``name``; InvalidInputError lists the rules otherwise."""
    try:
        return ConsensusRule(name)
    except ValueError:
        raise InvalidInputError("rule", f"unknown rule {name!r}", list(ConsensusRule)) from None


@dataclass(frozen=True)
class Vote:
    """One annotator's decision on one item."""

    annotator: str
    decision: ReviewDecision
    erroneous_steps: tuple[int, ...] = ()
    note: str | None = None
    """The corrected answer (``correct``), the rejection reason (``reject``) or a remark."""


@dataclass(frozen=True)
class Consensus:
    """What the annotations of one item resolve to; ``decision`` is None while pending."""

    decision: ReviewDecision | None
    votes: int
    agreeing: int
    erroneous_steps: tuple[int, ...] = ()
    note: str | None = None
    reason: str = ""

    @property
    def pending(self) -> bool:
        return self.decision is None

    @property
    def agreement(self) -> float | None:
        """Share of the annotations that give the consensus decision (None while pending)."""
        return None if self.decision is None else self.agreeing / self.votes


def resolve(votes: Sequence[Vote], rule: ConsensusRule, min_annotations: int = 1) -> Consensus:
    """The consensus of ``votes`` (one per annotator) under ``rule``."""
    rule = consensus_rule(rule)
    if min_annotations < 1:
        raise InvalidInputError("min_annotations", f"{min_annotations} is below 1")
    _check_one_vote_each(votes)
    if len(votes) < min_annotations:
        return Consensus(
            decision=None,
            votes=len(votes),
            agreeing=0,
            reason=f"{len(votes)} of {min_annotations} required annotations",
        )
    decision, why = _decide(votes, rule)
    note: str | None = None
    if decision is ReviewDecision.CORRECT:
        answers = {(v.note or "").strip() for v in votes if v.decision is decision}
        if len(answers) > 1:
            decision, why = ReviewDecision.QUARANTINE, "annotators corrected the answer differently"
        else:
            note = answers.pop() or None
    elif decision is not None:
        note = _joined_notes(v for v in votes if v.decision is decision)
    agreeing = sum(v.decision is decision for v in votes)
    steps = sorted({s for v in votes for s in v.erroneous_steps})
    return Consensus(
        decision=decision,
        votes=len(votes),
        agreeing=agreeing,
        erroneous_steps=tuple(steps),
        note=note,
        reason=f"{rule}: {_tally(votes)}; {why}",
    )


def _check_one_vote_each(votes: Sequence[Vote]) -> None:
    seen = Counter(v.annotator for v in votes)
    twice = sorted(a for a, n in seen.items() if n > 1)
    if twice:
        raise InvalidInputError("votes", f"more than one vote by {', '.join(twice)}")


def _decide(votes: Sequence[Vote], rule: ConsensusRule) -> tuple[ReviewDecision, str]:
    counts = Counter(v.decision for v in votes)
    if rule is ConsensusRule.ANY_REJECT:
        for decision in (ReviewDecision.REJECT, ReviewDecision.QUARANTINE, ReviewDecision.CORRECT):
            if counts[decision]:
                return decision, f"{counts[decision]} said {decision}"
        return ReviewDecision.APPROVE, "all approved"
    top, n = counts.most_common(1)[0]
    if rule is ConsensusRule.UNANIMOUS:
        if n == len(votes):
            return top, "unanimous"
        return ReviewDecision.QUARANTINE, "not unanimous"
    if 2 * n > len(votes):
        return top, "strict majority"
    return ReviewDecision.QUARANTINE, "no strict majority"


def _tally(votes: Sequence[Vote]) -> str:
    counts = Counter(v.decision for v in votes)
    return ", ".join(f"{d} {counts[d]}" for d in ReviewDecision if counts[d])


def _joined_notes(votes: Iterable[Vote]) -> str | None:
    notes = sorted({v.note.strip() for v in votes if v.note and v.note.strip()})
    return "; ".join(notes) or None


# -- agreement ------------------------------------------------------------------------------


class _Report(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ItemAgreement(_Report):
    """One item: its consensus and the share of its annotations that agree with it."""

    item: str
    annotations: int
    decision: ReviewDecision | None
    agreeing: float | None


class PairAgreement(_Report):
    """Two annotators over the items both annotated."""

    annotators: tuple[str, str]
    items: int
    percent_agreement: float
    cohen_kappa: float | None


class AgreementReport(_Report):
    """How well the annotators agree.

    ``percent_agreement``: share of items with two or more annotations where all agree.
    ``pairwise_agreement``: mean share of agreeing annotation pairs per such item (Fleiss'
    observed agreement). Kappas are None where chance agreement is total (one category
    only) or no item has two annotations.
    """

    rule: ConsensusRule
    min_annotations: int
    items: tuple[ItemAgreement, ...]
    multiply_annotated: int
    percent_agreement: float | None
    pairwise_agreement: float | None
    fleiss_kappa: float | None
    pairs: tuple[PairAgreement, ...]


def agreement_report(
    votes_by_item: Mapping[str, Sequence[Vote]],
    rule: ConsensusRule,
    min_annotations: int = 1,
) -> AgreementReport:
    """Per-item agreement with the consensus, and overall measures, sorted by item."""
    items = []
    for item, votes in sorted(votes_by_item.items()):
        consensus = resolve(votes, rule, min_annotations)
        items.append(
            ItemAgreement(
                item=item,
                annotations=len(votes),
                decision=consensus.decision,
                agreeing=consensus.agreement,
            )
        )
    ratings = [[v.decision.value for v in votes] for votes in votes_by_item.values()]
    multiple = [r for r in ratings if len(r) >= 2]
    return AgreementReport(
        rule=rule,
        min_annotations=min_annotations,
        items=tuple(items),
        multiply_annotated=len(multiple),
        percent_agreement=(
            sum(len(set(r)) == 1 for r in multiple) / len(multiple) if multiple else None
        ),
        pairwise_agreement=_observed_agreement(multiple),
        fleiss_kappa=fleiss_kappa(multiple),
        pairs=_pairs(votes_by_item),
    )


def _pairs(votes_by_item: Mapping[str, Sequence[Vote]]) -> tuple[PairAgreement, ...]:
    by_annotator: dict[str, dict[str, str]] = {}
    for item, votes in votes_by_item.items():
        for vote in votes:
            by_annotator.setdefault(vote.annotator, {})[item] = vote.decision.value
    pairs = []
    for a, b in itertools.combinations(sorted(by_annotator), 2):
        common = sorted(by_annotator[a].keys() & by_annotator[b].keys())
        if not common:
            continue
        ratings = [(by_annotator[a][i], by_annotator[b][i]) for i in common]
        pairs.append(
            PairAgreement(
                annotators=(a, b),
                items=len(common),
                percent_agreement=sum(x == y for x, y in ratings) / len(ratings),
                cohen_kappa=cohen_kappa(ratings),
            )
        )
    return tuple(pairs)


def cohen_kappa(ratings: Sequence[tuple[str, str]]) -> float | None:
    """Cohen's kappa of two raters; ``ratings`` holds one (first, second) pair per item.

    None when there is no item or chance agreement is 1 (both always give one category).
    """
    n = len(ratings)
    if n == 0:
        return None
    observed = sum(a == b for a, b in ratings) / n
    first = Counter(a for a, _ in ratings)
    second = Counter(b for _, b in ratings)
    expected = sum(first[c] * second[c] for c in first) / (n * n)
    return _kappa(observed, expected)


def fleiss_kappa(ratings: Sequence[Sequence[str]]) -> float | None:
    """Fleiss' kappa; ``ratings`` holds the categories given to each item.

    Items may have different numbers of ratings (each item's observed agreement uses its
    own count); items with fewer than two are ignored. None where undefined.
    """
    rated = [r for r in ratings if len(r) >= 2]
    observed = _observed_agreement(rated)
    if observed is None:
        return None
    totals = Counter(c for r in rated for c in r)
    n = sum(totals.values())
    expected = sum((k / n) ** 2 for k in totals.values())
    return _kappa(observed, expected)


def _observed_agreement(ratings: Sequence[Sequence[str]]) -> float | None:
    """Mean over items of the share of agreeing rating pairs (Fleiss' P-bar)."""
    shares = []
    for r in ratings:
        n = len(r)
        counts = Counter(r).values()
        shares.append((sum(k * k for k in counts) - n) / (n * (n - 1)))
    return sum(shares) / len(shares) if shares else None


def _kappa(observed: float, expected: float) -> float | None:
    if math.isclose(expected, 1.0):
        return None
    return (observed - expected) / (1.0 - expected)
