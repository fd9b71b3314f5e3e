"""The quality score ranks clean, recovered, redundant, looping and failed episodes."""

from __future__ import annotations

from statistics import mean

from contract import FaultKind, Outcome, Trajectory
from curation.quality import quality_parts, quality_score
from tests.curation.builders import fault_of, is_clean_success, pick


def _scores(
    trajectories: list[Trajectory], outcome: Outcome, fault: FaultKind | None
) -> list[float]:
    return [
        quality_score(t)
        for t in trajectories
        if t.metadata.outcome is outcome and fault_of(t) is fault
    ]


def test_scores_lie_in_the_unit_interval(faulty_trajectories: list[Trajectory]) -> None:
    for t in faulty_trajectories:
        assert 0.0 <= quality_score(t) <= 1.0


def test_a_clean_reference_success_scores_one(faulty_trajectories: list[Trajectory]) -> None:
    clean = pick(faulty_trajectories, is_clean_success)
    parts = quality_parts(clean)
    assert (parts.verifier, parts.efficiency, parts.hygiene) == (1.0, 1.0, 1.0)
    assert quality_score(clean) == 1.0


def test_faults_lower_the_score_in_a_sensible_order(
    faulty_trajectories: list[Trajectory],
) -> None:
    clean = _scores(faulty_trajectories, Outcome.SUCCESS, None)
    recovered = _scores(faulty_trajectories, Outcome.SUCCESS, FaultKind.INVALID_TOOL)
    redundant = _scores(faulty_trajectories, Outcome.SUCCESS, FaultKind.REDUNDANT_CALL)
    looping = _scores(faulty_trajectories, Outcome.SUCCESS, FaultKind.LOOPING_CALL)
    failed = [
        quality_score(t) for t in faulty_trajectories if t.metadata.outcome is Outcome.FAILURE
    ]
    assert min(clean) == 1.0
    assert all(0.7 <= q < 1.0 for q in recovered)
    assert 0.3 < mean(redundant) < 0.9
    assert max(looping) < 0.3
    assert mean(failed) < mean(redundant)
    assert mean(failed) < 0.5
    assert max(failed) < min(clean)


def test_a_recovered_error_costs_less_than_an_unrecovered_one(
    faulty_trajectories: list[Trajectory],
) -> None:
    recovered = pick(
        faulty_trajectories,
        lambda t: fault_of(t) is FaultKind.INVALID_TOOL and t.metadata.outcome is Outcome.SUCCESS,
    )
    unrecovered = pick(
        faulty_trajectories,
        lambda t: fault_of(t) is FaultKind.INVALID_TOOL and t.metadata.outcome is Outcome.FAILURE,
    )
    assert quality_parts(recovered).hygiene > quality_parts(unrecovered).hygiene
