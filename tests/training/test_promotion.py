"""The promotion gate on hand-built reports of one development set."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson
import pytest

from contract import Capability, FeedbackReport, InvalidInputError
from training.evaluate import overall_score
from training.promotion import PromotionRule, decide_promotion

EXAMPLE = Path(__file__).parents[2] / "docs" / "examples" / "feedback-report.json"
RULE = PromotionRule(min_overall_gain=0.01, max_capability_drop=0.02)


def _report(scores: dict[str, float], **changes: Any) -> FeedbackReport:
    data = orjson.loads(EXAMPLE.read_bytes())
    typed = {Capability(c): s for c, s in scores.items()}
    data |= {"capability_scores": scores, "overall": overall_score(typed)} | changes
    return FeedbackReport.model_validate(data)


CHAMPION = _report({"tool_use": 0.60, "memory": 0.40, "skills": 0.50, "subagent": 0.50})


def test_a_better_candidate_without_regressions_is_promoted() -> None:
    candidate = _report({"tool_use": 0.64, "memory": 0.39, "skills": 0.50, "subagent": 0.50})
    decision = decide_promotion(candidate, CHAMPION, RULE)
    # Overall: 0.5 * 0.04 - 0.2 * 0.01 = +0.018; memory dropped 0.01, within 0.02.
    assert decision.promote
    assert decision.overall_gain is not None and math.isclose(decision.overall_gain, 0.018)
    assert decision.regressions == {}
    assert decision.reasons == (
        "Overall 0.530 -> 0.548 (+0.018; at least +0.010 needed)",
        "no paired interval: the tasks' capabilities are unknown",
    )
    assert decision.interval is None


def test_a_gain_below_delta_is_not_enough() -> None:
    candidate = _report({"tool_use": 0.61, "memory": 0.40, "skills": 0.50, "subagent": 0.50})
    decision = decide_promotion(candidate, CHAMPION, RULE)
    assert not decision.promote  # +0.005 < 0.01
    assert decision.overall_gain is not None and math.isclose(decision.overall_gain, 0.005)


def test_a_capability_that_regresses_beyond_epsilon_blocks_a_better_overall() -> None:
    candidate = _report({"tool_use": 0.80, "memory": 0.30, "skills": 0.50, "subagent": 0.50})
    decision = decide_promotion(candidate, CHAMPION, RULE)
    assert not decision.promote  # Overall +0.08, but memory -0.10
    assert decision.overall_gain is not None and decision.overall_gain > 0.07
    assert list(decision.regressions) == [Capability.MEMORY]
    assert math.isclose(decision.regressions[Capability.MEMORY], 0.10)
    assert "memory regressed by 0.100 (at most 0.020)" in decision.reasons


def test_a_capability_the_candidate_was_not_measured_on_counts_as_lost() -> None:
    candidate = _report({"tool_use": 0.90, "memory": 0.60, "skills": 0.70})
    decision = decide_promotion(candidate, CHAMPION, RULE)
    assert not decision.promote
    assert set(decision.regressions) == {Capability.SUBAGENT}


def test_the_first_model_is_promoted_and_an_unmeasured_one_never_is() -> None:
    first = decide_promotion(CHAMPION, None, RULE)
    assert first.promote and first.overall_gain is None
    assert "no champion yet" in first.reasons[0]
    unmeasured = _report({}, overall=None)
    assert not decide_promotion(unmeasured, CHAMPION, RULE).promote
    assert not decide_promotion(unmeasured, None, RULE).promote


def test_reports_of_different_development_sets_are_refused() -> None:
    data = orjson.loads(EXAMPLE.read_bytes())
    other_tasks = [dict(data["tasks"][0], fingerprint="fp-" + "e" * 20)]
    candidate = _report(
        {"tool_use": 0.9, "memory": 0.9, "skills": 0.9, "subagent": 0.9}, tasks=other_tasks
    )
    with pytest.raises(InvalidInputError) as refused:
        decide_promotion(candidate, CHAMPION, RULE)
    assert refused.value.field == "candidate.tasks"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("min_overall_gain", -0.1),
        ("max_capability_drop", 1.5),
        ("min_interval_low", -1.5),
        ("confidence", 1.0),
        ("resamples", 10),
    ],
)
def test_bounds_outside_their_range_are_refused(name: str, value: float) -> None:
    with pytest.raises(InvalidInputError) as refused:
        PromotionRule(**{name: value})  # type: ignore[arg-type]
    assert refused.value.field == name


# -- the paired interval -----------------------------------------------------------------


def _paired(wins: int, losses: int, ties: int = 20) -> tuple[FeedbackReport, FeedbackReport]:
    """Reports on the same tasks: the candidate wins ``wins``, loses ``losses``, and the
    two tie (both succeed on half of them) on ``ties``."""
    outcomes = [(1, 0)] * wins + [(0, 1)] * losses + [(i % 2, i % 2) for i in range(ties)]
    reports = []
    for side in (0, 1):
        tasks = [
            {"fingerprint": f"fp-{i:020x}", "attempts": 1, "successes": o[side], "mean_cost": 0.1}
            for i, o in enumerate(outcomes)
        ]
        rate = sum(o[side] for o in outcomes) / len(outcomes)
        reports.append(_report({"tool_use": rate}, tasks=tasks))
    return reports[0], reports[1]


def _capabilities(report: FeedbackReport) -> dict[str, tuple[Capability, ...]]:
    return {t.fingerprint: (Capability.TOOL_USE,) for t in report.tasks}


def test_a_gain_the_tasks_cannot_tell_from_noise_is_not_promoted() -> None:
    candidate, champion = _paired(wins=6, losses=4)
    decision = decide_promotion(candidate, champion, RULE, _capabilities(candidate))
    assert decision.overall_gain is not None and math.isclose(decision.overall_gain, 2 / 30)
    interval = decision.interval
    assert interval is not None and interval.tasks == 30
    assert interval.low < 0 < interval.difference < interval.high
    assert math.isclose(interval.difference, decision.overall_gain)
    assert not decision.promote
    assert any(
        r.startswith("paired 95% interval of the Overall difference") for r in decision.reasons
    )


def test_a_gain_without_a_single_loss_is_promoted() -> None:
    candidate, champion = _paired(wins=3, losses=0)
    decision = decide_promotion(candidate, champion, RULE, _capabilities(candidate))
    assert decision.interval is not None and decision.interval.low == 0.0
    assert decision.promote


def test_a_positive_lower_bound_asks_for_a_gain_noise_cannot_explain() -> None:
    strict = PromotionRule(min_interval_low=0.01)
    small, champion = _paired(wins=3, losses=0)
    assert not decide_promotion(small, champion, strict, _capabilities(small)).promote
    large, champion = _paired(wins=12, losses=0)
    decision = decide_promotion(large, champion, strict, _capabilities(large))
    assert decision.interval is not None and decision.interval.low > 0.01
    assert decision.promote


def test_the_interval_is_the_same_every_time_and_ignoring_it_restores_the_old_gate() -> None:
    candidate, champion = _paired(wins=6, losses=4)
    capabilities = _capabilities(candidate)
    first = decide_promotion(candidate, champion, RULE, capabilities).interval
    assert first == decide_promotion(candidate, champion, RULE, capabilities).interval
    lenient = PromotionRule(min_interval_low=-1.0)
    assert decide_promotion(candidate, champion, lenient, capabilities).promote
