"""The bounded schedule controller: moves CARE's parameters from development metrics.

Every ``every`` updates, :func:`next_config` looks at the development metrics of the
last evaluation (and of the one before) and moves each of ``lambda_prog``,
``lambda_eff``, ``p_low`` and ``p_high`` by at most one ``step`` (relative to its
admissible range), never outside that range, and never so that ``p_low`` reaches
``p_high``. The rules, in order:

- **progress shaping** (``lambda_prog``): up when most groups are still unsolved (share
  of groups in the progress regime above ``crowded``), down when almost none are (below
  ``rare``): shaping helps while the model cannot yet succeed, and only then.
- **efficiency pressure** (``lambda_eff``): down when development success fell since the
  last evaluation (cost pressure must never cost successes); else up when success held
  and the mean execution cost rose.
- **mastery threshold** (``p_high``): up when development success fell (fewer groups are
  judged mastered, so fewer are optimized for cost); down when most groups are mastered
  and success held (more pressure on cost).
- **progress threshold** (``p_low``): follows the share of unsolved groups like
  ``lambda_prog``: up when they crowd, so more groups get shaping.

Each change comes with its reason, so a run's schedule can be read back.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from contract import InvalidInputError
from training.care import CareConfig

PARAMETERS = ("lambda_prog", "lambda_eff", "p_low", "p_high")


@dataclass(frozen=True)
class DevMetrics:
    """What the controller reads of an evaluation on the development set, and of the
    rollout groups since the last one."""

    success: float
    """Development success rate, in [0, 1]."""
    mean_cost: float
    """Mean normalized execution cost of the development rollouts, in [0, 1]."""
    progress_share: float
    """Share of training groups in the progress regime since the last evaluation."""
    efficiency_share: float
    """Share of training groups in the efficiency regime since the last evaluation."""

    def __post_init__(self) -> None:
        for name in ("success", "mean_cost", "progress_share", "efficiency_share"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise InvalidInputError(name, f"{value} is outside [0, 1]")
        if self.progress_share + self.efficiency_share > 1.0 + 1e-9:
            raise InvalidInputError("efficiency_share", "the regime shares add up to over 1")


@dataclass(frozen=True)
class ScheduleConfig:
    """The controller's bounds and rule thresholds."""

    every: int = 10
    """Updates between two moves."""
    step: float = 0.1
    """The largest move of a parameter, as a share of its admissible range."""
    ranges: dict[str, tuple[float, float]] = field(
        default_factory=lambda: {
            "lambda_prog": (0.1, 1.0),
            "lambda_eff": (0.0, 0.3),
            "p_low": (0.05, 0.4),
            "p_high": (0.6, 0.95),
        }
    )
    crowded: float = 0.5
    rare: float = 0.1
    tolerance: float = 0.01
    """A change in development success or cost smaller than this is no change."""

    def __post_init__(self) -> None:
        if self.every < 1:
            raise InvalidInputError("every", f"{self.every} is below 1")
        if not 0.0 < self.step <= 1.0:
            raise InvalidInputError("step", f"{self.step} is outside (0, 1]")
        if set(self.ranges) != set(PARAMETERS):
            raise InvalidInputError("ranges", "needs exactly", PARAMETERS)
        for name, (low, high) in self.ranges.items():
            if not 0.0 <= low <= high <= 1.0:
                raise InvalidInputError(f"ranges.{name}", f"({low}, {high}) is not within [0, 1]")
        if self.ranges["p_low"][1] >= self.ranges["p_high"][0]:
            raise InvalidInputError("ranges.p_low", "must end below where p_high's range starts")
        if not 0.0 <= self.rare < self.crowded <= 1.0:
            raise InvalidInputError("rare", f"{self.rare} must be below crowded {self.crowded}")

    def due(self, update: int) -> bool:
        """Whether the controller moves after update number ``update`` (1-based)."""
        return update > 0 and update % self.every == 0


@dataclass(frozen=True)
class Move:
    """One parameter's change and why."""

    parameter: str
    before: float
    after: float
    reason: str


def next_config(
    config: CareConfig,
    metrics: DevMetrics,
    previous: DevMetrics | None,
    schedule: ScheduleConfig | None = None,
) -> tuple[CareConfig, tuple[Move, ...]]:
    """CARE's parameters after one move of the controller, and the moves made."""
    schedule = schedule or ScheduleConfig()
    fell = previous is not None and metrics.success < previous.success - schedule.tolerance
    held = previous is not None and not fell
    costlier = previous is not None and metrics.mean_cost > previous.mean_cost + schedule.tolerance
    wanted: dict[str, tuple[int, str]] = {}
    if metrics.progress_share > schedule.crowded:
        why = f"{metrics.progress_share:.0%} of groups are unsolved"
        wanted["lambda_prog"] = (1, why)
        wanted["p_low"] = (1, why)
    elif metrics.progress_share < schedule.rare:
        wanted["lambda_prog"] = (-1, f"only {metrics.progress_share:.0%} of groups are unsolved")
    if fell and previous is not None:
        why = f"development success fell from {previous.success:.3f} to {metrics.success:.3f}"
        wanted["lambda_eff"] = (-1, why)
        wanted["p_high"] = (1, why)
    else:
        if held and costlier and previous is not None:
            why = (
                f"success held and the mean cost rose from {previous.mean_cost:.3f} "
                f"to {metrics.mean_cost:.3f}"
            )
            wanted["lambda_eff"] = (1, why)
        if held and metrics.efficiency_share > schedule.crowded:
            why = f"success held and {metrics.efficiency_share:.0%} of groups are mastered"
            wanted["p_high"] = (-1, why)
    values = {name: float(getattr(config, name)) for name in PARAMETERS}
    moves = []
    for name in PARAMETERS:
        if name not in wanted:
            continue
        direction, reason = wanted[name]
        low, high = schedule.ranges[name]
        moved = min(high, max(low, values[name] + direction * schedule.step * (high - low)))
        moved = round(moved, 6)
        if moved != values[name]:
            moves.append(Move(name, values[name], moved, reason))
            values[name] = moved
    return replace(config, **values), tuple(moves)
