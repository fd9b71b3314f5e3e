"""The bounded schedule controller: each rule, the bounds, and the reasons."""

from __future__ import annotations

import pytest

from contract import InvalidInputError
from training.care import CareConfig
from training.schedule import DevMetrics, ScheduleConfig, next_config

BASE = CareConfig()


def metrics(
    success: float = 0.5, cost: float = 0.3, progress: float = 0.3, efficiency: float = 0.3
) -> DevMetrics:
    return DevMetrics(
        success=success, mean_cost=cost, progress_share=progress, efficiency_share=efficiency
    )


def test_crowded_unsolved_groups_raise_progress_shaping_and_its_threshold() -> None:
    config, moves = next_config(BASE, metrics(progress=0.7), None)

    assert config.lambda_prog == pytest.approx(0.5 + 0.1 * 0.9)
    assert config.p_low == pytest.approx(0.2 + 0.1 * 0.35)
    assert {m.parameter for m in moves} == {"lambda_prog", "p_low"}
    assert all("70% of groups are unsolved" in m.reason for m in moves)


def test_falling_success_eases_cost_pressure_and_raises_the_mastery_bar() -> None:
    config, moves = next_config(BASE, metrics(success=0.40), metrics(success=0.50))

    assert config.lambda_eff == pytest.approx(0.1 - 0.1 * 0.3)
    assert config.p_high == pytest.approx(0.8 + 0.1 * 0.35)
    assert {m.parameter for m in moves} == {"lambda_eff", "p_high"}
    assert "fell from 0.500 to 0.400" in moves[0].reason


def test_held_success_with_rising_cost_and_many_mastered_groups_presses_on_cost() -> None:
    config, moves = next_config(
        BASE, metrics(success=0.6, cost=0.5, efficiency=0.6), metrics(success=0.6, cost=0.3)
    )

    assert config.lambda_eff == pytest.approx(0.1 + 0.03)
    assert config.p_high == pytest.approx(0.8 - 0.035)
    assert [m.parameter for m in moves] == ["lambda_eff", "p_high"]


def test_nothing_moves_without_a_reason_and_the_first_evaluation_never_touches_cost() -> None:
    assert next_config(BASE, metrics(), metrics()) == (BASE, ())
    config, moves = next_config(BASE, metrics(cost=0.9, progress=0.1, efficiency=0.9), None)
    assert (config, moves) == (BASE, ())


def test_moves_stop_at_the_admissible_bounds() -> None:
    config = BASE
    for _ in range(30):
        config, _ = next_config(config, metrics(progress=0.9, efficiency=0.0), None)
    assert (config.lambda_prog, config.p_low) == (1.0, 0.4)
    assert config.p_low < config.p_high
    _, moves = next_config(config, metrics(progress=0.9, efficiency=0.0), None)
    assert moves == ()


def test_the_controller_moves_every_n_updates() -> None:
    schedule = ScheduleConfig(every=4)
    assert [u for u in range(13) if schedule.due(u)] == [4, 8, 12]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"every": 0}, "every"),
        ({"step": 0.0}, "step"),
        ({"ranges": {"lambda_prog": (0.0, 1.0)}}, "ranges"),
        ({"rare": 0.6}, "rare"),
    ],
)
def test_bad_schedules_are_refused_naming_the_field(changes: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        ScheduleConfig(**changes)  # type: ignore[arg-type]
    assert caught.value.field == field


def test_bad_metrics_are_refused_naming_the_field() -> None:
    with pytest.raises(InvalidInputError, match="success"):
        metrics(success=1.5)
    with pytest.raises(InvalidInputError, match="efficiency_share"):
        metrics(progress=0.7, efficiency=0.7)
