"""A round's tasks from BFCL: the development split held out by id, the training tasks
taken once each in a seeded order, each checked by replaying its ground truth."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from contract import RejectionReason, Split, TaskSpec
from envs.bfcl import construct
from envs.bfcl.backend import bfcl_task_of
from envs.bfcl.construct import bfcl_specs, construct_bfcl
from envs.bfcl.tasks import CATEGORIES, DEV_EVERY, load_tasks, split_of


def test_one_task_in_five_of_each_category_is_held_out_and_marked_so() -> None:
    dev = list(bfcl_specs(Split.DEV))
    train = list(bfcl_specs(Split.TRAIN))
    per_category = Counter(t.template for t in dev)
    assert per_category == {f"bfcl_{c}": 200 // DEV_EVERY for c in CATEGORIES}
    assert all(t.split is Split.DEV for t in dev) and all(t.split is Split.TRAIN for t in train)
    assert not {t.fingerprint for t in dev} & {t.fingerprint for t in train}
    assert len(dev) + len(train) == sum(len(load_tasks(c)) for c in CATEGORIES)
    assert split_of(bfcl_task_of(dev[1])) is Split.DEV


def test_a_round_takes_unknown_training_tasks_in_its_seed_s_order() -> None:
    first = construct_bfcl("round-a", 30, 7, frozenset())
    again = construct_bfcl("round-a", 30, 7, frozenset())
    other_seed = construct_bfcl("round-a", 30, 8, frozenset())
    assert [t.id for t in first.accepted] == [t.id for t in again.accepted]  # a rerun: the same
    assert [t.id for t in first.accepted] != [t.id for t in other_seed.accepted]
    assert len(first.accepted) == 30 and not first.rejected
    assert {t.split for t in first.accepted} == {Split.TRAIN}
    assert len({t.template for t in first.accepted}) == len(CATEGORIES)

    known = frozenset(t.fingerprint for t in first.accepted)
    later = construct_bfcl("round-b", 1_000, 7, known)
    assert later.available == first.available - 30
    assert len(later.accepted) == later.available  # fewer than asked: the pool is spent
    assert not known & {t.fingerprint for t in later.accepted}


def test_a_task_whose_ground_truth_fails_its_verifier_is_rejected_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    good, bad = list(bfcl_specs(Split.TRAIN))[:2]
    dropped = bad.model_copy(update={"reference_plan": bad.reference_plan[1:]})

    def two(split: Split) -> Iterator[TaskSpec]:
        yield from (good, dropped)

    monkeypatch.setattr(construct, "bfcl_specs", two)
    taken = construct_bfcl("round-c", 2, 0, frozenset())
    assert [t.id for t in taken.accepted] == [good.id]
    (rejection,) = taken.rejected
    assert rejection.reason is RejectionReason.REFERENCE_FAILS
    assert rejection.fingerprint == bad.fingerprint and rejection.round_id == "round-c"
    assert str(bad.params["id"]) in rejection.detail and "BFCL" in rejection.detail
