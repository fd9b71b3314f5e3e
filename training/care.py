"""CARE: competence-aware rewards and advantages for a group of rollouts of one task.

For a task, G rollouts with binary success ``s_i``; competence ``s_bar = mean(s_i)``
picks the regime:

- ``s_bar < p_low``, **progress**: ``R_i = s_i + lambda_prog * p_i``, ``p_i`` the
  verified progress in [0, 1] (``Verdict.partial_progress``: what each check earned,
  partial credit for an unmet one included): a task nobody solves still teaches, and a
  rollout that booked the right table at the wrong time beats one that booked nothing.
- ``p_low <= s_bar < p_high``, **consolidation**: ``R_i = s_i``.
- ``s_bar >= p_high``, **efficiency**: ``R_i = s_i - lambda_eff * e_i``, ``e_i`` the
  normalized execution cost ``w * min(1, tokens_i / token_budget) + (1 - w) *
  min(1, calls_i / call_budget)`` with ``w = token_weight``: output tokens and tool calls
  against their per-episode budgets, so ``e_i`` is in [0, 1].

Advantages: ``A_i = (R_i - R_mean) / (sigma + eps)``, ``sigma`` the group's standard
deviation of rewards (population, ``ddof = 0``), except in the efficiency regime, where
``sigma = max(sigma_R, sigma_anchor)`` and ``sigma_anchor = sqrt(p_high * (1 - p_high))``,
the spread of a group at the edge of mastery. Plain group normalization would blow the
tiny cost gaps of an all-success group up to unit-scale advantages; the anchor keeps
them small.

Defaults (the paper gives none; all configurable): ``p_low = 0.2`` and ``p_high = 0.8``
(the plan's own mastery thresholds), ``lambda_prog = 0.5`` (progress never outweighs a
success), ``lambda_eff = 0.1`` (cost never outweighs success), ``token_weight = 0.5``,
``eps = 1e-6``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from contract import InvalidInputError


class Regime(StrEnum):
    """Which reward a group gets, by its competence."""

    PROGRESS = "progress"
    CONSOLIDATION = "consolidation"
    EFFICIENCY = "efficiency"


@dataclass(frozen=True)
class CareConfig:
    """CARE's parameters (module docstring); out-of-range values are refused by name."""

    p_low: float = 0.2
    p_high: float = 0.8
    lambda_prog: float = 0.5
    lambda_eff: float = 0.1
    token_weight: float = 0.5
    epsilon: float = 1e-6

    def __post_init__(self) -> None:
        for name in ("p_low", "p_high", "lambda_prog", "lambda_eff", "token_weight"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise InvalidInputError(name, f"{value} is outside [0, 1]")
        if not self.p_low < self.p_high:
            raise InvalidInputError("p_low", f"{self.p_low} must be below p_high {self.p_high}")
        if not 0.0 < self.epsilon < 1.0:
            raise InvalidInputError("epsilon", f"{self.epsilon} is outside (0, 1)")

    @property
    def sigma_anchor(self) -> float:
        """``sqrt(p_high * (1 - p_high))``: the floor of sigma in the efficiency regime."""
        return math.sqrt(self.p_high * (1.0 - self.p_high))


@dataclass(frozen=True)
class Rollout:
    """What CARE reads of one rollout."""

    success: bool
    progress: float
    """Verified progress in [0, 1]: ``Verdict.partial_progress``."""
    output_tokens: int
    tool_calls: int

    def __post_init__(self) -> None:
        if not 0.0 <= self.progress <= 1.0:
            raise InvalidInputError("progress", f"{self.progress} is outside [0, 1]")
        for name in ("output_tokens", "tool_calls"):
            if getattr(self, name) < 0:
                raise InvalidInputError(name, f"{getattr(self, name)} is negative")


@dataclass(frozen=True)
class Budget:
    """The per-episode budgets execution cost is measured against."""

    output_tokens: int
    tool_calls: int

    def __post_init__(self) -> None:
        for name in ("output_tokens", "tool_calls"):
            if getattr(self, name) < 1:
                raise InvalidInputError(f"budget.{name}", f"{getattr(self, name)} is below 1")


@dataclass(frozen=True)
class CareGroup:
    """One group's competence, regime, costs, rewards and advantages (rollout order)."""

    competence: float
    regime: Regime
    costs: tuple[float, ...]
    rewards: tuple[float, ...]
    advantages: tuple[float, ...]


def competence(rollouts: Sequence[Rollout]) -> float:
    """The group's success rate ``s_bar``."""
    if not rollouts:
        raise InvalidInputError("rollouts", "a group needs at least one rollout")
    return sum(r.success for r in rollouts) / len(rollouts)


def regime_of(competence: float, config: CareConfig) -> Regime:
    """Progress below ``p_low``, efficiency from ``p_high``, consolidation between."""
    if competence < config.p_low:
        return Regime.PROGRESS
    if competence >= config.p_high:
        return Regime.EFFICIENCY
    return Regime.CONSOLIDATION


def execution_cost(rollout: Rollout, budget: Budget, token_weight: float) -> float:
    """``e_i`` in [0, 1]: output tokens and tool calls as shares of their budgets."""
    tokens = min(1.0, rollout.output_tokens / budget.output_tokens)
    calls = min(1.0, rollout.tool_calls / budget.tool_calls)
    return token_weight * tokens + (1.0 - token_weight) * calls


def reward(rollout: Rollout, regime: Regime, cost: float, config: CareConfig) -> float:
    """``R_i`` in the group's regime."""
    success = float(rollout.success)
    if regime is Regime.PROGRESS:
        return success + config.lambda_prog * rollout.progress
    if regime is Regime.EFFICIENCY:
        return success - config.lambda_eff * cost
    return success


def advantages(rewards: Sequence[float], regime: Regime, config: CareConfig) -> tuple[float, ...]:
    """Group-normalized advantages; sigma floored by ``sigma_anchor`` in the efficiency regime."""
    mean = sum(rewards) / len(rewards)
    sigma = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
    if regime is Regime.EFFICIENCY:
        sigma = max(sigma, config.sigma_anchor)
    return tuple((r - mean) / (sigma + config.epsilon) for r in rewards)


def care_group(
    rollouts: Sequence[Rollout], budget: Budget, config: CareConfig | None = None
) -> CareGroup:
    """CARE over one task's group of rollouts."""
    config = config or CareConfig()
    level = competence(rollouts)
    regime = regime_of(level, config)
    costs = tuple(execution_cost(r, budget, config.token_weight) for r in rollouts)
    rewards = tuple(reward(r, regime, c, config) for r, c in zip(rollouts, costs, strict=True))
    return CareGroup(level, regime, costs, rewards, advantages(rewards, regime, config))
