"""A quality score for a trajectory as training data, from its evidence alone."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from contract import ErrorKind, Trajectory
from curation.facts import StepFacts, TrajectoryFacts, facts_of

LOOP_THRESHOLD = 3
"""The same call this many times is a loop, not a retry."""
UNRECOVERED_ERROR_PENALTY = 0.25
RECOVERED_ERROR_PENALTY = 0.1
REDUNDANT_CALL_PENALTY = 0.1
LOOP_PENALTY = 0.3


@dataclass(frozen=True)
class QualityParts:
    """The factors of :func:`quality_score`, each in [0, 1]."""

    verifier: float
    efficiency: float
    hygiene: float

    @property
    def score(self) -> float:
        return round(self.verifier * self.efficiency * self.hygiene, 6)


def quality_score(trajectory: Trajectory | TrajectoryFacts) -> float:
    """Quality in [0, 1]: ``verifier * efficiency * hygiene``.

    - ``verifier = (verdict.score + verdict.progress) / 2``: 1 for a passed verdict;
      halved when the episode did collateral damage (a task done with harm is worth
      less than half of one done cleanly).
    - ``efficiency = sqrt(min(1, reference_calls / calls))``: calls are the successful
      non-terminal actions (failed ones are priced by hygiene, not twice), compared with
      the reference plan's; the square root makes one extra call in four cost about 13%.
    - ``hygiene = max(0, 1 - 0.25 * unrecovered errors - 0.1 * recovered errors
      - 0.1 * redundant calls - 0.3 * [a call repeated 3+ times])``: an error is recovered
      when a later step runs the same target successfully, or for an unknown tool when
      the verdict passed (recovery is worth keeping, so it costs less); a redundant call
      repeats an earlier successful call exactly.

    A clean reference-length success scores 1.0; one recovered error 0.9; one redundant
    call on a three-call plan about 0.78; a loop falls below 0.3.
    """
    return quality_parts(trajectory).score


def quality_parts(trajectory: Trajectory | TrajectoryFacts) -> QualityParts:
    """The three factors of :func:`quality_score`, for reports and tests."""
    facts = facts_of(trajectory)
    steps = facts.steps
    calls = sum(1 for s in steps if s.is_call and s.error is None)
    efficiency = min(1.0, max(facts.reference_calls, 1) / calls) ** 0.5 if calls else 1.0
    recovered, unrecovered = _errors(steps, facts.passed)
    repeats = _repeats(steps)
    hygiene = 1.0 - (
        UNRECOVERED_ERROR_PENALTY * unrecovered
        + RECOVERED_ERROR_PENALTY * recovered
        + REDUNDANT_CALL_PENALTY * sum(repeats.values())
        + (LOOP_PENALTY if any(n + 1 >= LOOP_THRESHOLD for n in repeats.values()) else 0.0)
    )
    return QualityParts(
        verifier=(facts.score + facts.progress) / (4 if facts.harmed else 2),
        efficiency=efficiency,
        hygiene=max(0.0, hygiene),
    )


def _errors(steps: Sequence[StepFacts], succeeded: bool) -> tuple[int, int]:
    """``(recovered, unrecovered)`` errors.

    An error is recovered when a later step runs the same target successfully; an unknown
    tool or output that was no action has no target to retry, so it counts as recovered
    when the episode still succeeded.
    """
    recovered = unrecovered = 0
    for i, step in enumerate(steps):
        if step.error is None:
            continue
        if step.call is None or step.error is ErrorKind.UNKNOWN_TOOL:
            fixed = succeeded
        else:
            fixed = any(
                s.call is not None and s.target == step.target and s.error is None
                for s in steps[i + 1 :]
            )
        if fixed:
            recovered += 1
        else:
            unrecovered += 1
    return recovered, unrecovered


def _repeats(steps: Sequence[StepFacts]) -> Counter[str]:
    """How often each successful call was repeated after its first success."""
    seen: Counter[str] = Counter(
        s.call for s in steps if s.call is not None and s.is_call and s.error is None
    )
    return Counter({k: n - 1 for k, n in seen.items() if n > 1})
