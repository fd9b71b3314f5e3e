"""The curator's judgements, gate decisions and carried-over items in the DuckDB catalog."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import pyarrow.compute as pc

from contract import (
    CurationRecord,
    FinalReview,
    KeptSuggestion,
    Review,
    ReviewDecision,
    Routing,
    Trajectory,
)
from storage import carry_over
from storage.connection import CatalogFile
from storage.curation_files import read_curation_file
from storage.errors import CatalogError
from storage.locations import Location
from storage.round_facts import THE_REVIEW_THAT_COUNTS
from storage.rows import CURATION_SCHEMA, REVIEW_SCHEMA, curation_row, review_row
from storage.sql import ids_table, insert_rows, insert_table, now, registered, unique
from storage.stores import CarriedItems
from storage.trajectory_store import load_trajectories

_CURATION_CHANGED = (
    "(trajectory_id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in CURATION_SCHEMA.names[1:])
    + " WHERE curations.record::VARCHAR <> excluded.record::VARCHAR"
)
"""A curation stored again replaces the stored one only when its record differs."""


class DuckDBReviewStore:
    """``ReviewStore`` over the ``curations``, ``reviews`` and ``carry_over`` tables."""

    def __init__(self, file: CatalogFile) -> None:
        self._file = file

    def add_curations(self, records: Sequence[CurationRecord]) -> int:
        rows = unique((curation_row(r) for r in records), "trajectory_id")
        with self._file.write() as con:
            return insert_rows(con, "curations", rows, CURATION_SCHEMA, _CURATION_CHANGED)

    def add_curation_file(self, location: Location) -> int:
        rows = read_curation_file(location)
        trajectory_ids = rows.column("trajectory_id")
        if pc.count_distinct(trajectory_ids).as_py() < rows.num_rows:
            raise CatalogError(f"{location} holds a trajectory's curation more than once")
        with self._file.write() as con:
            return insert_table(con, "curations", rows, _CURATION_CHANGED)

    def curations_of_round(self, round_id: str) -> list[CurationRecord]:
        with self._file.read() as con:
            rows = con.execute(
                "SELECT record FROM curations WHERE round_id = ? ORDER BY trajectory_id",
                [round_id],
            ).fetchall()
        return [CurationRecord.model_validate_json(record) for (record,) in rows]

    def kept_suggestions(
        self, round_id: str, *, after: str | None = None, limit: int
    ) -> list[KeptSuggestion]:
        with self._file.read() as con:
            rows = con.execute(
                "SELECT trajectory_id, routing, suggested, coalesce(record->>'reason', '') "
                "FROM curations WHERE round_id = ? AND kept "
                "AND trajectory_id > coalesce(?, '') ORDER BY trajectory_id LIMIT ?",
                [round_id, after, limit],
            ).fetchall()
        routings = {r.value: r for r in Routing}
        decisions = {d.value: d for d in ReviewDecision}
        return [
            KeptSuggestion(trajectory_id, routings[routing], decisions[suggested], reason)
            for trajectory_id, routing, suggested, reason in rows
        ]

    def curations_of(self, trajectory_ids: Sequence[str]) -> list[CurationRecord]:
        wanted = sorted(set(trajectory_ids))
        if not wanted:
            return []
        with self._file.read() as con, registered(con, "_wanted", ids_table(wanted)):
            rows = con.execute(
                "SELECT record FROM curations WHERE trajectory_id IN (SELECT id FROM _wanted) "
                "ORDER BY trajectory_id"
            ).fetchall()
        return [CurationRecord.model_validate_json(record) for (record,) in rows]

    def add(self, reviews: Sequence[Review]) -> int:
        # Each decision's time is one microsecond after the one before it, so that
        # "recorded order" holds inside a batch too (an insert does not keep row order).
        start = now()
        rows = unique(
            (review_row(r, start + timedelta(microseconds=i)) for i, r in enumerate(reviews)),
            "id",
        )
        with self._file.write() as con:
            return insert_rows(con, "reviews", rows, REVIEW_SCHEMA)

    def of_round(self, round_id: str) -> list[Review]:
        with self._file.read() as con:
            rows = con.execute(
                "SELECT record FROM reviews WHERE round_id = ? ORDER BY created_at, rowid",
                [round_id],
            ).fetchall()
        return [Review.model_validate_json(record) for (record,) in rows]

    def of_trajectories(self, trajectory_ids: Sequence[str]) -> list[Review]:
        with self._file.read() as con:
            rows = con.execute(
                "SELECT record FROM reviews WHERE list_contains(?, trajectory_id) "
                "ORDER BY created_at, rowid",
                [sorted(set(trajectory_ids))],
            ).fetchall()
        return [Review.model_validate_json(record) for (record,) in rows]

    def final_reviews(self, trajectory_ids: Sequence[str]) -> dict[str, FinalReview]:
        wanted = list(dict.fromkeys(trajectory_ids))
        if not wanted:
            return {}
        with self._file.read() as con, registered(con, "_wanted", ids_table(wanted)):
            rows = con.execute(
                "SELECT trajectory_id, decision, reviewer, automatic, "
                "coalesce(record->>'reason', ''), "
                "coalesce(CAST(record->'erroneous_steps' AS INTEGER[]), []), "
                "record->>'note' "
                "FROM reviews WHERE trajectory_id IN (SELECT id FROM _wanted) "
                f"QUALIFY {THE_REVIEW_THAT_COUNTS} ORDER BY trajectory_id"
            ).fetchall()
        decisions = {d.value: d for d in ReviewDecision}
        return {
            row[0]: FinalReview(
                row[0], decisions[row[1]], row[2], row[3], row[4], tuple(row[5]), row[6]
            )
            for row in rows
        }

    def carry_over(self, round_id: str, gate: str, trajectory_ids: Sequence[str]) -> int:
        with self._file.write() as con:
            return carry_over.carry(con, round_id, gate, trajectory_ids)

    def carried_into(self, round_id: str, gate: str) -> CarriedItems:
        with self._file.read() as con:
            origin = carry_over.taken_up(con, round_id, gate)
            where = f"t.id IN ({carry_over.OPEN_OR_SETTLED_IN})"
            trajectories = load_trajectories(con, where, [gate, round_id, round_id])
            rows = con.execute(
                "SELECT record FROM curations WHERE list_contains(?, trajectory_id) "
                "ORDER BY trajectory_id",
                [list(origin)],
            ).fetchall()
        curations = [CurationRecord.model_validate_json(record) for (record,) in rows]
        return CarriedItems(trajectories, curations, origin)

    def settle_carry_over(self, round_id: str, trajectory_ids: Sequence[str]) -> int:
        with self._file.write() as con:
            return carry_over.settle(con, round_id, trajectory_ids)

    def settled_into(self, round_id: str) -> list[Trajectory]:
        with self._file.read() as con:
            return load_trajectories(con, f"t.id IN ({carry_over.SETTLED_IN})", [round_id])

    def settled_ids(self, round_id: str) -> list[str]:
        with self._file.read() as con:
            rows = con.execute(f"{carry_over.SETTLED_IN} ORDER BY 1", [round_id]).fetchall()
        return [str(trajectory_id) for (trajectory_id,) in rows]

    def carried_out_of(self, round_id: str, *, open_only: bool = False) -> int:
        with self._file.read() as con:
            return carry_over.carried_out(con, round_id, open_only=open_only)

    def decided_since_carried(self, round_id: str | None = None) -> int:
        with self._file.read() as con:
            return carry_over.decided_open(con, round_id)
