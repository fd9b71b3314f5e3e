"""The columns an export reads, straight from the catalog's tables: no record is rebuilt.

For the members of a dataset version at positions ``[start, stop)``: one row per member
with its decision and weight and what its ``sft`` row says of its trajectory (policy,
outcome, step budget); one row per step in (trajectory, index) order with the action and
feedback as the catalog stores them (canonical JSON); and each task's stored spec
(canonical JSON, what an ``rl_tasks`` row carries). A worker process reads its own range:
nothing but the range travels to it.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import pyarrow as pa

_RANGE = "dataset_id = $dataset AND position >= $start AND position < $stop"

MEMBER_QUERY = f"""
SELECT m.position, m.trajectory_id, m.task_id, m.weight, m.decision, m.human,
       m.masked_steps, m.correction,
       t.round_id, t.policy, t.policy_version, t.outcome, t.recovered,
       CAST(json_extract(t.metadata, '$.max_steps') AS INTEGER) AS max_steps
FROM dataset_members m
LEFT JOIN trajectories t ON t.id = m.trajectory_id
WHERE m.{_RANGE}
ORDER BY m.position
"""

STEP_QUERY = f"""
SELECT s.trajectory_id, s.idx, s.action, s.model_output, s.feedback, s.injected_fault
FROM steps s
WHERE s.trajectory_id IN (SELECT trajectory_id FROM dataset_members WHERE {_RANGE})
ORDER BY s.trajectory_id, s.idx
"""

SPEC_QUERY = f"""
SELECT k.id, k.spec
FROM tasks k
WHERE k.id IN (
    SELECT t.task_id FROM trajectories t
    WHERE t.id IN (SELECT trajectory_id FROM dataset_members WHERE {_RANGE})
)
"""


@dataclass(frozen=True)
class ExportColumns:
    """What an export reads of a range of a version's members."""

    members: pa.Table
    """In member order; a trajectory the catalog lacks has a null ``policy``."""
    steps: pa.Table
    """Sorted by trajectory id, then step index."""
    specs: dict[str, str]
    """Each task's stored spec by task id."""


def export_columns(
    con: duckdb.DuckDBPyConnection, dataset_id: str, start: int, stop: int
) -> ExportColumns:
    """The export's columns of the members of ``dataset_id`` at positions ``[start, stop)``."""
    bounds = {"dataset": dataset_id, "start": start, "stop": stop}
    members = _arrow(con, MEMBER_QUERY, bounds)
    steps = _arrow(con, STEP_QUERY, bounds)
    specs = dict(con.execute(SPEC_QUERY, bounds).fetchall())
    return ExportColumns(members=members, steps=steps, specs=specs)


def _arrow(con: duckdb.DuckDBPyConnection, query: str, params: dict[str, object]) -> pa.Table:
    relation = con.sql(query, params=params)
    assert relation is not None  # a query that reads
    return relation.to_arrow_table()
