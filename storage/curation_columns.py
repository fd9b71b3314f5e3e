"""The columns the curator reads, straight from the catalog's tables: no record is rebuilt.

Two Arrow tables for a set of trajectory ids. ``trajectories``: one row per trajectory with
its task's fingerprint, the verifier's checks (JSON), the kinds of the reference plan's
actions, the verdict and the stored failure attribution. ``steps``: one row per step, in
(trajectory, index) order, with the action as the catalog stores it (canonical JSON), its
kind and target, the error kind and the state changes (JSON) of its feedback.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import duckdb
import pyarrow as pa

from storage.sql import ids_table, registered

TRAJECTORY_QUERY = """
SELECT t.id, t.task_id, k.fingerprint, t.outcome, t.failure_attribution,
       CAST(json_extract(t.cost, '$.steps') AS INTEGER) AS cost_steps,
       json_extract(k.spec, '$.verifier.checks') AS verifier_checks,
       json_extract_string(k.spec, '$.reference_plan[*].kind') AS reference_kinds,
       v.passed, v.score, v.progress, v.checks
FROM trajectories t
JOIN _wanted w ON w.id = t.id
JOIN tasks k ON k.id = t.task_id
JOIN verdicts v ON v.trajectory_id = t.id
ORDER BY t.id
"""

STEP_QUERY = """
SELECT s.trajectory_id, s.idx, s.action, s.action_kind, s.target, s.error_kind,
       json_extract(s.feedback, '$.state_changes') AS state_changes
FROM steps s
WHERE s.trajectory_id IN (SELECT id FROM _wanted)
ORDER BY s.trajectory_id, s.idx
"""


@dataclass(frozen=True)
class CurationColumns:
    """What the curator reads of some trajectories: both tables sorted by trajectory id."""

    trajectories: pa.Table
    steps: pa.Table


def curation_columns(
    con: duckdb.DuckDBPyConnection, trajectory_ids: Sequence[str]
) -> CurationColumns:
    """The curator's columns of ``trajectory_ids`` (unknown ids are absent)."""
    with registered(con, "_wanted", ids_table(list(dict.fromkeys(trajectory_ids)))):
        trajectories = con.sql(TRAJECTORY_QUERY).to_arrow_table()
        steps = con.sql(STEP_QUERY).to_arrow_table()
    return CurationColumns(trajectories=trajectories, steps=steps)
