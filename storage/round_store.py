"""Rounds in the DuckDB catalog."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC
from typing import Any

import orjson

from storage.connection import CatalogFile
from storage.errors import UnknownIdError
from storage.round_facts import GateCounts, RoundTally, gate_counts, round_tally
from storage.rows import json_text
from storage.sql import dicts, now, recent_ids, scalar, utc
from storage.stores import RoundInfo


class DuckDBRoundStore:
    """``RoundStore`` over the ``rounds`` table."""

    def __init__(self, file: CatalogFile) -> None:
        self._file = file

    def begin(self, round_id: str, config: Mapping[str, Any]) -> RoundInfo:
        with self._file.write() as con:
            con.execute(
                "INSERT INTO rounds (id, config, status, started_at) "
                "VALUES (?, ?, 'running', ?) ON CONFLICT DO NOTHING",
                [round_id, json_text(dict(config)), now()],
            )
            rows = dicts(con, "SELECT * FROM rounds WHERE id = ?", [round_id])
        return _round_info(rows[0])

    def set_stage(self, round_id: str, stage: str) -> None:
        self._update(round_id, "stage = ?", [stage])

    def set_flow_run(self, round_id: str, flow_run_id: str) -> None:
        self._update(round_id, "flow_run_id = ?", [flow_run_id])

    def finish(
        self,
        round_id: str,
        *,
        dataset_id: str | None,
        counts: Mapping[str, int],
        flow_run_id: str | None,
    ) -> None:
        self._update(
            round_id,
            "status = 'done', dataset_id = ?, counts = ?, "
            "flow_run_id = coalesce(?, flow_run_id), finished_at = ?",
            [dataset_id, json_text(dict(counts)), flow_run_id, now()],
        )

    def get(self, round_id: str) -> RoundInfo | None:
        with self._file.read() as con:
            rows = dicts(con, "SELECT * FROM rounds WHERE id = ?", [round_id])
        return _round_info(rows[0]) if rows else None

    def every(self) -> list[RoundInfo]:
        with self._file.read() as con:
            rows = dicts(con, "SELECT * FROM rounds ORDER BY started_at, id")
        return [_round_info(row) for row in rows]

    def tally(self, round_id: str, carried_in: Sequence[str], dataset_id: str | None) -> RoundTally:
        with self._file.read() as con:
            return round_tally(con, round_id, carried_in, dataset_id)

    def gate_counts(self, round_id: str) -> GateCounts:
        with self._file.read() as con:
            return gate_counts(con, round_id)

    def _update(self, round_id: str, assignments: str, params: list[Any]) -> None:
        with self._file.write() as con:
            changed = scalar(
                con, f"UPDATE rounds SET {assignments} WHERE id = ?", [*params, round_id]
            )
            if not changed:
                raise UnknownIdError("round", round_id, recent_ids(con, "rounds"))


def _round_info(row: Mapping[str, Any]) -> RoundInfo:
    return RoundInfo(
        id=row["id"],
        status=row["status"],
        stage=row["stage"],
        config=orjson.loads(row["config"]),
        flow_run_id=row["flow_run_id"],
        dataset_id=row["dataset_id"],
        counts=orjson.loads(row["counts"]) if row["counts"] is not None else {},
        started_at=row["started_at"].replace(tzinfo=UTC),
        finished_at=utc(row["finished_at"]),
    )
