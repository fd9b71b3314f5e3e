"""Exact and near-duplicate detection: trajectories, and any text such as task goals.

Near-duplicates are found with MinHash and LSH banding from ``rensa`` (Rust, pinned):
each document's shingles become an ``RMinHash`` sketch of ``num_perm`` values, and an
``RMinHashLSH`` index of the sketches split into bands proposes candidates. A candidate
is confirmed when the two shingle sets have a Jaccard similarity of at least
``threshold``, computed exactly when both sets are known, else estimated from the
sketches. The estimate is noisy (with 64 values its standard deviation at 0.85 is 0.045),
and a document with many similar ones meets that noise once per candidate: a template's
draws, 0.80 to 0.85 alike, were refused as near-duplicates of earlier draws far below
the threshold. ``flywheel bench dedup`` measures it against datasketch.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Collection, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from rensa import RMinHash, RMinHashLSH

from contract import DropReason, InvalidInputError, Step, Trajectory, describe_json
from curation.facts import StepFacts, TrajectoryFacts, facts_of

DEFAULT_THRESHOLD = 0.9
DEFAULT_NUM_PERM = 64
DEFAULT_SEED = 1
BAND_RECALL = 0.98
"""Bands are chosen so that a pair at exactly ``threshold`` becomes a candidate this often
(at 64 permutations and 0.9: 8 bands of 8, 0.989)."""

_SEP = "\x1f"

Sketch = Any
"""A ``rensa.RMinHash`` (the package ships no type stubs)."""


class MinHasher:
    """Sketches documents (each a sequence of shingles) with ``num_perm`` permutations."""

    def __init__(self, num_perm: int = DEFAULT_NUM_PERM, seed: int = DEFAULT_SEED) -> None:
        if num_perm < 2:
            raise InvalidInputError("num_perm", f"{num_perm} is below 2")
        self.num_perm = num_perm
        self.seed = seed

    def sketches(self, documents: Iterable[Sequence[str]]) -> list[Sketch]:
        """One sketch per document, in one call into rensa (an empty document sketches
        like every other empty one)."""
        sketches: list[Sketch] = RMinHash.from_token_sets(documents, self.num_perm, self.seed)
        return sketches

    def sketch(self, shingles: Sequence[str]) -> Sketch:
        return self.sketches([shingles])[0]


def jaccard(first: Collection[Hashable], second: Collection[Hashable]) -> float:
    """The Jaccard similarity of two sets (two empty ones: 1.0)."""
    a, b = _frozen(first), _frozen(second)
    common = len(a & b)
    union = len(a) + len(b) - common
    return common / union if union else 1.0


def _frozen(items: Iterable[Hashable]) -> frozenset[Hashable]:
    """``items`` as a frozenset, not copied when it is one."""
    return items if isinstance(items, frozenset) else frozenset(items)


def shingle_hashes(shingles: Iterable[str]) -> tuple[int, ...]:
    """Each distinct shingle as a stable 64-bit hash, sorted: a shingle set as a catalog
    keeps it, to compute the exact similarity of a stored document with (collisions
    aside: about one pair in 2^64)."""
    return tuple(sorted({_hash64(s) for s in shingles}))


def _hash64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest())


@functools.cache
def lsh_bands(num_perm: int, threshold: float) -> tuple[int, int]:
    """``(bands, rows)`` with ``bands * rows == num_perm`` (rensa's rule): the most rows per
    band that still propose a pair at ``threshold`` as a candidate with probability
    ``BAND_RECALL`` (fewer rows: more candidates to confirm)."""
    best = (num_perm, 1)
    for rows in range(1, num_perm + 1):
        bands, rest = divmod(num_perm, rows)
        if rest == 0 and 1.0 - (1.0 - threshold**rows) ** bands >= BAND_RECALL:
            best = (bands, rows)
    return best


class NearDuplicateIndex:
    """An LSH index of sketches: ``add`` documents, ``query`` for a near-duplicate.

    A document is a text (shingled into word 3-grams) or its shingles. ``query`` returns
    the key of the most similar document added whose Jaccard similarity is at least
    ``threshold`` (the earliest added on a tie), or None. The similarity is exact when
    the shingles of both are known (``add`` and ``query`` know them; ``add_sketch`` and
    ``match_sketch`` when given them), else the sketches' estimate.
    """

    def __init__(
        self,
        threshold: float = DEFAULT_THRESHOLD,
        num_perm: int = DEFAULT_NUM_PERM,
        *,
        hasher: MinHasher | None = None,
    ) -> None:
        _check_threshold(threshold)
        self.threshold = threshold
        self.hasher = hasher if hasher is not None else MinHasher(num_perm)
        self.bands, self.rows = lsh_bands(self.hasher.num_perm, threshold)
        self._lsh = RMinHashLSH(threshold, self.hasher.num_perm, self.bands)
        self._keys: list[str] = []
        self._sketches: list[Sketch] = []
        self._shingles: list[frozenset[Hashable] | None] = []
        self._added: set[str] = set()

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._added

    def add(self, key: str, text_or_shingles: str | Sequence[str]) -> None:
        shingles = _shingles(text_or_shingles)
        self.add_sketch(key, self.hasher.sketch(shingles), shingles)

    def add_many(self, items: Iterable[tuple[str, str | Sequence[str]]]) -> None:
        """``add`` each ``(key, text_or_shingles)``, sketching them all in one call."""
        pairs = [(key, _shingles(doc)) for key, doc in items]
        sketches = self.hasher.sketches([shingles for _, shingles in pairs])
        for (key, shingles), sketch in zip(pairs, sketches, strict=True):
            self.add_sketch(key, sketch, shingles)

    def query(self, text_or_shingles: str | Sequence[str]) -> str | None:
        shingles = _shingles(text_or_shingles)
        return self.match_sketch(self.hasher.sketch(shingles), shingles)[0]

    def add_sketch(
        self, key: str, sketch: Sketch, shingles: Iterable[Hashable] | None = None
    ) -> None:
        if key in self._added:
            raise InvalidInputError("key", f"{key!r} was already added")
        position = len(self._keys)
        self._lsh.insert(position, sketch)
        self._added.add(key)
        self._keys.append(key)
        self._sketches.append(sketch)
        self._shingles.append(None if shingles is None else _frozen(shingles))

    def match_sketch(
        self, sketch: Sketch, shingles: Iterable[Hashable] | None = None
    ) -> tuple[str | None, float]:
        """The best near-duplicate's key and its similarity (None, 0.0 if none)."""
        mine = None if shingles is None else _frozen(shingles)
        best: tuple[str | None, float] = (None, 0.0)
        for position in sorted(self._lsh.query(sketch)):
            theirs = self._shingles[position]
            if mine is not None and theirs is not None:
                similarity = jaccard(mine, theirs)
            else:
                similarity = float(sketch.jaccard(self._sketches[position]))
            if similarity >= self.threshold and similarity > best[1]:
                best = (self._keys[position], similarity)
        return best


def word_shingles(text: str, n: int = 3) -> list[str]:
    """Case-folded word ``n``-grams; a text shorter than ``n`` words is one shingle."""
    words = re.findall(r"\w+", text.casefold())
    if len(words) < n:
        return [" ".join(words)]
    return [" ".join(words[i : i + n]) for i in range(len(words) - n + 1)]


def _shingles(text_or_shingles: str | Sequence[str]) -> Sequence[str]:
    if isinstance(text_or_shingles, str):
        return word_shingles(text_or_shingles)
    return text_or_shingles


def _check_threshold(threshold: float) -> None:
    if not 0.0 < threshold <= 1.0:
        raise InvalidInputError("threshold", f"{threshold} is outside (0, 1]")


# -- trajectories ---------------------------------------------------------------------


@dataclass(frozen=True)
class Duplicate:
    """Why a trajectory is dropped: an exact or near copy of the kept one ``of``."""

    reason: DropReason
    of: str
    similarity: float


def action_tokens(steps: Sequence[Step] | Sequence[StepFacts]) -> list[str]:
    """One normalized token per step (``StepFacts.token``): the action's description,
    case-folded and single-spaced, or the error of output that was no action."""
    return [step.token if isinstance(step, StepFacts) else _token(step) for step in steps]


def _token(step: Step) -> str:
    action = step.action
    call = describe_json(orjson.loads(action.to_json())) if action is not None else None
    error = step.feedback.error
    return StepFacts(step.index, call, None, None, error.kind if error else None).token


def action_shingles(tokens: Sequence[str], n: int = 3) -> list[str]:
    """``n``-grams of the action tokens, padded at both ends, after collapsing immediate
    repeats: a redundant or looping call does not make a trajectory new."""
    collapsed = [t for i, t in enumerate(tokens) if i == 0 or t != tokens[i - 1]]
    padded = ["<s>", *collapsed, "</s>"]
    if len(padded) < n:
        return [_SEP.join(padded)]
    return [_SEP.join(padded[i : i + n]) for i in range(len(padded) - n + 1)]


def keep_order(trajectory: Trajectory | TrajectoryFacts) -> tuple[int, int, str]:
    """Which copy is kept: the shortest, then the one whose actions hash lowest
    (``exact_key``), then the smallest id. A choice by content first: a served model's
    trajectory ids change from run to run with the latencies they record, and two runs
    that played alike should keep alike."""
    facts = facts_of(trajectory)
    return len(facts.steps), facts.exact_key, facts.id


def find_duplicates(
    trajectories: Sequence[Trajectory] | Sequence[TrajectoryFacts],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    num_perm: int = DEFAULT_NUM_PERM,
) -> dict[str, Duplicate]:
    """The trajectories to drop, by id, each with the kept one it copies.

    Exact: the same task fingerprint, actions and outcome. Near: within the same task
    fingerprint and outcome, action shingles (:func:`action_shingles`) whose estimated
    Jaccard similarity is at least ``threshold``: a trajectory meets only the few kept
    ones of its task and outcome, so the estimate's noise does not compound as it does
    for task goals, and confirming on the sketches keeps 200,000 trajectories' detection
    under a second (on the shingles: 4.4 s, ``flywheel bench dedup``). Kept copies are
    chosen by :func:`keep_order`, and every drop names a kept trajectory
    (an exact copy of a near-duplicate is that near-duplicate's drop).
    """
    _check_threshold(threshold)
    facts = {t.id: facts_of(t) for t in trajectories}
    ordered = sorted(facts.values(), key=keep_order)
    found: dict[str, Duplicate] = {}
    exact_kept: dict[int, str] = {}
    near_candidates: list[TrajectoryFacts] = []
    for t in ordered:
        if t.exact_key in exact_kept:
            found[t.id] = Duplicate(DropReason.DUPLICATE, exact_kept[t.exact_key], 1.0)
        else:
            exact_kept[t.exact_key] = t.id
            near_candidates.append(t)
    near = _near_duplicates(near_candidates, threshold, num_perm)
    for tid, duplicate in found.items():  # an exact copy of a near-duplicate: of its kept one
        if duplicate.of in near:
            found[tid] = near[duplicate.of]
    found.update(near)
    return found


def _near_duplicates(
    ordered: Sequence[TrajectoryFacts], threshold: float, num_perm: int
) -> dict[str, Duplicate]:
    hasher = MinHasher(num_perm)
    documents = [action_shingles([s.token for s in t.steps]) for t in ordered]
    indexes: dict[tuple[str, str], NearDuplicateIndex] = {}
    found: dict[str, Duplicate] = {}
    for t, sketch in zip(ordered, hasher.sketches(documents), strict=True):
        group = (t.fingerprint, t.outcome.value)
        index = indexes.get(group)
        if index is None:
            index = indexes[group] = NearDuplicateIndex(threshold, hasher=hasher)
        of, similarity = index.match_sketch(sketch)
        if of is None:
            index.add_sketch(t.id, sketch)
        else:
            found[t.id] = Duplicate(DropReason.NEAR_DUPLICATE, of, round(similarity, 6))
    return found
