"""Trajectories in the DuckDB catalog: ingested from shards, rebuilt whole, or read as the
columns a stage needs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb
import pyarrow as pa

from contract import TRUSTED_IDS, Outcome, TaskSpec, Trajectory
from storage import ingest, round_facts
from storage.bulk import gc_paused
from storage.connection import CatalogFile
from storage.curation_columns import (
    EVERYWHERE,
    CurationColumns,
    RowSpans,
    curation_columns,
    row_spans,
)
from storage.errors import UnknownIdError
from storage.export_columns import ExportColumns, export_columns
from storage.ingest import IngestReport
from storage.locations import Location
from storage.round_facts import EpisodeFacts
from storage.rows import STEP_COLUMNS, group_steps, rebuild_trajectory
from storage.sql import dicts, ids_table, recent_ids, registered, scalar, shared_rows
from storage.stores import BalanceRow, MemberTask

COLLATERAL_CHECK_TEXT = '"kind":"no_collateral"'
"""How a ``no_collateral`` check reads in a stored spec (``Record.to_json``: compact JSON;
inside a JSON string the quotes would be escaped, and only a check has this kind). The
specs are searched, not parsed: parsing every spec of a 17,689-task round took 0.05 GB."""


class DuckDBTrajectoryStore:
    """``TrajectoryStore`` over the ``trajectories``, ``steps``, ``verdicts`` and
    ``shards`` tables (and the tasks the trajectories ran)."""

    def __init__(self, file: CatalogFile) -> None:
        self._file = file

    def ingest(self, paths: Sequence[Location]) -> IngestReport:
        report = ingest.NOTHING_INGESTED
        found = ingest.resolve_shards(paths)
        if not found:
            return report
        for shards in ingest.transactions(found, ingest.TRANSACTION_TRAJECTORIES):
            with self._file.write() as con:
                report += ingest.ingest(con, shards)
        return report

    def of_round(self, round_id: str, *, verify_ids: bool = True) -> list[Trajectory]:
        with self._file.read() as con:
            return load_trajectories(con, "t.round_id = ?", [round_id], verify_ids)

    def get(self, trajectory_id: str) -> Trajectory:
        with self._file.read() as con:
            found = load_trajectories(con, "t.id = ?", [trajectory_id])
            if not found:
                raise UnknownIdError("trajectory", trajectory_id, recent_ids(con, "trajectories"))
        return found[0]

    def by_ids(self, trajectory_ids: Sequence[str], *, verify_ids: bool = True) -> list[Trajectory]:
        wanted = list(dict.fromkeys(trajectory_ids))
        if not wanted:
            return []
        with self._file.read() as con:
            with registered(con, "_wanted", ids_table(wanted)):
                found = {
                    t.id: t
                    for t in load_trajectories(
                        con, "t.id IN (SELECT id FROM _wanted)", [], verify_ids
                    )
                }
            missing = next((i for i in wanted if i not in found), None)
            if missing is not None:
                raise UnknownIdError("trajectory", missing, recent_ids(con, "trajectories"))
        return [found[i] for i in trajectory_ids]

    def count(self, round_id: str) -> int:
        with self._file.read() as con:
            return scalar(con, "SELECT count(*) FROM trajectories WHERE round_id = ?", [round_id])

    def failed_tasks(self, round_id: str, teacher: str) -> list[str]:
        with self._file.read() as con:
            rows = con.execute(
                "SELECT task_id FROM trajectories WHERE round_id = ? AND policy <> ? "
                "GROUP BY task_id HAVING bool_or(outcome = ?) AND NOT bool_or(outcome = ?) "
                "ORDER BY task_id",
                [round_id, teacher, Outcome.FAILURE.value, Outcome.SUCCESS.value],
            ).fetchall()
        return [task_id for (task_id,) in rows]

    def fingerprints(self, round_id: str) -> list[tuple[str, str]]:
        with self._file.read() as con:
            rows = con.execute(
                "SELECT t.id, k.fingerprint FROM trajectories t JOIN tasks k ON k.id = t.task_id "
                "WHERE t.round_id = ? ORDER BY t.rowid",
                [round_id],
            ).fetchall()
        return [(trajectory_id, fingerprint) for trajectory_id, fingerprint in rows]

    def export_columns(self, dataset_id: str, start: int, stop: int) -> ExportColumns:
        with self._file.read() as con:
            columns = export_columns(con, dataset_id, start, stop)
            policies = columns.members.column("policy")
            if policies.null_count:
                ids = columns.members.column("trajectory_id").filter(policies.is_null())
                raise UnknownIdError("trajectory", ids[0].as_py(), recent_ids(con, "trajectories"))
        return columns

    def curation_spans(self, partitions: Sequence[Sequence[str]]) -> list[RowSpans]:
        with self._file.read() as con:
            return row_spans(con, partitions)

    def curation_columns(
        self, trajectory_ids: Sequence[str], spans: RowSpans = EVERYWHERE
    ) -> CurationColumns:
        with self._file.read() as con:
            columns = curation_columns(con, trajectory_ids, spans)
            if columns.trajectories.num_rows < len(set(trajectory_ids)):
                found = set(columns.trajectories.column("id").to_pylist())
                missing = next(i for i in trajectory_ids if i not in found)
                raise UnknownIdError("trajectory", missing, recent_ids(con, "trajectories"))
        return columns

    def balance_rows(self, trajectory_ids: Sequence[str]) -> list[BalanceRow]:
        wanted = list(dict.fromkeys(trajectory_ids))
        if not wanted:
            return []
        with self._file.read() as con, registered(con, "_wanted", ids_table(wanted)):
            table = con.sql(
                "SELECT t.id AS trajectory_id, t.task_id, k.split, t.outcome, t.recovered, "
                "k.capabilities[1] AS capability, k.difficulty, k.domains[1] AS domain, "
                "k.source, t.policy || '@' || t.policy_version AS policy, k.fingerprint, "
                "k.template, coalesce(json_extract(t.metadata, '$.simulated')::BOOLEAN, false) "
                "AS simulated FROM trajectories t JOIN tasks k ON k.id = t.task_id "
                "WHERE t.id IN (SELECT id FROM _wanted)"
            ).to_arrow_table()
        rows = shared_rows(table, ("trajectory_id", "task_id", "fingerprint"))
        del table  # copied into the rows: its buffers need not live beside them
        by_id = {row[0]: BalanceRow._make(row) for row in rows}
        return [by_id[i] for i in wanted if i in by_id]

    def member_tasks(self, trajectory_ids: Sequence[str]) -> list[MemberTask]:
        wanted = pa.table(
            {
                "position": pa.array(range(len(trajectory_ids)), pa.int64()),
                "id": pa.array(list(trajectory_ids), pa.string()),
            }
        )
        with self._file.read() as con:
            with registered(con, "_wanted", wanted):
                rows = con.execute(
                    "SELECT w.id, k.id, k.split, k.fingerprint, k.template FROM _wanted w "
                    "LEFT JOIN trajectories t ON t.id = w.id "
                    "LEFT JOIN tasks k ON k.id = t.task_id ORDER BY w.position"
                ).fetchall()
            missing = next((row[0] for row in rows if row[1] is None), None)
            if missing is not None:
                raise UnknownIdError("trajectory", missing, recent_ids(con, "trajectories"))
        return [MemberTask(*row[1:]) for row in rows]

    def without_collateral_check(self, trajectory_ids: Sequence[str]) -> list[str]:
        wanted = list(dict.fromkeys(trajectory_ids))
        if not wanted:
            return []
        with self._file.read() as con, registered(con, "_wanted", ids_table(wanted)):
            rows = con.execute(
                "SELECT t.id FROM trajectories t JOIN tasks k ON k.id = t.task_id "
                "WHERE t.id IN (SELECT id FROM _wanted) AND NOT contains(k.spec, ?) "
                "AND json_extract_string(t.metadata, '$.backend') = 'sandbox'",
                [COLLATERAL_CHECK_TEXT],
            ).fetchall()
        older = {str(row[0]) for row in rows}
        return [i for i in wanted if i in older]

    def episode_facts(self, round_id: str) -> list[EpisodeFacts]:
        with self._file.read() as con:
            return round_facts.episode_facts(con, round_id)


def load_trajectories(
    con: duckdb.DuckDBPyConnection,
    where: str,
    params: Sequence[Any],
    verify_ids: bool = True,
) -> list[Trajectory]:
    """Rebuild the trajectories matching ``where`` (over ``trajectories t``), by id."""
    rows = dicts(
        con,
        "SELECT t.id, t.task_id, t.metadata, t.cost, v.passed, v.score, v.progress, v.checks "
        f"FROM trajectories t JOIN verdicts v ON v.trajectory_id = t.id WHERE {where} "
        "ORDER BY t.id",
        params,
    )
    if not rows:
        return []
    # Steps and tasks by the ids just found, not by ``where`` again: a semi-join on the
    # steps table's key instead of a join of two tables.
    found = pa.table(
        {
            "id": pa.array([r["id"] for r in rows], pa.string()),
            "task_id": pa.array([r["task_id"] for r in rows], pa.string()),
        }
    )
    with registered(con, "_found", found):
        steps = dicts(
            con,
            f"SELECT s.trajectory_id, {', '.join('s.' + c for c in STEP_COLUMNS)} "
            "FROM steps s WHERE s.trajectory_id IN (SELECT id FROM _found) "
            "ORDER BY s.trajectory_id, s.idx",
            [],
        )
        specs = con.execute(
            "SELECT id, spec FROM tasks WHERE id IN (SELECT task_id FROM _found)"
        ).fetchall()
    context = None if verify_ids else {TRUSTED_IDS: True}
    with gc_paused():
        tasks = {
            task_id: TaskSpec.model_validate_json(spec, context=context) for task_id, spec in specs
        }
        by_trajectory = group_steps(steps)
        return [
            rebuild_trajectory(
                row, tasks[row["task_id"]], by_trajectory.get(row["id"], []), verify_id=verify_ids
            )
            for row in rows
        ]
