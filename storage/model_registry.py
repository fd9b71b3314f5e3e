"""Registered models, their aliases and deployment decisions in the DuckDB catalog."""

from __future__ import annotations

from datetime import datetime

from contract import AliasChange, DeploymentRecord, FeedbackReport, ModelAlias, ModelRecord
from storage import deployments, feedback, models
from storage.connection import CatalogFile


class DuckDBModelRegistry:
    """``ModelRegistry`` over the ``models``, ``model_aliases``, ``model_alias_history``
    and ``deployments`` tables."""

    def __init__(self, file: CatalogFile) -> None:
        self._file = file

    def register(self, record: ModelRecord, report: FeedbackReport | None = None) -> bool:
        with self._file.write() as con:
            if report is not None:
                feedback.add(con, report)
            return models.register(con, record)

    def get(self, model_id: str) -> ModelRecord:
        with self._file.read() as con:
            return models.load(con, model_id)

    def every(self) -> list[ModelRecord]:
        with self._file.read() as con:
            return models.all_models(con)

    def latest(self) -> ModelRecord | None:
        with self._file.read() as con:
            return models.latest(con)

    def set_alias(
        self,
        alias: ModelAlias | str,
        model_id: str,
        *,
        reason: str,
        deployment_id: str | None = None,
        at: datetime | None = None,
    ) -> AliasChange:
        name = models.parse_alias(alias)
        with self._file.write() as con:
            return models.set_alias(
                con, name, model_id, reason=reason, deployment_id=deployment_id, at=at
            )

    def alias(self, alias: ModelAlias | str) -> ModelRecord | None:
        name = models.parse_alias(alias)
        with self._file.read() as con:
            model_id = models.alias_target(con, name)
            return models.load(con, model_id) if model_id is not None else None

    def aliases(self) -> dict[ModelAlias, ModelRecord]:
        with self._file.read() as con:
            return models.alias_models(con)

    def promote(
        self,
        model_id: str,
        *,
        reason: str,
        deployment_id: str | None = None,
        at: datetime | None = None,
    ) -> tuple[AliasChange, ...]:
        with self._file.write() as con:
            return models.promote(con, model_id, reason=reason, deployment_id=deployment_id, at=at)

    def rollback(
        self, *, reason: str, deployment_id: str | None = None, at: datetime | None = None
    ) -> tuple[AliasChange, ...]:
        with self._file.write() as con:
            return models.rollback(con, reason=reason, deployment_id=deployment_id, at=at)

    def alias_history(self, alias: ModelAlias | str | None = None) -> list[AliasChange]:
        name = models.parse_alias(alias) if alias is not None else None
        with self._file.read() as con:
            return models.alias_history(con, name)

    def record_deployment(self, record: DeploymentRecord) -> tuple[AliasChange, ...]:
        with self._file.write() as con:
            return deployments.record(con, record)

    def deployments(self, limit: int | None = None) -> list[DeploymentRecord]:
        with self._file.read() as con:
            return deployments.newest_first(con, limit)

    def deployment(self, deployment_id: str) -> DeploymentRecord:
        with self._file.read() as con:
            return deployments.load(con, deployment_id)

    def latest_deployment(self) -> DeploymentRecord | None:
        found = self.deployments(limit=1)
        return found[0] if found else None
