"""The construct stage compares a round's proposals with the tasks of other rounds through
the catalog (their goal digests, kept once each) and decides exactly as a construction
holding those goals in memory does."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import duckdb
from pytest import MonkeyPatch

from agents.task_constructor import construct_tasks, what_it_asks
from contract import RejectionReason, Split
from contract.plan import default_plan
from envs.sandbox import MobileSandbox
from flows import round_stages
from flows.round_stages import construct, keep_goal_digests
from flows.settings import catalog_path
from storage import Catalog

FIRST, SECOND = "round-first", "round-second"


def _outcome(catalog: Catalog) -> tuple[list[str], Counter[str]]:
    rejected = catalog.tasks.rejections_of_round(SECOND)
    return catalog.tasks.ids_of_round(SECOND), Counter(r.reason.value for r in rejected)


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
        assert stored and catalog.tasks.without_goal_sketch(SECOND) == []  # filed with them
    with duckdb.connect(str(catalog_path(home))) as con:
        con.execute("DELETE FROM goal_sketches")  # as in a catalog from before digests
    monkeypatch.setattr(round_stages, "SPEC_BATCH", 25)

    with Catalog.open(catalog_path(home)) as catalog:
        assert keep_goal_digests(catalog.tasks, SECOND) == len(stored)
        assert keep_goal_digests(catalog.tasks, SECOND) == 0
        assert catalog.tasks.without_goal_sketch(SECOND) == []
