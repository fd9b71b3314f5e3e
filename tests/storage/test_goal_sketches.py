"""Goal digests kept in the catalog: the near-duplicates the catalog finds for a batch of
digests are those rensa's index of the same digests finds (candidates sharing an LSH band,
confirmed by the share of equal values), among the tasks of other rounds only."""

from __future__ import annotations

import random

import pytest

from contract import TaskSpec, Trajectory
from curation.dedup import MinHasher, NearDuplicateIndex, lsh_bands
from storage import Catalog
from tests.storage.builders import ROUND

OTHER = "round-other"
THRESHOLD = 0.9
BANDS, ROWS = lsh_bands(64, THRESHOLD)


def _tasks(catalog: Catalog, tasks: list[TaskSpec]) -> tuple[list[TaskSpec], list[TaskSpec]]:
    """Half the tasks stored as round ``OTHER``'s, half as ``ROUND``'s."""
    unique = list({t.id: t for t in tasks}.values())
    other, mine = unique[::2], unique[1::2]
    catalog.tasks.add(OTHER, other)
    catalog.tasks.add(ROUND, mine)
    return other, mine


def _tasks_of(round_trajectories: list[Trajectory]) -> list[TaskSpec]:
    return [t.task for t in round_trajectories]


def test_digests_are_kept_once_and_the_missing_are_named(
    catalog: Catalog, round_trajectories: list[Trajectory]
) -> None:
    other, mine = _tasks(catalog, _tasks_of(round_trajectories))
    assert catalog.tasks.without_goal_sketch(ROUND) == sorted(t.id for t in other)
    first = {t.id: [i] * 64 for i, t in enumerate(other[:3])}
    assert catalog.tasks.add_goal_sketches(first) == 3
    assert catalog.tasks.add_goal_sketches(first | {other[3].id: [9] * 64}) == 1
    assert catalog.tasks.add_goal_sketches({}) == 0
    assert catalog.tasks.without_goal_sketch(ROUND) == sorted(t.id for t in other[4:])
    assert set(catalog.tasks.without_goal_sketch(OTHER)) == {t.id for t in mine}


def test_the_twins_are_those_rensas_index_finds_among_other_rounds(
    catalog: Catalog, round_trajectories: list[Trajectory]
) -> None:
    other, mine = _tasks(catalog, _tasks_of(round_trajectories))
    rng = random.Random(3)
    base = [[f"w{rng.randrange(40)}" for _ in range(14)] for _ in other]
    hasher = MinHasher()
    stored = hasher.sketches(base)
    catalog.tasks.add_goal_sketches({t.id: s.digest() for t, s in zip(other, stored, strict=True)})
    catalog.tasks.add_goal_sketches({t.id: stored[0].digest() for t in mine})  # this round's
    index = NearDuplicateIndex(threshold=THRESHOLD)
    for t, sketch in sorted(zip(other, stored, strict=True), key=lambda p: p[0].id):
        index.add_sketch(t.id, sketch)
    variants = []
    for words in base:
        for changes in range(4):
            variant = list(words)
            for _ in range(changes):
                variant[rng.randrange(len(variant))] = f"x{rng.randrange(1000)}"
            variants.append(variant)
    queries = hasher.sketches(variants)

    twins = catalog.tasks.goal_twins([q.digest() for q in queries], BANDS, THRESHOLD, ROUND)

    expected = [index.match_sketch(q) for q in queries]
    assert twins == expected
    assert sum(t is not None for t, _ in twins) > len(other)  # exact copies and near ones
    assert any(0 < s < 1 for _, s in twins), "near twins, not only copies"


def test_a_batch_of_nothing_and_a_digest_with_no_twin(catalog: Catalog) -> None:
    assert catalog.tasks.goal_twins([], BANDS, THRESHOLD, ROUND) == []
    assert catalog.tasks.goal_twins([[1] * 64], BANDS, THRESHOLD, ROUND) == [(None, 0.0)]


@pytest.mark.parametrize("equal", [57, 58])
def test_a_shared_band_is_a_twin_only_at_the_threshold(
    catalog: Catalog, round_trajectories: list[Trajectory], equal: int
) -> None:
    other, _ = _tasks(catalog, _tasks_of(round_trajectories))
    stored = list(range(64))
    query = stored[:equal] + [1000 + i for i in range(64 - equal)]  # the first bands equal
    catalog.tasks.add_goal_sketches({other[1].id: stored, other[0].id: stored})
    (twin,) = catalog.tasks.goal_twins([query], BANDS, THRESHOLD, ROUND)
    if equal / 64 >= THRESHOLD:
        assert twin == (min(other[0].id, other[1].id), equal / 64)  # a tie: the first id
    else:
        assert twin == (None, 0.0)
