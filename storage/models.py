"""The model registry in the catalog: every checkpoint the trainer made, with its lineage.

A model is stored whole (``models.record``, its canonical JSON) with the columns lineage
queries read. Registering is idempotent by the record's content-derived id, and refuses a
record whose lineage the catalog cannot vouch for: a dataset version that is not frozen
here, a parent model that is not registered, a feedback report that is not stored.
"""

from __future__ import annotations

from datetime import UTC

import duckdb

from contract import InvalidInputError, ModelRecord
from storage.errors import UnknownIdError
from storage.sql import now, recent_ids, scalar

_NEWEST_FIRST = "ORDER BY created_at DESC, rowid DESC"


def register(con: duckdb.DuckDBPyConnection, record: ModelRecord) -> bool:
    """Store ``record`` inside the caller's transaction; False if it was stored before."""
    if scalar(con, "SELECT count(*) FROM models WHERE id = ?", [record.id]):
        return False
    _check_lineage(con, record)
    con.execute(
        "INSERT INTO models (id, name, dataset_id, base, parent, method, path, feedback_id, "
        "flow_run_id, created_at, registered_at, record) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            record.id,
            record.name,
            record.dataset_id,
            record.base,
            record.parent,
            record.method.value,
            record.path,
            record.feedback_id,
            record.flow_run_id,
            record.created_at.astimezone(UTC).replace(tzinfo=None),
            now(),
            record.to_json().decode(),
        ],
    )
    return True


def _check_lineage(con: duckdb.DuckDBPyConnection, record: ModelRecord) -> None:
    """Refuse (InvalidInputError naming the field) ids the catalog does not hold."""
    _require(con, "dataset_id", record.dataset_id, "dataset_versions", "a frozen dataset version")
    if record.parent is not None:
        _require(con, "parent", record.parent, "models", "a registered model")
    if record.feedback_id is not None:
        _require(con, "feedback_id", record.feedback_id, "feedback_reports", "a stored report")


def _require(con: duckdb.DuckDBPyConnection, field: str, value: str, table: str, what: str) -> None:
    if scalar(con, f"SELECT count(*) FROM {table} WHERE id = ?", [value]):
        return
    recent = recent_ids(con, table)
    known = f"most recent: {', '.join(recent)}" if recent else "the catalog has none yet"
    raise InvalidInputError(field, f"{value!r} is not {what} in the catalog ({known})")


def load(con: duckdb.DuckDBPyConnection, model_id: str) -> ModelRecord:
    """The registered model ``model_id``; UnknownIdError if there is none such."""
    rows = con.execute("SELECT record FROM models WHERE id = ?", [model_id]).fetchall()
    if not rows:
        raise UnknownIdError("model", model_id, recent_ids(con, "models"))
    return ModelRecord.model_validate_json(rows[0][0])


def all_models(con: duckdb.DuckDBPyConnection) -> list[ModelRecord]:
    """Every registered model, oldest first (by ``created_at``, then as registered)."""
    rows = con.execute("SELECT record FROM models ORDER BY created_at, rowid").fetchall()
    return [ModelRecord.model_validate_json(record) for (record,) in rows]


def latest(con: duckdb.DuckDBPyConnection) -> ModelRecord | None:
    """The model created last (among equal ``created_at``, the one registered last)."""
    rows = con.execute(f"SELECT record FROM models {_NEWEST_FIRST} LIMIT 1").fetchall()
    return ModelRecord.model_validate_json(rows[0][0]) if rows else None
