"""Task manifests: a shard's tasks written whole and read back equal; a missing or damaged
manifest is refused with its location, never half-read."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from contract import TaskSpec
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks
from storage import CatalogError
from storage.files import TEMP_MARK
from storage.task_manifests import read_task_manifest, write_task_manifest


@pytest.fixture(scope="module")
def tasks() -> list[TaskSpec]:
    return sample_tasks(5, 3, MobileSandbox())


def test_a_manifest_gives_back_its_tasks_in_order(tmp_path: Path, tasks: list[TaskSpec]) -> None:
    path = tmp_path / "round-a" / "tasks" / "shard-00000.jsonl"
    order = [tasks[3], tasks[0], tasks[4]]

    write_task_manifest(order, path)

    assert read_task_manifest(path) == order
    assert not [p for p in path.parent.iterdir() if TEMP_MARK in p.name]
    write_task_manifest([], path)
    assert read_task_manifest(path) == []


def test_a_missing_manifest_is_refused_with_its_location(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match=r"no task manifest at .*shard-00007\.jsonl"):
        read_task_manifest(tmp_path / "shard-00007.jsonl")


@pytest.mark.parametrize(
    ("damage", "line"),
    [
        pytest.param(lambda text: text.replace('"goal":"', '"goal":"Not ', 1), 1, id="edited"),
        pytest.param(lambda text: text + "{}\n", 3, id="not a spec"),
        pytest.param(lambda text: text[:-10], 2, id="cut short"),
    ],
)
def test_a_damaged_manifest_is_refused_naming_the_line(
    tmp_path: Path, tasks: list[TaskSpec], damage: Callable[[str], str], line: int
) -> None:
    path = tmp_path / "shard.jsonl"
    write_task_manifest(tasks[:2], path)
    path.write_text(damage(path.read_text()))

    with pytest.raises(CatalogError, match=rf"shard\.jsonl, line {line}, is not a task spec"):
        read_task_manifest(path)
