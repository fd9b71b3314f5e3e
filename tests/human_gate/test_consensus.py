"""Consensus rules and agreement measures on decisions made by hand."""

from __future__ import annotations

import pytest

from contract import InvalidInputError, Review, ReviewDecision
from human_gate import final_decisions, is_consensus
from human_gate.label_studio.consensus import (
    AgreementReport,
    ConsensusRule,
    Vote,
    agreement_report,
    cohen_kappa,
    fleiss_kappa,
    resolve,
)

APPROVE = ReviewDecision.APPROVE
CORRECT = ReviewDecision.CORRECT
REJECT = ReviewDecision.REJECT
QUARANTINE = ReviewDecision.QUARANTINE


def votes(*decisions: ReviewDecision) -> list[Vote]:
    return [Vote(annotator=f"a{i}", decision=d) for i, d in enumerate(decisions)]


@pytest.mark.parametrize(
    ("decisions", "expected", "agreeing"),
    [
        ((APPROVE,), APPROVE, 1),
        ((APPROVE, APPROVE, REJECT), APPROVE, 2),
        ((REJECT, REJECT, APPROVE), REJECT, 2),
        ((APPROVE, REJECT), QUARANTINE, 0),
        ((APPROVE, CORRECT, REJECT), QUARANTINE, 0),
        ((APPROVE, APPROVE, REJECT, REJECT), QUARANTINE, 0),
    ],
)
def test_majority_needs_more_than_half_else_quarantines(
    decisions: tuple[ReviewDecision, ...], expected: ReviewDecision, agreeing: int
) -> None:
    consensus = resolve(votes(*decisions), ConsensusRule.MAJORITY)
    assert consensus.decision is expected
    assert consensus.votes == len(decisions)
    assert consensus.agreeing == agreeing
    assert consensus.agreement == pytest.approx(agreeing / len(decisions))


@pytest.mark.parametrize(
    ("decisions", "expected"),
    [
        ((APPROVE, APPROVE), APPROVE),
        ((REJECT, REJECT, REJECT), REJECT),
        ((APPROVE, CORRECT), QUARANTINE),
        ((APPROVE, APPROVE, REJECT), QUARANTINE),
    ],
)
def test_unanimous_quarantines_any_disagreement(
    decisions: tuple[ReviewDecision, ...], expected: ReviewDecision
) -> None:
    assert resolve(votes(*decisions), ConsensusRule.UNANIMOUS).decision is expected


@pytest.mark.parametrize(
    ("decisions", "expected"),
    [
        ((APPROVE, APPROVE, REJECT), REJECT),
        ((QUARANTINE, REJECT), REJECT),
        ((APPROVE, QUARANTINE, APPROVE), QUARANTINE),
        ((APPROVE, CORRECT), CORRECT),
        ((APPROVE, APPROVE), APPROVE),
    ],
)
def test_any_reject_lets_one_person_keep_an_item_out(
    decisions: tuple[ReviewDecision, ...], expected: ReviewDecision
) -> None:
    assert resolve(votes(*decisions), ConsensusRule.ANY_REJECT).decision is expected


@pytest.mark.parametrize("rule", list(ConsensusRule))
def test_too_few_annotations_stay_pending(rule: ConsensusRule) -> None:
    consensus = resolve(votes(APPROVE), rule, min_annotations=2)
    assert consensus.pending
    assert consensus.decision is None
    assert consensus.agreement is None
    assert "1 of 2" in consensus.reason
    assert resolve([], rule).pending


def test_bad_input_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="min_annotations"):
        resolve(votes(APPROVE), ConsensusRule.MAJORITY, min_annotations=0)
    twice = [Vote("ana", APPROVE), Vote("ana", REJECT)]
    with pytest.raises(InvalidInputError, match="more than one vote by ana"):
        resolve(twice, ConsensusRule.MAJORITY)


def test_erroneous_steps_are_the_union_of_all_marks() -> None:
    marked = [
        Vote("ana", REJECT, erroneous_steps=(1, 2)),
        Vote("bo", REJECT, erroneous_steps=(2, 5)),
        Vote("cy", APPROVE, erroneous_steps=(0,)),
    ]
    consensus = resolve(marked, ConsensusRule.MAJORITY)
    assert consensus.decision is REJECT
    assert consensus.erroneous_steps == (0, 1, 2, 5)


def test_a_correction_needs_the_same_answer_from_the_correctors() -> None:
    same = [Vote("ana", CORRECT, note="42 "), Vote("bo", CORRECT, note="42")]
    consensus = resolve(same, ConsensusRule.UNANIMOUS)
    assert (consensus.decision, consensus.note) == (CORRECT, "42")

    different = [Vote("ana", CORRECT, note="42"), Vote("bo", CORRECT, note="41")]
    consensus = resolve(different, ConsensusRule.UNANIMOUS)
    assert consensus.decision is QUARANTINE
    assert "corrected the answer differently" in consensus.reason
    assert consensus.note is None


def test_the_note_joins_the_reasons_of_those_who_agree() -> None:
    rejected = [
        Vote("ana", REJECT, note="wrong_outcome"),
        Vote("bo", REJECT, note="unsafe"),
        Vote("cy", APPROVE, note="fine by me"),
    ]
    consensus = resolve(rejected, ConsensusRule.MAJORITY)
    assert consensus.note == "unsafe; wrong_outcome"
    assert consensus.reason == "majority: approve 1, reject 2; strict majority"


def test_cohen_kappa_on_a_hand_computed_table() -> None:
    # 50 items: both yes 20, first yes / second no 5, first no / second yes 10, both no 15.
    # p_o = 0.7; p_e = 0.5 * 0.6 + 0.5 * 0.4 = 0.5; kappa = 0.2 / 0.5 = 0.4.
    ratings = (
        [("yes", "yes")] * 20 + [("yes", "no")] * 5 + [("no", "yes")] * 10 + [("no", "no")] * 15
    )
    assert cohen_kappa(ratings) == pytest.approx(0.4)
    assert cohen_kappa([("a", "a"), ("b", "b")]) == pytest.approx(1.0)
    assert cohen_kappa([("a", "b"), ("b", "a")]) == pytest.approx(-1.0)
    assert cohen_kappa([("a", "a"), ("a", "a")]) is None
    assert cohen_kappa([]) is None


def test_fleiss_kappa_on_hand_computed_tables() -> None:
    # Two items, two raters: P = (1 + 0) / 2; p = (3/4, 1/4), P_e = 10/16; kappa = -1/3.
    assert fleiss_kappa([["a", "a"], ["a", "b"]]) == pytest.approx(-1 / 3)
    # Uneven counts: P = (1 + 0) / 2; p = (4/5, 1/5), P_e = 0.68; kappa = -0.18 / 0.32.
    assert fleiss_kappa([["a", "a", "a"], ["a", "b"], ["c"]]) == pytest.approx(-0.5625)
    assert fleiss_kappa([["a", "a"], ["b", "b"]]) == pytest.approx(1.0)
    assert fleiss_kappa([["a", "a"], ["a", "a"]]) is None
    assert fleiss_kappa([["a"]]) is None


def test_fleiss_kappa_matches_the_textbook_example() -> None:
    # Fleiss (1971) as reproduced on Wikipedia: 10 items, 14 raters, 5 categories,
    # P-bar = 0.378, P_e = 0.213, kappa = 0.210.
    table = [
        [0, 0, 0, 0, 14],
        [0, 2, 6, 4, 2],
        [0, 0, 3, 5, 6],
        [0, 3, 9, 2, 0],
        [2, 2, 8, 1, 1],
        [7, 7, 0, 0, 0],
        [3, 2, 6, 3, 0],
        [2, 5, 3, 2, 2],
        [6, 5, 2, 1, 0],
        [0, 2, 2, 3, 7],
    ]
    ratings = [[str(c) for c, n in enumerate(row) for _ in range(n)] for row in table]
    assert fleiss_kappa(ratings) == pytest.approx(0.210, abs=5e-4)


def test_agreement_report_per_item_and_overall() -> None:
    by_item = {
        "x": [Vote("ana", APPROVE), Vote("bo", APPROVE)],
        "y": [Vote("ana", REJECT), Vote("bo", REJECT)],
        "z": [Vote("ana", APPROVE), Vote("bo", REJECT)],
        "w": [Vote("ana", APPROVE)],
    }
    report = agreement_report(by_item, ConsensusRule.MAJORITY, min_annotations=1)

    assert [(i.item, i.decision, i.agreeing) for i in report.items] == [
        ("w", APPROVE, 1.0),
        ("x", APPROVE, 1.0),
        ("y", REJECT, 1.0),
        ("z", QUARANTINE, 0.0),
    ]
    assert report.multiply_annotated == 3
    assert report.percent_agreement == pytest.approx(2 / 3)
    assert report.pairwise_agreement == pytest.approx(2 / 3)
    # p = (1/2, 1/2) over six ratings: P_e = 1/2; kappa = (2/3 - 1/2) / (1/2).
    assert report.fleiss_kappa == pytest.approx(1 / 3)
    (pair,) = report.pairs
    assert pair.annotators == ("ana", "bo")
    assert pair.items == 3
    assert pair.percent_agreement == pytest.approx(2 / 3)
    # ana: approve 2, reject 1; bo: approve 1, reject 2: p_e = 4/9; kappa = (2/9) / (5/9).
    assert pair.cohen_kappa == pytest.approx(0.4)
    assert AgreementReport.model_validate_json(report.model_dump_json()) == report


def test_agreement_report_of_single_annotations_has_no_overall_measure() -> None:
    report = agreement_report({"x": [Vote("ana", APPROVE)]}, ConsensusRule.MAJORITY, 2)
    assert report.items[0].decision is None
    assert report.items[0].agreeing is None
    assert report.multiply_annotated == 0
    assert report.percent_agreement is None
    assert report.fleiss_kappa is None
    assert report.pairs == ()


def test_rules_are_named() -> None:
    assert resolve(votes(APPROVE, CORRECT), "unanimous").decision is QUARANTINE  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="allowed: majority, unanimous, any_reject"):
        resolve(votes(APPROVE), "most")  # type: ignore[arg-type]


def test_a_consensus_outranks_the_annotators_it_resolves() -> None:
    def review(reviewer: str, decision: ReviewDecision, automatic: bool = False) -> Review:
        return Review(
            trajectory_id="t",
            round_id="r",
            decision=decision,
            reviewer=reviewer,
            automatic=automatic,
        )

    auto = review("auto", APPROVE, automatic=True)
    first = review("consensus:majority", QUARANTINE)
    latest = review("consensus:majority", APPROVE)
    ana = review("ana@example.com", REJECT)
    assert is_consensus(first)
    assert not is_consensus(ana)
    assert not is_consensus(review("consensus:majority", APPROVE, automatic=True))
    assert final_decisions([auto, first, ana])["t"] == first
    assert final_decisions([ana, first, auto])["t"] == first
    assert final_decisions([first, ana, latest, auto])["t"] == latest
    assert final_decisions([auto, ana])["t"] == ana
