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
    assert decision.reasons == ("Overall 0.530 -> 0.548 (+0.018; at least +0.010 needed)",)


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


@pytest.mark.parametrize("name", ["min_overall_gain", "max_capability_drop"])
def test_bounds_outside_zero_and_one_are_refused(name: str) -> None:
    with pytest.raises(InvalidInputError) as refused:
        PromotionRule(**{name: -0.1})
    assert refused.value.field == name
