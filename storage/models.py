"""The model registry in the catalog: every checkpoint the trainer made, with its lineage.

A model is stored whole (``models.record``, its canonical JSON) with the columns lineage
queries read. Registering is idempotent by the record's content-derived id, and refuses a
record whose lineage the catalog cannot vouch for: a dataset version that is not frozen
here, a parent model that is not registered, a feedback report that is not stored.

Registry aliases (``champion``, ``candidate``, ``previous``) point at registered models;
every change is appended to ``model_alias_history``. A promotion pushes the champion down
to ``previous``; a rollback pops it back, and finds the champion below by replaying the
history.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

import duckdb
from pydantic import ValidationError

from contract import AliasChange, InvalidInputError, ModelAlias, ModelRecord, invalid_input
from storage.errors import UnknownIdError
from storage.sql import now, recent_ids, scalar, utc

AliasAction = Literal["set", "promote", "rollback"]
"""The operation that made an alias change, kept in the history for rollbacks."""

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


def require_model(con: duckdb.DuckDBPyConnection, field: str, model_id: str) -> None:
    """Refuse (InvalidInputError naming ``field``) a model id that is not registered."""
    _require(con, field, model_id, "models", "a registered model")


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


# -- aliases ------------------------------------------------------------------------------


def parse_alias(value: ModelAlias | str) -> ModelAlias:
    """``value`` as an alias; InvalidInputError naming ``alias`` if it is none."""
    try:
        return ModelAlias(value)
    except ValueError:
        raise InvalidInputError(
            "alias", f"{value!r} is not a registry alias", [a.value for a in ModelAlias]
        ) from None


def alias_change(
    alias: ModelAlias,
    model_id: str | None,
    *,
    reason: str,
    deployment_id: str | None,
    at: datetime | None,
) -> AliasChange:
    """A checked change (InvalidInputError naming the field), stamped now unless ``at``."""
    try:
        return AliasChange(
            alias=alias,
            model_id=model_id,
            changed_at=at if at is not None else datetime.now(UTC),
            reason=reason,
            deployment_id=deployment_id,
        )
    except ValidationError as exc:
        raise invalid_input(exc) from None


def write_alias(con: duckdb.DuckDBPyConnection, change: AliasChange, action: AliasAction) -> None:
    """Point (or clear) one alias and append the change to the history, inside the
    caller's transaction."""
    at = change.changed_at.astimezone(UTC).replace(tzinfo=None)
    if change.model_id is None:
        con.execute("DELETE FROM model_aliases WHERE alias = ?", [change.alias.value])
    else:
        con.execute(
            "INSERT INTO model_aliases (alias, model_id, changed_at) VALUES (?, ?, ?) "
            "ON CONFLICT (alias) DO UPDATE "
            "SET model_id = excluded.model_id, changed_at = excluded.changed_at",
            [change.alias.value, change.model_id, at],
        )
    con.execute(
        "INSERT INTO model_alias_history "
        "(seq, alias, model_id, changed_at, reason, deployment_id, action) "
        "SELECT coalesce(max(seq), 0) + 1, ?, ?, ?, ?, ?, ? FROM model_alias_history",
        [change.alias.value, change.model_id, at, change.reason, change.deployment_id, action],
    )


def alias_target(con: duckdb.DuckDBPyConnection, alias: ModelAlias) -> str | None:
    """The model id ``alias`` points at, or None when it is not set."""
    rows = con.execute(
        "SELECT model_id FROM model_aliases WHERE alias = ?", [alias.value]
    ).fetchall()
    return str(rows[0][0]) if rows else None


def alias_models(con: duckdb.DuckDBPyConnection) -> dict[ModelAlias, ModelRecord]:
    """Every set alias and its model, in the order of ``ModelAlias``."""
    rows = con.execute(
        "SELECT a.alias, m.record FROM model_aliases a JOIN models m ON m.id = a.model_id"
    ).fetchall()
    found = {ModelAlias(alias): ModelRecord.model_validate_json(record) for alias, record in rows}
    return {alias: found[alias] for alias in ModelAlias if alias in found}


def set_alias(
    con: duckdb.DuckDBPyConnection,
    alias: ModelAlias,
    model_id: str,
    *,
    reason: str,
    deployment_id: str | None,
    at: datetime | None,
) -> AliasChange:
    """Point ``alias`` at the registered model ``model_id``; the change recorded."""
    change = alias_change(alias, model_id, reason=reason, deployment_id=deployment_id, at=at)
    _require(con, "model_id", model_id, "models", "a registered model")
    write_alias(con, change, "set")
    return change


def promote(
    con: duckdb.DuckDBPyConnection,
    model_id: str,
    *,
    reason: str,
    deployment_id: str | None,
    at: datetime | None,
) -> tuple[AliasChange, ...]:
    """Make ``model_id`` the champion: the champion becomes ``previous``, and
    ``candidate`` is cleared if it named ``model_id``. The champion again: ()."""
    at = at if at is not None else datetime.now(UTC)

    def change(alias: ModelAlias, target: str | None) -> AliasChange:
        return alias_change(alias, target, reason=reason, deployment_id=deployment_id, at=at)

    crowned = change(ModelAlias.CHAMPION, model_id)
    _require(con, "model_id", model_id, "models", "a registered model")
    champion = alias_target(con, ModelAlias.CHAMPION)
    if champion == model_id:
        return ()
    changes = [change(ModelAlias.PREVIOUS, champion)] if champion is not None else []
    changes.append(crowned)
    if alias_target(con, ModelAlias.CANDIDATE) == model_id:
        changes.append(change(ModelAlias.CANDIDATE, None))
    for each in changes:
        write_alias(con, each, "promote")
    return tuple(changes)


def rollback(
    con: duckdb.DuckDBPyConnection,
    *,
    reason: str,
    deployment_id: str | None,
    at: datetime | None,
) -> tuple[AliasChange, ...]:
    """Make ``previous`` the champion again, and the champion below it ``previous``
    (cleared when there is none); InvalidInputError naming ``previous`` without one."""
    at = at if at is not None else datetime.now(UTC)
    previous = alias_target(con, ModelAlias.PREVIOUS)
    if previous is None:
        raise InvalidInputError(
            "previous", "nothing to roll back to: no previous champion is recorded"
        )
    below = _champions_below(con)
    changes = tuple(
        alias_change(alias, target, reason=reason, deployment_id=deployment_id, at=at)
        for alias, target in (
            (ModelAlias.CHAMPION, previous),
            (ModelAlias.PREVIOUS, below[-2] if len(below) >= 2 else None),
        )
    )
    for each in changes:
        write_alias(con, each, "rollback")
    return changes


def alias_history(
    con: duckdb.DuckDBPyConnection, alias: ModelAlias | None = None
) -> list[AliasChange]:
    """Changes of every alias, or of one, oldest first."""
    where, params = ("WHERE alias = ?", [alias.value]) if alias is not None else ("", [])
    rows = con.execute(
        "SELECT alias, model_id, changed_at, reason, deployment_id "
        f"FROM model_alias_history {where} ORDER BY seq",
        params,
    ).fetchall()
    return [
        AliasChange(
            alias=ModelAlias(name),
            model_id=model_id,
            changed_at=utc(changed_at),
            reason=reason,
            deployment_id=deployment_id,
        )
        for name, model_id, changed_at, reason, deployment_id in rows
    ]


def _champions_below(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The champions under the current one, oldest first (the last is ``previous``),
    replayed from the history: a promotion pushes the champion, a rollback pops it, and
    setting ``champion`` or ``previous`` directly replaces that entry."""
    rows = con.execute(
        "SELECT alias, model_id, action FROM model_alias_history "
        "WHERE alias IN ('champion', 'previous') ORDER BY seq"
    ).fetchall()
    champion: str | None = None
    below: list[str] = []
    for alias, model_id, action in rows:
        if alias == ModelAlias.CHAMPION:
            if action == "promote" and champion is not None:
                below.append(champion)
            elif action == "rollback" and below:
                below.pop()
            champion = model_id
        elif action == "set":  # promotions and rollbacks move ``previous`` with the champion
            if below:
                below[-1] = model_id
            else:
                below.append(model_id)
    return below
