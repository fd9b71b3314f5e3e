"""Dataset versions and their approvals in the DuckDB catalog."""

from __future__ import annotations

from contract import DatasetApproval, DatasetVersion
from storage import dataset_diff, datasets
from storage.connection import CatalogFile
from storage.dataset_diff import DatasetDiff
from storage.datasets import DatasetDescription
from storage.sql import dicts, utc
from storage.stores import DatasetSummary


class DuckDBDatasetStore:
    """``DatasetStore`` over the ``dataset_proposals``, ``dataset_versions``,
    ``dataset_members`` and ``dataset_approvals`` tables."""

    def __init__(self, file: CatalogFile) -> None:
        self._file = file

    def propose(self, version: DatasetVersion) -> bool:
        with self._file.write() as con:
            return datasets.propose(con, version)

    def proposal(self, dataset_id: str) -> DatasetVersion:
        with self._file.read() as con:
            return datasets.proposal(con, dataset_id)

    def decide(self, version: DatasetVersion, approval: DatasetApproval) -> DatasetApproval:
        with self._file.write() as con:
            return datasets.decide(con, version, approval)

    def round_approval(self, round_id: str) -> DatasetApproval | None:
        with self._file.read() as con:
            rows = con.execute(
                "SELECT record FROM dataset_approvals WHERE round_id = ? "
                "ORDER BY decided_at DESC, rowid DESC LIMIT 1",
                [round_id],
            ).fetchall()
        return DatasetApproval.model_validate_json(rows[0][0]) if rows else None

    def approval(self, dataset_id: str) -> DatasetApproval | None:
        with self._file.read() as con:
            return datasets.approval_of(con, dataset_id)

    def freeze(self, version: DatasetVersion) -> bool:
        with self._file.write() as con:
            return datasets.freeze(con, version)

    def get(self, dataset_id: str) -> DatasetVersion:
        with self._file.read() as con:
            return datasets.load(con, dataset_id)

    def member_ids(self, dataset_id: str) -> list[str]:
        with self._file.read() as con:
            return datasets.member_ids(con, dataset_id)

    def latest_id(self) -> str | None:
        with self._file.read() as con:
            rows = con.execute(
                "SELECT id FROM dataset_versions ORDER BY created_at DESC, rowid DESC LIMIT 1"
            ).fetchall()
        return str(rows[0][0]) if rows else None

    def summaries(self) -> list[DatasetSummary]:
        with self._file.read() as con:
            rows = dicts(
                con,
                "SELECT id, round_id, parent, content_hash, size, human_reviewed, created_at "
                "FROM dataset_versions ORDER BY created_at, rowid",
            )
        return [DatasetSummary(**(row | {"created_at": utc(row["created_at"])})) for row in rows]

    def describe(self, dataset_id: str) -> DatasetDescription:
        with self._file.read() as con:
            return datasets.summary(con, dataset_id)

    def diff(self, a: str, b: str) -> DatasetDiff:
        with self._file.read() as con:
            return dataset_diff.diff(con, a, b)
