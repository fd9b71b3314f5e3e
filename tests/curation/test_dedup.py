"""Exact and near-duplicate detection with the vectorized MinHash / LSH index."""

from __future__ import annotations

import random
import time

import numpy as np
import pytest

from contract import DropReason, Finish, InvalidInputError, Outcome, Trajectory
from curation.dedup import (
    MERSENNE_61,
    SIGNING_CHUNK,
    MinHasher,
    NearDuplicateIndex,
    _mulmod61,
    action_shingles,
    action_tokens,
    estimated_jaccard,
    find_duplicates,
    keep_order,
    lsh_bands,
    word_shingles,
)
from envs.sandbox import MobileSandbox
from tests.curation.builders import is_clean_success, pick, rebuilt, redundant_pair, with_round

GOAL = "Send a message to Vera Okafor saying that the meeting moved to Thursday at 10:00"


def test_mulmod_is_exact_against_python_integers() -> None:
    rng = random.Random(0)
    a = [rng.randrange(1, MERSENNE_61) for _ in range(500)] + [MERSENNE_61 - 1]
    x = [rng.randrange(0, MERSENNE_61) for _ in range(500)] + [MERSENNE_61 - 1]
    got = _mulmod61(np.array(a, dtype=np.uint64), np.array(x, dtype=np.uint64))
    assert [int(v) for v in got] == [(p * q) % MERSENNE_61 for p, q in zip(a, x, strict=True)]


def test_signatures_are_deterministic_and_estimate_jaccard() -> None:
    first = [f"s{i}" for i in range(100)]
    second = [f"s{i}" for i in range(20, 120)]  # true Jaccard 80 / 120
    hasher = MinHasher(num_perm=256)
    sig = hasher.signatures([first, second, []])
    assert sig.shape == (3, 256) and sig.dtype == np.uint64
    assert np.array_equal(sig, MinHasher(num_perm=256).signatures([first, second, []]))
    assert np.array_equal(sig[0], hasher.signature(list(reversed(first))))
    assert abs(estimated_jaccard(sig[0], sig[1]) - 80 / 120) < 0.1
    assert int(sig.max()) < MERSENNE_61


def test_signing_in_passes_gives_each_documents_own_signature() -> None:
    rng = random.Random(4)
    sizes = [0, 1, SIGNING_CHUNK - 1, 2, SIGNING_CHUNK, 3, SIGNING_CHUNK + 7, 5, 0, 300, 300]
    docs = [[f"t{rng.randrange(5000)}" for _ in range(n)] for n in sizes]
    hasher = MinHasher(num_perm=32)
    together = hasher.signatures(docs)
    assert together.shape == (len(docs), 32)
    for doc, row in zip(docs, together, strict=True):
        assert np.array_equal(row, hasher.signature(doc))
    assert hasher.signatures([]).shape == (0, 32)


def test_bands_find_pairs_at_the_threshold() -> None:
    bands, rows = lsh_bands(64, 0.9)
    assert bands * rows <= 64
    assert 1 - (1 - 0.9**rows) ** bands >= 0.99
    assert lsh_bands(64, 0.5)[1] < rows


def test_index_finds_a_near_duplicate_goal() -> None:
    index = NearDuplicateIndex(threshold=0.6, num_perm=128)
    index.add("task-a", GOAL)
    index.add("task-b", "Set an alarm for 07:45 labelled Call mum")
    assert len(index) == 2 and "task-a" in index
    assert index.query(GOAL.lower() + ".") == "task-a"
    assert index.query(GOAL + " please") == "task-a"
    assert index.query("Book a table for two at Pho Saigon tonight") is None
    assert index.query(word_shingles(GOAL)) == "task-a"


def test_adding_many_at_once_matches_adding_one_by_one() -> None:
    goals = [GOAL, "Set an alarm for 07:45 labelled Call mum", "Add Sydney to my world clock"]
    one, many = NearDuplicateIndex(), NearDuplicateIndex()
    for i, goal in enumerate(goals):
        one.add(str(i), goal)
    many.add_many((str(i), goal) for i, goal in enumerate(goals))
    for goal in goals:
        assert one.query(goal) == many.query(goal) is not None


def test_index_refuses_a_key_twice_and_a_bad_threshold() -> None:
    index = NearDuplicateIndex()
    index.add("k", GOAL)
    with pytest.raises(InvalidInputError, match="key"):
        index.add("k", GOAL)
    with pytest.raises(InvalidInputError, match="threshold"):
        NearDuplicateIndex(threshold=0.0)
    with pytest.raises(InvalidInputError, match="num_perm"):
        NearDuplicateIndex(num_perm=1)


def test_word_shingles() -> None:
    assert word_shingles("Add Sydney to my clock") == [
        "add sydney to",
        "sydney to my",
        "to my clock",
    ]
    assert word_shingles("Hi there") == ["hi there"]


def test_action_shingles_collapse_immediate_repeats() -> None:
    assert action_shingles(["a", "a", "a", "b"]) == action_shingles(["a", "b"])
    assert action_shingles(["a", "b", "a"]) != action_shingles(["a", "b"])
    assert action_shingles([]) == ["<s>\x1f</s>"]


def test_an_exact_copy_from_another_round_is_a_duplicate(
    faulty_trajectories: list[Trajectory],
) -> None:
    original = pick(faulty_trajectories, is_clean_success)
    copy = with_round(original, "round-2")
    assert copy.id != original.id

    found = find_duplicates([copy, original])

    kept, dropped = sorted([original, copy], key=keep_order)
    assert found == {dropped.id: found[dropped.id]}
    assert found[dropped.id].reason is DropReason.DUPLICATE
    assert found[dropped.id].of == kept.id


def test_one_redundant_call_is_a_near_duplicate_and_the_shorter_is_kept(
    faulty_trajectories: list[Trajectory], sandbox: MobileSandbox
) -> None:
    clean, redundant = redundant_pair(faulty_trajectories, sandbox)

    found = find_duplicates([redundant, clean])

    assert set(found) == {redundant.id}
    assert found[redundant.id].reason is DropReason.NEAR_DUPLICATE
    assert found[redundant.id].of == clean.id
    assert found[redundant.id].similarity >= 0.9


def test_different_outcomes_or_tasks_are_not_duplicates(
    faulty_trajectories: list[Trajectory], sandbox: MobileSandbox
) -> None:
    clean, redundant = redundant_pair(faulty_trajectories, sandbox)
    failed = rebuilt(
        redundant,
        metadata=redundant.metadata.model_copy(update={"outcome": Outcome.FAILURE}),
    )
    other = pick(faulty_trajectories, lambda t: t.task.fingerprint != clean.task.fingerprint)
    assert find_duplicates([clean, failed, other]) == {}


def test_a_changed_argument_is_not_a_near_duplicate(
    faulty_trajectories: list[Trajectory],
) -> None:
    original = pick(faulty_trajectories, lambda t: is_clean_success(t) and len(t.steps) >= 3)
    last = original.steps[-1]
    changed = last.model_copy(update={"action": Finish(answer="Something else entirely.")})
    variant = rebuilt(original, steps=(*original.steps[:-1], changed))
    assert action_tokens(variant.steps) != action_tokens(original.steps)
    assert find_duplicates([original, variant], threshold=0.95) == {}


def test_the_fixture_has_few_duplicates(faulty_trajectories: list[Trajectory]) -> None:
    found = find_duplicates(faulty_trajectories)
    by_id = {t.id: t for t in faulty_trajectories}
    assert 0 < len(found) < len(faulty_trajectories) // 10
    for tid, dup in found.items():
        assert dup.of not in found
        assert by_id[tid].task.fingerprint == by_id[dup.of].task.fingerprint
        assert keep_order(by_id[dup.of]) < keep_order(by_id[tid])


def test_two_thousand_trajectories_dedup_well_under_a_second(
    faulty_trajectories: list[Trajectory],
) -> None:
    many = [
        _answered(with_round(t, f"round-{r}"), f"Done ({r}).")
        for r in range(9)
        for t in faulty_trajectories
    ][:2000]
    assert len({t.id for t in many}) == 2000

    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        found = find_duplicates(many)
        best = min(best, time.perf_counter() - start)
    assert found
    assert best < 1.0, f"dedup of 2000 took {best:.2f}s"


def _answered(trajectory: Trajectory, answer: str) -> Trajectory:
    """The trajectory with another final answer, when it ended with finish."""
    last = trajectory.steps[-1]
    if not isinstance(last.action, Finish):
        return trajectory
    changed = last.model_copy(update={"action": Finish(answer=answer)})
    return rebuilt(trajectory, steps=(*trajectory.steps[:-1], changed))
