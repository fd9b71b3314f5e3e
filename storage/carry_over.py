"""Items the gate left undecided when their round ended, carried over to a later round.

A row is written for every item still pending at the end of a round's gate (``carry``).
A later round with the same gate asks for their decisions again and settles the decided
ones into itself (``settle``): approved ones then join that round's dataset version. An
undecided item stays open, round after round, and is never approved silently.
"""

from __future__ import annotations

from collections.abc import Sequence

import duckdb
import pyarrow as pa

from storage.sql import insert_rows, now, scalar

CARRY_SCHEMA = pa.schema(
    [
        ("trajectory_id", pa.string()),
        ("from_round", pa.string()),
        ("gate", pa.string()),
        ("carried_at", pa.timestamp("us")),
    ]
)

OPEN_OR_SETTLED_IN = (
    "SELECT trajectory_id FROM carry_over WHERE gate = ? AND from_round <> ? "
    "AND (settled_in IS NULL OR settled_in = ?)"
)
"""Carried items a round takes up: open ones, and those it settled before (a rerun)."""
SETTLED_IN = "SELECT trajectory_id FROM carry_over WHERE settled_in = ?"


def carry(
    con: duckdb.DuckDBPyConnection, round_id: str, gate: str, trajectory_ids: Sequence[str]
) -> int:
    """Record that ``trajectory_ids`` of ``round_id`` are carried over; the number new."""
    at = now()
    rows = [
        {"trajectory_id": t, "from_round": round_id, "gate": gate, "carried_at": at}
        for t in sorted(set(trajectory_ids))
    ]
    return insert_rows(con, "carry_over", rows, CARRY_SCHEMA)


def taken_up(con: duckdb.DuckDBPyConnection, round_id: str, gate: str) -> dict[str, str]:
    """Carried items that ``round_id`` takes up: trajectory id -> the round it came from."""
    rows = con.execute(
        "SELECT trajectory_id, from_round FROM carry_over WHERE trajectory_id IN "
        f"({OPEN_OR_SETTLED_IN}) ORDER BY trajectory_id",
        [gate, round_id, round_id],
    ).fetchall()
    return {str(t): str(r) for t, r in rows}


def settle(con: duckdb.DuckDBPyConnection, round_id: str, trajectory_ids: Sequence[str]) -> int:
    """Mark open carried items as decided during ``round_id``; the number settled."""
    if not trajectory_ids:
        return 0
    return scalar(
        con,
        "UPDATE carry_over SET settled_in = ?, settled_at = ? "
        "WHERE settled_in IS NULL AND list_contains(?, trajectory_id)",
        [round_id, now(), sorted(set(trajectory_ids))],
    )


def carried_out(con: duckdb.DuckDBPyConnection, round_id: str, *, open_only: bool) -> int:
    """Items of ``round_id`` carried over (``open_only``: and not settled yet)."""
    settled = " AND settled_in IS NULL" if open_only else ""
    return scalar(con, f"SELECT count(*) FROM carry_over WHERE from_round = ?{settled}", [round_id])


def decided_open(con: duckdb.DuckDBPyConnection, round_id: str | None) -> int:
    """Carried items (of ``round_id``, or of every round) decided since (a review of them
    is stored: an undecided item gets none) that no later round has settled yet."""
    of_round = " AND from_round = ?" if round_id is not None else ""
    return scalar(
        con,
        "SELECT count(*) FROM carry_over c WHERE settled_in IS NULL"
        f"{of_round} AND EXISTS (SELECT 1 FROM reviews r WHERE r.trajectory_id = c.trajectory_id)",
        [round_id] if round_id is not None else [],
    )
