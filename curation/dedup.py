"""Exact and near-duplicate detection: trajectories, and any text such as task goals.

Near-duplicates are found with MinHash and LSH banding, vectorized with numpy: shingles
are hashed to uint64 with xxhash, each of ``num_perm`` permutations is
``(a * x + b) mod (2**61 - 1)`` computed exactly in uint64 arithmetic over all shingles
of all documents at once, signatures are split into bands whose buckets propose
candidates, and a candidate is confirmed when the signatures estimate a Jaccard
similarity of at least ``threshold``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import xxhash
from numpy.typing import NDArray

from contract import DropReason, InvalidInputError, Step, Trajectory, canonical_json

MERSENNE_61 = (1 << 61) - 1
DEFAULT_THRESHOLD = 0.9
DEFAULT_NUM_PERM = 64
BAND_RECALL = 0.99
"""Bands are chosen so that a pair at exactly ``threshold`` becomes a candidate this often."""

_P = np.uint64(MERSENNE_61)
_MASK32 = np.uint64(0xFFFFFFFF)
_MASK29 = np.uint64((1 << 29) - 1)
_EMPTY = "\x00empty"
SIGNING_CHUNK = 512
"""Shingles signed per numpy pass (``bench dedup`` measured larger passes slower)."""
_SEP = "\x1f"

Signature = NDArray[np.uint64]


def _mulmod61(a: Signature, x: Signature) -> Signature:
    """``a * x mod (2**61 - 1)`` elementwise (broadcasting), exact for ``a, x < 2**61``.

    Splits both into 32-bit halves so no partial product overflows 64 bits, and folds
    with ``2**61 == 1`` (so ``2**64 == 8``) modulo the prime.
    """
    a_hi, a_lo = a >> np.uint64(32), a & _MASK32
    x_hi, x_lo = x >> np.uint64(32), x & _MASK32
    high = (a_hi * x_hi) << np.uint64(3)  # * 2**64
    mid = a_hi * x_lo + a_lo * x_hi  # * 2**32
    low = a_lo * x_lo
    total = (
        high
        + (mid >> np.uint64(29))
        + ((mid & _MASK29) << np.uint64(32))
        + (low & _P)
        + (low >> np.uint64(61))
    )
    return _fold61(total)


def _fold61(value: Signature) -> Signature:
    """Reduce values below ``2**63`` modulo ``2**61 - 1``."""
    value = (value & _P) + (value >> np.uint64(61))
    return np.where(value >= _P, value - _P, value)


def hash_shingles(shingles: Iterable[str]) -> Signature:
    """xxh64 of each shingle, as uint64."""
    hashes: Signature = np.fromiter(
        (xxhash.xxh64_intdigest(s.encode()) for s in shingles), dtype=np.uint64
    )
    return hashes


class MinHasher:
    """``num_perm`` seeded permutations ``(a * x + b) mod (2**61 - 1)``."""

    def __init__(self, num_perm: int = DEFAULT_NUM_PERM, seed: int = 1) -> None:
        if num_perm < 2:
            raise InvalidInputError("num_perm", f"{num_perm} is below 2")
        rng = np.random.default_rng(seed)
        self.num_perm = num_perm
        self._a = rng.integers(1, MERSENNE_61, size=(num_perm, 1), dtype=np.uint64)
        self._b = rng.integers(0, MERSENNE_61, size=(num_perm, 1), dtype=np.uint64)

    def signatures(self, documents: Sequence[Sequence[str]]) -> NDArray[np.uint64]:
        """One signature row per document (a document is its shingles).

        Documents are signed in passes of about ``SIGNING_CHUNK`` shingles (a document is
        never split): one pass over everything would allocate permutations x shingles
        temporaries, gigabytes at 200,000 trajectories, and run slower for it.
        """
        docs = [doc if len(doc) else (_EMPTY,) for doc in documents]
        out = np.empty((len(docs), self.num_perm), dtype=np.uint64)
        start = 0
        while start < len(docs):
            end, count = start + 1, len(docs[start])
            while end < len(docs) and count + len(docs[end]) <= SIGNING_CHUNK:
                count += len(docs[end])
                end += 1
            out[start:end] = self._sign(docs[start:end])
            start = end
        return out

    def _sign(self, docs: Sequence[Sequence[str]]) -> NDArray[np.uint64]:
        """Signatures of non-empty documents in one numpy pass."""
        sizes = np.fromiter((len(d) for d in docs), dtype=np.int64, count=len(docs))
        x = hash_shingles(s for d in docs for s in d) % _P
        permuted = _fold61(_mulmod61(self._a, x[np.newaxis, :]) + self._b)
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        signed: NDArray[np.uint64] = np.minimum.reduceat(permuted, starts, axis=1).T
        return signed

    def signature(self, shingles: Sequence[str]) -> Signature:
        row: Signature = self.signatures([shingles])[0]
        return row


def estimated_jaccard(first: Signature, second: Signature) -> float:
    return float(np.count_nonzero(first == second)) / len(first)


def lsh_bands(num_perm: int, threshold: float) -> tuple[int, int]:
    """``(bands, rows)``: the most rows per band that still propose a pair at ``threshold``
    as a candidate with probability ``BAND_RECALL`` (fewer rows: more candidates)."""
    best = (num_perm, 1)
    for rows in range(1, num_perm + 1):
        bands = num_perm // rows
        if 1.0 - (1.0 - threshold**rows) ** bands >= BAND_RECALL:
            best = (bands, rows)
    return best


class NearDuplicateIndex:
    """An LSH index of MinHash signatures: ``add`` documents, ``query`` for a near-duplicate.

    A document is a text (shingled into word 3-grams) or its shingles. ``query`` returns
    the key of the most similar document added whose estimated Jaccard similarity is at
    least ``threshold`` (the earliest added on a tie), or None.
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
        self._buckets: dict[tuple[int, bytes], list[str]] = {}
        self._signatures: dict[str, Signature] = {}

    def __len__(self) -> int:
        return len(self._signatures)

    def __contains__(self, key: object) -> bool:
        return key in self._signatures

    def add(self, key: str, text_or_shingles: str | Sequence[str]) -> None:
        self.add_signature(key, self.hasher.signature(_shingles(text_or_shingles)))

    def add_many(self, items: Iterable[tuple[str, str | Sequence[str]]]) -> None:
        """``add`` each ``(key, text_or_shingles)``, hashing them all in one pass."""
        pairs = list(items)
        signatures = self.hasher.signatures([_shingles(doc) for _, doc in pairs])
        for (key, _), signature in zip(pairs, signatures, strict=True):
            self.add_signature(key, signature)

    def query(self, text_or_shingles: str | Sequence[str]) -> str | None:
        return self.query_signature(self.hasher.signature(_shingles(text_or_shingles)))

    def add_signature(self, key: str, signature: Signature) -> None:
        if key in self._signatures:
            raise InvalidInputError("key", f"{key!r} was already added")
        self._signatures[key] = signature
        for band in self._band_keys(signature):
            self._buckets.setdefault(band, []).append(key)

    def query_signature(self, signature: Signature) -> str | None:
        return self.match_signature(signature)[0]

    def match_signature(self, signature: Signature) -> tuple[str | None, float]:
        """The best near-duplicate's key and its estimated similarity (None, 0.0 if none)."""
        best: tuple[str | None, float] = (None, 0.0)
        seen: set[str] = set()
        for band in self._band_keys(signature):
            for key in self._buckets.get(band, ()):
                if key in seen:
                    continue
                seen.add(key)
                similarity = estimated_jaccard(signature, self._signatures[key])
                if similarity >= self.threshold and similarity > best[1]:
                    best = (key, similarity)
        return best

    def _band_keys(self, signature: Signature) -> list[tuple[int, bytes]]:
        r = self.rows
        return [(i, signature[i * r : (i + 1) * r].tobytes()) for i in range(self.bands)]


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


def action_tokens(steps: Sequence[Step]) -> list[str]:
    """One normalized token per step: the action's description, case-folded and
    single-spaced, or the error of output that was no action."""
    tokens = []
    for step in steps:
        if step.action is not None:
            tokens.append(" ".join(step.action.describe().casefold().split()))
        else:
            error = step.feedback.error
            tokens.append(f"<no action: {error.kind if error is not None else 'none'}>")
    return tokens


def action_shingles(tokens: Sequence[str], n: int = 3) -> list[str]:
    """``n``-grams of the action tokens, padded at both ends, after collapsing immediate
    repeats: a redundant or looping call does not make a trajectory new."""
    collapsed = [t for i, t in enumerate(tokens) if i == 0 or t != tokens[i - 1]]
    padded = ["<s>", *collapsed, "</s>"]
    if len(padded) < n:
        return [_SEP.join(padded)]
    return [_SEP.join(padded[i : i + n]) for i in range(len(padded) - n + 1)]


def keep_order(trajectory: Trajectory) -> tuple[int, str]:
    """Which copy is kept: the shortest, then the smallest id (stable across runs)."""
    return len(trajectory.steps), trajectory.id


def find_duplicates(
    trajectories: Sequence[Trajectory],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    num_perm: int = DEFAULT_NUM_PERM,
    tokens: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Duplicate]:
    """The trajectories to drop, by id, each with the kept one it copies.

    Exact: the same task fingerprint, actions and outcome. Near: within the same task
    fingerprint and outcome, action shingles (:func:`action_shingles`) whose estimated
    Jaccard similarity is at least ``threshold``. ``tokens`` may give precomputed
    :func:`action_tokens` by trajectory id. Kept copies are chosen by :func:`keep_order`.
    """
    _check_threshold(threshold)
    ordered = sorted({t.id: t for t in trajectories}.values(), key=keep_order)
    found: dict[str, Duplicate] = {}
    exact_kept: dict[int, str] = {}
    near_candidates: list[Trajectory] = []
    for t in ordered:
        key = _exact_key(t)
        if key in exact_kept:
            found[t.id] = Duplicate(DropReason.DUPLICATE, exact_kept[key], 1.0)
        else:
            exact_kept[key] = t.id
            near_candidates.append(t)
    found.update(_near_duplicates(near_candidates, threshold, num_perm, tokens or {}))
    return found


def _near_duplicates(
    ordered: Sequence[Trajectory],
    threshold: float,
    num_perm: int,
    tokens: Mapping[str, Sequence[str]],
) -> dict[str, Duplicate]:
    hasher = MinHasher(num_perm)
    documents = [action_shingles(tokens.get(t.id) or action_tokens(t.steps)) for t in ordered]
    signatures = hasher.signatures(documents)
    indexes: dict[tuple[str, str], NearDuplicateIndex] = {}
    found: dict[str, Duplicate] = {}
    for t, signature in zip(ordered, signatures, strict=True):
        group = (t.task.fingerprint, t.metadata.outcome.value)
        index = indexes.get(group)
        if index is None:
            index = indexes[group] = NearDuplicateIndex(threshold, hasher=hasher)
        of, similarity = index.match_signature(signature)
        if of is None:
            index.add_signature(t.id, signature)
        else:
            found[t.id] = Duplicate(DropReason.NEAR_DUPLICATE, of, round(similarity, 6))
    return found


def _exact_key(trajectory: Trajectory) -> int:
    actions = [
        s.action.model_dump(mode="json") if s.action is not None else None for s in trajectory.steps
    ]
    body = [trajectory.task.fingerprint, trajectory.metadata.outcome.value, actions]
    return xxhash.xxh3_128_intdigest(canonical_json(body))
