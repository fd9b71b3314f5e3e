"""The construct stage compares a round's proposals with the stored tasks through the
catalog (their goal sketches, kept once each: other rounds' and this round's filed batches)
and decides exactly as a construction holding those goals in memory does; stopped
half-way and run again, it constructs the same tasks."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pytest
from pytest import MonkeyPatch

from agents import task_constructor
from agents.task_constructor import construct_tasks, what_it_asks
from contract import Capability, Difficulty, RejectionReason, Split
from contract.plan import GenerationPlan, Quota, default_plan
from envs.sandbox import MobileSandbox
from flows import round_stages
from flows.round_stages import construct, keep_goal_digests
from flows.settings import catalog_path
from storage import Catalog
from storage.task_store import DuckDBTaskStore

FIRST, SECOND = "round-first", "round-second"


def _outcome(catalog: Catalog) -> tuple[list[str], Counter[str]]:
    """The round's tasks, and per reason the fingerprints it rejected. Counted by
    fingerprint, not by record: a record names the twin, and on a tie of similarity the
    catalog names the first task id where the goals in memory name the first goal given,
    so two rejections of one draw may be one record or two."""
    rejected = {(r.fingerprint, r.reason.value) for r in catalog.tasks.rejections_of_round(SECOND)}
    return catalog.tasks.ids_of_round(SECOND), Counter(reason for _, reason in rejected)


def test_the_catalog_decides_as_the_goals_in_memory_do(tmp_path: Path) -> None:
    home, copy = tmp_path / "home", tmp_path / "copy"
    construct(home, FIRST, default_plan(400), 1, max_passes=12)
    copy.mkdir()
    shutil.copy(catalog_path(home), catalog_path(copy))

    construct(home, SECOND, default_plan(400), 1, max_passes=12)  # the same draws again
    with Catalog.open(catalog_path(copy)) as catalog:
        others = catalog.tasks.by_ids(catalog.tasks.ids_except_round(SECOND))
        construct_tasks(
            SECOND,
            default_plan(400),
            1,
            MobileSandbox(),
            store=catalog.tasks,
            known_fingerprints=frozenset(catalog.tasks.fingerprints_except_round(SECOND)),
            dev_fingerprints=frozenset(catalog.tasks.fingerprints(Split.DEV)),
            known_goals=[what_it_asks(t) for t in others],
        )
        in_memory = _outcome(catalog)
    with Catalog.open(catalog_path(home), read_only=True) as catalog:
        through_catalog = _outcome(catalog)
        named = [
            r.detail
            for r in catalog.tasks.rejections_of_round(SECOND)
            if r.reason is RejectionReason.NEAR_DUPLICATE
        ]
        first = set(catalog.tasks.ids_of_round(FIRST))

    assert through_catalog == in_memory
    assert through_catalog[1][RejectionReason.DUPLICATE.value] > 0
    assert named and any(task_id in detail for detail in named for task_id in first)


def test_each_stored_task_is_sketched_once(tmp_path: Path, monkeypatch: MonkeyPatch) -> None:
    home = tmp_path / "home"
    construct(home, FIRST, default_plan(60), 2, max_passes=12)
    with Catalog.open(catalog_path(home), read_only=True) as catalog:
        stored = catalog.tasks.ids_of_round(FIRST)
        assert stored and catalog.tasks.without_goal_sketch() == []  # filed with them
    with duckdb.connect(str(catalog_path(home))) as con:
        con.execute("DELETE FROM goal_sketches")  # as in a catalog from before sketches
    monkeypatch.setattr(round_stages, "SPEC_BATCH", 25)

    with Catalog.open(catalog_path(home)) as catalog:
        assert keep_goal_digests(catalog.tasks) == len(stored)
        assert keep_goal_digests(catalog.tasks) == 0
        assert catalog.tasks.without_goal_sketch() == []


def _near_twins_in_round(catalog: Catalog, round_id: str) -> int:
    ours = catalog.tasks.ids_of_round(round_id)
    return sum(
        any(task_id in r.detail for task_id in ours)
        for r in catalog.tasks.rejections_of_round(round_id)
        if r.reason is RejectionReason.NEAR_DUPLICATE
    )


def test_the_round_s_earlier_batches_are_asked_of_the_catalog(
    tmp_path: Path, monkeypatch: MonkeyPatch
) -> None:
    # Memory, easy: the thermostat's goal never changes and its checks differ in one value,
    # so its draws meet near-twins among the round's own (an even mix may meet none).
    plan = GenerationPlan(
        quotas=(Quota(capability=Capability.MEMORY, difficulty=Difficulty.EASY, count=60),)
    )
    monkeypatch.setattr(task_constructor, "PROPOSAL_BATCH", 9)
    in_memory = construct_tasks(FIRST, plan, 2, MobileSandbox(), max_passes=12)

    construct(tmp_path, FIRST, plan, 2, max_passes=12)

    with Catalog.open(catalog_path(tmp_path), read_only=True) as catalog:
        assert catalog.tasks.ids_of_round(FIRST) == [t.id for t in in_memory.tasks]
        stored = {r.id: r.reason for r in catalog.tasks.rejections_of_round(FIRST)}
        assert stored == {r.id: r.reason for r in in_memory.rejected}
        assert _near_twins_in_round(catalog, FIRST) > 0, "no twin among the round's own"


class _StoppedError(Exception):
    """The construction's process stopping between two writes."""


@pytest.mark.parametrize("write", ["add_serialized", "add_goal_sketches"])
def test_a_construction_stopped_half_way_and_run_again_constructs_the_same_tasks(
    tmp_path: Path, monkeypatch: MonkeyPatch, write: str
) -> None:
    plan = default_plan(150)
    construct(tmp_path / "whole", FIRST, plan, 4, max_passes=12)
    monkeypatch.setattr(task_constructor, "PROPOSAL_BATCH", 20)
    real = getattr(DuckDBTaskStore, write)
    calls = [0]

    def stopping(self: DuckDBTaskStore, *args: Any) -> int:
        calls[0] += 1
        if calls[0] == 4:
            raise _StoppedError
        return real(self, *args)  # type: ignore[no-any-return]

    monkeypatch.setattr(DuckDBTaskStore, write, stopping)
    with pytest.raises(_StoppedError):
        construct(tmp_path / "stopped", FIRST, plan, 4, max_passes=12)
    with Catalog.open(catalog_path(tmp_path / "stopped"), read_only=True) as catalog:
        assert 0 < len(catalog.tasks.ids_of_round(FIRST)) < 150
    monkeypatch.setattr(DuckDBTaskStore, write, real)

    construct(tmp_path / "stopped", FIRST, plan, 4, max_passes=12)

    with (
        Catalog.open(catalog_path(tmp_path / "whole"), read_only=True) as whole,
        Catalog.open(catalog_path(tmp_path / "stopped"), read_only=True) as again,
    ):
        assert again.tasks.ids_of_round(FIRST) == whole.tasks.ids_of_round(FIRST)
        assert again.tasks.without_goal_sketch() == []
