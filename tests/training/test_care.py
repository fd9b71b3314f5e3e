"""CARE's rewards and advantages on hand-computed groups."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from contract import InvalidInputError
from training.care import (
    Budget,
    CareConfig,
    Regime,
    Rollout,
    advantages,
    care_group,
    execution_cost,
    regime_of,
)

BUDGET = Budget(output_tokens=1000, tool_calls=10)


def rollout(success: bool, progress: float = 0.0, tokens: int = 0, calls: int = 0) -> Rollout:
    return Rollout(success=success, progress=progress, output_tokens=tokens, tool_calls=calls)


def test_the_regime_follows_competence_with_p_high_inclusive() -> None:
    config = CareConfig()
    assert regime_of(0.0, config) is Regime.PROGRESS
    assert regime_of(0.19, config) is Regime.PROGRESS
    assert regime_of(0.2, config) is Regime.CONSOLIDATION
    assert regime_of(0.79, config) is Regime.CONSOLIDATION
    assert regime_of(0.8, config) is Regime.EFFICIENCY


def test_execution_cost_weighs_tokens_and_calls_against_their_budgets_capped_at_one() -> None:
    assert execution_cost(rollout(True, tokens=250, calls=5), BUDGET, 0.5) == pytest.approx(0.375)
    assert execution_cost(rollout(True, tokens=4000, calls=40), BUDGET, 0.5) == 1.0
    assert execution_cost(rollout(True, tokens=500, calls=0), BUDGET, 1.0) == 0.5


def test_a_group_nobody_solves_is_rewarded_for_verified_progress() -> None:
    group = care_group([rollout(False, p) for p in (0.0, 0.5, 0.25, 1.0)], BUDGET)

    assert group.regime is Regime.PROGRESS and group.competence == 0.0
    assert group.rewards == (0.0, 0.25, 0.125, 0.5)  # lambda_prog = 0.5
    mean = 0.21875
    sigma = math.sqrt(sum((r - mean) ** 2 for r in group.rewards) / 4)
    expected = [(r - mean) / (sigma + 1e-6) for r in group.rewards]
    assert group.advantages == pytest.approx(expected)
    assert group.advantages[3] > group.advantages[1] > group.advantages[2] > group.advantages[0]


def test_a_half_solved_group_is_rewarded_for_success_alone() -> None:
    group = care_group(
        [rollout(True, 1.0, 900, 9), rollout(False, 0.9), rollout(True), rollout(False)], BUDGET
    )

    assert group.regime is Regime.CONSOLIDATION
    assert group.rewards == (1.0, 0.0, 1.0, 0.0)
    assert group.advantages == pytest.approx((1.0, -1.0, 1.0, -1.0), abs=1e-5)


def test_the_anchor_keeps_tiny_cost_gaps_of_an_all_success_group_small() -> None:
    """The paper's pathology: lambda_eff = 0.1, every rollout succeeds, costs 0.10 to 0.13.
    R = 0.99, 0.989, 0.988, 0.987; mean 0.9885; sigma_R = sqrt(1.25e-6) = 0.001118. Plain
    normalization gives +-1.342 and +-0.447: unit scale from a 0.003 gap in reward. The
    anchor sqrt(0.8 * 0.2) = 0.4 gives +-0.00375 and +-0.00125."""
    costs = (0.10, 0.11, 0.12, 0.13)
    group = care_group(
        [rollout(True, 1.0, tokens=round(c * 1000), calls=round(c * 10)) for c in costs],
        BUDGET,
        CareConfig(token_weight=1.0),
    )

    assert group.regime is Regime.EFFICIENCY and group.competence == 1.0
    assert group.costs == pytest.approx(costs)
    assert group.rewards == pytest.approx((0.99, 0.989, 0.988, 0.987))
    plain = advantages(group.rewards, Regime.CONSOLIDATION, CareConfig())
    assert plain == pytest.approx((1.3416, 0.4472, -0.4472, -1.3416), rel=2e-3)
    assert group.advantages == pytest.approx((0.00375, 0.00125, -0.00125, -0.00375), rel=1e-4)


def test_the_anchor_does_not_shrink_a_group_that_really_differs() -> None:
    """An efficiency-regime group with a failure: sigma_R (0.43) is above the anchor."""
    group = care_group(
        [rollout(True), rollout(True), rollout(True), rollout(True), rollout(False)], BUDGET
    )

    assert group.regime is Regime.EFFICIENCY
    assert group.rewards == (1.0, 1.0, 1.0, 1.0, 0.0)
    sigma = math.sqrt((4 * 0.2**2 + 0.8**2) / 5)
    assert sigma > CareConfig().sigma_anchor
    assert group.advantages[4] == pytest.approx(-0.8 / (sigma + 1e-6))


def test_identical_rewards_give_zero_advantages() -> None:
    group = care_group([rollout(True, 1.0, 100, 2)] * 3, BUDGET)
    assert group.advantages == (0.0, 0.0, 0.0)


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: CareConfig(p_low=0.9), "p_low"),
        (lambda: CareConfig(lambda_eff=1.5), "lambda_eff"),
        (lambda: CareConfig(epsilon=0.0), "epsilon"),
        (lambda: Rollout(True, 1.2, 0, 0), "progress"),
        (lambda: Rollout(True, 1.0, -1, 0), "output_tokens"),
        (lambda: Budget(output_tokens=0, tool_calls=3), "budget.output_tokens"),
        (lambda: care_group([], BUDGET), "rollouts"),
    ],
)
def test_bad_parameters_are_refused_naming_the_field(
    make: Callable[[], object], field: str
) -> None:
    with pytest.raises(InvalidInputError) as caught:
        make()
    assert caught.value.field == field
