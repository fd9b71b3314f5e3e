"""Rule-based attribution agrees with the scripted policy's injected faults."""

from __future__ import annotations

from collections import Counter

from contract import FailureType, FaultKind, Outcome, Trajectory

EXPECTED = {
    FaultKind.INVALID_TOOL: {FailureType.ROUTING},
    FaultKind.LOOPING_CALL: {FailureType.STATE_TRACKING},
    FaultKind.PREMATURE_FINISH: {FailureType.PREMATURE_TERMINATION},
    FaultKind.WRONG_ARGUMENT: {FailureType.ARGUMENT_GROUNDING, FailureType.RECOVERY},
    FaultKind.SKIPPED_STEP: {
        FailureType.PREMATURE_TERMINATION,
        FailureType.ROUTING,
        FailureType.STATE_TRACKING,
    },
}


def test_attribution_matches_injected_faults(faulty_trajectories: list[Trajectory]) -> None:
    hits: Counter[bool] = Counter()
    for t in faulty_trajectories:
        if t.metadata.outcome is not Outcome.FAILURE or not t.metadata.injected_faults:
            continue
        expected = EXPECTED.get(t.metadata.injected_faults[0])
        if expected is not None:
            hits[t.metadata.failure_attribution in expected] += 1
    assert sum(hits.values()) >= 30
    assert hits[True] / sum(hits.values()) >= 0.8, hits


def test_every_failure_is_attributed(faulty_trajectories: list[Trajectory]) -> None:
    for t in faulty_trajectories:
        attributed = t.metadata.failure_attribution is not None
        assert attributed == (t.metadata.outcome is Outcome.FAILURE)
