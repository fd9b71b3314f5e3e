"""Tasks and refused proposals in the DuckDB catalog."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa
from more_itertools import chunked

from contract import RejectedTask, Split, TaskSpec
from storage import round_facts
from storage.connection import CatalogFile
from storage.errors import UnknownIdError
from storage.rows import (
    REJECTION_SCHEMA,
    TASK_SCHEMA,
    rejection_row,
    task_row,
    task_row_of_spec,
)
from storage.sql import (
    dicts,
    ids_table,
    insert_rows,
    insert_table,
    recent_ids,
    registered,
    unique,
)
from storage.stores import GoalSketch, Placement

INSERT_BATCH = 1_000
"""Tasks turned into rows and inserted at once: a large round's tasks are stored in one
transaction without their rows all in memory (each spec is kilobytes of JSON)."""


_DIGEST = pa.list_(pa.uint32())
_HASHES = pa.list_(pa.uint64())

GOAL_TWINS_QUERY = """
WITH q AS (
    SELECT pos, id, b.band,
           list_slice(digest, b.band * $rows + 1, (b.band + 1) * $rows) AS key
    FROM _query, range($bands) b(band)
), s AS (
    SELECT g.task_id, b.band,
           list_slice(g.digest, b.band * $rows + 1, (b.band + 1) * $rows) AS key
    FROM goal_sketches g, range($bands) b(band)
), candidates AS (
    SELECT DISTINCT q.pos, s.task_id
    FROM q JOIN s ON s.band = q.band AND s.key = q.key AND s.task_id <> q.id
), shared AS (
    SELECT c.pos, c.task_id, len(d.shingles) + len(g.shingles) AS sizes,
           len(list_intersect(d.shingles, g.shingles)) AS common
    FROM candidates c
    JOIN _query d ON d.pos = c.pos
    JOIN goal_sketches g ON g.task_id = c.task_id
), scored AS (
    SELECT pos, task_id, common / (sizes - common) AS similarity FROM shared
)
SELECT pos, task_id, similarity FROM scored
WHERE similarity >= $threshold
QUALIFY row_number() OVER (PARTITION BY pos ORDER BY similarity DESC, task_id) = 1
"""
"""The most similar stored task for each query (its id, digest and shingle hashes; the
task with that id is not its own twin), among those whose digest has a whole LSH band
(``rows`` consecutive values) equal to the query's (rensa's ``RMinHashLSH`` candidates:
checked equal on 1,600 queries), by the Jaccard similarity of their shingle hashes
(distinct on both sides), at least ``threshold``; ties go to the first id."""


class DuckDBTaskStore:
    """``TaskStore`` over the ``tasks`` and ``rejected_tasks`` tables."""

    def __init__(self, file: CatalogFile) -> None:
        self._file = file

    def add(self, round_id: str | None, tasks: Iterable[TaskSpec]) -> int:
        return self._insert(task_row(t, round_id) for t in tasks)

    def add_serialized(self, round_id: str | None, specs: Iterable[bytes]) -> int:
        return self._insert(task_row_of_spec(s, round_id) for s in specs)

    def _insert(self, rows: Iterable[dict[str, Any]]) -> int:
        """Insert task rows ``INSERT_BATCH`` at a time in one transaction; how many were
        new."""
        added = 0
        with self._file.write() as con:
            for batch in chunked(rows, INSERT_BATCH):
                added += insert_rows(con, "tasks", unique(batch, "id"), TASK_SCHEMA)
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
        found = self._columns_by_id(task_ids, "spec")
        specs = {i: TaskSpec.model_validate_json(found[i][0]) for i in found}
        return [specs[i] for i in task_ids]

    def spec_texts(self, task_ids: Sequence[str]) -> list[str]:
        found = self._columns_by_id(task_ids, "spec")
        return [found[i][0] for i in task_ids]

    def placements(self, task_ids: Sequence[str]) -> list[Placement]:
        found = self._columns_by_id(
            task_ids,
            "CAST(json_extract(spec, '$.initial_conditions.seed') AS BIGINT), "
            "coalesce(json_extract_string(spec, '$.initial_conditions.backend'), 'sandbox')",
        )
        return [Placement(i, *found[i]) for i in task_ids]

    def _columns_by_id(self, task_ids: Sequence[str], columns: str) -> dict[str, tuple[Any, ...]]:
        """``columns`` (SQL over ``tasks``) of each task of ``task_ids`` by id;
        UnknownIdError names the first id there is no task of."""
        wanted = list(dict.fromkeys(task_ids))
        if not wanted:
            return {}
        with self._file.read() as con:
            with registered(con, "_wanted", ids_table(wanted)):
                rows = con.execute(
                    f"SELECT id, {columns} FROM tasks WHERE id IN (SELECT id FROM _wanted)"
                ).fetchall()
            found = {row[0]: tuple(row[1:]) for row in rows}
            missing = next((i for i in wanted if i not in found), None)
            if missing is not None:
                raise UnknownIdError("task", missing, recent_ids(con, "tasks"))
        return found

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

    def fingerprints_except_round(self, round_id: str) -> set[str]:
        with self._file.read() as con:
            rows = con.execute(
                "SELECT DISTINCT fingerprint FROM tasks WHERE round_id IS DISTINCT FROM ?",
                [round_id],
            ).fetchall()
        return {fingerprint for (fingerprint,) in rows}

    def add_goal_sketches(self, sketches: Mapping[str, GoalSketch]) -> int:
        if not sketches:
            return 0
        rows = pa.table(
            {
                "task_id": pa.array(list(sketches), pa.string()),
                "digest": pa.array([list(s.digest) for s in sketches.values()], _DIGEST),
                "shingles": pa.array([list(s.shingles) for s in sketches.values()], _HASHES),
            }
        )
        with self._file.write() as con:
            return insert_table(con, "goal_sketches", rows)

    def without_goal_sketch(self) -> list[str]:
        return self._ids("WHERE id NOT IN (SELECT task_id FROM goal_sketches)", [])

    def goal_twins(
        self, queries: Sequence[tuple[str, GoalSketch]], bands: int, threshold: float
    ) -> list[tuple[str | None, float]]:
        twins: list[tuple[str | None, float]] = [(None, 0.0)] * len(queries)
        if not queries:
            return twins
        query = pa.table(
            {
                "pos": pa.array(range(len(queries)), pa.int64()),
                "id": pa.array([task_id for task_id, _ in queries], pa.string()),
                "digest": pa.array([list(s.digest) for _, s in queries], _DIGEST),
                "shingles": pa.array([list(s.shingles) for _, s in queries], _HASHES),
            }
        )
        params = {
            "bands": bands,
            "rows": len(queries[0][1].digest) // bands,
            "threshold": threshold,
        }
        with self._file.read() as con, registered(con, "_query", query):
            found = con.execute(GOAL_TWINS_QUERY, params).fetchall()
        for pos, task_id, similarity in found:
            twins[pos] = (str(task_id), float(similarity))
        return twins

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
