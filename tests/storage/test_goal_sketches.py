"""Goal sketches kept in the catalog: the near-duplicates the catalog finds for a batch of
sketches are those rensa's index of the same documents finds (candidates sharing an LSH
band, confirmed on the shingles' exact similarity), among every stored task but the one
asked about."""

from __future__ import annotations

import random

import pytest

from contract import TaskSpec, Trajectory
from curation.dedup import MinHasher, NearDuplicateIndex, jaccard, lsh_bands, shingle_hashes
from storage import Catalog
from storage.stores import GoalSketch
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


def _kept(digest: list[int], shingles: list[str] | None = None) -> GoalSketch:
    """A sketch as the catalog keeps it (shingles named by the digest's values if none)."""
    words = shingles if shingles is not None else [f"s{v}" for v in digest]
    return GoalSketch(digest, shingle_hashes(words))


def test_sketches_are_kept_once_and_the_missing_are_named(
    catalog: Catalog, round_trajectories: list[Trajectory]
) -> None:
    other, mine = _tasks(catalog, _tasks_of(round_trajectories))
    assert catalog.tasks.without_goal_sketch() == sorted(t.id for t in [*other, *mine])
    first = {t.id: _kept([i] * 64) for i, t in enumerate(other[:3])}
    assert catalog.tasks.add_goal_sketches(first) == 3
    assert catalog.tasks.add_goal_sketches(first | {other[3].id: _kept([9] * 64)}) == 1
    assert catalog.tasks.add_goal_sketches({}) == 0
    assert catalog.tasks.without_goal_sketch() == sorted(t.id for t in [*other[4:], *mine])


def test_the_twins_are_those_rensas_index_finds(
    catalog: Catalog, round_trajectories: list[Trajectory]
) -> None:
    other, mine = _tasks(catalog, _tasks_of(round_trajectories))
    stored_tasks = sorted([*other, *mine], key=lambda t: t.id)
    rng = random.Random(3)
    base = [[f"w{rng.randrange(40)}" for _ in range(14)] for _ in stored_tasks]
    hasher = MinHasher()
    stored = hasher.sketches(base)
    catalog.tasks.add_goal_sketches(
        {t.id: _kept(s.digest(), w) for t, s, w in zip(stored_tasks, stored, base, strict=True)}
    )
    index = NearDuplicateIndex(threshold=THRESHOLD)
    for t, sketch, words in zip(stored_tasks, stored, base, strict=True):
        index.add_sketch(t.id, sketch, words)
    variants = []
    for words in base:
        for changes in range(4):
            variant = list(words)
            for _ in range(changes):
                variant[rng.randrange(len(variant))] = f"x{rng.randrange(1000)}"
            variants.append(variant)
    queries = hasher.sketches(variants)

    asked = [_kept(q.digest(), v) for q, v in zip(queries, variants, strict=True)]
    twins = catalog.tasks.goal_twins(
        [(f"new-{i}", sketch) for i, sketch in enumerate(asked)], BANDS, THRESHOLD
    )

    expected = [index.match_sketch(q, v) for q, v in zip(queries, variants, strict=True)]
    assert twins == expected
    stored_words = {t.id: w for t, w in zip(stored_tasks, base, strict=True)}
    for (twin, similarity), variant in zip(twins, variants, strict=True):
        assert twin is None or similarity == jaccard(variant, stored_words[twin]) >= THRESHOLD
    assert sum(t is not None for t, _ in twins) > len(stored_tasks)  # copies and near ones
    assert any(0 < s < 1 for _, s in twins), "near twins, not only copies"
    assert {t for t, _ in twins} >= {mine[0].id, other[0].id}, "this round's and others'"


def test_a_stored_task_is_not_its_own_twin(
    catalog: Catalog, round_trajectories: list[Trajectory]
) -> None:
    other, mine = _tasks(catalog, _tasks_of(round_trajectories))
    sketch = _kept(list(range(64)))
    catalog.tasks.add_goal_sketches({mine[0].id: sketch})
    assert catalog.tasks.goal_twins([(mine[0].id, sketch)], BANDS, THRESHOLD) == [(None, 0.0)]
    catalog.tasks.add_goal_sketches({other[0].id: sketch})
    (twin,) = catalog.tasks.goal_twins([(mine[0].id, sketch)], BANDS, THRESHOLD)
    assert twin == (other[0].id, 1.0)


def test_a_batch_of_nothing_and_a_digest_with_no_twin(catalog: Catalog) -> None:
    assert catalog.tasks.goal_twins([], BANDS, THRESHOLD) == []
    assert catalog.tasks.goal_twins([("new", _kept([1] * 64))], BANDS, THRESHOLD) == [(None, 0.0)]


@pytest.mark.parametrize("common", [9, 10])
def test_a_candidate_is_a_twin_only_when_its_shingles_reach_the_threshold(
    catalog: Catalog, round_trajectories: list[Trajectory], common: int
) -> None:
    """The digests agree wholly (a sure candidate); the shingles decide: 9 of 11 shared
    is below 0.9, 10 of 11 above, whatever the digests say."""
    other, _ = _tasks(catalog, _tasks_of(round_trajectories))
    digest = list(range(64))
    stored = [f"s{i}" for i in range(10)]
    query = [*stored[:common], "new"]
    catalog.tasks.add_goal_sketches(
        {other[1].id: _kept(digest, stored), other[0].id: _kept(digest, stored)}
    )
    (twin,) = catalog.tasks.goal_twins([("new", _kept(digest, query))], BANDS, THRESHOLD)
    if common / 11 >= THRESHOLD:
        assert twin == (min(other[0].id, other[1].id), common / 11)  # a tie: the first id
    else:
        assert twin == (None, 0.0)


def test_the_same_shingles_without_a_shared_band_are_not_a_candidate(
    catalog: Catalog, round_trajectories: list[Trajectory]
) -> None:
    other, _ = _tasks(catalog, _tasks_of(round_trajectories))
    words = [f"s{i}" for i in range(10)]
    catalog.tasks.add_goal_sketches({other[0].id: _kept(list(range(64)), words)})
    apart = [1000 + v if v % ROWS == 0 else v for v in range(64)]  # every band differs
    assert catalog.tasks.goal_twins([("new", _kept(apart, words))], BANDS, THRESHOLD) == [
        (None, 0.0)
    ]
