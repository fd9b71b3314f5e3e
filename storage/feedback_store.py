"""Feedback reports in the DuckDB catalog."""

from __future__ import annotations

from contract import FeedbackReport
from storage import feedback
from storage.connection import CatalogFile
from storage.feedback import FeedbackSummary


class DuckDBFeedbackStore:
    """``FeedbackStore`` over the ``feedback_reports`` and ``feedback_tasks`` tables."""

    def __init__(self, file: CatalogFile) -> None:
        self._file = file

    def add(self, report: FeedbackReport) -> bool:
        with self._file.write() as con:
            return feedback.add(con, report)

    def get(self, report_id: str) -> FeedbackReport:
        with self._file.read() as con:
            return feedback.load(con, report_id)

    def summaries(self) -> list[FeedbackSummary]:
        with self._file.read() as con:
            return feedback.summaries(con)

    def latest(self) -> FeedbackReport | None:
        with self._file.read() as con:
            return feedback.latest(con)
