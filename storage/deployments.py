"""Deployment records in the catalog: every decision of the deployment flow, with its trace.

A deployment is stored whole (``deployments.record``, its canonical JSON) with the columns
its queries read, and its effect on the registry aliases is applied in the same
transaction: a promotion promotes its candidate, a rollback restores the previous champion,
and every other decision leaves the aliases as they are. The alias changes name the
deployment (``deployment_id``), so the history says which decision made each.
"""

from __future__ import annotations

from datetime import UTC

import duckdb

from contract import (
    AliasChange,
    DeploymentDecision,
    DeploymentRecord,
    InvalidInputError,
    ModelAlias,
)
from storage import models
from storage.sql import now, recent_ids, scalar

_NEWEST_FIRST = "ORDER BY created_at DESC, rowid DESC"


def record(con: duckdb.DuckDBPyConnection, deployment: DeploymentRecord) -> tuple[AliasChange, ...]:
    """Store ``deployment`` and apply its alias effect inside the caller's transaction; the
    alias changes made. The same record again (by id) stores nothing and returns ()."""
    if scalar(con, "SELECT count(*) FROM deployments WHERE id = ?", [deployment.id]):
        return ()
    _check(con, deployment)
    insert(con, deployment)
    return _apply(con, deployment)


def _check(con: duckdb.DuckDBPyConnection, deployment: DeploymentRecord) -> None:
    """Refuse (InvalidInputError naming the field) models that are not registered, and a
    champion that is not the catalog's champion now."""
    for field in ("candidate_id", "champion_id", "served_id"):
        model_id: str | None = getattr(deployment, field)
        if model_id is not None:
            models.require_model(con, field, model_id)
    champion = models.alias_target(con, ModelAlias.CHAMPION)
    if deployment.champion_id != champion:
        raise InvalidInputError(
            "champion_id",
            f"the champion changed since {deployment.champion_id!r} was read: the catalog's "
            f"champion is {champion!r} now (a concurrent deployment?)",
        )


def insert(con: duckdb.DuckDBPyConnection, deployment: DeploymentRecord) -> None:
    """Write the row of ``deployment`` (checked by the caller)."""
    con.execute(
        "INSERT INTO deployments (id, decision, candidate_id, champion_id, served_id, "
        "flow_run_id, created_at, recorded_at, record) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            deployment.id,
            deployment.decision.value,
            deployment.candidate_id,
            deployment.champion_id,
            deployment.served_id,
            deployment.flow_run_id,
            deployment.created_at.astimezone(UTC).replace(tzinfo=None),
            now(),
            deployment.to_json().decode(),
        ],
    )


def _apply(con: duckdb.DuckDBPyConnection, deployment: DeploymentRecord) -> tuple[AliasChange, ...]:
    """The alias effect of the decision: promote, roll back, or nothing."""
    reason, at = deployment.reasons[0], deployment.created_at
    candidate = deployment.candidate_id
    if deployment.decision is DeploymentDecision.PROMOTED and candidate is not None:
        return models.promote(con, candidate, reason=reason, deployment_id=deployment.id, at=at)
    if deployment.decision is DeploymentDecision.ROLLED_BACK:
        previous = models.alias_target(con, ModelAlias.PREVIOUS)
        if previous is not None and previous != candidate:
            raise InvalidInputError(
                "candidate_id",
                f"a rollback restores the previous champion {previous!r}, not {candidate!r}",
            )
        return models.rollback(con, reason=reason, deployment_id=deployment.id, at=at)
    return ()


def load(con: duckdb.DuckDBPyConnection, deployment_id: str) -> DeploymentRecord:
    """The deployment ``deployment_id``; InvalidInputError naming ``deployment_id`` if the
    catalog has none such."""
    rows = con.execute("SELECT record FROM deployments WHERE id = ?", [deployment_id]).fetchall()
    if not rows:
        recent = recent_ids(con, "deployments")
        known = f"most recent: {', '.join(recent)}" if recent else "the catalog has none yet"
        raise InvalidInputError(
            "deployment_id", f"{deployment_id!r} is not a deployment in the catalog ({known})"
        )
    return DeploymentRecord.model_validate_json(rows[0][0])


def newest_first(
    con: duckdb.DuckDBPyConnection, limit: int | None = None
) -> list[DeploymentRecord]:
    """Deployments, newest first (by ``created_at``, then the one stored last); at most
    ``limit`` of them (InvalidInputError naming ``limit`` when negative)."""
    if limit is not None and limit < 0:
        raise InvalidInputError("limit", f"must be >= 0, got {limit}")
    bound = f" LIMIT {int(limit)}" if limit is not None else ""
    rows = con.execute(f"SELECT record FROM deployments {_NEWEST_FIRST}{bound}").fetchall()
    return [DeploymentRecord.model_validate_json(text) for (text,) in rows]
