"""Exact and near-duplicate detection with rensa's MinHash sketches and LSH index."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest

from agents.task_constructor import what_it_asks
from contract import DropReason, Finish, InvalidInputError, Outcome, Trajectory
from curation.dedup import (
    Duplicate,
    MinHasher,
    NearDuplicateIndex,
    action_shingles,
    action_tokens,
    find_duplicates,
    jaccard,
    keep_order,
    lsh_bands,
    shingle_hashes,
    word_shingles,
)
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import instantiate, template_named
from tests.curation.builders import is_clean_success, pick, rebuilt, redundant_pair, with_round

GOAL = "Send a message to Vera Okafor saying that the meeting moved to Thursday at 10:00"


def test_sketches_are_deterministic_order_free_and_estimate_jaccard() -> None:
    first = [f"s{i}" for i in range(100)]
    second = [f"s{i}" for i in range(20, 120)]  # true Jaccard 80 / 120
    hasher = MinHasher(num_perm=256)
    one, two, empty = hasher.sketches([first, second, []])
    assert len(one.digest()) == 256
    assert one.digest() == MinHasher(num_perm=256).sketch(list(reversed(first))).digest()
    assert abs(one.jaccard(two) - 80 / 120) < 0.1
    assert empty.jaccard(hasher.sketch(())) == 1.0 and one.jaccard(empty) == 0.0
    assert MinHasher(num_perm=256, seed=2).sketch(first).digest() != one.digest()


def test_sketches_are_the_same_in_another_process() -> None:
    """A catalog's decisions must not depend on the process (no per-process hash seed)."""
    code = "from curation.dedup import MinHasher; print(MinHasher().sketch(['a', 'b']).digest())"
    other = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert other.strip() == str(MinHasher().sketch(["a", "b"]).digest())


def test_bands_divide_the_permutations_and_find_pairs_at_the_threshold() -> None:
    bands, rows = lsh_bands(64, 0.9)
    assert bands * rows == 64
    assert 1 - (1 - 0.9**rows) ** bands >= 0.98
    assert lsh_bands(64, 0.5)[1] < rows
    assert lsh_bands(96, 0.9)[0] * lsh_bands(96, 0.9)[1] == 96


def test_the_most_similar_match_wins_and_the_earliest_on_a_tie() -> None:
    base = [f"t{i}" for i in range(40)]
    index = NearDuplicateIndex(threshold=0.8, num_perm=128)
    index.add("far", [*base[:36], "x1", "x2", "x3", "x4"])
    index.add("near", [*base[:39], "y1"])
    index.add("same-1", base)
    index.add("same-2", base)
    assert index.query(base) == "same-1"
    assert index.query([*base[:39], "y1"]) == "near"


def test_an_index_survives_pickling() -> None:
    """The task-constructor keeps its goal index in LangGraph state."""
    index = NearDuplicateIndex()
    index.add("task-a", GOAL)
    copy = pickle.loads(pickle.dumps(index))
    assert copy.query(GOAL) == "task-a" and "task-a" in copy
    copy.add("task-b", "Add Sydney to my world clock")
    assert copy.query("Add Sydney to my world clock") == "task-b"


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


def _what_distinct_draws_ask(template: str, variants: int) -> list[list[str]]:
    """The shingles of what a template's distinct draws ask, in draw order."""
    sandbox = MobileSandbox()
    asked = {
        what_it_asks(instantiate(template_named(template), 3, sandbox, variant=v)): None
        for v in range(variants)
    }
    return [word_shingles(text) for text in asked]


def test_many_similar_documents_below_the_threshold_are_not_confirmed_by_the_estimate() -> None:
    """A routine's draws differ in a door, a temperature and a setting: no two are 0.9
    alike, but the sketches' estimate, met once per earlier draw, says so of many."""
    draws = _what_distinct_draws_ask("run_bedtime_routine", 100)
    assert len(draws) > 40
    assert max(jaccard(a, b) for i, a in enumerate(draws) for b in draws[:i]) < 0.9
    exact, estimated = NearDuplicateIndex(), NearDuplicateIndex()
    false_twins = 0
    for i, shingles in enumerate(draws):
        sketch = exact.hasher.sketch(shingles)
        assert exact.match_sketch(sketch, shingles) == (None, 0.0)
        false_twins += estimated.match_sketch(sketch)[0] is not None
        exact.add_sketch(f"draw-{i}", sketch, shingles)
        estimated.add_sketch(f"draw-{i}", sketch)
    assert false_twins > len(draws) // 10, "the noise this guards against"
    assert exact.query(draws[3]) == "draw-3"


def test_a_confirmed_twin_has_its_exact_similarity() -> None:
    index = NearDuplicateIndex(threshold=0.8)
    words = [f"w{i}" for i in range(30)]
    index.add("a", words)
    near = [*words[:29], "other"]  # 29 of 31
    assert index.match_sketch(index.hasher.sketch(near), near) == ("a", 29 / 31)


def test_shingle_hashes_are_distinct_sorted_and_the_same_in_another_process() -> None:
    hashes = shingle_hashes(["a b c", "b c d", "a b c"])
    assert len(hashes) == 2 and list(hashes) == sorted(hashes)
    assert all(0 <= h < 2**64 for h in hashes)
    code = "from curation.dedup import shingle_hashes; print(shingle_hashes(['a b c']))"
    other = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert other.strip() == str(shingle_hashes(["a b c"]))


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


def another_answer(trajectories: list[Trajectory], steps: int) -> tuple[Trajectory, Trajectory]:
    """``(original, variant)``: a clean success of at least ``steps`` steps, and the same
    episode finishing with another answer in place of its last action. Of the ``n``
    action 3-shingles (padded), two change: the pair's Jaccard similarity is
    ``(n - 2) / (n + 2)``."""
    original = pick(trajectories, lambda t: is_clean_success(t) and len(t.steps) >= steps)
    last = original.steps[-1]
    changed = last.model_copy(update={"action": Finish(answer="Something else entirely.")})
    return original, rebuilt(original, steps=(*original.steps[:-1], changed))


def test_a_changed_argument_is_not_a_near_duplicate(
    faulty_trajectories: list[Trajectory],
) -> None:
    original, variant = another_answer(faulty_trajectories, 3)
    assert action_tokens(variant.steps) != action_tokens(original.steps)
    assert find_duplicates([original, variant], threshold=0.95) == {}


def test_two_runs_that_played_alike_keep_the_same_copy_whatever_their_ids(
    faulty_trajectories: list[Trajectory],
) -> None:
    # Six steps or more: half the shingles alike or more, far above 0.3 whatever the
    # sketches' noise (four steps, 0.33, are not).
    original, variant = another_answer(faulty_trajectories, 6)
    first = find_duplicates([original, variant], threshold=0.3)
    assert len(first) == 1  # near-duplicates of one length: ids alone told them apart
    # the same two episodes recorded again (a served model's ids change with its latencies)
    again = next(
        (with_round(original, r), with_round(variant, r))
        for r in (f"round-{i}" for i in range(100))
        if (with_round(original, r).id < with_round(variant, r).id) != (original.id < variant.id)
    )
    second = find_duplicates(list(again), threshold=0.3)
    dropped_first = next(t for t in (original, variant) if t.id in first)
    dropped_second = next(t for t in again if t.id in second)
    assert dropped_first.steps == dropped_second.steps


def test_the_fixture_has_few_duplicates(faulty_trajectories: list[Trajectory]) -> None:
    found = find_duplicates(faulty_trajectories)
    by_id = {t.id: t for t in faulty_trajectories}
    assert 0 < len(found) < len(faulty_trajectories) // 10
    for tid, dup in found.items():
        assert dup.of not in found
        assert by_id[tid].task.fingerprint == by_id[dup.of].task.fingerprint
        assert keep_order(by_id[dup.of]) < keep_order(by_id[tid])


def test_copies_from_other_rounds_with_another_answer_are_dropped_against_one_kept(
    faulty_trajectories: list[Trajectory],
) -> None:
    """Speed is ``flywheel bench dedup``'s; here, 2,000 items' decisions. Another answer
    changes the last two of a trajectory's action shingles, so at the default 0.9 only a
    trajectory of some 40 actions stays near its copy; at 0.5 one of six or more does (the
    sample's longest end with finish after 6 to 11 steps), so the near-duplicate path is
    exercised whatever the templates draw."""
    many = [
        _answered(with_round(t, f"round-{r}"), f"Done ({r}).")
        for r in range(9)
        for t in faulty_trajectories
    ][:2000]
    assert len({t.id for t in many}) == 2000

    found = find_duplicates(many, threshold=0.5)

    copies: dict[str, list[Trajectory]] = {}
    for t in sorted(many, key=keep_order):
        actions = [s.action.describe() if s.action else None for s in t.steps]
        copies.setdefault(repr((t.task.fingerprint, t.metadata.outcome, actions)), []).append(t)
    for first, *rest in copies.values():  # identical actions: each dropped as the first is
        if first.id in found:  # the first is a near-duplicate: so are its copies, of one kept
            assert all(found[t.id] == found[first.id] for t in rest)
        else:
            assert all(found[t.id] == Duplicate(DropReason.DUPLICATE, first.id, 1.0) for t in rest)
    assert any(d.reason is DropReason.NEAR_DUPLICATE for d in found.values())
    by_id = {t.id: t for t in many}
    for tid, dup in found.items():
        assert dup.of not in found
        kept, dropped = by_id[dup.of], by_id[tid]
        assert kept.task.fingerprint == dropped.task.fingerprint
        assert kept.metadata.outcome is dropped.metadata.outcome


def _answered(trajectory: Trajectory, answer: str) -> Trajectory:
    """The trajectory with another final answer, when it ended with finish."""
    last = trajectory.steps[-1]
    if not isinstance(last.action, Finish):
        return trajectory
    changed = last.model_copy(update={"action": Finish(answer=answer)})
    return rebuilt(trajectory, steps=(*trajectory.steps[:-1], changed))
