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
from storage.json_lines import JSON_LINES_SUFFIX, read_json_lines, write_json_lines
from storage.locations import Location

MANIFEST_SUFFIX = JSON_LINES_SUFFIX


def write_task_manifest(tasks: Sequence[TaskSpec], location: Location) -> None:
    """Write the specs of ``tasks``, in order, at ``location``, whole or not at all."""
    write_json_lines((task.to_json() for task in tasks), location)


def read_task_manifest(location: Location) -> list[TaskSpec]:
    """The tasks of the manifest at ``location``, in order; CatalogError when there is
    none there or a line is not a task spec (each spec's id is checked against its
    content)."""
    return read_json_lines(
        location,
        TaskSpec,
        what="task manifest",
        line="a task spec",
        remedy="rerun the round's collect stage",
    )
