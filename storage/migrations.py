"""Catalog schema migrations: an ordered list, each applied in its own transaction.

The ``meta`` table holds the schema version, which is the number of migrations applied.
Append new migrations; never edit one that has shipped.
"""

from __future__ import annotations

import duckdb

from storage.errors import CatalogError

Migration = tuple[str, ...]

_V1_RECORDS: Migration = (
    "CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL)",
    """CREATE TABLE rounds (
        id VARCHAR PRIMARY KEY,
        config JSON NOT NULL,
        status VARCHAR NOT NULL CHECK (status IN ('running', 'done')),
        stage VARCHAR,
        flow_run_id VARCHAR,
        dataset_id VARCHAR,
        counts JSON,
        started_at TIMESTAMP NOT NULL,
        finished_at TIMESTAMP
    )""",
    """CREATE TABLE tasks (
        id VARCHAR PRIMARY KEY,
        fingerprint VARCHAR NOT NULL,
        template VARCHAR,
        split VARCHAR NOT NULL,
        difficulty VARCHAR NOT NULL,
        capabilities VARCHAR[] NOT NULL,
        domains VARCHAR[] NOT NULL,
        source VARCHAR NOT NULL,
        goal VARCHAR NOT NULL,
        round_id VARCHAR,
        spec JSON USING COMPRESSION zstd NOT NULL
    )""",
    """CREATE TABLE rejected_tasks (
        id VARCHAR PRIMARY KEY,
        round_id VARCHAR NOT NULL,
        fingerprint VARCHAR,
        template VARCHAR,
        reason VARCHAR NOT NULL,
        detail VARCHAR NOT NULL,
        goal VARCHAR
    )""",
    """CREATE TABLE trajectories (
        id VARCHAR PRIMARY KEY,
        round_id VARCHAR,
        task_id VARCHAR NOT NULL,
        shard VARCHAR,
        attempt INTEGER NOT NULL,
        device VARCHAR,
        policy VARCHAR NOT NULL,
        policy_version VARCHAR NOT NULL,
        model VARCHAR,
        backend VARCHAR NOT NULL,
        outcome VARCHAR NOT NULL,
        termination VARCHAR NOT NULL,
        failure_attribution VARCHAR,
        recovered BOOLEAN NOT NULL,
        injected_faults VARCHAR[] NOT NULL,
        n_steps INTEGER NOT NULL,
        tool_calls INTEGER NOT NULL,
        input_tokens BIGINT NOT NULL,
        output_tokens BIGINT NOT NULL,
        latency_ms DOUBLE NOT NULL,
        usd DOUBLE NOT NULL,
        seed BIGINT NOT NULL,
        metadata JSON USING COMPRESSION zstd NOT NULL,
        cost JSON USING COMPRESSION zstd NOT NULL
    )""",
    """CREATE TABLE steps (
        trajectory_id VARCHAR NOT NULL,
        idx INTEGER NOT NULL,
        action_kind VARCHAR,
        target VARCHAR,
        action JSON USING COMPRESSION zstd,
        model_output VARCHAR NOT NULL,
        observation VARCHAR,
        feedback JSON USING COMPRESSION zstd NOT NULL,
        error_kind VARCHAR,
        input_tokens INTEGER NOT NULL,
        output_tokens INTEGER NOT NULL,
        injected_fault VARCHAR,
        artifacts VARCHAR[] NOT NULL,
        PRIMARY KEY (trajectory_id, idx)
    )""",
    """CREATE TABLE verdicts (
        trajectory_id VARCHAR PRIMARY KEY,
        passed BOOLEAN NOT NULL,
        score DOUBLE NOT NULL,
        progress DOUBLE NOT NULL,
        checks JSON USING COMPRESSION zstd NOT NULL
    )""",
    """CREATE TABLE curations (
        trajectory_id VARCHAR PRIMARY KEY,
        round_id VARCHAR NOT NULL,
        task_id VARCHAR NOT NULL,
        kept BOOLEAN NOT NULL,
        drop_reason VARCHAR,
        routing VARCHAR NOT NULL,
        suggested VARCHAR NOT NULL,
        quality DOUBLE NOT NULL,
        supported BOOLEAN NOT NULL,
        failure_attribution VARCHAR,
        record JSON USING COMPRESSION zstd NOT NULL
    )""",
    """CREATE TABLE reviews (
        id VARCHAR PRIMARY KEY,
        trajectory_id VARCHAR NOT NULL,
        round_id VARCHAR NOT NULL,
        decision VARCHAR NOT NULL,
        reviewer VARCHAR NOT NULL,
        automatic BOOLEAN NOT NULL,
        record JSON USING COMPRESSION zstd NOT NULL,
        created_at TIMESTAMP NOT NULL
    )""",
    """CREATE TABLE dataset_versions (
        id VARCHAR PRIMARY KEY,
        round_id VARCHAR NOT NULL,
        parent VARCHAR,
        content_hash VARCHAR NOT NULL,
        size INTEGER NOT NULL,
        human_reviewed INTEGER NOT NULL,
        record JSON USING COMPRESSION zstd NOT NULL,
        created_at TIMESTAMP NOT NULL
    )""",
    """CREATE TABLE dataset_members (
        dataset_id VARCHAR NOT NULL,
        trajectory_id VARCHAR NOT NULL,
        task_id VARCHAR NOT NULL,
        weight DOUBLE NOT NULL,
        position INTEGER NOT NULL,
        PRIMARY KEY (dataset_id, trajectory_id)
    )""",
)
"""Version 1: the records of a round. Large JSON columns use zstd: smaller files and
cheaper checkpoints than DuckDB's default string compression."""

_V2_SHARDS: Migration = (
    """CREATE TABLE shards (
        path VARCHAR PRIMARY KEY,
        round_id VARCHAR,
        trajectories INTEGER NOT NULL,
        steps INTEGER NOT NULL,
        ingested_at TIMESTAMP NOT NULL
    )""",
)
"""Version 2: which Parquet shards were ingested, so that ingesting again is a no-op."""

_V3_GATE: Migration = (
    "ALTER TABLE dataset_members ADD COLUMN decision VARCHAR NOT NULL DEFAULT 'approve'",
    "ALTER TABLE dataset_members ADD COLUMN human BOOLEAN NOT NULL DEFAULT false",
    "ALTER TABLE dataset_members ADD COLUMN masked_steps INTEGER[] NOT NULL DEFAULT []",
    "ALTER TABLE dataset_members ADD COLUMN correction VARCHAR",
    """CREATE TABLE dataset_approvals (
        dataset_id VARCHAR PRIMARY KEY,
        round_id VARCHAR NOT NULL,
        decision VARCHAR NOT NULL CHECK (decision IN ('approve', 'reject')),
        approver VARCHAR NOT NULL,
        automatic BOOLEAN NOT NULL,
        decided_at TIMESTAMP NOT NULL,
        record JSON NOT NULL
    )""",
    """CREATE TABLE carry_over (
        trajectory_id VARCHAR PRIMARY KEY,
        from_round VARCHAR NOT NULL,
        gate VARCHAR NOT NULL,
        carried_at TIMESTAMP NOT NULL,
        settled_in VARCHAR,
        settled_at TIMESTAMP
    )""",
)
"""Version 3: what the gate decided, kept with each dataset member (masks, corrections);
the approval of each proposed version; items carried over to a later round's gate."""

_V4_FEEDBACK: Migration = (
    """CREATE TABLE feedback_reports (
        id VARCHAR PRIMARY KEY,
        format_version INTEGER NOT NULL,
        source VARCHAR NOT NULL,
        produced_by VARCHAR NOT NULL,
        model VARCHAR,
        created_at TIMESTAMP NOT NULL,
        ingested_at TIMESTAMP NOT NULL,
        record JSON USING COMPRESSION zstd NOT NULL
    )""",
    """CREATE TABLE feedback_tasks (
        report_id VARCHAR NOT NULL,
        fingerprint VARCHAR NOT NULL,
        attempts INTEGER NOT NULL,
        successes INTEGER NOT NULL,
        mean_cost DOUBLE NOT NULL,
        failures JSON NOT NULL,
        PRIMARY KEY (report_id, fingerprint)
    )""",
)
"""Version 4: feedback reports (the whole record) and their per-task statistics, one row
per task, for the planner's queries."""

_V5_MODELS: Migration = (
    """CREATE TABLE models (
        id VARCHAR PRIMARY KEY,
        name VARCHAR NOT NULL,
        dataset_id VARCHAR NOT NULL,
        base VARCHAR NOT NULL,
        parent VARCHAR,
        method VARCHAR NOT NULL,
        path VARCHAR NOT NULL,
        feedback_id VARCHAR,
        flow_run_id VARCHAR,
        created_at TIMESTAMP NOT NULL,
        registered_at TIMESTAMP NOT NULL,
        record JSON USING COMPRESSION zstd NOT NULL
    )""",
)
"""Version 5: the model registry, every checkpoint with its lineage (the whole record, and
the columns its queries filter on)."""

_V6_ALIASES: Migration = (
    """CREATE TABLE model_aliases (
        alias VARCHAR PRIMARY KEY CHECK (alias IN ('champion', 'candidate', 'previous')),
        model_id VARCHAR NOT NULL,
        changed_at TIMESTAMP NOT NULL
    )""",
    """CREATE TABLE model_alias_history (
        seq BIGINT PRIMARY KEY,
        alias VARCHAR NOT NULL CHECK (alias IN ('champion', 'candidate', 'previous')),
        model_id VARCHAR,
        changed_at TIMESTAMP NOT NULL,
        reason VARCHAR NOT NULL,
        deployment_id VARCHAR,
        action VARCHAR NOT NULL CHECK (action IN ('set', 'promote', 'rollback'))
    )""",
)
"""Version 6: registry aliases (a set alias has a row; a cleared one has none) and the
append-only history of their changes, in ``seq`` order, with the operation that made each
(what a rollback replays to find the champion before the previous one)."""

_V7_DEPLOYMENTS: Migration = (
    """CREATE TABLE deployments (
        id VARCHAR PRIMARY KEY,
        decision VARCHAR NOT NULL CHECK (
            decision IN ('promoted', 'refused', 'rejected', 'failed', 'rolled_back')
        ),
        candidate_id VARCHAR,
        champion_id VARCHAR,
        served_id VARCHAR,
        flow_run_id VARCHAR,
        created_at TIMESTAMP NOT NULL,
        recorded_at TIMESTAMP NOT NULL,
        record JSON USING COMPRESSION zstd NOT NULL
    )""",
)
"""Version 7: every deployment decision with its trace (the whole record, and the columns
its queries filter on); the alias changes it made name it in ``model_alias_history``."""

_V8_GOAL_SKETCHES: Migration = (
    """CREATE TABLE goal_sketches (
        task_id VARCHAR PRIMARY KEY,
        digest UINTEGER[] NOT NULL
    )""",
)
"""Version 8: each task's MinHash digest of what it asks, kept once computed, so that a
round's construction asks the catalog for near-duplicates of its proposals instead of
holding a sketch of every stored task (``TaskStore.goal_twins``)."""

_V9_PROPOSALS: Migration = (
    """CREATE TABLE dataset_proposals (
        id VARCHAR PRIMARY KEY,
        round_id VARCHAR NOT NULL,
        record JSON USING COMPRESSION zstd NOT NULL,
        created_at TIMESTAMP NOT NULL
    )""",
)
"""Version 9: every dataset version a round proposed, whole (members included), kept from
its proposal to the decision on it and after: the round's tasks hand on its id, not its
members, and an approved one is frozen from here."""

_V10_GOAL_SHINGLES: Migration = (
    "DROP TABLE goal_sketches",
    """CREATE TABLE goal_sketches (
        task_id VARCHAR PRIMARY KEY,
        digest UINTEGER[] NOT NULL,
        shingles UBIGINT[] NOT NULL
    )""",
)
"""Version 10: each task's shingle hashes beside its digest, so that a near-duplicate is
confirmed on the exact similarity, not the digest's estimate. The digests kept before are
dropped: the next round's construction sketches every task again, with its shingles."""

MIGRATIONS: tuple[Migration, ...] = (
    _V1_RECORDS,
    _V2_SHARDS,
    _V3_GATE,
    _V4_FEEDBACK,
    _V5_MODELS,
    _V6_ALIASES,
    _V7_DEPLOYMENTS,
    _V8_GOAL_SKETCHES,
    _V9_PROPOSALS,
    _V10_GOAL_SHINGLES,
)
SCHEMA_VERSION = len(MIGRATIONS)


def schema_version(con: duckdb.DuckDBPyConnection) -> int | None:
    """The catalog's schema version: 0 for an empty database, None for a database that
    holds tables but no ``meta`` table (not a catalog)."""
    tables = {
        name
        for (name,) in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database()"
        ).fetchall()
    }
    if "meta" not in tables:
        return 0 if not tables else None
    row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall()
    return int(row[0][0]) if row else None


def migrate(con: duckdb.DuckDBPyConnection, current: int, target: int = SCHEMA_VERSION) -> None:
    """Apply migrations ``current + 1 .. target``, each with its version bump in one
    transaction, so a failed upgrade stops at a whole version."""
    for version in range(current + 1, target + 1):
        con.begin()
        try:
            for statement in MIGRATIONS[version - 1]:
                con.execute(statement)
            con.execute(
                "INSERT INTO meta VALUES ('schema_version', ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                [str(version)],
            )
        except duckdb.Error as exc:
            con.rollback()
            raise CatalogError(
                f"upgrading the catalog to schema version {version} failed "
                f"(it stays at version {version - 1}): {exc}"
            ) from exc
        except BaseException:
            con.rollback()
            raise
        con.commit()
