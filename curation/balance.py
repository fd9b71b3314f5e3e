"""Sampling weights that move approved training data towards a target mix.

Bounded raking (iterative proportional fitting): one dimension after another, each value's
group of candidates is scaled so that its weighted share meets the target, with every
weight kept in ``[1, max_ratio]`` (so largest / smallest never passes the cap), for a
bounded number of passes. A target value no candidate has is dropped, the rest of that
dimension's target renormalized over the values present, and the shortfall reported; a
target the cap makes unreachable is met as closely as the passes allow and its gap reported.

Dimensions: ``capability`` (the task's primary one), ``difficulty``, ``domain`` (primary),
``source``, and ``outcome`` (``recovery`` for a verified recovery, else ``success``).
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from contract import (
    Capability,
    DatasetMember,
    DatasetVersion,
    Difficulty,
    FinalReview,
    InvalidInputError,
    MixTarget,
    Outcome,
    RemovedMember,
    Review,
    ReviewDecision,
    Split,
    Trajectory,
    content_hash,
)

TARGET_FIELDS = ("capability", "difficulty", "domain", "source")
"""The ``MixTarget`` fields that are shares per value."""
DIMENSIONS = (*TARGET_FIELDS, "outcome")
SUCCESS = "success"
RECOVERY = "recovery"
DEFAULT_MAX_RATIO = 10.0
DEFAULT_MAX_PASSES = 100
DEFAULT_TOLERANCE = 1e-4
DROPPED_DEV = "dev_split"
DROPPED_NOT_SUCCESS = "not_success"
DROPPED_SIMULATED = "simulated_over_cap"

BISECTION_STEPS = 40
STALL_PASSES = 10

Weights = npt.NDArray[np.float64]
Codes = npt.NDArray[np.intp]
Shares = dict[str, dict[str, float]]


@dataclass(frozen=True)
class MixRow:
    """Achieved against (effective) target for one value of one dimension."""

    dimension: str
    value: str
    target: float
    achieved: float
    gap: float
    """``achieved - target``."""


@dataclass(frozen=True)
class Shortfall:
    """A target value that no candidate has: its share went to the other values."""

    dimension: str
    value: str
    requested: float


@dataclass(frozen=True)
class BalanceResult:
    """Weighted members and how close their mix came to the target."""

    members: tuple[DatasetMember, ...]
    achieved: Shares
    """Weighted share per value, for every dimension."""
    target: Shares
    """The effective target: dimensions with a target, renormalized over present values."""
    rows: tuple[MixRow, ...]
    shortfalls: tuple[Shortfall, ...]
    dropped: dict[str, int]
    """How many input trajectories were left out, by reason."""
    passes: int
    converged: bool


def default_target() -> MixTarget:
    """Even over capabilities and difficulties, a fifth recoveries, no domain or source."""
    return MixTarget(
        capability={c.value: 1 / len(Capability) for c in Capability},
        difficulty={d.value: 1 / len(Difficulty) for d in Difficulty},
        recovery_share=0.2,
    )


@dataclass(frozen=True, slots=True)
class Candidate:
    """What balancing reads of a trajectory: ids, split, outcome, policy and the task's
    primary capability and domain, difficulty and source.

    Built from a trajectory (:meth:`of`) or from the catalog's columns
    (``TrajectoryStore.balance_rows``), so a dataset of any size is balanced without
    loading its trajectories.
    """

    trajectory_id: str
    task_id: str
    split: Split
    outcome: Outcome
    recovered: bool
    capability: str
    difficulty: str
    domain: str
    source: str
    policy: str
    """``name@version``."""
    fingerprint: str = ""
    template: str | None = None
    simulated: bool = False
    """A chat model answered its tools (``envs.simulated``)."""

    @classmethod
    def of(cls, trajectory: Trajectory) -> Candidate:
        task, meta = trajectory.task, trajectory.metadata
        return cls(
            trajectory_id=trajectory.id,
            task_id=task.id,
            split=task.split,
            outcome=meta.outcome,
            recovered=meta.recovered,
            capability=task.capabilities[0].value,
            difficulty=task.difficulty.value,
            domain=task.domains[0],
            source=task.source.value,
            policy=f"{meta.policy.name}@{meta.policy.version}",
            fingerprint=task.fingerprint,
            template=task.template,
            simulated=meta.simulated,
        )

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> Candidate:
        """From a row of ``TrajectoryStore.balance_rows``: these fields' values in this
        order, split and outcome as their values (built positionally: a version's pool is
        hundreds of thousands of rows)."""
        trajectory_id, task_id, split, outcome, *rest = row
        return cls(trajectory_id, task_id, _SPLITS[split], _OUTCOMES[outcome], *rest)


_SPLITS = {split.value: split for split in Split}
_OUTCOMES = {outcome.value: outcome for outcome in Outcome}
"""Enum members by value: a dict lookup costs a tenth of an enum call."""


def candidates_of(items: Iterable[Candidate | Trajectory]) -> list[Candidate]:
    """``items`` as candidates (trajectories are reduced to what balancing reads)."""
    return [i if isinstance(i, Candidate) else Candidate.of(i) for i in items]


def labels_of(candidate: Candidate | Trajectory) -> dict[str, str]:
    """The value of each balancing dimension for ``candidate``."""
    c = candidate if isinstance(candidate, Candidate) else Candidate.of(candidate)
    return {
        "capability": c.capability,
        "difficulty": c.difficulty,
        "domain": c.domain,
        "source": c.source,
        "outcome": RECOVERY if c.recovered else SUCCESS,
    }


def requested_shares(target: MixTarget) -> Shares:
    """The target as shares per dimension (``recovery_share`` becomes ``outcome``)."""
    shares: Shares = {
        name: dict(getattr(target, name)) for name in TARGET_FIELDS if getattr(target, name)
    }
    if target.recovery_share is not None:
        shares["outcome"] = {RECOVERY: target.recovery_share, SUCCESS: 1 - target.recovery_share}
    return shares


def trainable(
    items: Iterable[Candidate | Trajectory],
) -> tuple[list[Candidate], dict[str, int]]:
    """Train-split successes, one per id, sorted by id; and how many were dropped, why."""
    kept: dict[str, Candidate] = {}
    dropped = {DROPPED_DEV: 0, DROPPED_NOT_SUCCESS: 0}
    for candidate in candidates_of(items):
        if candidate.split is not Split.TRAIN:
            dropped[DROPPED_DEV] += 1
        elif candidate.outcome is not Outcome.SUCCESS:
            dropped[DROPPED_NOT_SUCCESS] += 1
        else:
            kept[candidate.trajectory_id] = candidate
    return [kept[i] for i in sorted(kept)], dropped


def balance_mix(
    items: Iterable[Candidate | Trajectory],
    target: MixTarget,
    *,
    max_ratio: float = DEFAULT_MAX_RATIO,
    max_passes: int = DEFAULT_MAX_PASSES,
    tolerance: float = DEFAULT_TOLERANCE,
) -> BalanceResult:
    """Weights (mean 1, largest / smallest <= ``max_ratio``) towards ``target``.

    Dev-split tasks and anything but a success are dropped here, whatever their review.
    """
    if max_ratio < 1:
        raise InvalidInputError("max_ratio", f"{max_ratio} is below 1")
    if max_passes < 1:
        raise InvalidInputError("max_passes", f"{max_passes} is below 1")
    candidates, dropped = trainable(items)
    # Raking scales whole groups, so candidates with the same labels in every dimension
    # (a cell) always share one weight: rake the cells, counted, not the candidates.
    cells: dict[tuple[str, ...], int] = {}
    cell_of = np.array(
        [
            cells.setdefault(tuple(label[d] for d in DIMENSIONS), len(cells))
            for label in map(labels_of, candidates)
        ],
        np.intp,
    )
    labels = [dict(zip(DIMENSIONS, cell, strict=True)) for cell in cells]
    counts = np.bincount(cell_of, minlength=len(cells)).astype(np.float64)
    effective, shortfalls = effective_target(requested_shares(target), labels)
    columns = {dim: _Column.of(labels, counts, dim) for dim in DIMENSIONS}
    fits = [columns[dim].fit(effective[dim]) for dim in DIMENSIONS if dim in effective]
    cell_weights, passes, converged = _rake(counts, fits, max_ratio, max_passes, tolerance)
    achieved = {dim: columns[dim].shares(cell_weights) for dim in DIMENSIONS}
    weights = cell_weights[cell_of]
    members = tuple(
        DatasetMember(
            trajectory_id=c.trajectory_id, task_id=c.task_id, weight=max(round(float(w), 6), 1e-6)
        )
        for c, w in zip(candidates, weights, strict=True)
    )
    return BalanceResult(
        members=members,
        achieved=achieved,
        target=effective,
        rows=mix_rows(effective, achieved),
        shortfalls=shortfalls,
        dropped=dropped,
        passes=passes,
        converged=converged,
    )


def effective_target(
    requested: Shares, labels: Sequence[Mapping[str, str]]
) -> tuple[Shares, tuple[Shortfall, ...]]:
    """``requested`` over the values candidates have, renormalized; and what is missing.

    A present value the target does not name gets share 0. A dimension none of whose
    targeted values is present keeps no target.
    """
    effective: Shares = {}
    shortfalls: list[Shortfall] = []
    for dim, shares in requested.items():
        present = sorted({label[dim] for label in labels})
        shortfalls += [
            Shortfall(dim, value, share)
            for value, share in sorted(shares.items())
            if share > 0 and value not in present
        ]
        total = sum(shares.get(value, 0.0) for value in present)
        if total > 0:
            effective[dim] = {value: shares.get(value, 0.0) / total for value in present}
    return effective, tuple(shortfalls)


def mix_rows(target: Shares, achieved: Shares) -> tuple[MixRow, ...]:
    """One row per targeted value, in dimension order then value order."""
    rows: list[MixRow] = []
    for dim in DIMENSIONS:
        for value, share in sorted(target.get(dim, {}).items()):
            got = achieved.get(dim, {}).get(value, 0.0)
            rows.append(MixRow(dim, value, round(share, 6), got, round(got - share, 6)))
    return tuple(rows)


@dataclass(frozen=True)
class _Column:
    """One dimension over the cells: its sorted values, each cell's code, and how many
    candidates each cell holds."""

    values: tuple[str, ...]
    codes: Codes
    counts: Weights

    @classmethod
    def of(cls, labels: Sequence[Mapping[str, str]], counts: Weights, dim: str) -> _Column:
        values = tuple(sorted({label[dim] for label in labels}))
        index = {value: i for i, value in enumerate(values)}
        return cls(values, np.array([index[label[dim]] for label in labels], np.intp), counts)

    def shares(self, weights: Weights) -> dict[str, float]:
        if not self.values:
            return {}
        mass = weights * self.counts
        sums = np.bincount(self.codes, mass, minlength=len(self.values)) / mass.sum()
        return {
            value: round(float(share), 6) for value, share in zip(self.values, sums, strict=True)
        }

    def fit(self, target: Mapping[str, float]) -> _Fit:
        sizes = np.bincount(self.codes, self.counts, minlength=len(self.values))
        return _Fit(
            self.codes,
            self.counts,
            sizes.astype(np.float64),
            np.array([target[v] for v in self.values], np.float64),
        )


@dataclass(frozen=True)
class _Fit:
    """What raking one dimension needs: cell codes and counts, group sizes (candidates)
    and target shares."""

    codes: Codes
    counts: Weights
    sizes: Weights
    target: Weights

    def gap(self, weights: Weights) -> float:
        mass = weights * self.counts
        sums = np.bincount(self.codes, mass, minlength=len(self.sizes)) / mass.sum()
        return float(np.abs(sums - self.target).max())

    def apply(self, weights: Weights, max_ratio: float) -> Weights:
        """Weights in [1, max_ratio] whose group sums come as close to the target as the
        bounds allow, each group scaled by one factor (before clipping)."""
        wanted = np.clip(
            self.target * self._total(weights, max_ratio), self.sizes, self.sizes * max_ratio
        )
        logs = np.log(weights)
        span = np.log(max_ratio) + 1.0
        low: Weights = np.full(len(self.sizes), -span)
        high: Weights = np.full(len(self.sizes), span)
        for _ in range(BISECTION_STEPS):
            mid = (low + high) / 2
            over = self._sums(logs, mid, max_ratio) > wanted
            high, low = np.where(over, mid, high), np.where(over, low, mid)
        return self._scaled(logs, (low + high) / 2, max_ratio)

    def _total(self, weights: Weights, max_ratio: float) -> float:
        """The total closest to the current one at which every targeted group is in
        bounds; the geometric middle of the bounds when none is."""
        targeted = self.target > 0
        lowest = float((self.sizes[targeted] / self.target[targeted]).max())
        highest = float((max_ratio * self.sizes[targeted] / self.target[targeted]).min())
        if lowest > highest:
            return float(np.sqrt(lowest * highest))
        return min(max(float((weights * self.counts).sum()), lowest), highest)

    def _scaled(self, logs: Weights, factors: Weights, max_ratio: float) -> Weights:
        scaled: Weights = np.clip(np.exp(logs + factors[self.codes]), 1.0, max_ratio)
        return scaled

    def _sums(self, logs: Weights, factors: Weights, max_ratio: float) -> Weights:
        scaled = self._scaled(logs, factors, max_ratio) * self.counts
        return np.bincount(self.codes, scaled, minlength=len(self.sizes)).astype(np.float64)


def _rake(
    counts: Weights, fits: Sequence[_Fit], max_ratio: float, max_passes: int, tolerance: float
) -> tuple[Weights, int, bool]:
    """Raked weights per cell (``counts`` candidates each) with mean 1 over the
    candidates, the passes run, and whether every gap met ``tolerance``.

    Dimensions are fitted in reverse order, so the first (capability) is served best when
    the bounds make the target unreachable. The pass with the smallest gap is kept; raking
    stops early once ``STALL_PASSES`` passes in a row have not improved on it.
    """
    weights: Weights = np.ones(len(counts), np.float64)
    if not len(counts) or not fits:
        return weights, 0, True
    best, best_gap, best_pass, passes = weights, np.inf, 0, 0
    while passes < max_passes and best_gap > tolerance and passes - best_pass < STALL_PASSES:
        passes += 1
        for fit in reversed(fits):
            weights = fit.apply(weights, max_ratio)
        gap = max(fit.gap(weights) for fit in fits)
        if gap < best_gap - tolerance / 10:
            best, best_gap, best_pass = weights, gap, passes
    return best * counts.sum() / (best * counts).sum(), passes, bool(best_gap <= tolerance)


def down_weigh(
    result: BalanceResult,
    candidates: Iterable[Candidate],
    factors: Mapping[str, float],
    preserved: Container[str] = (),
) -> BalanceResult:
    """``result`` with the weight of each member whose template has a factor (a mastered
    template's, from the plan) multiplied by it, unless its task is in the preservation
    set (``preserved`` fingerprints); weights renormalized to mean 1 and the achieved
    mix recomputed. Unchanged when no member is scaled."""
    by_id = {c.trajectory_id: c for c in candidates}
    scale = [
        1.0
        if (c := by_id[m.trajectory_id]).template is None or c.fingerprint in preserved
        else factors.get(c.template, 1.0)
        for m in result.members
    ]
    if all(f == 1.0 for f in scale):
        return result
    return _rescaled(result, result.members, scale, by_id)


def cap_simulated(
    result: BalanceResult, candidates: Iterable[Candidate], cap: float | None
) -> BalanceResult:
    """``result`` with the members on simulated tools holding at most ``cap`` of the
    weight (None: no cap): their weights scaled down together, the others' kept in
    proportion (mean 1 again). With no member on real tools to weigh them against, or a
    cap of 0, they are left out, counted in ``dropped`` (``DROPPED_SIMULATED``)."""
    by_id = {c.trajectory_id: c for c in candidates}
    flags = [by_id[m.trajectory_id].simulated for m in result.members]
    simulated = sum(m.weight for m, f in zip(result.members, flags, strict=True) if f)
    real = sum(m.weight for m, f in zip(result.members, flags, strict=True) if not f)
    if cap is None or simulated == 0 or simulated <= cap * (simulated + real) + 1e-9:
        return result
    if cap == 0 or real == 0:
        kept = tuple(m for m, f in zip(result.members, flags, strict=True) if not f)
        dropped = {**result.dropped, DROPPED_SIMULATED: len(result.members) - len(kept)}
        return replace(_rescaled(result, kept, [1.0] * len(kept), by_id), dropped=dropped)
    factor = cap * real / ((1 - cap) * simulated)
    return _rescaled(result, result.members, [factor if f else 1.0 for f in flags], by_id)


def _rescaled(
    result: BalanceResult,
    members: Sequence[DatasetMember],
    scale: Sequence[float],
    by_id: Mapping[str, Candidate],
) -> BalanceResult:
    """``result`` with ``members``, each weight multiplied by its ``scale`` and all
    renormalized to mean 1, and the achieved mix recomputed."""
    if not members:
        return replace(result, members=(), achieved={}, rows=mix_rows(result.target, {}))
    raw = np.array([m.weight * f for m, f in zip(members, scale, strict=True)])
    weights = raw * len(raw) / raw.sum()
    scaled = tuple(
        m.model_copy(update={"weight": max(round(float(w), 6), 1e-6)})
        for m, w in zip(members, weights, strict=True)
    )
    labels = [labels_of(by_id[m.trajectory_id]) for m in scaled]
    achieved: Shares = {}
    for dim in DIMENSIONS:
        totals: dict[str, float] = {}
        for label, member in zip(labels, scaled, strict=True):
            totals[label[dim]] = totals.get(label[dim], 0.0) + member.weight
        mass = sum(totals.values())
        achieved[dim] = {v: round(t / mass, 6) for v, t in sorted(totals.items())}
    return replace(
        result,
        members=scaled,
        achieved=achieved,
        rows=mix_rows(result.target, achieved),
    )


def dataset_content_hash(members: Iterable[DatasetMember]) -> str:
    """Digest of what training sees of the members (weights, decisions, masks,
    corrections), whatever their order."""
    rows = sorted((m.model_dump(mode="json") for m in members), key=lambda m: m["trajectory_id"])
    return content_hash(rows)


def with_reviews(
    members: Iterable[DatasetMember], decisions: Mapping[str, Review | FinalReview]
) -> tuple[DatasetMember, ...]:
    """The members carrying their final review: decision, whether a person made it, the
    steps a person marked erroneous, and a correction's note."""
    out = []
    for member in members:
        review = decisions[member.trajectory_id]
        correct = review.decision is ReviewDecision.CORRECT
        out.append(
            DatasetMember(
                trajectory_id=member.trajectory_id,
                task_id=member.task_id,
                weight=member.weight,
                decision=review.decision,
                human=not review.automatic,
                masked_steps=tuple(sorted(set(review.erroneous_steps))),
                correction=review.note if correct else None,
            )
        )
    return tuple(out)


def propose_version(
    round_id: str,
    parent: str | None,
    result: BalanceResult,
    target: MixTarget,
    policies: Iterable[str],
    human_reviewed: int,
    *,
    inherited: int = 0,
    removed: Iterable[RemovedMember] = (),
) -> DatasetVersion:
    """The dataset version of ``result``: members sorted by trajectory id, ``inherited``
    of them from the parent, and the parent's members ``removed`` (sorted by id).

    An empty result is refused: an empty dataset is not frozen.
    """
    if not result.members:
        raise InvalidInputError("members", "no candidates: an empty dataset is not frozen")
    members = tuple(sorted(result.members, key=lambda m: m.trajectory_id))
    return DatasetVersion(
        round_id=round_id,
        parent=parent,
        content_hash=dataset_content_hash(members),
        members=members,
        target=target,
        achieved=result.achieved,
        policies=tuple(sorted(set(policies))),
        human_reviewed=human_reviewed,
        inherited=inherited,
        removed=tuple(sorted(removed, key=lambda r: r.trajectory_id)),
    )


def policies_of(items: Iterable[Candidate | Trajectory]) -> tuple[str, ...]:
    """``name@version`` of the policies that generated ``items``, sorted."""
    return tuple(sorted({c.policy for c in candidates_of(items)}))
