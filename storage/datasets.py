"""Dataset versions in the catalog: the checks before freezing, approvals, summaries."""

from __future__ import annotations

from datetime import UTC
from typing import Any, TypedDict

import duckdb
import orjson
import pyarrow as pa

from contract import DatasetApproval, DatasetVersion, InvalidInputError, Split
from storage.errors import UnknownIdError
from storage.rows import MEMBER_SCHEMA, dataset_record_json, member_rows
from storage.sql import RECENT, dicts, now, recent_ids, scalar


class ReviewCounts(TypedDict):
    """Members corrected, decided by a person, with masked steps, with a correction."""

    corrected: int
    human: int
    with_masked_steps: int
    with_correction: int


class DatasetDescription(TypedDict):
    """A JSON-ready description of a stored version.

    ``counts`` has member counts per dimension (capability: a task counts under each of its
    capabilities; difficulty; outcome, where a recovered success counts as ``recovery``);
    ``lineage`` has the round, the policies and sorted task and trajectory ids; ``target``
    and ``achieved`` are the balancer's weight shares per dimension; ``approval`` is who
    approved the version, when, and how; ``inherited`` and ``removed`` count the parent's
    members kept and left out."""

    id: str
    round_id: str
    parent: str | None
    content_hash: str
    size: int
    counts: dict[str, dict[str, int]]
    human_reviewed: int
    inherited: int
    removed: int
    lineage: dict[str, Any]
    target: dict[str, Any]
    achieved: dict[str, dict[str, float]]
    review: ReviewCounts
    approval: dict[str, Any] | None
    created_at: str


def freeze(con: duckdb.DuckDBPyConnection, version: DatasetVersion) -> bool:
    """Store ``version`` inside the caller's transaction; False if it was stored before."""
    members = member_rows(version)
    if len({m["trajectory_id"] for m in members}) != len(members):
        raise InvalidInputError("members", "a trajectory appears more than once")
    if scalar(con, "SELECT count(*) FROM dataset_versions WHERE id = ?", [version.id]):
        return False
    con.register("_members", pa.Table.from_pylist(members, schema=MEMBER_SCHEMA))
    try:
        _check_members(con)
        columns = ", ".join(MEMBER_SCHEMA.names)
        con.execute(f"INSERT INTO dataset_members ({columns}) SELECT {columns} FROM _members")
    finally:
        con.unregister("_members")
    con.execute(
        "INSERT INTO dataset_versions (id, round_id, parent, content_hash, size, "
        "human_reviewed, record, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            version.id,
            version.round_id,
            version.parent,
            version.content_hash,
            len(version.members),
            version.human_reviewed,
            dataset_record_json(version),
            now(),
        ],
    )
    return True


def propose(con: duckdb.DuckDBPyConnection, version: DatasetVersion) -> bool:
    """Keep the proposed ``version`` until it is decided; False if it was proposed before
    (a version's id is its content: the same id is the same version)."""
    return bool(
        scalar(
            con,
            "INSERT INTO dataset_proposals (id, round_id, record, created_at) "
            "VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
            [version.id, version.round_id, version.to_json().decode(), now()],
        )
    )


def proposal(con: duckdb.DuckDBPyConnection, dataset_id: str) -> DatasetVersion:
    """The proposed version ``dataset_id``, decided or not; UnknownIdError naming the
    latest proposals when there is none such."""
    rows = con.execute("SELECT record FROM dataset_proposals WHERE id = ?", [dataset_id]).fetchall()
    if not rows:
        raise UnknownIdError("dataset proposal", dataset_id, recent_ids(con, "dataset_proposals"))
    return DatasetVersion.model_validate_json(rows[0][0])


def decide(
    con: duckdb.DuckDBPyConnection, version: DatasetVersion, approval: DatasetApproval
) -> DatasetApproval:
    """Store ``approval`` of the proposed ``version`` and, when it approves, freeze the
    version, inside the caller's transaction. The first decision on a version stands:
    deciding again returns the stored one and changes nothing."""
    if approval.dataset_id != version.id or approval.content_hash != version.content_hash:
        raise InvalidInputError(
            "approval",
            f"it is for {approval.dataset_id} ({approval.content_hash}), "
            f"not for {version.id} ({version.content_hash})",
        )
    if approval.round_id != version.round_id or approval.target != version.target:
        raise InvalidInputError(
            "approval", f"its round or sampling target differs from {version.id}'s"
        )
    stored = approval_of(con, version.id)
    if stored is not None:
        return stored
    if approval.approved:
        freeze(con, version)
    con.execute(
        "INSERT INTO dataset_approvals (dataset_id, round_id, decision, approver, automatic, "
        "decided_at, record) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            approval.dataset_id,
            approval.round_id,
            approval.decision.value,
            approval.approver,
            approval.automatic,
            approval.decided_at.astimezone(UTC).replace(tzinfo=None),
            approval.to_json().decode(),
        ],
    )
    return approval


def approval_of(con: duckdb.DuckDBPyConnection, dataset_id: str) -> DatasetApproval | None:
    """The decision on the proposed version ``dataset_id``, if one was made."""
    rows = con.execute(
        "SELECT record FROM dataset_approvals WHERE dataset_id = ?", [dataset_id]
    ).fetchall()
    return DatasetApproval.model_validate_json(rows[0][0]) if rows else None


def _check_members(con: duckdb.DuckDBPyConnection) -> None:
    """Refuse members (staged in ``_members``) that the catalog cannot vouch for."""
    unknown = con.execute(
        "SELECT trajectory_id FROM _members "
        "WHERE trajectory_id NOT IN (SELECT id FROM trajectories) ORDER BY position LIMIT 1"
    ).fetchall()
    if unknown:
        raise UnknownIdError("trajectory", unknown[0][0], recent_ids(con, "trajectories"))
    mismatched = con.execute(
        "SELECT m.trajectory_id, m.task_id, t.task_id FROM _members m "
        "JOIN trajectories t ON t.id = m.trajectory_id WHERE t.task_id <> m.task_id "
        "ORDER BY m.position LIMIT 1"
    ).fetchall()
    if mismatched:
        trajectory_id, claimed, actual = mismatched[0]
        raise InvalidInputError(
            "members", f"{trajectory_id} is a trajectory of {actual}, not of {claimed}"
        )
    # By fingerprint, the development set's identity: a task that calls itself "train" but
    # repeats a development task's fingerprint is a development task all the same.
    development = con.execute(
        "SELECT m.trajectory_id, k.id FROM _members m JOIN tasks k ON k.id = m.task_id "
        "WHERE k.split = ? OR k.fingerprint IN (SELECT fingerprint FROM tasks WHERE split = ?) "
        "ORDER BY m.position",
        [Split.DEV.value, Split.DEV.value],
    ).fetchall()
    if development:
        examples = ", ".join(f"{traj} (task {task})" for traj, task in development[:RECENT])
        raise InvalidInputError(
            "members",
            f"{len(development)} trajectories of development tasks, which are never "
            f"trained on: {examples}",
        )


def load(con: duckdb.DuckDBPyConnection, dataset_id: str) -> DatasetVersion:
    """The stored version ``dataset_id``, members in their original order."""
    record = _record(con, dataset_id)
    members = dicts(
        con,
        "SELECT trajectory_id, task_id, weight, decision, human, masked_steps, correction "
        "FROM dataset_members "
        "WHERE dataset_id = ? ORDER BY position",
        [dataset_id],
    )
    return DatasetVersion.model_validate({**record, "members": members})


def member_ids(con: duckdb.DuckDBPyConnection, dataset_id: str) -> list[str]:
    """The trajectory ids of the stored version ``dataset_id``'s members, in order."""
    rows = con.execute(
        "SELECT trajectory_id FROM dataset_members WHERE dataset_id = ? ORDER BY position",
        [dataset_id],
    ).fetchall()
    if not rows:
        _record(con, dataset_id)  # a frozen version has members: the id is unknown
    return [str(row[0]) for row in rows]


def summary(con: duckdb.DuckDBPyConnection, dataset_id: str) -> DatasetDescription:
    """A JSON-ready description of a stored version."""
    record = _record(con, dataset_id)
    lineage = _lineage(con, dataset_id)
    ((created_at,),) = con.execute(
        "SELECT created_at FROM dataset_versions WHERE id = ?", [dataset_id]
    ).fetchall()
    return {
        "id": dataset_id,
        "round_id": record["round_id"],
        "parent": record["parent"],
        "content_hash": record["content_hash"],
        "size": len(lineage["trajectory_ids"]),
        "counts": _composition(con, dataset_id),
        "human_reviewed": record["human_reviewed"],
        "inherited": record.get("inherited", 0),
        "removed": len(record.get("removed", [])),
        "lineage": {"round": record["round_id"], "policies": record["policies"], **lineage},
        "target": record["target"],
        "achieved": record["achieved"],
        "review": _review_counts(con, dataset_id),
        "approval": _approval_json(con, dataset_id),
        "created_at": created_at.replace(tzinfo=UTC).isoformat(),
    }


def _review_counts(con: duckdb.DuckDBPyConnection, dataset_id: str) -> ReviewCounts:
    """Members corrected, decided by a person, and carrying masked steps or a correction."""
    ((corrected, human, masked, with_correction),) = con.execute(
        "SELECT count(*) FILTER (decision = 'correct'), count(*) FILTER (human), "
        "count(*) FILTER (len(masked_steps) > 0), count(*) FILTER (correction IS NOT NULL) "
        "FROM dataset_members WHERE dataset_id = ?",
        [dataset_id],
    ).fetchall()
    return {
        "corrected": int(corrected),
        "human": int(human),
        "with_masked_steps": int(masked),
        "with_correction": int(with_correction),
    }


def _approval_json(con: duckdb.DuckDBPyConnection, dataset_id: str) -> dict[str, Any] | None:
    approval = approval_of(con, dataset_id)
    if approval is None:
        return None
    return approval.model_dump(
        mode="json",
        include={"decision", "approver", "automatic", "decided_at", "comment", "flow_run_id"},
    )


def removals(con: duckdb.DuckDBPyConnection, dataset_id: str) -> list[dict[str, Any]]:
    """The parent's members version ``dataset_id`` left out, each with its reason."""
    removed: list[dict[str, Any]] = _record(con, dataset_id).get("removed", [])
    return removed


def _record(con: duckdb.DuckDBPyConnection, dataset_id: str) -> dict[str, Any]:
    rows = con.execute("SELECT record FROM dataset_versions WHERE id = ?", [dataset_id]).fetchall()
    if not rows:
        raise UnknownIdError("dataset", dataset_id, recent_ids(con, "dataset_versions"))
    record: dict[str, Any] = orjson.loads(rows[0][0])
    return record


_MEMBER_TASKS = "FROM dataset_members m JOIN tasks k ON k.id = m.task_id WHERE m.dataset_id = ?"
_MEMBER_TRAJECTORIES = (
    "FROM dataset_members m JOIN trajectories t ON t.id = m.trajectory_id WHERE m.dataset_id = ?"
)


def _tally(con: duckdb.DuckDBPyConnection, values: str, dataset_id: str) -> dict[str, int]:
    rows = con.execute(
        f"SELECT value, count(*) FROM ({values}) GROUP BY value ORDER BY value", [dataset_id]
    ).fetchall()
    return {str(value): int(n) for value, n in rows}


def _composition(con: duckdb.DuckDBPyConnection, dataset_id: str) -> dict[str, dict[str, int]]:
    """Members per capability (a task counts under each of its capabilities), per
    difficulty and per outcome (a recovered success counts as ``recovery``)."""
    outcome = "CASE WHEN t.outcome = 'success' AND t.recovered THEN 'recovery' ELSE t.outcome END"
    return {
        "capability": _tally(
            con, f"SELECT unnest(k.capabilities) AS value {_MEMBER_TASKS}", dataset_id
        ),
        "difficulty": _tally(con, f"SELECT k.difficulty AS value {_MEMBER_TASKS}", dataset_id),
        "outcome": _tally(con, f"SELECT {outcome} AS value {_MEMBER_TRAJECTORIES}", dataset_id),
    }


def _lineage(con: duckdb.DuckDBPyConnection, dataset_id: str) -> dict[str, list[str]]:
    rows = con.execute(
        "SELECT trajectory_id, task_id FROM dataset_members WHERE dataset_id = ?", [dataset_id]
    ).fetchall()
    return {
        "task_ids": sorted({task_id for _, task_id in rows}),
        "trajectory_ids": sorted(trajectory_id for trajectory_id, _ in rows),
    }
