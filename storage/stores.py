"""The catalog's stores, one narrow protocol per subject, and the records they return.

A stage or a command asks for the stores it uses, not for the whole catalog: the
curator's partitions read a ``TrajectoryStore``, the gate writes a ``ReviewStore``, the
trainer reads a ``DatasetStore`` and writes a ``ModelRegistry``. Every write is one
transaction and idempotent by content-derived ids: writing the same records again changes
nothing. ``tests/storage/test_store_conformance.py`` holds every implementation to these
contracts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, Protocol

from contract import (
    AliasChange,
    CurationRecord,
    DatasetApproval,
    DatasetVersion,
    DeploymentRecord,
    FeedbackReport,
    FinalReview,
    KeptSuggestion,
    ModelAlias,
    ModelRecord,
    RejectedTask,
    Review,
    Split,
    TaskSpec,
    Trajectory,
)
from storage.curation_columns import EVERYWHERE, CurationColumns, RowSpans
from storage.dataset_diff import DatasetDiff
from storage.datasets import DatasetDescription
from storage.export_columns import ExportColumns
from storage.feedback import FeedbackSummary
from storage.ingest import IngestReport
from storage.locations import Location
from storage.round_facts import EpisodeFacts, GateCounts, RoundTally


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
    """One line of ``DatasetStore.summaries``."""

    id: str
    round_id: str
    parent: str | None
    content_hash: str
    size: int
    human_reviewed: int
    created_at: datetime


class MemberTask(NamedTuple):
    """What an export or a dataset check reads of a member trajectory's task."""

    task_id: str
    split: str
    fingerprint: str
    template: str | None


class Placement(NamedTuple):
    """Where a task runs: its world seed and the backend its initial conditions name."""

    task_id: str
    seed: int
    backend: str


class BalanceRow(NamedTuple):
    """What balancing reads of one trajectory (its task's first capability and domain), in
    the order of ``curation.balance.Candidate``'s fields: a tuple, not a dict, because a
    version's pool is hundreds of thousands of these."""

    trajectory_id: str
    task_id: str
    split: str
    outcome: str
    recovered: bool
    capability: str
    difficulty: str
    domain: str
    source: str
    policy: str
    """``name@version``."""
    fingerprint: str
    template: str | None
    simulated: bool
    """A chat model answered its tools."""


class RoundStore(Protocol):
    """Rounds: their identity (configuration), the stage reached, what they produced."""

    def begin(self, round_id: str, config: Mapping[str, Any]) -> RoundInfo:
        """Record a running round, or return the round already recorded under that id."""
        ...

    def set_stage(self, round_id: str, stage: str) -> None:
        """Record the stage a round has reached (UnknownIdError for an unknown round)."""
        ...

    def set_flow_run(self, round_id: str, flow_run_id: str) -> None:
        """Record the orchestrator's run id of a round."""
        ...

    def finish(
        self,
        round_id: str,
        *,
        dataset_id: str | None,
        counts: Mapping[str, int],
        flow_run_id: str | None,
    ) -> None:
        """Mark a round done with what it produced (a None flow run id keeps the known one)."""
        ...

    def get(self, round_id: str) -> RoundInfo | None:
        """The round recorded under ``round_id``, or None."""
        ...

    def every(self) -> list[RoundInfo]:
        """Every round, oldest first."""
        ...

    def tally(self, round_id: str, carried_in: Sequence[str], dataset_id: str | None) -> RoundTally:
        """The counts of a round's summary, made by the catalog (``round_facts``):
        ``carried_in`` are the items it took up from earlier rounds, ``dataset_id`` the
        version it froze. Reads no record: its memory does not grow with the round."""
        ...

    def gate_counts(self, round_id: str) -> GateCounts:
        """The round's kept items by the review that counts (its own reviews): per
        decision, by a person, undecided. Reads no record."""
        ...


class GoalSketch(NamedTuple):
    """What a task asks as near-duplicate detection keeps it: its MinHash digest (which
    proposes LSH candidates) and its shingles' hashes, sorted (their exact similarity)."""

    digest: Sequence[int]
    shingles: Sequence[int]


class TaskStore(Protocol):
    """Constructed tasks (train and development) and the proposals refused."""

    def add(self, round_id: str | None, tasks: Iterable[TaskSpec]) -> int:
        """Record tasks first constructed in ``round_id`` (None: by no round, as the
        development set is), in one transaction, read from ``tasks`` as they are written
        (a generator need not hold them all); the number that were new."""
        ...

    def add_serialized(self, round_id: str | None, specs: Iterable[bytes]) -> int:
        """``add`` for specs already serialized by ``TaskSpec.to_json`` (what a
        construction holds of the tasks it accepted), not validated again."""
        ...

    def add_rejections(self, rejections: Sequence[RejectedTask]) -> int:
        """Record refused task proposals; the number that were new."""
        ...

    def of_round(self, round_id: str) -> list[TaskSpec]:
        """Tasks first constructed in ``round_id``, ordered by id."""
        ...

    def ids_of_round(self, round_id: str) -> list[str]:
        """The ids of ``of_round(round_id)``, without parsing a spec."""
        ...

    def by_ids(self, task_ids: Sequence[str]) -> list[TaskSpec]:
        """The tasks ``task_ids``, in that order; UnknownIdError names the first one there
        is none such of."""
        ...

    def spec_texts(self, task_ids: Sequence[str]) -> list[str]:
        """The stored specs of ``task_ids`` (canonical JSON), in that order, unparsed;
        UnknownIdError as ``by_ids``."""
        ...

    def placements(self, task_ids: Sequence[str]) -> list[Placement]:
        """Where each task of ``task_ids`` runs (its world seed, its backend), in that
        order, read without parsing a spec; UnknownIdError as ``by_ids``."""
        ...

    def ids_except_round(self, round_id: str) -> list[str]:
        """The ids of the tasks constructed in other rounds (or none), ordered by id."""
        ...

    def with_fingerprints(self, fingerprints: Iterable[str]) -> list[TaskSpec]:
        """Stored tasks whose fingerprint is one of ``fingerprints`` (train and dev), by id."""
        ...

    def rejections_of_round(self, round_id: str) -> list[RejectedTask]:
        """Proposals refused in ``round_id``, ordered by id."""
        ...

    def get(self, task_id: str) -> TaskSpec:
        """The task ``task_id``; UnknownIdError if there is none such."""
        ...

    def fingerprints(self, split: Split | None = None) -> set[str]:
        """Fingerprints of every known task, or of one split's."""
        ...

    def goals(self) -> list[tuple[str, str]]:
        """(id, goal) of every known task, ordered by id, for near-duplicate checks."""
        ...

    def capabilities_of_round(self, round_id: str) -> list[list[str]]:
        """The capabilities of each task first constructed in ``round_id``."""
        ...

    def fingerprints_except_round(self, round_id: str) -> set[str]:
        """Fingerprints of the tasks constructed in other rounds (or none)."""
        ...

    def add_goal_sketches(self, sketches: Mapping[str, GoalSketch]) -> int:
        """Keep each task's sketch of what it asks (task id -> its MinHash digest and its
        shingle hashes), in one transaction; the number new (a task keeps its first)."""
        ...

    def without_goal_sketch(self) -> list[str]:
        """The ids of the tasks with no goal sketch kept yet, ordered by id."""
        ...

    def goal_twins(
        self, queries: Sequence[tuple[str, GoalSketch]], bands: int, threshold: float
    ) -> list[tuple[str | None, float]]:
        """Per query (a task id and its sketch; digests of equal lengths, a multiple of
        ``bands``): the stored task most similar to it other than the one with that id (a
        construction run again meets its own stored tasks), with the Jaccard similarity of
        their shingle hashes, among those whose kept digest has one of its ``bands`` runs
        of consecutive values equal (MinHash LSH's candidates) and a similarity of at least
        ``threshold``; ties go to the first by id; (None, 0.0) when there is none."""
        ...


class TrajectoryStore(Protocol):
    """Trajectories, ingested from shards, read whole or as the columns a stage needs."""

    def ingest(self, paths: Sequence[Location]) -> IngestReport:
        """Ingest Parquet shards; a folder stands for the complete shards in it. Each
        shard is ingested whole or not at all, in transactions of a bounded number of
        trajectories (a failure keeps the transactions before it). Shards ingested
        before (by resolved path) and trajectories stored before (by id) are skipped;
        task specs the shards embed are added when new."""
        ...

    def of_round(self, round_id: str, *, verify_ids: bool = True) -> list[Trajectory]:
        """The exact trajectories of a round, ordered by id (``verify_ids``: see
        ``by_ids``)."""
        ...

    def get(self, trajectory_id: str) -> Trajectory:
        """The trajectory ``trajectory_id``; UnknownIdError if there is none such."""
        ...

    def by_ids(self, trajectory_ids: Sequence[str], *, verify_ids: bool = True) -> list[Trajectory]:
        """The trajectories ``trajectory_ids``, in that order, loaded in one pass;
        UnknownIdError names the first one the store does not hold.

        Every id is recomputed from the rebuilt content unless ``verify_ids`` is False:
        bulk readers of rows this catalog wrote skip it (it is a third of the cost).
        """
        ...

    def count(self, round_id: str) -> int:
        """How many trajectories a round has stored."""
        ...

    def failed_tasks(self, round_id: str, teacher: str) -> list[str]:
        """Ids of the round's tasks its collecting policy failed, in id order: an episode
        by a policy other than ``teacher`` (a recorded policy name) ended as a failure,
        and none such succeeded (a backend error is the backend's, not the policy's)."""
        ...

    def fingerprints(self, round_id: str) -> list[tuple[str, str]]:
        """``(trajectory id, task fingerprint)`` of every trajectory of a round, in
        storage order (the order shards were ingested)."""
        ...

    def export_columns(self, dataset_id: str, start: int, stop: int) -> ExportColumns:
        """What an export reads of the members of ``dataset_id`` at positions
        ``[start, stop)``, as columns (no record rebuilt); UnknownIdError names the first
        member trajectory the store does not hold."""
        ...

    def curation_spans(self, partitions: Sequence[Sequence[str]]) -> list[RowSpans]:
        """Where each partition's rows lie (``partitions``: trajectory ids), found in one
        pass, for ``curation_columns`` to read a partition without scanning the rest."""
        ...

    def curation_columns(
        self, trajectory_ids: Sequence[str], spans: RowSpans = EVERYWHERE
    ) -> CurationColumns:
        """What the curator reads of ``trajectory_ids``, as columns (no record rebuilt),
        scanning the rows inside ``spans`` (``curation_spans``; spans that missed a row
        are not trusted); UnknownIdError names the first id the store does not hold."""
        ...

    def balance_rows(self, trajectory_ids: Sequence[str]) -> list[BalanceRow]:
        """What balancing reads of each trajectory, from columns, in the order given,
        unknown ids left out."""
        ...

    def member_tasks(self, trajectory_ids: Sequence[str]) -> list[MemberTask]:
        """Each trajectory's task, in the order given, from the task columns (no spec is
        parsed); UnknownIdError names the first trajectory the store does not hold."""
        ...

    def without_collateral_check(self, trajectory_ids: Sequence[str]) -> list[str]:
        """Those of ``trajectory_ids`` collected on the sandbox whose task has no
        ``no_collateral`` check (stored before it existed: ``flywheel verify``
        re-verifies them), in the order given. Other backends' tasks (BFCL's) never had
        one, and the sandbox cannot replay them."""
        ...

    def episode_facts(self, round_id: str) -> list[EpisodeFacts]:
        """What the round's summary counts of each trajectory ``round_id`` stored, by id:
        outcome, backend and device, its task's capabilities, artifacts kept."""
        ...


class ReviewStore(Protocol):
    """What the curator and the gate decided about trajectories, and the items a gate left
    undecided and carried over to later rounds."""

    def add_curations(self, records: Sequence[CurationRecord]) -> int:
        """Record the curator's judgements, one per trajectory: a new judgement of a
        trajectory replaces the old one. The number of rows added or changed."""
        ...

    def add_curation_file(self, location: Location) -> int:
        """``add_curations`` for the records of a curated partition's file
        (``storage.curation_files``), in one transaction, parsing no record; CatalogError
        naming the file when there is none there or it is not one."""
        ...

    def curations_of_round(self, round_id: str) -> list[CurationRecord]:
        """The curator's judgements in ``round_id``, ordered by trajectory id."""
        ...

    def kept_suggestions(
        self, round_id: str, *, after: str | None = None, limit: int
    ) -> list[KeptSuggestion]:
        """The routing, suggestion and reason of the judgements in ``round_id`` that kept
        their trajectory, ordered by trajectory id: at most ``limit``, those after the
        trajectory id ``after`` (a round's kept items read a batch at a time, no record
        loaded)."""
        ...

    def curations_of(self, trajectory_ids: Sequence[str]) -> list[CurationRecord]:
        """The curator's judgements of those of ``trajectory_ids`` that have one, ordered
        by trajectory id."""
        ...

    def add(self, reviews: Sequence[Review]) -> int:
        """Record gate decisions, in the order given; the number that were new."""
        ...

    def of_round(self, round_id: str) -> list[Review]:
        """Gate decisions of ``round_id``, in the order they were recorded."""
        ...

    def of_trajectories(self, trajectory_ids: Sequence[str]) -> list[Review]:
        """Gate decisions on ``trajectory_ids``, whatever their round, in recorded order."""
        ...

    def final_reviews(self, trajectory_ids: Sequence[str]) -> dict[str, FinalReview]:
        """The review that counts for each of ``trajectory_ids`` that has one, whatever
        its round (``human_gate.final_decisions``' ranking: a consensus over a person's
        over an automatic review, the later recorded among equals), by trajectory id in
        order; computed by the store, so no other review is read."""
        ...

    def carry_over(self, round_id: str, gate: str, trajectory_ids: Sequence[str]) -> int:
        """Record items of ``round_id`` left undecided by ``gate``; the number new."""
        ...

    def carried_into(self, round_id: str, gate: str) -> CarriedItems:
        """Items of earlier rounds through ``gate`` that ``round_id`` takes up: the open
        ones, and those it settled in an earlier run of itself."""
        ...

    def settle_carry_over(self, round_id: str, trajectory_ids: Sequence[str]) -> int:
        """Mark carried items decided during ``round_id``; the number newly settled."""
        ...

    def settled_into(self, round_id: str) -> list[Trajectory]:
        """Carried items that were decided during ``round_id``, by id."""
        ...

    def settled_ids(self, round_id: str) -> list[str]:
        """The ids of ``settled_into(round_id)``, in order, without loading the records."""
        ...

    def carried_out_of(self, round_id: str, *, open_only: bool = False) -> int:
        """Items of ``round_id`` carried over to later rounds (``open_only``: those no
        later round has settled yet)."""
        ...

    def decided_since_carried(self, round_id: str | None = None) -> int:
        """Items carried over (from ``round_id``, or from any round) and decided since,
        that no later round has settled yet: they wait to join a dataset version (the
        next round with their gate takes them in)."""
        ...


class DatasetStore(Protocol):
    """Dataset versions: proposed, decided, frozen (immutable), described and compared."""

    def propose(self, version: DatasetVersion) -> bool:
        """Keep a proposed version, whole, until it is decided (and after): what hands
        the proposal on by its id. False when that version was proposed before."""
        ...

    def proposal(self, dataset_id: str) -> DatasetVersion:
        """The proposed version ``dataset_id``, decided or not; UnknownIdError if none."""
        ...

    def decide(self, version: DatasetVersion, approval: DatasetApproval) -> DatasetApproval:
        """Store the decision on a proposed version, freezing it when approved, in one
        transaction. The first decision stands: it is returned, and deciding again
        changes nothing. Refuses (InvalidInputError) an approval of other content."""
        ...

    def round_approval(self, round_id: str) -> DatasetApproval | None:
        """The latest decision on a version ``round_id`` proposed, frozen or not."""
        ...

    def approval(self, dataset_id: str) -> DatasetApproval | None:
        """The decision on the proposed version ``dataset_id``, if one was made."""
        ...

    def freeze(self, version: DatasetVersion) -> bool:
        """Store a dataset version; True if it is new. A version is immutable: the same id
        again is a no-op. Refuses (InvalidInputError) members whose task is a development
        task or differs from their trajectory's, and (UnknownIdError) members that are
        not stored trajectories."""
        ...

    def get(self, dataset_id: str) -> DatasetVersion:
        """The dataset version ``dataset_id``; UnknownIdError if there is none such."""
        ...

    def member_ids(self, dataset_id: str) -> list[str]:
        """The trajectory ids of ``get(dataset_id)``'s members, in order, without loading
        the version; UnknownIdError if there is none such."""
        ...

    def latest_id(self) -> str | None:
        """The most recently frozen dataset version, if any."""
        ...

    def summaries(self) -> list[DatasetSummary]:
        """Every dataset version, oldest first."""
        ...

    def describe(self, dataset_id: str) -> DatasetDescription:
        """A JSON-ready description of a dataset version (see ``DatasetDescription``)."""
        ...

    def diff(self, a: str, b: str) -> DatasetDiff:
        """What changed from version ``a`` to ``b`` (see ``DatasetDiff``); UnknownIdError
        for an unknown version."""
        ...


class FeedbackStore(Protocol):
    """Evaluation reports of models on the development set, fed into later rounds."""

    def add(self, report: FeedbackReport) -> bool:
        """Store a feedback report and its per-task rows in one transaction; True if it
        is new. The same report again (by its content-derived id) stores nothing."""
        ...

    def get(self, report_id: str) -> FeedbackReport:
        """The feedback report ``report_id``; UnknownIdError if there is none such."""
        ...

    def summaries(self) -> list[FeedbackSummary]:
        """Every feedback report, oldest first (by ``created_at``, then as stored)."""
        ...

    def latest(self) -> FeedbackReport | None:
        """The most recently created feedback report (among equal ``created_at``, the one
        stored last), if any."""
        ...


class ModelRegistry(Protocol):
    """Registered checkpoints, the aliases that name the deployed ones, and the
    deployment decisions that move the aliases."""

    def register(self, record: ModelRecord, report: FeedbackReport | None = None) -> bool:
        """Register a checkpoint, and store ``report`` (its evaluation) first when given,
        in one transaction; True if the model is new. The same record again (by its
        content-derived id) stores nothing. Refuses (InvalidInputError naming the field) a
        ``dataset_id`` that is not a frozen dataset version here, a ``parent`` that is not
        a registered model, a ``feedback_id`` that is not a stored feedback report."""
        ...

    def get(self, model_id: str) -> ModelRecord:
        """The registered model ``model_id``; UnknownIdError if there is none such."""
        ...

    def every(self) -> list[ModelRecord]:
        """Every registered model, oldest first (by ``created_at``, then as registered)."""
        ...

    def latest(self) -> ModelRecord | None:
        """The most recently created model (among equal ``created_at``, the one
        registered last), if any."""
        ...

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
        ...

    def alias(self, alias: ModelAlias | str) -> ModelRecord | None:
        """The model ``alias`` points at, or None when it is not set."""
        ...

    def aliases(self) -> dict[ModelAlias, ModelRecord]:
        """Every set alias and its model (champion, candidate, previous order)."""
        ...

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
        ...

    def rollback(
        self, *, reason: str, deployment_id: str | None = None, at: datetime | None = None
    ) -> tuple[AliasChange, ...]:
        """Restore the previous champion, in one transaction: ``champion`` := ``previous``,
        and ``previous`` := the champion before that one (cleared when there is none).
        The changes made; InvalidInputError naming ``previous`` when nothing is to
        restore."""
        ...

    def alias_history(self, alias: ModelAlias | str | None = None) -> list[AliasChange]:
        """Every change of every alias, or of ``alias``, oldest first."""
        ...

    def record_deployment(self, record: DeploymentRecord) -> tuple[AliasChange, ...]:
        """Store a deployment decision and apply its alias effect, in one transaction: a
        promotion promotes ``candidate_id``, a rollback restores the previous champion
        (which must be ``candidate_id``), any other decision changes no alias. The alias
        changes made, each naming the deployment; () for the same record again.

        Refuses (InvalidInputError naming the field) a model id that is not registered, a
        ``champion_id`` that is not the champion now (another deployment came first), and a
        rollback whose ``candidate_id`` is not ``previous``; nothing is written then."""
        ...

    def deployments(self, limit: int | None = None) -> list[DeploymentRecord]:
        """Deployments, newest first (by ``created_at``, then the one recorded last); the
        first ``limit`` when given."""
        ...

    def deployment(self, deployment_id: str) -> DeploymentRecord:
        """The deployment ``deployment_id``; InvalidInputError naming ``deployment_id`` if
        there is none such."""
        ...

    def latest_deployment(self) -> DeploymentRecord | None:
        """The most recently created deployment (among equal ``created_at``, the one
        recorded last), if any."""
        ...
