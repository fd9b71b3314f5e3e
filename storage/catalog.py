"""The DuckDB catalog: rounds, tasks, trajectories, curation, reviews, dataset versions,
feedback reports, models and deployments.

One DuckDB file. DuckDB locks a file per process, so the catalog holds a connection only
for the length of one operation. Every write runs in one transaction and is idempotent
by content-derived ids: writing the same records again changes nothing.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import duckdb
import orjson
import pyarrow as pa

from contract import (
    TRUSTED_IDS,
    AliasChange,
    CurationRecord,
    DatasetApproval,
    DatasetVersion,
    DeploymentRecord,
    FeedbackReport,
    ModelAlias,
    ModelRecord,
    RejectedTask,
    Review,
    Split,
    TaskSpec,
    Trajectory,
)
from storage import (
    carry_over,
    dataset_diff,
    datasets,
    deployments,
    feedback,
    ingest,
    models,
    round_facts,
)
from storage.bulk import gc_paused
from storage.curation_columns import CurationColumns, curation_columns
from storage.errors import CatalogError, UnknownIdError
from storage.export_columns import ExportColumns, export_columns
from storage.feedback import FeedbackSummary
from storage.ingest import IngestReport
from storage.locations import Location
from storage.migrations import SCHEMA_VERSION, migrate, schema_version
from storage.round_facts import EpisodeFacts
from storage.rows import (
    CURATION_SCHEMA,
    REJECTION_SCHEMA,
    REVIEW_SCHEMA,
    STEP_COLUMNS,
    TASK_SCHEMA,
    curation_row,
    group_steps,
    json_text,
    rebuild_trajectory,
    rejection_row,
    review_row,
    task_row,
)
from storage.sql import dicts, ids_table, insert_rows, now, recent_ids, registered, scalar, utc

TABLES = (
    "rounds",
    "tasks",
    "rejected_tasks",
    "trajectories",
    "steps",
    "verdicts",
    "curations",
    "reviews",
    "dataset_versions",
    "dataset_members",
    "dataset_approvals",
    "shards",
    "carry_over",
    "feedback_reports",
    "feedback_tasks",
    "models",
    "model_aliases",
    "model_alias_history",
    "deployments",
)

_DIRECT_CHECKPOINT = "1MB"
DEFAULT_LOCK_WAIT_S = 120.0
"""How long an operation waits for a catalog that another process is using: DuckDB lets
one process at a time hold the file, and another round's stage may hold it for a long
transaction (storing a large round's curation). Waited with backoff, then refused."""
_SAY_WAITING_AFTER_S = 3.0
_LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class RoundInfo:
    """A round as the catalog records it."""

    id: str
    status: str
    stage: str | None
    config: dict[str, Any]
    flow_run_id: str | None
    dataset_id: str | None
    counts: dict[str, int]
    started_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True)
class CarriedItems:
    """Items carried over from earlier rounds, with their curation and their round."""

    trajectories: list[Trajectory]
    curations: list[CurationRecord]
    from_round: dict[str, str]
    """Trajectory id -> the round it was collected and first gated in."""


@dataclass(frozen=True)
class DatasetSummary:
    """One line of ``Catalog.list_datasets``."""

    id: str
    round_id: str
    parent: str | None
    content_hash: str
    size: int
    human_reviewed: int
    created_at: datetime


class Catalog:
    """The catalog in one DuckDB file. Build it with ``Catalog.open``."""

    def __init__(self, path: Path, *, read_only: bool, lock_wait_s: float) -> None:
        self.path = path
        self.read_only = read_only
        self.lock_wait_s = lock_wait_s
        self._closed = False

    # -- opening ------------------------------------------------------------------------

    @classmethod
    def open(
        cls, path: Path, *, read_only: bool = False, lock_wait_s: float = DEFAULT_LOCK_WAIT_S
    ) -> Catalog:
        """Open the catalog at ``path``, creating and upgrading it unless ``read_only``.

        Raises CatalogError for a missing file (read-only), an unwritable folder, a file
        that is not a catalog, a schema newer than this code, or a file that another
        process holds for longer than ``lock_wait_s`` (it holds it for one operation).
        """
        path = Path(path)
        if read_only and not path.exists():
            raise CatalogError(f"no catalog at {path}: run a round first")
        if not read_only:
            _ensure_writable_folder(path.parent)
        catalog = cls(path, read_only=read_only, lock_wait_s=lock_wait_s)
        catalog._upgrade()
        return catalog

    def _upgrade(self) -> None:
        """Check the schema version and apply the migrations this file lacks."""
        with self._connect() as con:
            version = schema_version(con)
            if version is None:
                raise CatalogError(
                    f"{self.path} is a DuckDB database but not a flywheel catalog "
                    "(it has no meta table)"
                )
            if version > SCHEMA_VERSION:
                raise CatalogError(
                    f"catalog schema version {version} is newer than this code's "
                    f"{SCHEMA_VERSION}: upgrade the code"
                )
            if version < SCHEMA_VERSION:
                if self.read_only:
                    raise CatalogError(
                        f"catalog {self.path} has schema version {version}, older than this "
                        f"code's {SCHEMA_VERSION}: open it once for writing to upgrade it"
                    )
                migrate(con, version)

    def close(self) -> None:
        """Refuse further operations (no connection is held between operations)."""
        self._closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @contextmanager
    def _connect(self) -> Iterator[duckdb.DuckDBPyConnection]:
        if self._closed:
            raise CatalogError(f"catalog {self.path} is closed")
        con = _connect_file(self.path, self.read_only, self.lock_wait_s)
        try:
            yield con
        finally:
            con.close()

    @contextmanager
    def _write(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection inside one transaction: committed whole, or rolled back whole."""
        if self.read_only:
            raise CatalogError(f"catalog {self.path} was opened read-only")
        with self._connect() as con:
            # A commit larger than this checkpoints into the file instead of writing the
            # WAL first: one write of the data, not two (the close would checkpoint anyway).
            con.execute(f"SET checkpoint_threshold = '{_DIRECT_CHECKPOINT}'")
            con.begin()
            try:
                yield con
            except BaseException:
                con.rollback()
                raise
            con.commit()

    # -- rounds -------------------------------------------------------------------------

    def begin_round(self, round_id: str, config: Mapping[str, Any]) -> RoundInfo:
        """Record a running round, or return the round already recorded under that id."""
        with self._write() as con:
            con.execute(
                "INSERT INTO rounds (id, config, status, started_at) "
                "VALUES (?, ?, 'running', ?) ON CONFLICT DO NOTHING",
                [round_id, json_text(dict(config)), now()],
            )
            rows = dicts(con, "SELECT * FROM rounds WHERE id = ?", [round_id])
        return _round_info(rows[0])

    def set_stage(self, round_id: str, stage: str) -> None:
        """Record the stage a round has reached."""
        self._update_round(round_id, "stage = ?", [stage])

    def set_flow_run(self, round_id: str, flow_run_id: str) -> None:
        """Record the orchestrator's run id of a round."""
        self._update_round(round_id, "flow_run_id = ?", [flow_run_id])

    def finish_round(
        self,
        round_id: str,
        *,
        dataset_id: str | None,
        counts: Mapping[str, int],
        flow_run_id: str | None,
    ) -> None:
        """Mark a round done with what it produced (a None flow run id keeps the known one)."""
        self._update_round(
            round_id,
            "status = 'done', dataset_id = ?, counts = ?, "
            "flow_run_id = coalesce(?, flow_run_id), finished_at = ?",
            [dataset_id, json_text(dict(counts)), flow_run_id, now()],
        )

    def _update_round(self, round_id: str, assignments: str, params: list[Any]) -> None:
        with self._write() as con:
            changed = scalar(
                con, f"UPDATE rounds SET {assignments} WHERE id = ?", [*params, round_id]
            )
            if not changed:
                raise UnknownIdError("round", round_id, recent_ids(con, "rounds"))

    def get_round(self, round_id: str) -> RoundInfo | None:
        """The round recorded under ``round_id``, or None."""
        with self._connect() as con:
            rows = dicts(con, "SELECT * FROM rounds WHERE id = ?", [round_id])
        return _round_info(rows[0]) if rows else None

    def list_rounds(self) -> list[RoundInfo]:
        """Every round, oldest first."""
        with self._connect() as con:
            rows = dicts(con, "SELECT * FROM rounds ORDER BY started_at, id")
        return [_round_info(row) for row in rows]

    # -- tasks --------------------------------------------------------------------------

    def add_tasks(self, round_id: str | None, tasks: Sequence[TaskSpec]) -> int:
        """Record tasks first constructed in ``round_id`` (None: by no round, as the
        development set is); the number that were new."""
        rows = _unique((task_row(t, round_id) for t in tasks), "id")
        with self._write() as con:
            return insert_rows(con, "tasks", rows, TASK_SCHEMA)

    def add_rejections(self, rejections: Sequence[RejectedTask]) -> int:
        """Record refused task proposals; the number that were new."""
        rows = _unique((rejection_row(r) for r in rejections), "id")
        with self._write() as con:
            return insert_rows(con, "rejected_tasks", rows, REJECTION_SCHEMA)

    def tasks_of_round(self, round_id: str) -> list[TaskSpec]:
        """Tasks first constructed in ``round_id``, ordered by id."""
        with self._connect() as con:
            rows = con.execute(
                "SELECT spec FROM tasks WHERE round_id = ? ORDER BY id", [round_id]
            ).fetchall()
        return [TaskSpec.model_validate_json(spec) for (spec,) in rows]

    def tasks_except_round(self, round_id: str) -> list[TaskSpec]:
        """Tasks constructed in other rounds (or none), ordered by id."""
        with self._connect() as con:
            rows = con.execute(
                "SELECT spec FROM tasks WHERE round_id IS DISTINCT FROM ? ORDER BY id", [round_id]
            ).fetchall()
        return [TaskSpec.model_validate_json(spec) for (spec,) in rows]

    def tasks_with_fingerprints(self, fingerprints: Iterable[str]) -> list[TaskSpec]:
        """Stored tasks whose fingerprint is one of ``fingerprints`` (train and dev), by id."""
        with self._connect() as con:
            rows = con.execute(
                "SELECT spec FROM tasks WHERE list_contains(?, fingerprint) ORDER BY id",
                [sorted(set(fingerprints))],
            ).fetchall()
        return [TaskSpec.model_validate_json(spec) for (spec,) in rows]

    def rejections_of_round(self, round_id: str) -> list[RejectedTask]:
        """Proposals refused in ``round_id``, ordered by id."""
        columns = ", ".join(REJECTION_SCHEMA.names)
        with self._connect() as con:
            rows = dicts(
                con,
                f"SELECT {columns} FROM rejected_tasks WHERE round_id = ? ORDER BY id",
                [round_id],
            )
        return [RejectedTask.model_validate(row) for row in rows]

    def get_task(self, task_id: str) -> TaskSpec:
        """The task ``task_id``; UnknownIdError if the catalog has none such."""
        with self._connect() as con:
            rows = con.execute("SELECT spec FROM tasks WHERE id = ?", [task_id]).fetchall()
            if not rows:
                raise UnknownIdError("task", task_id, recent_ids(con, "tasks"))
        return TaskSpec.model_validate_json(rows[0][0])

    def fingerprints(self, split: Split | None = None) -> set[str]:
        """Fingerprints of every known task, or of one split's."""
        query = "SELECT DISTINCT fingerprint FROM tasks"
        params = []
        if split is not None:
            query += " WHERE split = ?"
            params.append(split.value)
        with self._connect() as con:
            rows = con.execute(query, params).fetchall()
        return {fingerprint for (fingerprint,) in rows}

    def task_goals(self) -> list[tuple[str, str]]:
        """(id, goal) of every known task, ordered by id, for near-duplicate checks."""
        with self._connect() as con:
            rows = con.execute("SELECT id, goal FROM tasks ORDER BY id").fetchall()
        return [(task_id, goal) for task_id, goal in rows]

    # -- trajectories -------------------------------------------------------------------

    def ingest_shards(self, paths: Sequence[Location]) -> IngestReport:
        """Ingest Parquet shards in one transaction; a folder stands for the complete
        shards in it. Shards ingested before (by resolved path) and trajectories stored
        before (by id) are skipped; task specs the shards embed are added when new."""
        shards = ingest.resolve_shards(paths)
        if not shards:
            return IngestReport(files=0, trajectories=0, steps=0, skipped_files=0)
        with self._write() as con:
            return ingest.ingest(con, shards)

    def trajectories_of_round(self, round_id: str, *, verify_ids: bool = True) -> list[Trajectory]:
        """The exact trajectories of a round, ordered by id (``verify_ids``: see
        :meth:`trajectories_by_ids`)."""
        with self._connect() as con:
            return _load_trajectories(con, "t.round_id = ?", [round_id], verify_ids)

    def get_trajectory(self, trajectory_id: str) -> Trajectory:
        """The trajectory ``trajectory_id``; UnknownIdError if the catalog has none such."""
        with self._connect() as con:
            found = _load_trajectories(con, "t.id = ?", [trajectory_id])
            if not found:
                raise UnknownIdError("trajectory", trajectory_id, recent_ids(con, "trajectories"))
        return found[0]

    def trajectories_by_ids(
        self, trajectory_ids: Sequence[str], *, verify_ids: bool = True
    ) -> list[Trajectory]:
        """The trajectories ``trajectory_ids``, in that order, loaded in one pass;
        UnknownIdError names the first one the catalog does not hold.

        Every id is recomputed from the rebuilt content unless ``verify_ids`` is False:
        bulk readers of rows this catalog wrote skip it (it is a third of the cost).
        """
        wanted = list(dict.fromkeys(trajectory_ids))
        if not wanted:
            return []
        with self._connect() as con:
            with registered(con, "_wanted", ids_table(wanted)):
                found = {
                    t.id: t
                    for t in _load_trajectories(
                        con, "t.id IN (SELECT id FROM _wanted)", [], verify_ids
                    )
                }
            missing = next((i for i in wanted if i not in found), None)
            if missing is not None:
                raise UnknownIdError("trajectory", missing, recent_ids(con, "trajectories"))
        return [found[i] for i in trajectory_ids]

    def export_columns(self, dataset_id: str, start: int, stop: int) -> ExportColumns:
        """What an export reads of the members of ``dataset_id`` at positions
        ``[start, stop)``, as columns (no record rebuilt); UnknownIdError names the first
        member trajectory the catalog does not hold."""
        with self._connect() as con:
            columns = export_columns(con, dataset_id, start, stop)
            policies = columns.members.column("policy")
            if policies.null_count:
                ids = columns.members.column("trajectory_id").filter(policies.is_null())
                raise UnknownIdError("trajectory", ids[0].as_py(), recent_ids(con, "trajectories"))
        return columns

    def curation_columns(self, trajectory_ids: Sequence[str]) -> CurationColumns:
        """What the curator reads of ``trajectory_ids``, as columns (no record rebuilt);
        UnknownIdError names the first one the catalog does not hold."""
        with self._connect() as con:
            columns = curation_columns(con, trajectory_ids)
            if columns.trajectories.num_rows < len(set(trajectory_ids)):
                found = set(columns.trajectories.column("id").to_pylist())
                missing = next(i for i in trajectory_ids if i not in found)
                raise UnknownIdError("trajectory", missing, recent_ids(con, "trajectories"))
        return columns

    def without_collateral_check(self, trajectory_ids: Sequence[str]) -> list[str]:
        """Those of ``trajectory_ids`` whose task has no ``no_collateral`` check (stored
        before it existed: ``flywheel verify`` re-verifies them), in the order given."""
        wanted = list(dict.fromkeys(trajectory_ids))
        if not wanted:
            return []
        with self._connect() as con, registered(con, "_wanted", ids_table(wanted)):
            rows = con.execute(
                "SELECT t.id FROM trajectories t JOIN tasks k ON k.id = t.task_id "
                "WHERE t.id IN (SELECT id FROM _wanted) AND NOT list_contains("
                "json_extract_string(k.spec, '$.verifier.checks[*].kind'), 'no_collateral')",
            ).fetchall()
        older = {str(row[0]) for row in rows}
        return [i for i in wanted if i in older]

    def trajectory_fingerprints(self, round_id: str) -> list[tuple[str, str]]:
        """``(trajectory id, task fingerprint)`` of every trajectory of a round, in
        storage order (the order shards were ingested)."""
        with self._connect() as con:
            rows = con.execute(
                "SELECT t.id, k.fingerprint FROM trajectories t JOIN tasks k ON k.id = t.task_id "
                "WHERE t.round_id = ? ORDER BY t.rowid",
                [round_id],
            ).fetchall()
        return [(trajectory_id, fingerprint) for trajectory_id, fingerprint in rows]

    def member_tasks(self, trajectory_ids: Sequence[str]) -> list[tuple[str, str, str, str | None]]:
        """``(task id, split, fingerprint, template)`` of each trajectory's task, in the
        order given, from the task columns (no spec is parsed); UnknownIdError names the
        first trajectory the catalog does not hold."""
        wanted = pa.table(
            {
                "position": pa.array(range(len(trajectory_ids)), pa.int64()),
                "id": pa.array(list(trajectory_ids), pa.string()),
            }
        )
        with self._connect() as con:
            with registered(con, "_wanted", wanted):
                rows = con.execute(
                    "SELECT w.id, k.id, k.split, k.fingerprint, k.template FROM _wanted w "
                    "LEFT JOIN trajectories t ON t.id = w.id "
                    "LEFT JOIN tasks k ON k.id = t.task_id ORDER BY w.position"
                ).fetchall()
            missing = next((row[0] for row in rows if row[1] is None), None)
            if missing is not None:
                raise UnknownIdError("trajectory", missing, recent_ids(con, "trajectories"))
        return [
            (task_id, split, fingerprint, template)
            for _, task_id, split, fingerprint, template in rows
        ]

    def balance_rows(self, trajectory_ids: Sequence[str]) -> list[dict[str, Any]]:
        """What balancing reads of each trajectory, from columns (no trajectory is
        rebuilt): ``trajectory_id``, ``task_id``, ``split``, ``outcome``, ``recovered``,
        ``capability`` and ``domain`` (the task's first), ``difficulty``, ``source``,
        ``policy`` (``name@version``), ``fingerprint`` and ``template``; in the order
        given, unknown ids left out."""
        wanted = list(dict.fromkeys(trajectory_ids))
        if not wanted:
            return []
        with self._connect() as con, registered(con, "_wanted", ids_table(wanted)):
            rows = dicts(
                con,
                "SELECT t.id AS trajectory_id, t.task_id, k.split, t.outcome, t.recovered, "
                "k.capabilities[1] AS capability, k.difficulty, k.domains[1] AS domain, "
                "k.source, t.policy || '@' || t.policy_version AS policy, k.fingerprint, "
                "k.template FROM trajectories t JOIN tasks k ON k.id = t.task_id "
                "WHERE t.id IN (SELECT id FROM _wanted)",
                [],
            )
        by_id = {row["trajectory_id"]: row for row in rows}
        return [by_id[i] for i in wanted if i in by_id]

    def episode_facts(self, round_id: str) -> list[EpisodeFacts]:
        """What the round's summary counts of each trajectory ``round_id`` stored, by id:
        outcome, backend and device, its task's capabilities, artifacts kept."""
        with self._connect() as con:
            return round_facts.episode_facts(con, round_id)

    def task_capabilities(self, round_id: str) -> list[list[str]]:
        """The capabilities of each task first constructed in ``round_id``."""
        with self._connect() as con:
            return round_facts.task_capabilities(con, round_id)

    def count_trajectories(self, round_id: str) -> int:
        """How many trajectories a round has stored."""
        with self._connect() as con:
            return scalar(con, "SELECT count(*) FROM trajectories WHERE round_id = ?", [round_id])

    # -- curation and reviews -----------------------------------------------------------

    def add_curations(self, records: Sequence[CurationRecord]) -> int:
        """Record the curator's judgements, one per trajectory: a new judgement of a
        trajectory replaces the old one. The number of rows added or changed."""
        rows = _unique((curation_row(r) for r in records), "trajectory_id")
        updates = ", ".join(f"{c} = excluded.{c}" for c in CURATION_SCHEMA.names[1:])
        conflict = (
            f"(trajectory_id) DO UPDATE SET {updates} "
            "WHERE curations.record::VARCHAR <> excluded.record::VARCHAR"
        )
        with self._write() as con:
            return insert_rows(con, "curations", rows, CURATION_SCHEMA, conflict)

    def curations_of_round(self, round_id: str) -> list[CurationRecord]:
        """The curator's judgements in ``round_id``, ordered by trajectory id."""
        with self._connect() as con:
            rows = con.execute(
                "SELECT record FROM curations WHERE round_id = ? ORDER BY trajectory_id",
                [round_id],
            ).fetchall()
        return [CurationRecord.model_validate_json(record) for (record,) in rows]

    def add_reviews(self, reviews: Sequence[Review]) -> int:
        """Record gate decisions; the number that were new.

        Each decision's time is one microsecond after the one before it, so that
        "recorded order" holds inside a batch too (an insert does not keep row order)."""
        start = now()
        rows = _unique(
            (review_row(r, start + timedelta(microseconds=i)) for i, r in enumerate(reviews)),
            "id",
        )
        with self._write() as con:
            return insert_rows(con, "reviews", rows, REVIEW_SCHEMA)

    def reviews_of_round(self, round_id: str) -> list[Review]:
        """Gate decisions of ``round_id``, in the order they were recorded."""
        with self._connect() as con:
            rows = con.execute(
                "SELECT record FROM reviews WHERE round_id = ? ORDER BY created_at, rowid",
                [round_id],
            ).fetchall()
        return [Review.model_validate_json(record) for (record,) in rows]

    def reviews_of_trajectories(self, trajectory_ids: Sequence[str]) -> list[Review]:
        """Gate decisions on ``trajectory_ids``, whatever their round, in recorded order."""
        with self._connect() as con:
            rows = con.execute(
                "SELECT record FROM reviews WHERE list_contains(?, trajectory_id) "
                "ORDER BY created_at, rowid",
                [sorted(set(trajectory_ids))],
            ).fetchall()
        return [Review.model_validate_json(record) for (record,) in rows]

    # -- carried-over items -------------------------------------------------------------

    def carry_over(self, round_id: str, gate: str, trajectory_ids: Sequence[str]) -> int:
        """Record items of ``round_id`` left undecided by ``gate``; the number new."""
        with self._write() as con:
            return carry_over.carry(con, round_id, gate, trajectory_ids)

    def carried_into(self, round_id: str, gate: str) -> CarriedItems:
        """Items of earlier rounds through ``gate`` that ``round_id`` takes up: the open
        ones, and those it settled in an earlier run of itself."""
        with self._connect() as con:
            origin = carry_over.taken_up(con, round_id, gate)
            where = f"t.id IN ({carry_over.OPEN_OR_SETTLED_IN})"
            params = [gate, round_id, round_id]
            trajectories = _load_trajectories(con, where, params)
            rows = con.execute(
                "SELECT record FROM curations WHERE list_contains(?, trajectory_id) "
                "ORDER BY trajectory_id",
                [list(origin)],
            ).fetchall()
        curations = [CurationRecord.model_validate_json(record) for (record,) in rows]
        return CarriedItems(trajectories, curations, origin)

    def settle_carry_over(self, round_id: str, trajectory_ids: Sequence[str]) -> int:
        """Mark carried items decided during ``round_id``; the number newly settled."""
        with self._write() as con:
            return carry_over.settle(con, round_id, trajectory_ids)

    def settled_into(self, round_id: str) -> list[Trajectory]:
        """Carried items that were decided during ``round_id``, by id."""
        with self._connect() as con:
            return _load_trajectories(con, f"t.id IN ({carry_over.SETTLED_IN})", [round_id])

    def settled_ids(self, round_id: str) -> list[str]:
        """The ids of ``settled_into(round_id)``, in order, without loading the records."""
        with self._connect() as con:
            rows = con.execute(f"{carry_over.SETTLED_IN} ORDER BY 1", [round_id]).fetchall()
        return [str(trajectory_id) for (trajectory_id,) in rows]

    def carried_out_of(self, round_id: str, *, open_only: bool = False) -> int:
        """Items of ``round_id`` carried over to later rounds (``open_only``: those no
        later round has settled yet)."""
        with self._connect() as con:
            return carry_over.carried_out(con, round_id, open_only=open_only)

    # -- datasets -----------------------------------------------------------------------

    def decide_dataset(self, version: DatasetVersion, approval: DatasetApproval) -> DatasetApproval:
        """Store the decision on a proposed version, freezing it when approved, in one
        transaction. The first decision stands: it is returned, and deciding again
        changes nothing. Refuses (InvalidInputError) an approval of other content."""
        with self._write() as con:
            return datasets.decide(con, version, approval)

    def round_approval(self, round_id: str) -> DatasetApproval | None:
        """The latest decision on a version ``round_id`` proposed, frozen or not."""
        with self._connect() as con:
            rows = con.execute(
                "SELECT record FROM dataset_approvals WHERE round_id = ? "
                "ORDER BY decided_at DESC, rowid DESC LIMIT 1",
                [round_id],
            ).fetchall()
        return DatasetApproval.model_validate_json(rows[0][0]) if rows else None

    def dataset_approval(self, dataset_id: str) -> DatasetApproval | None:
        """The decision on the proposed version ``dataset_id``, if one was made."""
        with self._connect() as con:
            return datasets.approval_of(con, dataset_id)

    def freeze_dataset(self, version: DatasetVersion) -> bool:
        """Store a dataset version; True if it is new. A version is immutable: the same id
        again is a no-op. Refuses (InvalidInputError) members whose task is a development
        task or differs from their trajectory's, and (UnknownIdError) members that are
        not stored trajectories."""
        with self._write() as con:
            return datasets.freeze(con, version)

    def get_dataset(self, dataset_id: str) -> DatasetVersion:
        """The dataset version ``dataset_id``; UnknownIdError if there is none such."""
        with self._connect() as con:
            return datasets.load(con, dataset_id)

    def latest_dataset_id(self) -> str | None:
        """The most recently frozen dataset version, if any."""
        with self._connect() as con:
            rows = con.execute(
                "SELECT id FROM dataset_versions ORDER BY created_at DESC, rowid DESC LIMIT 1"
            ).fetchall()
        return str(rows[0][0]) if rows else None

    def list_datasets(self) -> list[DatasetSummary]:
        """Every dataset version, oldest first."""
        with self._connect() as con:
            rows = dicts(
                con,
                "SELECT id, round_id, parent, content_hash, size, human_reviewed, created_at "
                "FROM dataset_versions ORDER BY created_at, rowid",
            )
        return [DatasetSummary(**(row | {"created_at": utc(row["created_at"])})) for row in rows]

    def dataset_summary(self, dataset_id: str) -> dict[str, Any]:
        """A JSON-ready description of a dataset version: ``id, round_id, parent,
        content_hash, size, counts, human_reviewed, lineage, target, achieved, review,
        approval, created_at``. ``counts`` has member counts per capability (a task counts under
        each of its capabilities), difficulty and outcome (a recovered success counts as
        ``recovery``); ``lineage`` has the round, policies and sorted task and trajectory
        ids; ``review`` counts corrected, person-decided, masked and corrected members;
        ``approval`` is who approved the version, when, and how."""
        with self._connect() as con:
            return datasets.summary(con, dataset_id)

    def diff_datasets(self, a: str, b: str) -> dict[str, Any]:
        """What changed from version ``a`` to ``b``: ``size``; ``members`` (``added``,
        ``removed``, ``reweighted``, ``review_changed`` trajectory ids, and how many are
        ``unchanged``); ``composition`` and ``achieved`` per dimension and value (``a``,
        ``b``, ``delta``); ``human_reviewed``; ``target_changed``; ``lineage``
        (``b_descends_from_a``, the rounds). UnknownIdError for an unknown version."""
        with self._connect() as con:
            return dataset_diff.diff(con, a, b)

    # -- feedback -----------------------------------------------------------------------

    def add_feedback(self, report: FeedbackReport) -> bool:
        """Store a feedback report and its per-task rows in one transaction; True if it
        is new. The same report again (by its content-derived id) stores nothing."""
        with self._write() as con:
            return feedback.add(con, report)

    def get_feedback(self, report_id: str) -> FeedbackReport:
        """The feedback report ``report_id``; UnknownIdError if there is none such."""
        with self._connect() as con:
            return feedback.load(con, report_id)

    def list_feedback(self) -> list[FeedbackSummary]:
        """Every feedback report, oldest first (by ``created_at``, then as stored)."""
        with self._connect() as con:
            return feedback.summaries(con)

    def latest_feedback(self) -> FeedbackReport | None:
        """The most recently created feedback report (among equal ``created_at``, the one
        stored last), if any."""
        with self._connect() as con:
            return feedback.latest(con)

    # -- models -------------------------------------------------------------------------

    def register_model(self, record: ModelRecord, report: FeedbackReport | None = None) -> bool:
        """Register a checkpoint, and store ``report`` (its evaluation) first when given,
        in one transaction; True if the model is new. The same record again (by its
        content-derived id) stores nothing. Refuses (InvalidInputError naming the field) a
        ``dataset_id`` that is not a frozen dataset version here, a ``parent`` that is not
        a registered model, a ``feedback_id`` that is not a stored feedback report."""
        with self._write() as con:
            if report is not None:
                feedback.add(con, report)
            return models.register(con, record)

    def get_model(self, model_id: str) -> ModelRecord:
        """The registered model ``model_id``; UnknownIdError if there is none such."""
        with self._connect() as con:
            return models.load(con, model_id)

    def list_models(self) -> list[ModelRecord]:
        """Every registered model, oldest first (by ``created_at``, then as registered)."""
        with self._connect() as con:
            return models.all_models(con)

    def latest_model(self) -> ModelRecord | None:
        """The most recently created model (among equal ``created_at``, the one
        registered last), if any."""
        with self._connect() as con:
            return models.latest(con)

    # -- model aliases ------------------------------------------------------------------

    def set_alias(
        self,
        alias: ModelAlias | str,
        model_id: str,
        *,
        reason: str,
        deployment_id: str | None = None,
        at: datetime | None = None,
    ) -> AliasChange:
        """Point ``alias`` at the registered model ``model_id`` (InvalidInputError naming
        ``model_id`` otherwise) and record the change, in one transaction."""
        name = models.parse_alias(alias)
        with self._write() as con:
            return models.set_alias(
                con, name, model_id, reason=reason, deployment_id=deployment_id, at=at
            )

    def alias(self, alias: ModelAlias | str) -> ModelRecord | None:
        """The model ``alias`` points at, or None when it is not set."""
        name = models.parse_alias(alias)
        with self._connect() as con:
            model_id = models.alias_target(con, name)
            return models.load(con, model_id) if model_id is not None else None

    def aliases(self) -> dict[ModelAlias, ModelRecord]:
        """Every set alias and its model (champion, candidate, previous order)."""
        with self._connect() as con:
            return models.alias_models(con)

    def promote(
        self,
        model_id: str,
        *,
        reason: str,
        deployment_id: str | None = None,
        at: datetime | None = None,
    ) -> tuple[AliasChange, ...]:
        """Make the registered model ``model_id`` the champion, in one transaction: the
        champion before becomes ``previous``, and ``candidate`` is cleared if it named
        ``model_id``. The changes made, in order; () when it is the champion already."""
        with self._write() as con:
            return models.promote(con, model_id, reason=reason, deployment_id=deployment_id, at=at)

    def rollback(
        self, *, reason: str, deployment_id: str | None = None, at: datetime | None = None
    ) -> tuple[AliasChange, ...]:
        """Restore the previous champion, in one transaction: ``champion`` := ``previous``,
        and ``previous`` := the champion before that one (cleared when there is none).
        The changes made; InvalidInputError naming ``previous`` when nothing is to
        restore."""
        with self._write() as con:
            return models.rollback(con, reason=reason, deployment_id=deployment_id, at=at)

    def alias_history(self, alias: ModelAlias | str | None = None) -> list[AliasChange]:
        """Every change of every alias, or of ``alias``, oldest first."""
        name = models.parse_alias(alias) if alias is not None else None
        with self._connect() as con:
            return models.alias_history(con, name)

    # -- deployments --------------------------------------------------------------------

    def record_deployment(self, record: DeploymentRecord) -> tuple[AliasChange, ...]:
        """Store a deployment decision and apply its alias effect, in one transaction: a
        promotion promotes ``candidate_id``, a rollback restores the previous champion
        (which must be ``candidate_id``), any other decision changes no alias. The alias
        changes made, each naming the deployment; () for the same record again.

        Refuses (InvalidInputError naming the field) a model id that is not registered, a
        ``champion_id`` that is not the champion now (another deployment came first), and a
        rollback whose ``candidate_id`` is not ``previous``; nothing is written then."""
        with self._write() as con:
            return deployments.record(con, record)

    def deployments(self, limit: int | None = None) -> list[DeploymentRecord]:
        """Deployments, newest first (by ``created_at``, then the one recorded last); the
        first ``limit`` when given."""
        with self._connect() as con:
            return deployments.newest_first(con, limit)

    def deployment(self, deployment_id: str) -> DeploymentRecord:
        """The deployment ``deployment_id``; InvalidInputError naming ``deployment_id`` if
        there is none such."""
        with self._connect() as con:
            return deployments.load(con, deployment_id)

    def latest_deployment(self) -> DeploymentRecord | None:
        """The most recently created deployment (among equal ``created_at``, the one
        recorded last), if any."""
        found = self.deployments(limit=1)
        return found[0] if found else None

    # -- all ----------------------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        """Rows per table."""
        with self._connect() as con:
            return {table: scalar(con, f"SELECT count(*) FROM {table}") for table in TABLES}


_BUSY = ("Could not set lock", "different configuration than existing connections")


def _connect_file(path: Path, read_only: bool, wait_s: float) -> duckdb.DuckDBPyConnection:
    """Open the DuckDB file, waiting up to ``wait_s`` while another process (or another
    mode in this one) holds it; DuckDB's errors become messages for a person."""
    start = time.monotonic()
    deadline = start + wait_s
    pause = 0.02
    said = False
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only)
        except duckdb.Error as exc:
            busy = any(mark in str(exc) for mark in _BUSY)
            now = time.monotonic()
            if busy and now < deadline:
                if not said and now - start >= _SAY_WAITING_AFTER_S:
                    said = True
                    pid = _holder_pid(exc)
                    who = f" by PID {pid}" if pid else ""
                    _LOG.warning(
                        "catalog %s is in use%s: waiting for it, up to %g s", path, who, wait_s
                    )
                time.sleep(min(pause, max(deadline - now, 0.0)))
                pause = min(pause * 2, 1.0)
                continue
            raise _open_error(path, exc, wait_s) from exc


def _holder_pid(exc: duckdb.Error) -> str | None:
    """The PID of the process holding the file, as DuckDB's lock error names it."""
    found = re.search(r"PID (\d+)", str(exc))
    return found.group(1) if found else None


def _open_error(path: Path, exc: duckdb.Error, wait_s: float) -> CatalogError:
    text = str(exc)
    if "Could not set lock" in text:
        pid = _holder_pid(exc)
        who = f" (PID {pid})" if pid else ""
        return CatalogError(
            f"catalog {path} is in use by another process{who}, still after {wait_s:g} s: "
            "wait for it to finish, then retry"
        )
    if _BUSY[1] in text:
        return CatalogError(
            f"catalog {path} is open in this process both read-only and writable: "
            "use one mode at a time"
        )
    if "not a valid DuckDB database" in text:
        return CatalogError(
            f"{path} is not a DuckDB catalog (corrupt, or another kind of file): "
            "move it away or choose another state folder"
        )
    return CatalogError(f"cannot open catalog {path}: {text}")


def _ensure_writable_folder(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CatalogError(f"cannot create state folder {folder}: {exc.strerror}") from exc
    if not os.access(folder, os.W_OK | os.X_OK):
        raise CatalogError(
            f"state folder {folder} is not writable: fix its permissions or choose another one"
        )


def _unique(rows: Iterable[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """One row per key, the last one winning: a batch must not conflict with itself."""
    return list({row[key]: row for row in rows}.values())


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


def _load_trajectories(
    con: duckdb.DuckDBPyConnection,
    where: str,
    params: Sequence[Any],
    verify_ids: bool = True,
) -> list[Trajectory]:
    """Rebuild the trajectories matching ``where`` (over ``trajectories t``), by id."""
    rows = dicts(
        con,
        "SELECT t.id, t.task_id, t.metadata, t.cost, v.passed, v.score, v.progress, v.checks "
        f"FROM trajectories t JOIN verdicts v ON v.trajectory_id = t.id WHERE {where} "
        "ORDER BY t.id",
        params,
    )
    if not rows:
        return []
    # Steps and tasks by the ids just found, not by ``where`` again: a semi-join on the
    # steps table's key instead of a join of two tables.
    found = pa.table(
        {
            "id": pa.array([r["id"] for r in rows], pa.string()),
            "task_id": pa.array([r["task_id"] for r in rows], pa.string()),
        }
    )
    with registered(con, "_found", found):
        steps = dicts(
            con,
            f"SELECT s.trajectory_id, {', '.join('s.' + c for c in STEP_COLUMNS)} "
            "FROM steps s WHERE s.trajectory_id IN (SELECT id FROM _found) "
            "ORDER BY s.trajectory_id, s.idx",
            [],
        )
        specs = con.execute(
            "SELECT id, spec FROM tasks WHERE id IN (SELECT task_id FROM _found)"
        ).fetchall()
    context = None if verify_ids else {TRUSTED_IDS: True}
    with gc_paused():
        tasks = {
            task_id: TaskSpec.model_validate_json(spec, context=context) for task_id, spec in specs
        }
        by_trajectory = group_steps(steps)
        return [
            rebuild_trajectory(
                row, tasks[row["task_id"]], by_trajectory.get(row["id"], []), verify_id=verify_ids
            )
            for row in rows
        ]
