"""Goal digests kept in the catalog: the near-duplicates the catalog finds for a batch of
digests are those rensa's index of the same digests finds (candidates sharing an LSH band,
confirmed by the share of equal values), among every stored task but the one asked about."""

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
    assert catalog.tasks.without_goal_sketch() == sorted(t.id for t in [*other, *mine])
    first = {t.id: [i] * 64 for i, t in enumerate(other[:3])}
    assert catalog.tasks.add_goal_sketches(first) == 3
    assert catalog.tasks.add_goal_sketches(first | {other[3].id: [9] * 64}) == 1
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
        {t.id: s.digest() for t, s in zip(stored_tasks, stored, strict=True)}
    )
    index = NearDuplicateIndex(threshold=THRESHOLD)
    for t, sketch in zip(stored_tasks, stored, strict=True):
        index.add_sketch(t.id, sketch)
    variants = []
    for words in base:
        for changes in range(4):
            variant = list(words)
            for _ in range(changes):
                variant[rng.randrange(len(variant))] = f"x{rng.randrange(1000)}"
            variants.append(variant)
    queries = hasher.sketches(variants)

    twins = catalog.tasks.goal_twins(
        [(f"new-{i}", q.digest()) for i, q in enumerate(queries)], BANDS, THRESHOLD
    )

    expected = [index.match_sketch(q) for q in queries]
    assert twins == expected
    assert sum(t is not None for t, _ in twins) > len(stored_tasks)  # copies and near ones
    assert any(0 < s < 1 for _, s in twins), "near twins, not only copies"
    assert {t for t, _ in twins} >= {mine[0].id, other[0].id}, "this round's and others'"


def test_a_stored_task_is_not_its_own_twin(
    catalog: Catalog, round_trajectories: list[Trajectory]
) -> None:
    other, mine = _tasks(catalog, _tasks_of(round_trajectories))
    digest = list(range(64))
    catalog.tasks.add_goal_sketches({mine[0].id: digest})
    assert catalog.tasks.goal_twins([(mine[0].id, digest)], BANDS, THRESHOLD) == [(None, 0.0)]
    catalog.tasks.add_goal_sketches({other[0].id: digest})
    (twin,) = catalog.tasks.goal_twins([(mine[0].id, digest)], BANDS, THRESHOLD)
    assert twin == (other[0].id, 1.0)


def test_a_batch_of_nothing_and_a_digest_with_no_twin(catalog: Catalog) -> None:
    assert catalog.tasks.goal_twins([], BANDS, THRESHOLD) == []
    assert catalog.tasks.goal_twins([("new", [1] * 64)], BANDS, THRESHOLD) == [(None, 0.0)]


@pytest.mark.parametrize("equal", [57, 58])
def test_a_shared_band_is_a_twin_only_at_the_threshold(
    catalog: Catalog, round_trajectories: list[Trajectory], equal: int
) -> None:
    other, _ = _tasks(catalog, _tasks_of(round_trajectories))
    stored = list(range(64))
    query = stored[:equal] + [1000 + i for i in range(64 - equal)]  # the first bands equal
    catalog.tasks.add_goal_sketches({other[1].id: stored, other[0].id: stored})
    (twin,) = catalog.tasks.goal_twins([("new", query)], BANDS, THRESHOLD)
    if equal / 64 >= THRESHOLD:
        assert twin == (min(other[0].id, other[1].id), equal / 64)  # a tie: the first id
    else:
        assert twin == (None, 0.0)
