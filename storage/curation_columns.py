"""The columns the curator reads, straight from the catalog's tables: no record is rebuilt.

Two Arrow tables for a set of trajectory ids. ``trajectories``: one row per trajectory with
its task's fingerprint, the verifier's checks (JSON), the kinds of the reference plan's
actions, the verdict and the stored failure attribution. ``steps``: one row per step, in
(trajectory, index) order, with the action as the catalog stores it (canonical JSON), its
kind and target, the error kind and the state changes (JSON) of its feedback.

A round is curated in partitions, and a query for one partition's ids would scan every
row of the catalog's tables (every round's): ten partitions, ten scans. ``row_spans``
finds, in one scan, the rowids each partition's rows lie between in each table; a
partition's read then names its spans, and DuckDB skips the rows outside them (a
partition's trajectories are neighbours: ``curation.partitions``). A span only narrows
what is scanned; the ids still select the rows, and a read whose spans no longer hold
every row (the counts say so) is done again without them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from storage.sql import ids_table, registered

TRAJECTORY_QUERY = """
WITH tw AS (
    SELECT t.id, t.task_id, t.outcome, t.failure_attribution, t.n_steps, t.cost,
           coalesce(json_extract(t.metadata, '$.simulated')::BOOLEAN, false) AS simulated
    FROM trajectories t JOIN _wanted w ON w.id = t.id
    WHERE t.rowid BETWEEN $t0 AND $t1
), kw AS (
    SELECT k.id, k.fingerprint,
           json_extract(k.spec, '$.verifier.checks') AS verifier_checks,
           json_extract_string(k.spec, '$.reference_plan[*].kind') AS reference_kinds
    FROM tasks k
    WHERE k.rowid BETWEEN $k0 AND $k1 AND k.id IN (SELECT task_id FROM tw)
)
SELECT t.id, t.task_id, k.fingerprint, t.outcome, t.failure_attribution, t.n_steps,
       CAST(json_extract(t.cost, '$.steps') AS INTEGER) AS cost_steps,
       k.verifier_checks, k.reference_kinds,
       v.passed, v.score, v.progress, v.checks, t.simulated
FROM tw t
JOIN kw k ON k.id = t.task_id
JOIN verdicts v ON v.trajectory_id = t.id
WHERE v.rowid BETWEEN $v0 AND $v1
ORDER BY t.id
"""
"""The tasks' JSON is parsed in ``kw``, for the partition's tasks alone, before the join:
joined first, every spec in the span was carried whole into the join (a 5,000-trajectory
partition of a 17,689-task round: 0.18 GB of query memory, against 0.07 GB)."""

STEP_QUERY = """
SELECT s.trajectory_id, s.idx, s.action, s.action_kind, s.target, s.error_kind,
       json_extract(s.feedback, '$.state_changes') AS state_changes
FROM steps s
WHERE s.trajectory_id IN (SELECT id FROM _wanted) AND s.rowid BETWEEN $s0 AND $s1
ORDER BY s.trajectory_id, s.idx
"""

SPANS_QUERY = """
WITH rows AS (
    SELECT p.part, t.rowid AS t, k.rowid AS k, v.rowid AS v
    FROM trajectories t
    JOIN _parts p ON p.id = t.id
    JOIN tasks k ON k.id = t.task_id
    JOIN verdicts v ON v.trajectory_id = t.id
), steps_of AS (
    SELECT p.part, min(s.rowid) AS s0, max(s.rowid) AS s1
    FROM steps s JOIN _parts p ON p.id = s.trajectory_id
    GROUP BY p.part
)
SELECT r.part, min(t), max(t), min(k), max(k), min(v), max(v),
       coalesce(any_value(st.s0), 0), coalesce(any_value(st.s1), -1)
FROM rows r LEFT JOIN steps_of st ON st.part = r.part
GROUP BY r.part
"""
EVERY_ROW = 2**62
"""A span's end that no rowid reaches."""


@dataclass(frozen=True)
class RowSpans:
    """The first and last rowid of a partition's rows in each table the curator reads:
    ``trajectories``, ``tasks``, ``verdicts``, ``steps``."""

    trajectories: tuple[int, int]
    tasks: tuple[int, int]
    verdicts: tuple[int, int]
    steps: tuple[int, int]


EVERYWHERE = RowSpans((0, EVERY_ROW), (0, EVERY_ROW), (0, EVERY_ROW), (0, EVERY_ROW))
"""Spans that narrow nothing."""


@dataclass(frozen=True)
class CurationColumns:
    """What the curator reads of some trajectories: both tables sorted by trajectory id."""

    trajectories: pa.Table
    steps: pa.Table


def curation_columns(
    con: duckdb.DuckDBPyConnection,
    trajectory_ids: Sequence[str],
    spans: RowSpans = EVERYWHERE,
) -> CurationColumns:
    """The curator's columns of ``trajectory_ids`` (unknown ids are absent), scanning
    only the rows inside ``spans``; read again without them when they missed a row."""
    wanted = list(dict.fromkeys(trajectory_ids))
    with registered(con, "_wanted", ids_table(wanted)):
        columns = _read(con, spans)
        if spans != EVERYWHERE and not _whole(columns, len(wanted)):
            columns = _read(con, EVERYWHERE)
    return columns


def _read(con: duckdb.DuckDBPyConnection, spans: RowSpans) -> CurationColumns:
    (t0, t1), (k0, k1), (v0, v1) = spans.trajectories, spans.tasks, spans.verdicts
    bounds = {"t0": t0, "t1": t1, "k0": k0, "k1": k1, "v0": v0, "v1": v1}
    s0, s1 = spans.steps
    trajectories = con.sql(TRAJECTORY_QUERY, params=bounds).to_arrow_table()
    steps = con.sql(STEP_QUERY, params={"s0": s0, "s1": s1}).to_arrow_table()
    return CurationColumns(trajectories=trajectories, steps=steps)


def _whole(columns: CurationColumns, wanted: int) -> bool:
    """Every wanted trajectory and every one of its steps was read (an unknown id,
    missing either way, is told apart by the read without spans)."""
    steps = int(pc.sum(columns.trajectories.column("n_steps")).as_py() or 0)
    read: tuple[int, int] = (columns.trajectories.num_rows, columns.steps.num_rows)
    return read == (wanted, steps)


def row_spans(
    con: duckdb.DuckDBPyConnection, partitions: Sequence[Sequence[str]]
) -> list[RowSpans]:
    """The spans of each partition's rows (``partitions``: trajectory ids), in one scan
    of each table; a partition none of whose ids is stored gets ``EVERYWHERE``."""
    parts = pa.table(
        {
            "id": pa.array([i for ids in partitions for i in ids], pa.string()),
            "part": pa.array([n for n, ids in enumerate(partitions) for _ in ids], pa.int32()),
        }
    )
    with registered(con, "_parts", parts):
        rows = con.execute(SPANS_QUERY).fetchall()
    found = {
        part: RowSpans((t0, t1), (k0, k1), (v0, v1), (s0, s1))
        for part, t0, t1, k0, k1, v0, v1, s0, s1 in rows
    }
    return [found.get(n, EVERYWHERE) for n in range(len(partitions))]
