"""The promotion gate: does a candidate model replace the champion?

Both are evaluated on the same development set (the same tasks with the same seeds:
``training/evaluate.py``), and their feedback reports are compared. The candidate is
promoted only if

- its MobilePA-style Overall beats the champion's by at least ``min_overall_gain``
  (delta), and
- no capability the champion was measured on drops by more than ``max_capability_drop``
  (epsilon); a capability the candidate was not measured on counts as dropped to 0.

With no champion yet, any candidate with an Overall is promoted. Reports of different
development sets cannot be compared and are refused. Every decision carries its reasons.
"""

from __future__ import annotations

from dataclasses import dataclass

from contract import Capability, FeedbackReport, InvalidInputError


@dataclass(frozen=True)
class PromotionRule:
    """The gate's bounds (deployment settings)."""

    min_overall_gain: float = 0.01
    """delta: how much the Overall must improve, in [0, 1]."""
    max_capability_drop: float = 0.02
    """epsilon: how much any capability may regress, in [0, 1]."""

    def __post_init__(self) -> None:
        for name in ("min_overall_gain", "max_capability_drop"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise InvalidInputError(name, f"{value} is outside [0, 1]")


@dataclass(frozen=True)
class PromotionDecision:
    """Whether to promote, by how much the Overall moved, what regressed, and why."""

    promote: bool
    overall_gain: float | None
    """Candidate minus champion Overall; None without a champion."""
    regressions: dict[Capability, float]
    """Capabilities that dropped by more than the rule allows, by how much."""
    reasons: tuple[str, ...]


def decide_promotion(
    candidate: FeedbackReport, champion: FeedbackReport | None, rule: PromotionRule
) -> PromotionDecision:
    """Compare ``candidate`` with ``champion`` (module docstring)."""
    if candidate.overall is None:
        return PromotionDecision(
            False, None, {}, ("the candidate has no Overall: nothing of it was measured",)
        )
    if champion is None:
        return PromotionDecision(
            True,
            None,
            {},
            (f"no champion yet: the candidate's Overall is {candidate.overall:.3f}",),
        )
    _same_development_set(candidate, champion)
    champion_overall = champion.overall or 0.0
    gain = candidate.overall - champion_overall
    regressions = {
        capability: drop
        for capability, score in champion.capability_scores.items()
        if (drop := score - candidate.capability_scores.get(capability, 0.0))
        > rule.max_capability_drop
    }
    reasons = [
        f"Overall {champion_overall:.3f} -> {candidate.overall:.3f} ({gain:+.3f}; "
        f"at least {rule.min_overall_gain:+.3f} needed)"
    ]
    reasons += [
        f"{capability.value} regressed by {drop:.3f} (at most {rule.max_capability_drop:.3f})"
        for capability, drop in sorted(regressions.items())
    ]
    promote = gain >= rule.min_overall_gain - 1e-12 and not regressions
    return PromotionDecision(promote, gain, regressions, tuple(reasons))


def _same_development_set(candidate: FeedbackReport, champion: FeedbackReport) -> None:
    ours = {t.fingerprint for t in candidate.tasks}
    theirs = {t.fingerprint for t in champion.tasks}
    if ours != theirs:
        raise InvalidInputError(
            "candidate.tasks",
            f"the candidate ({candidate.id}) and the champion ({champion.id}) were evaluated "
            f"on different development tasks ({len(ours ^ theirs)} differ): evaluate both on "
            "the same set",
        )
