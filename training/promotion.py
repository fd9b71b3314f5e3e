"""The promotion gate: does a candidate model replace the champion?

Both are evaluated on the same development set (the same tasks with the same seeds:
``training/evaluate.py``), and their feedback reports are compared. The candidate is
promoted only if

- its MobilePA-style Overall beats the champion's by at least ``min_overall_gain``
  (delta), and
- no capability the champion was measured on drops by more than ``max_capability_drop``
  (epsilon); a capability the candidate was not measured on counts as dropped to 0, and
- the paired interval of the Overall difference reaches no lower than
  ``min_interval_low`` (default 0).

**The paired interval.** Both models ran the same tasks with the same seeds, so the
difference is measured task by task: the tasks are resampled with replacement (a paired
bootstrap, ``resamples`` times, seeded), both Overalls are computed on each resample,
and the central ``confidence`` share (95%) of the differences is the interval. Its lower
end at or above 0 means that no plausible resample of the development set makes the
candidate worse: a candidate that wins some tasks and loses others, so that the losses
could outweigh the wins, is not promoted however large its gain looks. A positive
``min_interval_low`` asks for a gain that noise cannot explain; -1 ignores the interval.

With no champion yet, any candidate with an Overall is promoted. Reports of different
development sets cannot be compared and are refused. Every decision carries its reasons.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from contract import OVERALL_WEIGHTS, Capability, FeedbackReport, InvalidInputError

Matrix = np.ndarray[tuple[int, ...], np.dtype[np.float64]]


@dataclass(frozen=True)
class PromotionRule:
    """The gate's bounds (deployment settings)."""

    min_overall_gain: float = 0.01
    """delta: how much the Overall must improve, in [0, 1]."""
    max_capability_drop: float = 0.02
    """epsilon: how much any capability may regress, in [0, 1]."""
    min_interval_low: float = 0.0
    """The lowest the paired interval's lower end may be, in [-1, 1]."""
    confidence: float = 0.95
    resamples: int = 2000

    def __post_init__(self) -> None:
        for name in ("min_overall_gain", "max_capability_drop"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise InvalidInputError(name, f"{value} is outside [0, 1]")
        if not -1.0 <= self.min_interval_low <= 1.0:
            raise InvalidInputError(
                "min_interval_low", f"{self.min_interval_low} is outside [-1, 1]"
            )
        if not 0.5 <= self.confidence < 1.0:
            raise InvalidInputError("confidence", f"{self.confidence} is outside [0.5, 1)")
        if self.resamples < 100:
            raise InvalidInputError("resamples", f"{self.resamples} is below 100")


@dataclass(frozen=True)
class PairedInterval:
    """The candidate's Overall minus the champion's on the tasks both were measured on,
    and its paired bootstrap interval."""

    difference: float
    low: float
    high: float
    confidence: float
    tasks: int

    def describe(self) -> str:
        return (
            f"paired {self.confidence:.0%} interval of the Overall difference over "
            f"{self.tasks} tasks: [{self.low:+.3f}, {self.high:+.3f}]"
        )


@dataclass(frozen=True)
class PromotionDecision:
    """Whether to promote, by how much the Overall moved, what regressed, and why."""

    promote: bool
    overall_gain: float | None
    """Candidate minus champion Overall; None without a champion."""
    regressions: dict[Capability, float]
    """Capabilities that dropped by more than the rule allows, by how much."""
    reasons: tuple[str, ...]
    interval: PairedInterval | None = None
    """None without a champion, or without the tasks' capabilities."""


def decide_promotion(
    candidate: FeedbackReport,
    champion: FeedbackReport | None,
    rule: PromotionRule,
    capabilities: Mapping[str, Sequence[Capability]] | None = None,
) -> PromotionDecision:
    """Compare ``candidate`` with ``champion`` (module docstring); ``capabilities`` per
    task fingerprint (the development set's) give the paired interval."""
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
    interval = None
    if capabilities is not None:
        interval = paired_interval(candidate, champion, capabilities, rule)
    if interval is None:
        reasons.append("no paired interval: the tasks' capabilities are unknown")
    else:
        reasons.append(
            f"{interval.describe()} (its lower end at least {rule.min_interval_low:+.3f} needed)"
        )
        promote = promote and interval.low >= rule.min_interval_low - 1e-12
    return PromotionDecision(promote, gain, regressions, tuple(reasons), interval)


def paired_interval(
    candidate: FeedbackReport,
    champion: FeedbackReport,
    capabilities: Mapping[str, Sequence[Capability]],
    rule: PromotionRule,
    seed: int = 0,
) -> PairedInterval | None:
    """The paired bootstrap interval of the Overall difference (module docstring), over
    the tasks both reports measured; None when there are none."""
    ours = {t.fingerprint: t.success_rate for t in candidate.tasks}
    theirs = {t.fingerprint: t.success_rate for t in champion.tasks}
    shared = sorted(fp for fp in ours.keys() & theirs.keys() if capabilities.get(fp))
    if not shared:
        return None
    order = list(OVERALL_WEIGHTS)
    has = np.array([[c in capabilities[fp] for c in order] for fp in shared], dtype=float)
    weights = np.array([OVERALL_WEIGHTS[c] for c in order])
    rates = np.array([[ours[fp], theirs[fp]] for fp in shared])
    n = len(shared)
    picks = np.random.default_rng(seed).integers(0, n, size=(rule.resamples, n))
    counts = np.zeros((rule.resamples, n))
    np.add.at(counts, (np.arange(rule.resamples)[:, None], picks), 1.0)
    full = np.ones((1, n))
    differences = _overall_difference(counts, has, rates, weights)
    point = float(_overall_difference(full, has, rates, weights)[0])
    tail = (1.0 - rule.confidence) / 2 * 100
    low, high = np.percentile(differences, [tail, 100 - tail])
    return PairedInterval(point, float(low), float(high), rule.confidence, n)


def _overall_difference(counts: Matrix, has: Matrix, rates: Matrix, weights: Matrix) -> Matrix:
    """Per row of ``counts`` (how often each task is drawn), the candidate's Overall minus
    the champion's; a capability no drawn task has drops out, the weights renormalized."""
    tasks_per_capability = counts @ has
    measured = tasks_per_capability > 0
    norm = (measured * weights).sum(axis=1)
    out = []
    for model in (0, 1):
        sums = counts @ (has * rates[:, model : model + 1])
        means = np.divide(sums, tasks_per_capability, where=measured, out=np.zeros_like(sums))
        out.append((means * weights).sum(axis=1) / norm)
    result: Matrix = out[0] - out[1]
    return result


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
