"""Where stored tasks run, and their specs as stored, read without parsing a spec: what a
round's collection stage needs to place its tasks in shards and write their manifests."""

from __future__ import annotations

from pathlib import Path

import pytest

from contract import Split, TaskSpec
from envs.bfcl.construct import bfcl_specs
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks
from storage import Catalog, UnknownIdError


def test_placements_and_spec_texts_are_read_in_the_order_asked(tmp_path: Path) -> None:
    sandbox_tasks = sample_tasks(5, 3, MobileSandbox())
    bfcl_tasks = [next(bfcl_specs(Split.TRAIN))]
    with Catalog.open(tmp_path / "catalog.duckdb") as catalog:
        catalog.tasks.add("round-a", [*sandbox_tasks, *bfcl_tasks])
        asked = [bfcl_tasks[0].id, *reversed([t.id for t in sandbox_tasks])]
        placed = catalog.tasks.placements(asked)
        texts = catalog.tasks.spec_texts(asked)
        with pytest.raises(UnknownIdError, match="task-nope"):
            catalog.tasks.placements([*asked, "task-nope"])
    by_id = {t.id: t for t in [*sandbox_tasks, *bfcl_tasks]}
    assert [p.task_id for p in placed] == asked
    assert [(p.seed, p.backend) for p in placed] == [
        (by_id[i].initial_conditions.seed, by_id[i].initial_conditions.backend) for i in asked
    ]
    assert {p.backend for p in placed} == {"sandbox", "bfcl"}
    assert [TaskSpec.model_validate_json(text) for text in texts] == [by_id[i] for i in asked]
    assert all("\n" not in text for text in texts)  # one line each in a manifest


def test_a_serialized_spec_is_stored_as_its_record_would_be(tmp_path: Path) -> None:
    tasks = [*sample_tasks(4, 5, MobileSandbox()), next(bfcl_specs(Split.DEV))]
    with (
        Catalog.open(tmp_path / "a.duckdb") as records,
        Catalog.open(tmp_path / "b.duckdb") as texts,
    ):
        assert records.tasks.add("round-a", tasks) == 5
        assert texts.tasks.add_serialized("round-a", [t.to_json() for t in tasks]) == 5
        assert texts.tasks.add_serialized("round-a", [tasks[0].to_json()]) == 0  # known id
        ids = [t.id for t in tasks]
        assert texts.tasks.by_ids(ids) == records.tasks.by_ids(ids) == tasks
        assert texts.tasks.spec_texts(ids) == records.tasks.spec_texts(ids)
        assert texts.tasks.ids_of_round("round-a") == records.tasks.ids_of_round("round-a")
        assert texts.tasks.fingerprints(Split.DEV) == records.tasks.fingerprints(Split.DEV)
