"""Feedback reports in the catalog: what training, evaluation or deployment revealed.

A report is stored whole (``feedback_reports.record``, the canonical JSON it was read
from) with one ``feedback_tasks`` row per task for queries over fingerprints. Storing is
idempotent by the report's content-derived id.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import duckdb
import orjson
import pyarrow as pa

from contract import FEEDBACK_FORMAT_VERSION, FeedbackReport, FeedbackSource
from storage.errors import CatalogError, UnknownIdError
from storage.sql import dicts, insert_rows, now, recent_ids, scalar, utc

TASK_SCHEMA = pa.schema(
    [
        ("report_id", pa.string()),
        ("fingerprint", pa.string()),
        ("attempts", pa.int32()),
        ("successes", pa.int32()),
        ("mean_cost", pa.float64()),
        ("failures", pa.string()),
    ]
)

_SUMMARY = (
    "SELECT r.id, r.format_version, r.source, r.produced_by, r.model, r.created_at, "
    "r.ingested_at, (r.record->>'$.overall')::DOUBLE AS overall, "
    "(SELECT count(*) FROM feedback_tasks t WHERE t.report_id = r.id) AS tasks "
    "FROM feedback_reports r"
)
_NEWEST_FIRST = "ORDER BY created_at DESC, rowid DESC"


@dataclass(frozen=True)
class FeedbackSummary:
    """One line of ``FeedbackStore.summaries``."""

    id: str
    format_version: int
    source: FeedbackSource
    produced_by: str
    model: str | None
    created_at: datetime
    ingested_at: datetime
    overall: float | None
    tasks: int

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "format_version": self.format_version,
            "source": self.source.value,
            "produced_by": self.produced_by,
            "model": self.model,
            "created_at": self.created_at.isoformat(),
            "ingested_at": self.ingested_at.isoformat(),
            "overall": self.overall,
            "tasks": self.tasks,
        }


def add(con: duckdb.DuckDBPyConnection, report: FeedbackReport) -> bool:
    """Store ``report`` inside the caller's transaction; False if it was stored before."""
    if scalar(con, "SELECT count(*) FROM feedback_reports WHERE id = ?", [report.id]):
        return False
    con.execute(
        "INSERT INTO feedback_reports (id, format_version, source, produced_by, model, "
        "created_at, ingested_at, record) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            report.id,
            report.format_version,
            report.source.value,
            report.produced_by,
            report.model,
            report.created_at.astimezone(UTC).replace(tzinfo=None),
            now(),
            report.to_json().decode(),
        ],
    )
    rows = [
        {
            "report_id": report.id,
            "fingerprint": t.fingerprint,
            "attempts": t.attempts,
            "successes": t.successes,
            "mean_cost": t.mean_cost,
            "failures": orjson.dumps(
                {k.value: n for k, n in t.failures.items()}, option=orjson.OPT_SORT_KEYS
            ).decode(),
        }
        for t in report.tasks
    ]
    insert_rows(con, "feedback_tasks", rows, TASK_SCHEMA)
    return True


def load(con: duckdb.DuckDBPyConnection, report_id: str) -> FeedbackReport:
    """The stored report ``report_id``; UnknownIdError if there is none such."""
    rows = con.execute(
        "SELECT format_version, record FROM feedback_reports WHERE id = ?", [report_id]
    ).fetchall()
    if not rows:
        raise UnknownIdError("feedback report", report_id, recent_ids(con, "feedback_reports"))
    return _report(report_id, *rows[0])


def latest(con: duckdb.DuckDBPyConnection) -> FeedbackReport | None:
    """The report created last (by ``created_at``; among equals, the one stored last)."""
    rows = con.execute(
        f"SELECT id, format_version, record FROM feedback_reports {_NEWEST_FIRST} LIMIT 1"
    ).fetchall()
    return _report(*rows[0]) if rows else None


def summaries(con: duckdb.DuckDBPyConnection) -> list[FeedbackSummary]:
    """Every stored report, oldest first (by ``created_at``, then as stored)."""
    rows = dicts(con, f"{_SUMMARY} ORDER BY r.created_at, r.rowid")
    return [
        FeedbackSummary(
            **row
            | {
                "source": FeedbackSource(row["source"]),
                "created_at": utc(row["created_at"]),
                "ingested_at": utc(row["ingested_at"]),
                "tasks": int(row["tasks"]),
            }
        )
        for row in rows
    ]


def _report(report_id: str, format_version: int, record: str) -> FeedbackReport:
    """A stored record, refused with a clear message if its format is newer than the code."""
    if format_version != FEEDBACK_FORMAT_VERSION:
        raise CatalogError(
            f"feedback report {report_id} has format_version {format_version}; this code "
            f"reads {FEEDBACK_FORMAT_VERSION}: upgrade the code"
        )
    return FeedbackReport.model_validate_json(record)
