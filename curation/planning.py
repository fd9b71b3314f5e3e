"""Competence-aware generation plans: what the next round constructs, from feedback.

``plan_from_feedback`` turns a feedback report, the tasks the catalog knows and the number
of new tasks into a ``GenerationPlan`` that explains itself. Pure functions: no storage,
no Prefect; the same inputs always give the same plan. The rules, with the defaults of
``PlanningConfig``:

**Capability deficits shift quotas.** Each capability's share of the new tasks mixes the
even share with a share proportional to its deficit ``1 - score``::

    w_c = (1 - deficit_mix) / 4 + deficit_mix * (1 - s_c) / sum_k (1 - s_k)

so a capability below the mean score gains and one above it loses, by at most
``deficit_mix`` of the difference (``deficit_mix = 0.5``: feedback moves quota, the even
mix keeps every capability in the data). No capability falls below
``min_capability_share`` (0.10): what the floor adds is taken from the others in
proportion to their weights. A capability the report does not score counts at the mean
of those it does (no shift); a report that scores none, or all at 1.0, leaves the even mix.

**Mastered tasks are down-sampled, with a preservation set.** A task is *mastered* when
its success rate is at least ``p_high`` (0.8) over at least ``min_attempts`` (4) attempts,
*inconsistent* when it is in ``[p_low, p_high)`` (``p_low = 0.2``: the CARE regimes),
*never solved* below ``p_low``; with fewer attempts it is *unrated* and left alone. Within
a capability, a cell whose rated tasks are mastered gets fewer new tasks: its weight is
multiplied by ``1 - downsample * mastered_share`` (``downsample = 0.5``: a fully mastered
cell keeps half, so it is never emptied) and the capability's share is spread over its
cells by these weights; templates of mastered tasks get the same factor as a proposal
weight (``template_weights``), so a cell mixing mastered and weak templates proposes the
weak ones more. A deterministic preservation set is kept and re-collected once each
(``preserve``): ``preserve_share`` (0.2) of the mastered tasks, at least one, at most
``max_preserve_share`` (0.1) of the new tasks, chosen by the SHA-256 of the fingerprint
(stable across rounds and orderings).

**Inconsistent tasks are up-weighted**: re-collected ``replay_attempts`` (4) more times
(``replays``), the most uncertain first (rate nearest 0.5, then fingerprint hash), at most
``max_replay_share`` (0.25) of the new tasks, at least one.

**Never-solved tasks are not replayed**: more failed attempts at the same task teach
little, and their attributed failures already size the repair sets below. A never-solved
task with no attributed failure at all goes back to curation (nothing explains the
failures: the task or its verifier may be wrong).

**Each failure type yields a repair set** of new tasks exercising its pattern
(``contract.REPAIR_PATTERN``: routing -> routing, argument grounding -> grounding, state
tracking -> stateful, recovery -> recovery, premature termination -> long horizon). The
repair sets share at most ``max_repair_share`` (0.25) of the new tasks and no more tasks
than the failures they answer; a type with fewer than ``min_failures`` (3) attributed
failures gets none (noise). The budget is split in proportion to the failure counts
(largest remainders). The counts are the report's ``failure_counts``, or, when it has
none, the sum of its tasks' failures.

**Ambiguous cases go back to curation** (``recurate``), never into replays or the
preservation set: a task the report knows and the catalog does not; a task whose success
rate in the report and in our own stored verdicts (``observed``) differ by more than
``max_disagreement`` (0.5) with at least ``min_attempts`` on both sides; a never-solved task
with no attributed failure. Development tasks are never replayed or preserved: they only
count through the capability scores.

Quotas are apportioned over the 12 cells by largest remainders with ties to the earlier
cell, so the plan of a report that changes nothing equals ``default_plan``.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction

from contract import (
    REPAIR_PATTERN,
    Capability,
    Difficulty,
    FailureType,
    FeedbackReport,
    GenerationPlan,
    InvalidInputError,
    Outcome,
    Quota,
    Recurate,
    RepairQuota,
    Replay,
    Split,
    TaskSpec,
    TaskStats,
    TemplateWeight,
    Trajectory,
    default_plan,
)

Cell = tuple[Capability, Difficulty]
CELLS: tuple[Cell, ...] = tuple((c, d) for c in Capability for d in Difficulty)
PRESERVE_ATTEMPTS = 1
"""A preserved task is re-collected once a round: enough to keep it in the data."""


@dataclass(frozen=True)
class PlanningConfig:
    """The rules' parameters (see the module docstring for what each does and why)."""

    p_low: float = field(default=0.2, metadata={"help": "below: never solved"})
    p_high: float = field(default=0.8, metadata={"help": "at or above: mastered"})
    min_attempts: int = field(
        default=4, metadata={"help": "attempts a task needs before it is rated (>= 1)"}
    )
    deficit_mix: float = field(
        default=0.5, metadata={"help": "weight of the deficit share against the even share"}
    )
    min_capability_share: float = field(
        default=0.1, metadata={"help": "floor of each capability's share, in [0, 0.25]"}
    )
    downsample: float = field(
        default=0.5, metadata={"help": "cut of a fully mastered cell or template, in [0, 0.9]"}
    )
    preserve_share: float = field(
        default=0.2, metadata={"help": "share of mastered tasks kept and re-collected, (0, 1]"}
    )
    max_preserve_share: float = field(
        default=0.1, metadata={"help": "preservation set at most this share of new tasks"}
    )
    replay_attempts: int = field(
        default=4, metadata={"help": "attempts an inconsistent task is re-collected (>= 1)"}
    )
    max_replay_share: float = field(
        default=0.25, metadata={"help": "replayed tasks at most this share of new tasks"}
    )
    max_repair_share: float = field(
        default=0.25, metadata={"help": "repair sets at most this share of new tasks, [0, 0.5]"}
    )
    min_failures: int = field(
        default=3, metadata={"help": "attributed failures a type needs for a repair set (>= 1)"}
    )
    max_disagreement: float = field(
        default=0.5, metadata={"help": "report vs stored success rate gap sent to curation"}
    )

    def __post_init__(self) -> None:
        for name in ("p_low", "p_high", "deficit_mix", "max_replay_share", "max_preserve_share"):
            _within(name, getattr(self, name), 0.0, 1.0)
        if self.p_low >= self.p_high:
            raise InvalidInputError("p_low", f"{self.p_low} must be below p_high {self.p_high}")
        _within("min_capability_share", self.min_capability_share, 0.0, 1 / len(Capability))
        _within("downsample", self.downsample, 0.0, 0.9)
        _within("max_repair_share", self.max_repair_share, 0.0, 0.5)
        if not 0.0 < self.preserve_share <= 1.0:
            raise InvalidInputError("preserve_share", f"{self.preserve_share} is outside (0, 1]")
        if not 0.0 < self.max_disagreement <= 1.0:
            raise InvalidInputError(
                "max_disagreement", f"{self.max_disagreement} is outside (0, 1]"
            )
        for name in ("min_attempts", "replay_attempts", "min_failures"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInputError(name, f"{value!r} must be an integer >= 1")


def _within(name: str, value: object, low: float, high: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise InvalidInputError(name, f"{value!r} is not a number")
    if not low <= value <= high:
        raise InvalidInputError(name, f"{value} is outside [{low:g}, {high:g}]")


@dataclass(frozen=True)
class Observed:
    """What our own stored verdicts say about a task: attempts and verified successes."""

    attempts: int
    successes: int

    def __post_init__(self) -> None:
        if self.attempts < 0 or not 0 <= self.successes <= self.attempts:
            raise InvalidInputError(
                "observed", f"{self.successes} successes of {self.attempts} attempts"
            )


def observed_outcomes(trajectories: Iterable[Trajectory]) -> dict[str, Observed]:
    """Attempts and verified successes per task fingerprint, from stored trajectories
    (backend errors are not attempts of the policy)."""
    attempts: Counter[str] = Counter()
    successes: Counter[str] = Counter()
    for trajectory in trajectories:
        if trajectory.metadata.outcome is Outcome.BACKEND_ERROR:
            continue
        fingerprint = trajectory.task.fingerprint
        attempts[fingerprint] += 1
        successes[fingerprint] += trajectory.verdict.passed
    return {fp: Observed(attempts[fp], successes[fp]) for fp in sorted(attempts)}


class Competence(StrEnum):
    MASTERED = "mastered"
    INCONSISTENT = "inconsistent"
    NEVER_SOLVED = "never_solved"
    UNRATED = "unrated"
    """Fewer than ``min_attempts`` attempts: no task-level decision."""


def competence(stats: TaskStats, config: PlanningConfig) -> Competence:
    if stats.attempts < config.min_attempts:
        return Competence.UNRATED
    rate = stats.success_rate
    if rate >= config.p_high:
        return Competence.MASTERED
    if rate >= config.p_low:
        return Competence.INCONSISTENT
    return Competence.NEVER_SOLVED


def fingerprint_rank(fingerprint: str) -> str:
    """The order the preservation set and replay ties are chosen in."""
    return hashlib.sha256(fingerprint.encode()).hexdigest()


def capability_weights(
    scores: Mapping[Capability, float], config: PlanningConfig
) -> dict[Capability, Fraction]:
    """Each capability's share of the quota tasks (exact fractions summing to 1)."""
    n = len(Capability)
    even = Fraction(1, n)
    if not scores:
        return dict.fromkeys(Capability, even)
    filled = _filled_scores(scores)
    deficits = {c: 1 - filled[c] for c in Capability}
    total_deficit = sum(deficits.values())
    if total_deficit == 0:
        return dict.fromkeys(Capability, even)
    mix = _exact(config.deficit_mix)
    weights = {c: (1 - mix) * even + mix * deficits[c] / total_deficit for c in Capability}
    return _with_floor(weights, _exact(config.min_capability_share))


def _exact(value: float) -> Fraction:
    """The decimal a float was written as (``0.1`` is 1/10), so that shares that should be
    equal are equal and the plan never hangs on a binary rounding."""
    return Fraction(repr(float(value)))


def _filled_scores(scores: Mapping[Capability, float]) -> dict[Capability, Fraction]:
    known = {c: _exact(s) for c, s in scores.items()}
    mean = sum(known.values(), Fraction(0)) / len(known)
    return {c: known.get(c, mean) for c in Capability}


def _with_floor(weights: dict[Capability, Fraction], floor: Fraction) -> dict[Capability, Fraction]:
    """Raise weights below ``floor`` to it, taking the difference from the others in
    proportion to their weights (repeated until none is below)."""
    fixed: set[Capability] = set()
    while True:
        low = {c for c, w in weights.items() if w < floor and c not in fixed}
        if not low:
            return weights
        fixed |= low
        # the others are above the floor, so their mass is positive
        free_mass = sum((w for c, w in weights.items() if c not in fixed), Fraction(0))
        scale = (1 - floor * len(fixed)) / free_mass
        weights = {c: floor if c in fixed else w * scale for c, w in weights.items()}


def apportion(total: int, weights: Sequence[Fraction]) -> list[int]:
    """``total`` split by weight: floors, then one more to the largest remainders (ties
    to the earlier entry). Zero weights get nothing."""
    whole = sum(weights)
    if total <= 0 or whole <= 0:
        return [0] * len(weights)
    shares = [total * w / whole for w in weights]
    counts = [math.floor(s) for s in shares]
    rest = total - sum(counts)
    order = sorted(range(len(weights)), key=lambda i: (-(shares[i] - counts[i]), i))
    for i in order[:rest]:
        counts[i] += 1
    return counts


@dataclass
class _Rated:
    """The task-level picture: known train tasks by competence, per cell and template."""

    mastered: list[tuple[TaskStats, TaskSpec]] = field(default_factory=list)
    inconsistent: list[tuple[TaskStats, TaskSpec]] = field(default_factory=list)
    rated_cells: Counter[Cell] = field(default_factory=Counter)
    mastered_cells: Counter[Cell] = field(default_factory=Counter)
    rated_templates: Counter[str] = field(default_factory=Counter)
    mastered_templates: Counter[str] = field(default_factory=Counter)
    recurate: list[Recurate] = field(default_factory=list)


def plan_from_feedback(
    report: FeedbackReport,
    known_tasks: Iterable[TaskSpec],
    total: int,
    config: PlanningConfig | None = None,
    *,
    observed: Mapping[str, Observed] | None = None,
) -> GenerationPlan:
    """The next round's plan: ``total`` new tasks (quotas and repair sets), the stored
    tasks to re-collect, and the ambiguous ones sent back to curation.

    ``known_tasks``: every task the catalog has constructed (train and development);
    ``observed``: our own stored verdicts per fingerprint (``observed_outcomes``), when
    the report is about the policy those verdicts came from.
    """
    config = config or PlanningConfig()
    if isinstance(total, bool) or not isinstance(total, int) or total < 0:
        raise InvalidInputError("total", f"{total!r} must be an integer >= 0")
    rated = _rate_tasks(report, _by_fingerprint(known_tasks), observed or {}, config)
    repairs = _repairs(report, total, config)
    quotas = _quotas(report, rated, total, total - sum(r.count for r in repairs), config)
    return GenerationPlan(
        quotas=quotas,
        source=f"feedback {report.id}",
        repairs=repairs,
        replays=_replays(rated, total, config),
        preserve=_preserve(rated, total, config),
        recurate=tuple(sorted(rated.recurate, key=lambda r: r.fingerprint)),
        template_weights=_template_weights(rated, config),
    )


def _by_fingerprint(tasks: Iterable[TaskSpec]) -> dict[str, TaskSpec]:
    """One task per fingerprint; a development copy wins (it must never be replayed)."""
    known: dict[str, TaskSpec] = {}
    for task in tasks:
        held = known.get(task.fingerprint)
        if held is None or (task.split is Split.DEV and held.split is not Split.DEV):
            known[task.fingerprint] = task
    return known


def _rate(stats: TaskStats) -> str:
    return f"{stats.successes}/{stats.attempts} = {stats.success_rate:.2f}"


def _rate_tasks(
    report: FeedbackReport,
    known: Mapping[str, TaskSpec],
    observed: Mapping[str, Observed],
    config: PlanningConfig,
) -> _Rated:
    rated = _Rated()
    for stats in sorted(report.tasks, key=lambda s: s.fingerprint):
        fp = stats.fingerprint
        task = known.get(fp)
        if task is None:
            rated.recurate.append(
                Recurate(fingerprint=fp, reason="the report knows the task, the catalog does not")
            )
            continue
        if task.split is Split.DEV:
            continue  # development tasks count only through the capability scores
        ours = observed.get(fp)
        if (
            ours is not None
            and ours.attempts >= config.min_attempts
            and stats.attempts >= config.min_attempts
        ):
            gap = abs(stats.success_rate - ours.successes / ours.attempts)
            if gap > config.max_disagreement:
                rated.recurate.append(
                    Recurate(
                        fingerprint=fp,
                        reason=f"the report's success rate {_rate(stats)} and our verdicts' "
                        f"{ours.successes}/{ours.attempts} = {ours.successes / ours.attempts:.2f} "
                        f"differ by {gap:.2f} > {config.max_disagreement:g}",
                    )
                )
                continue
        level = competence(stats, config)
        if level is Competence.NEVER_SOLVED and not stats.failures:
            rated.recurate.append(
                Recurate(
                    fingerprint=fp,
                    reason=f"never solved ({_rate(stats)} < p_low {config.p_low:g}) and no "
                    "failure type explains why: check the task and its verifier",
                )
            )
            continue
        if level is Competence.UNRATED:
            continue
        cell = (task.capabilities[0], task.difficulty)
        rated.rated_cells[cell] += 1
        if task.template is not None:
            rated.rated_templates[task.template] += 1
        if level is Competence.MASTERED:
            rated.mastered.append((stats, task))
            rated.mastered_cells[cell] += 1
            if task.template is not None:
                rated.mastered_templates[task.template] += 1
        elif level is Competence.INCONSISTENT:
            rated.inconsistent.append((stats, task))
    return rated


def _cap(share: float, total: int) -> int:
    """At most ``share`` of ``total``, at least 1."""
    return max(1, math.floor(share * total))


def _preserve(rated: _Rated, total: int, config: PlanningConfig) -> tuple[Replay, ...]:
    mastered = rated.mastered
    if not mastered:
        return ()
    wanted = max(1, math.ceil(config.preserve_share * len(mastered)))
    keep = min(wanted, _cap(config.max_preserve_share, total))
    chosen = sorted(mastered, key=lambda st: fingerprint_rank(st[0].fingerprint))[:keep]
    return tuple(
        Replay(
            fingerprint=stats.fingerprint,
            attempts=PRESERVE_ATTEMPTS,
            reason=f"mastered ({_rate(stats)} >= p_high {config.p_high:g}): kept in the "
            f"preservation set ({keep} of {len(mastered)} mastered, by fingerprint hash)",
        )
        for stats, _ in sorted(chosen, key=lambda st: st[0].fingerprint)
    )


def _replays(rated: _Rated, total: int, config: PlanningConfig) -> tuple[Replay, ...]:
    candidates = sorted(
        rated.inconsistent,
        key=lambda st: (abs(st[0].success_rate - 0.5), fingerprint_rank(st[0].fingerprint)),
    )
    keep = min(len(candidates), _cap(config.max_replay_share, total))
    capped = f"; the {keep} most uncertain of {len(candidates)}" if keep < len(candidates) else ""
    return tuple(
        Replay(
            fingerprint=stats.fingerprint,
            attempts=config.replay_attempts,
            reason=f"inconsistent ({_rate(stats)} in [{config.p_low:g}, {config.p_high:g})): "
            f"{config.replay_attempts} more attempts{capped}",
        )
        for stats, _ in sorted(candidates[:keep], key=lambda st: st[0].fingerprint)
    )


def _downsample_factor(mastered: int, rated: int, config: PlanningConfig) -> Fraction:
    if not rated:
        return Fraction(1)
    return 1 - _exact(config.downsample) * Fraction(mastered, rated)


def _template_weights(rated: _Rated, config: PlanningConfig) -> tuple[TemplateWeight, ...]:
    weights = []
    for name in sorted(rated.mastered_templates):
        mastered, of = rated.mastered_templates[name], rated.rated_templates[name]
        factor = _downsample_factor(mastered, of, config)
        if factor < 1:
            weights.append(
                TemplateWeight(
                    template=name,
                    weight=float(factor),
                    reason=f"{mastered} of {of} rated tasks mastered: proposed "
                    f"x {float(factor):.2f} as often",
                )
            )
    return tuple(weights)


def _failure_counts(report: FeedbackReport) -> dict[FailureType, int]:
    if report.failure_counts:
        return {f: n for f, n in report.failure_counts.items() if n > 0}
    summed: Counter[FailureType] = Counter()
    for stats in report.tasks:
        summed.update(stats.failures)
    return {f: n for f, n in summed.items() if n > 0}


def _repairs(report: FeedbackReport, total: int, config: PlanningConfig) -> tuple[RepairQuota, ...]:
    counts = _failure_counts(report)
    all_failures = sum(counts.values())
    eligible = [f for f in FailureType if counts.get(f, 0) >= config.min_failures]
    budget = math.floor(config.max_repair_share * total)
    size = min(budget, sum(counts[f] for f in eligible))
    sizes = apportion(size, [Fraction(counts[f]) for f in eligible])
    return tuple(
        RepairQuota(
            failure_type=f,
            count=n,
            reason=f"{counts[f]} of {all_failures} attributed failures are {f.value} "
            f"({counts[f] / all_failures:.0%}): {n} new {REPAIR_PATTERN[f].value} tasks "
            f"(repair sets: {size} of {total} new tasks, at most "
            f"{config.max_repair_share:.0%})",
        )
        for f, n in zip(eligible, sizes, strict=True)
        if n > 0
    )


def _quotas(
    report: FeedbackReport, rated: _Rated, total: int, n_quota: int, config: PlanningConfig
) -> tuple[Quota, ...]:
    cap_weights = capability_weights(report.capability_scores, config)
    factors = {
        cell: _downsample_factor(rated.mastered_cells[cell], rated.rated_cells[cell], config)
        for cell in CELLS
    }
    cell_weights = []
    for capability, difficulty in CELLS:
        spread = sum(factors[(capability, d)] for d in Difficulty)
        cell_weights.append(cap_weights[capability] * factors[(capability, difficulty)] / spread)
    counts = apportion(n_quota, cell_weights)
    before = {(q.capability, q.difficulty): q.count for q in default_plan(total).quotas}
    repaired = total - n_quota
    explain = _CapabilityReasons(report.capability_scores, cap_weights, config)
    quotas = []
    for (capability, difficulty), count in zip(CELLS, counts, strict=True):
        parts = explain.parts(capability)
        factor = factors[(capability, difficulty)]
        cell = (capability, difficulty)
        if factor < 1:
            parts.append(
                f"{rated.mastered_cells[cell]} of {rated.rated_cells[cell]} rated "
                f"{capability.value}/{difficulty.value} tasks mastered "
                f"(x {float(factor):.2f} within {capability.value})"
            )
        elif any(factors[(capability, d)] < 1 for d in Difficulty):
            parts.append(f"takes over from mastered {capability.value} cells")
        if repaired:
            parts.append(f"repair sets take {repaired} of {total}")
        reason = "; ".join(parts) or "even mix"
        quotas.append(
            Quota(
                capability=capability,
                difficulty=difficulty,
                count=count,
                reason=f"{reason}: {before[cell]} → {count}",
            )
        )
    return tuple(quotas)


class _CapabilityReasons:
    """The capability part of a quota's reason: its score against the mean, its share."""

    def __init__(
        self,
        scores: Mapping[Capability, float],
        weights: Mapping[Capability, Fraction],
        config: PlanningConfig,
    ) -> None:
        self.scores = scores
        self.weights = weights
        self.config = config
        self.mean = sum(scores.values()) / len(scores) if scores else None

    def parts(self, capability: Capability) -> list[str]:
        share = self.weights[capability]
        even = Fraction(1, len(Capability))
        floored = share == _exact(self.config.min_capability_share) and share != even
        moved = (
            f"share stays {float(even):.2f}"
            if share == even
            else f"share {float(even):.2f} → {float(share):.2f}"
            + (" (the floor)" if floored else "")
        )
        score = self.scores.get(capability)
        if score is None or self.mean is None:
            if share == even:
                return []
            return [f"{capability.value} not scored (counts at the mean), {moved}"]
        sign = "<" if score < self.mean else ">" if score > self.mean else "="
        return [f"{capability.value} scored {score:.2f} {sign} mean {self.mean:.2f}, {moved}"]
