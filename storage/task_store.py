"""Tasks and refused proposals in the DuckDB catalog."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from more_itertools import chunked

from contract import RejectedTask, Split, TaskSpec
from storage import round_facts
from storage.connection import CatalogFile
from storage.errors import UnknownIdError
from storage.rows import REJECTION_SCHEMA, TASK_SCHEMA, rejection_row, task_row
from storage.sql import dicts, ids_table, insert_rows, recent_ids, registered, unique

INSERT_BATCH = 1_000
"""Tasks turned into rows and inserted at once: a large round's tasks are stored in one
transaction without their rows all in memory (each spec is kilobytes of JSON)."""


class DuckDBTaskStore:
    """``TaskStore`` over the ``tasks`` and ``rejected_tasks`` tables."""

    def __init__(self, file: CatalogFile) -> None:
        self._file = file

    def add(self, round_id: str | None, tasks: Iterable[TaskSpec]) -> int:
        added = 0
        with self._file.write() as con:
            for batch in chunked(tasks, INSERT_BATCH):
                rows = unique((task_row(t, round_id) for t in batch), "id")
                added += insert_rows(con, "tasks", rows, TASK_SCHEMA)
        return added

    def add_rejections(self, rejections: Sequence[RejectedTask]) -> int:
        rows = unique((rejection_row(r) for r in rejections), "id")
        with self._file.write() as con:
            return insert_rows(con, "rejected_tasks", rows, REJECTION_SCHEMA)

    def of_round(self, round_id: str) -> list[TaskSpec]:
        return self._specs("WHERE round_id = ?", [round_id])

    def ids_of_round(self, round_id: str) -> list[str]:
        return self._ids("WHERE round_id = ?", [round_id])

    def ids_except_round(self, round_id: str) -> list[str]:
        return self._ids("WHERE round_id IS DISTINCT FROM ?", [round_id])

    def by_ids(self, task_ids: Sequence[str]) -> list[TaskSpec]:
        wanted = list(dict.fromkeys(task_ids))
        if not wanted:
            return []
        with self._file.read() as con:
            with registered(con, "_wanted", ids_table(wanted)):
                rows = con.execute(
                    "SELECT id, spec FROM tasks WHERE id IN (SELECT id FROM _wanted)"
                ).fetchall()
            found = {task_id: spec for task_id, spec in rows}
            missing = next((i for i in wanted if i not in found), None)
            if missing is not None:
                raise UnknownIdError("task", missing, recent_ids(con, "tasks"))
        specs = {i: TaskSpec.model_validate_json(found[i]) for i in wanted}
        return [specs[i] for i in task_ids]

    def with_fingerprints(self, fingerprints: Iterable[str]) -> list[TaskSpec]:
        return self._specs("WHERE list_contains(?, fingerprint)", [sorted(set(fingerprints))])

    def rejections_of_round(self, round_id: str) -> list[RejectedTask]:
        columns = ", ".join(REJECTION_SCHEMA.names)
        with self._file.read() as con:
            rows = dicts(
                con,
                f"SELECT {columns} FROM rejected_tasks WHERE round_id = ? ORDER BY id",
                [round_id],
            )
        return [RejectedTask.model_validate(row) for row in rows]

    def get(self, task_id: str) -> TaskSpec:
        with self._file.read() as con:
            rows = con.execute("SELECT spec FROM tasks WHERE id = ?", [task_id]).fetchall()
            if not rows:
                raise UnknownIdError("task", task_id, recent_ids(con, "tasks"))
        return TaskSpec.model_validate_json(rows[0][0])

    def fingerprints(self, split: Split | None = None) -> set[str]:
        query = "SELECT DISTINCT fingerprint FROM tasks"
        params = []
        if split is not None:
            query += " WHERE split = ?"
            params.append(split.value)
        with self._file.read() as con:
            rows = con.execute(query, params).fetchall()
        return {fingerprint for (fingerprint,) in rows}

    def goals(self) -> list[tuple[str, str]]:
        with self._file.read() as con:
            rows = con.execute("SELECT id, goal FROM tasks ORDER BY id").fetchall()
        return [(task_id, goal) for task_id, goal in rows]

    def capabilities_of_round(self, round_id: str) -> list[list[str]]:
        with self._file.read() as con:
            return round_facts.task_capabilities(con, round_id)

    def _ids(self, where: str, params: list[object]) -> list[str]:
        with self._file.read() as con:
            rows = con.execute(f"SELECT id FROM tasks {where} ORDER BY id", params).fetchall()
        return [str(task_id) for (task_id,) in rows]

    def _specs(self, where: str, params: list[object]) -> list[TaskSpec]:
        with self._file.read() as con:
            rows = con.execute(f"SELECT spec FROM tasks {where} ORDER BY id", params).fetchall()
        return [TaskSpec.model_validate_json(spec) for (spec,) in rows]
