"""Task manifests: how a round hands a collection shard its tasks without the catalog.

Before a shard runs, the round writes the specs of the shard's tasks as one small file
beside the round's shards (JSON lines, one canonical spec a line, at the shards' root:
a folder or an object-storage URL). The shard's task is given only the manifest's
location, so it holds its own tasks, not the round's, and a collector on another machine
needs the shards' URL, not the catalog.
"""

from __future__ import annotations

from collections.abc import Sequence

from contract import TaskSpec
from storage.errors import CatalogError
from storage.locations import Location, read_whole, write_whole

MANIFEST_SUFFIX = ".jsonl"


def write_task_manifest(tasks: Sequence[TaskSpec], location: Location) -> None:
    """Write the specs of ``tasks``, in order, at ``location``, whole or not at all."""
    write_manifest_texts([task.to_json().decode() for task in tasks], location)


def write_manifest_texts(specs: Sequence[str], location: Location) -> None:
    """Write specs already serialized (as the catalog stores them: one JSON object each,
    no line break inside), in order, at ``location``, whole or not at all."""
    data = "".join(spec + "\n" for spec in specs).encode()
    write_whole(location, lambda sink: sink.write(data))


def read_task_manifest(location: Location) -> list[TaskSpec]:
    """The tasks of the manifest at ``location``, in order; CatalogError when there is
    none there or a line is not a task spec (each spec's id is checked against its
    content)."""
    try:
        data = read_whole(location)
    except FileNotFoundError:
        raise CatalogError(
            f"no task manifest at {location}: rerun the round's collect stage"
        ) from None
    tasks = []
    for number, line in enumerate(data.splitlines(), start=1):
        try:
            tasks.append(TaskSpec.model_validate_json(line))
        except ValueError as exc:
            raise CatalogError(
                f"task manifest {location}, line {number}, is not a task spec: "
                f"{str(exc).splitlines()[0]}"
            ) from None
    return tasks
