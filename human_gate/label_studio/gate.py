"""The Label Studio gate: items that need a person become tasks; annotations become reviews.

One project per round, titled ``"<prefix> <round_id>"`` and found again by that title, so a
rerun neither creates a second project nor imports a trajectory twice (tasks are matched
by their ``trajectory_id``). Items the curator routed automatically never reach Label
Studio: they come back as automatic reviews, as in :class:`human_gate.auto.AutoGate`.

Each annotator's annotation becomes a :class:`Review` (the reviewer is the annotator's
email); the annotations of an item are resolved by a consensus rule
(:mod:`human_gate.label_studio.consensus`) into one more review, by ``"consensus:<rule>"``,
which is the one that counts (:func:`human_gate.base.final_decisions`). Reviews are
content-derived and name the annotation and when it was last edited: collecting twice
gives equal reviews, an edit gives new ones.

Screenshots and page sources of the steps (``Step.artifacts``) are served by Label Studio
itself when it runs on this machine: given ``artifact_root``, the gate adds a local-files
storage on that folder to the round's project (Label Studio serves a file only under a
storage of a project the user may see) and links ``/data/local-files/?d=...`` from the
page. Without it, references show as text.

Label Studio on SQLite re-runs a request that met a locked database, which can create a
project or import a task twice: ``submit`` deletes such unannotated extras again.

Every call to the server is tried again on connection errors, timeouts, 429 and 5xx answers
as the config's ``retry`` says (``[retries] label_studio``; the SDK's own retries are
switched off: one layer retries); then :class:`GateUnavailableError` names the server's
URL, never its token.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast
from urllib.parse import quote

import httpx
from label_studio_sdk import (
    AllRolesProjectList,
    ImportApiRequest,
    LabelStudio,
    ViewDataRequestRequest,
)
from label_studio_sdk.core.api_error import ApiError
from label_studio_sdk.core.request_options import RequestOptions

from contract import InvalidInputError, RetryPolicy, Review, ReviewDecision, Routing
from contract.curation import CONSENSUS_REVIEWER_PREFIX
from contract.retry import LABEL_STUDIO_RETRY
from human_gate.auto import auto_review
from human_gate.base import (
    GateError,
    GateItem,
    GateResult,
    GateUnavailableError,
    Workplace,
)
from human_gate.label_studio.consensus import (
    AgreementReport,
    Consensus,
    ConsensusRule,
    Vote,
    agreement_report,
    consensus_rule,
    resolve,
)
from human_gate.label_studio.labeling import LABEL_CONFIG
from human_gate.label_studio.view import (
    CURATOR_VERSION,
    HIDDEN_FIELDS,
    REVIEW_ORDER,
    AnnotationValues,
    ArtifactUrl,
    parse_annotation,
    prediction,
    task_data,
)
from storage.artifacts import ArtifactStore

log = logging.getLogger(__name__)

TRAJECTORY_KEY = "trajectory_id"
"""The task data field that identifies the trajectory (set by ``view.task_data``)."""
HIDDEN_TASK_COLUMNS = (
    "inner_id",
    "cancelled_annotations",
    "total_predictions",
    "annotations_results",
    "annotations_ids",
    "predictions_score",
    "predictions_model_versions",
    "predictions_results",
    "file_upload",
    "storage_filename",
    "created_at",
    "updated_at",
    "updated_by",
    "avg_lead_time",
    "draft_exists",
)
"""Label Studio's own task columns an annotator does not need: they come before the data
columns and pushed them off the screen (the prediction's score is the ``quality``
column; the id, completion, annotation count and annotators stay)."""
_HIDDEN_COLUMNS = [
    *(f"tasks:{column}" for column in HIDDEN_TASK_COLUMNS),
    *(f"tasks:data.{field}" for field in HIDDEN_FIELDS),
]
TASK_LIST_VIEW: dict[str, Any] = {
    "title": "To review",
    "hiddenColumns": {"explore": _HIDDEN_COLUMNS, "labeling": _HIDDEN_COLUMNS},
    "ordering": [f"tasks:data.{REVIEW_ORDER}"],
}
"""The project's task list: the annotator's columns (goal, suggestion, routing reason,
capability, difficulty, outcome...) shown, the rendered page, the step choices and Label
Studio's bookkeeping hidden, the most doubtful items (lowest curator quality) first."""

LOCAL_FILES_URL = "/data/local-files/?d="
"""Where Label Studio serves a file, by its path under the local-files document root."""
ARTIFACT_STORAGE_TITLE = "flywheel artifacts"
"""The title of the local-files storage that serves a project's artifacts."""

T = TypeVar("T")
_REASONED = frozenset({ReviewDecision.REJECT, ReviewDecision.QUARANTINE})


@dataclass(frozen=True)
class LabelStudioGateConfig:
    """How the Label Studio gate names projects, resolves annotators and retries.

    Which items reach a person (and the audit sample of confident ones) is decided
    upstream by the curator's routing.
    """

    project_prefix: str = field(
        default="flywheel", metadata={"help": "projects are titled '<prefix> <round_id>'"}
    )
    rule: ConsensusRule = field(
        default=ConsensusRule.MAJORITY, metadata={"help": "how several annotators resolve"}
    )
    min_annotations: int = field(
        default=1, metadata={"help": "annotations an item needs before it is decided"}
    )
    overlap: int | None = field(
        default=None,
        metadata={"help": "annotators Label Studio asks per task; None: min_annotations"},
    )
    retry: RetryPolicy = field(
        default=LABEL_STUDIO_RETRY, metadata={"help": "how a failed server call is tried again"}
    )
    timeout_s: float = field(default=30.0, metadata={"help": "per HTTP request"})
    page_size: int = field(default=100, metadata={"help": "tasks per page when reading"})
    import_batch: int = field(default=100, metadata={"help": "tasks per import request"})
    artifact_root: Path | None = field(
        default=None,
        metadata={
            "help": "the artifact store as Label Studio reaches it: a folder directly under "
            "its LOCAL_FILES_DOCUMENT_ROOT, with local-files serving on; None: artifacts "
            "show as references (a remote server cannot read this machine's files)"
        },
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "rule", consensus_rule(self.rule))
        for name in ("min_annotations", "page_size", "import_batch"):
            if getattr(self, name) < 1:
                raise InvalidInputError(name, f"{getattr(self, name)} is below 1")
        if self.overlap is not None and self.overlap < self.min_annotations:
            raise InvalidInputError(
                "overlap", f"{self.overlap} is below min_annotations ({self.min_annotations})"
            )
        if self.timeout_s <= 0:
            raise InvalidInputError("timeout_s", f"{self.timeout_s} is not positive")
        if not self.project_prefix.strip():
            raise InvalidInputError("project_prefix", "must not be blank")

    @property
    def consensus_reviewer(self) -> str:
        return f"{CONSENSUS_REVIEWER_PREFIX}{self.rule}"

    def project_title(self, round_id: str) -> str:
        return f"{self.project_prefix} {round_id}"


@dataclass(frozen=True)
class Annotation:
    """One annotator's latest valid annotation of one trajectory, as read back."""

    id: int
    task_id: int
    trajectory_id: str
    annotator: str
    updated_at: str
    values: AnnotationValues

    @property
    def vote(self) -> Vote:
        return Vote(
            annotator=self.annotator,
            decision=self.values.decision,
            erroneous_steps=self.values.erroneous_steps,
            note=_note(self.values),
        )


class LabelStudioGate:
    """The ``label-studio`` gate over an SDK client (see :meth:`connect`)."""

    name: str = "label-studio"
    asks_people: bool = True

    def __init__(
        self,
        client: LabelStudio,
        url: str,
        config: LabelStudioGateConfig | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """``url`` is the server's address, named in errors; ``sleep`` waits between tries."""
        self.client = client
        self.url = url
        self.config = config or LabelStudioGateConfig()
        self._sleep = sleep
        self._options: RequestOptions = {"max_retries": 0, "timeout": self.config.timeout_s}

    @classmethod
    def connect(
        cls, url: str, token: str, config: LabelStudioGateConfig | None = None
    ) -> LabelStudioGate:
        """A gate with its own client for the server at ``url`` (legacy or personal token)."""
        config = config or LabelStudioGateConfig()
        client = LabelStudio(  # type: ignore[no-untyped-call]
            base_url=url, api_key=token, timeout=config.timeout_s, max_retries=0
        )
        return cls(client, url, config)

    # -- the HumanGate protocol ------------------------------------------------------------

    def submit(self, round_id: str, items: Sequence[GateItem]) -> None:
        """Import the items routed to a person into the round's project, each once."""
        human = [i for i in items if _needs_human(i)]
        if not human:
            return
        project = self._call("find or create the project", lambda: self._project(round_id))
        self._call("import tasks", lambda: self._import_missing(project, round_id, human))

    def collect(self, round_id: str, items: Sequence[GateItem]) -> GateResult:
        """Automatic reviews, then per decided human item its annotators' reviews and the
        consensus review (the one ``final_decisions`` counts); undecided items are pending
        and bring no review, not even their annotators' (they would count otherwise)."""
        reviews = [auto_review(round_id, i) for i in items if not _needs_human(i)]
        human = [i for i in items if _needs_human(i)]
        annotations = self.annotations(round_id) if human else {}
        pending: list[str] = []
        for item in human:
            found = annotations.get(item.trajectory_id, [])
            consensus = resolve(
                [a.vote for a in found], self.config.rule, self.config.min_annotations
            )
            if consensus.pending:
                pending.append(item.trajectory_id)
                continue
            reviews += [annotation_review(round_id, a) for a in found]
            reviews.append(self._consensus_review(round_id, item.trajectory_id, found, consensus))
        return GateResult(reviews=tuple(reviews), pending=tuple(pending))

    def agreement(self, round_id: str) -> AgreementReport:
        """How the annotators of the round's project agree (items by trajectory id)."""
        votes = {t: [a.vote for a in found] for t, found in self.annotations(round_id).items()}
        return agreement_report(votes, self.config.rule, self.config.min_annotations)

    def workplace(self, round_id: str) -> Workplace | None:
        """The round's project and its task list; None before anything was submitted."""
        project = self.project_id(round_id)
        if project is None:
            return None
        return Workplace(
            name=f"Label Studio project '{self.config.project_title(round_id)}'",
            url=f"{self.url.rstrip('/')}/projects/{project}/data",
        )

    def project_id(self, round_id: str) -> int | None:
        """The id of the round's project (the oldest with its title); None before submit."""
        found = self._call("find the project", lambda: self._projects(round_id))
        return int(found[0].id or 0) if found else None

    def annotations(self, round_id: str) -> dict[str, list[Annotation]]:
        """Each trajectory's latest valid annotation per annotator, in the round's project
        (in every project with its title, should there be several).

        Skipped (cancelled) annotations are left out; one that cannot be read (no
        verdict, a step out of range) is logged and left out, so it decides nothing.
        """
        projects = self._call("find the project", lambda: self._projects(round_id))
        if not projects:
            return {}
        tasks = self._call(
            "read tasks", lambda: [t for p in projects for t in self._tasks(int(p.id or 0))]
        )
        emails = self._call("read users", self._emails)
        latest: dict[tuple[str, str], Annotation] = {}
        for task in tasks:
            for annotation in _read_annotations(task, emails):
                key = (annotation.trajectory_id, annotation.annotator)
                if key not in latest or _newer(annotation, latest[key]):
                    latest[key] = annotation
        by_item: dict[str, list[Annotation]] = {}
        for (trajectory_id, _), annotation in sorted(latest.items()):
            by_item.setdefault(trajectory_id, []).append(annotation)
        return by_item

    # -- server calls (each unit retried as a whole by _call) ------------------------------

    def _projects(self, round_id: str) -> list[AllRolesProjectList]:
        """The projects titled for ``round_id``, oldest first (normally one)."""
        title = self.config.project_title(round_id)
        projects: Iterable[AllRolesProjectList] = self.client.projects.list(
            title=title, page_size=self.config.page_size, request_options=self._options
        )
        found = [p for p in projects if p.title == title and p.id is not None]
        return sorted(found, key=lambda p: int(p.id or 0))

    def _project(self, round_id: str) -> int:
        """The round's project, created when missing (a retry finds it first).

        Label Studio on SQLite re-runs a request whose database was locked, which can
        create a project twice: empty extra projects of the round are deleted.
        """
        if not self._projects(round_id):
            self._create_project(round_id)
        keep, *extra = self._projects(round_id)
        for project in extra:
            if not project.task_number:
                self._delete(self.client.projects.delete, int(project.id or 0))
        return int(keep.id or 0)

    def _create_project(self, round_id: str) -> None:
        project = self.client.projects.create(
            title=self.config.project_title(round_id),
            description=f"Flywheel round {round_id}: approve, correct, reject or quarantine.",
            label_config=LABEL_CONFIG,
            maximum_annotations=self.config.overlap or self.config.min_annotations,
            overlap_cohort_percentage=100,
            show_collab_predictions=True,
            model_version=f"curator-{CURATOR_VERSION}",
            request_options=self._options,
        )
        self.client.views.create(
            project=int(project.id or 0),
            data=cast("ViewDataRequestRequest", TASK_LIST_VIEW),
            request_options=self._options,
        )

    def _tasks(self, project: int) -> list[Any]:
        pages: Iterable[Any] = self.client.tasks.list(
            project=project,
            fields="all",
            page_size=self.config.page_size,
            request_options=self._options,
        )
        return list(pages)

    def _import_missing(self, project: int, round_id: str, items: Sequence[GateItem]) -> int:
        """Import the items whose trajectory has no task yet; the number imported."""
        tasks = self._tasks(project)
        present = {_trajectory_of(task) for task in tasks}
        missing = [i for i in items if i.trajectory_id not in present]
        artifact_url = self._artifact_url(project, missing)
        size = self.config.import_batch
        for start in range(0, len(missing), size):
            batch = [
                {
                    "data": task_data(item, round_id, artifact_url=artifact_url),
                    "predictions": [prediction(item)],
                }
                for item in missing[start : start + size]
            ]
            # The SDK's typed ImportApiRequest insists on a task id inside each prediction,
            # which a task being imported has not got yet; the server takes plain JSON.
            self.client.projects.import_tasks(
                id=project,
                request=cast("list[ImportApiRequest]", batch),
                return_task_ids=True,
                request_options=self._options,
            )
        self._repair(self._tasks(project) if missing else tasks, items)
        return len(missing)

    def _artifact_url(self, project: int, items: Sequence[GateItem]) -> ArtifactUrl | None:
        """URLs of the stored artifacts of ``items``, served by Label Studio from
        ``artifact_root`` through a local-files storage of ``project`` (added when missing).

        None (references show as text) without a root or artifacts, or when the server
        refuses the storage: local-files serving off, or the root outside its document root.
        """
        root = self.config.artifact_root
        if root is None or not any(s.artifacts for i in items for s in i.trajectory.steps):
            return None
        path = os.path.normpath(root.absolute())
        storages = self.client.import_storage.local.list(
            project=project, request_options=self._options
        )
        if not any(s.path == path for s in storages):
            try:
                self.client.import_storage.local.create(
                    project=project,
                    path=path,
                    title=ARTIFACT_STORAGE_TITLE,
                    description="Screenshots and page sources for the review page; "
                    "it imports nothing.",
                    regex_filter="^$",  # a sync, should someone start one, imports no file
                    use_blob_urls=False,
                    request_options=self._options,
                )
            except ApiError as exc:
                if exc.status_code != 400:
                    raise
                log.warning(
                    "Label Studio at %s refused to serve %s (%s): artifacts show as "
                    "references. `flywheel server start label-studio` starts a local server "
                    "that serves them (stop one started by an older version first).",
                    self.url,
                    path,
                    _validation_errors(exc.body),
                )
                return None
        store = ArtifactStore(root)
        prefix = LOCAL_FILES_URL + quote(root.name) + "/"

        def url(ref: str) -> str | None:
            return prefix + quote(ref) if ref in store else None

        return url

    def _repair(self, tasks: Sequence[Any], items: Sequence[GateItem]) -> None:
        """Undo what a re-run import leaves behind: Label Studio on SQLite re-runs a
        request that met a locked database, which can import a task twice, or once
        without its prediction. Unannotated extra tasks are deleted (the one kept has the
        prediction if any has); a missing prediction is added."""
        by_trajectory: dict[str, list[Any]] = {}
        for task in tasks:
            trajectory_id = _trajectory_of(task)
            if trajectory_id is not None:
                by_trajectory.setdefault(trajectory_id, []).append(task)
        for item in items:
            found = by_trajectory.get(item.trajectory_id, [])
            if not found:
                continue
            keep, extra = _keep_one(found)
            for task in extra:
                self._delete(self.client.tasks.delete, str(task.id))
            if not keep.predictions:
                self._add_prediction(int(keep.id), item)

    def _add_prediction(self, task: int, item: GateItem) -> None:
        pre = prediction(item)
        self.client.predictions.create(
            task=task,
            result=cast("list[dict[str, Any]]", pre["result"]),
            score=cast(float, pre["score"]),
            model_version=cast(str, pre["model_version"]),
            request_options=self._options,
        )

    def _delete(self, delete: Callable[..., None], id: Any) -> None:
        try:
            delete(id, request_options=self._options)
        except ApiError as exc:
            if exc.status_code != 404:
                raise

    def _emails(self) -> dict[int, str]:
        users = self.client.users.list(request_options=self._options)
        return {int(u.id): u.email or u.username or str(u.id) for u in users if u.id is not None}

    def _call(self, action: str, fn: Callable[[], T]) -> T:
        """``fn()``, tried again as ``config.retry`` says while the server is unavailable."""

        def retrying(attempt: int, exc: BaseException) -> None:
            why = _cause(exc)
            log.warning("Label Studio at %s: %s (try %d); retrying", self.url, why, attempt)

        try:
            return self.config.retry.call(
                fn, transient=_unavailable, sleep=self._sleep, on_retry=retrying
            )
        except ApiError as exc:
            if not _transient(exc.status_code):
                raise GateError(
                    f"Label Studio at {self.url} refused to {action}: "
                    f"HTTP {exc.status_code}{_detail(exc.body)}"
                ) from None
            cause = _cause(exc)
        except httpx.TransportError as exc:
            cause = _cause(exc)
        # No exception chaining: an SDK error prints the response headers (session cookies).
        raise GateUnavailableError(
            f"Label Studio at {self.url} is unavailable: could not {action} "
            f"after {self.config.retry.attempts} tries ({cause})"
        ) from None

    def _consensus_review(
        self,
        round_id: str,
        trajectory_id: str,
        annotations: Sequence[Annotation],
        consensus: Consensus,
    ) -> Review:
        # Naming the annotations and their last edit makes every change of them a new
        # review, stored after the older ones (the latest consensus counts), even when the
        # decision goes back to an earlier one.
        ids = ", ".join(f"#{a.id}" for a in sorted(annotations, key=lambda a: a.id))
        last = max(a.updated_at for a in annotations)
        assert consensus.decision is not None
        return Review(
            trajectory_id=trajectory_id,
            round_id=round_id,
            decision=consensus.decision,
            reviewer=self.config.consensus_reviewer,
            automatic=False,
            reason=f"{consensus.reason} (annotations {ids}; last edit {last})",
            erroneous_steps=consensus.erroneous_steps,
            note=consensus.note,
        )


def annotation_review(round_id: str, annotation: Annotation) -> Review:
    """One annotator's review of one trajectory."""
    vote = annotation.vote
    return Review(
        trajectory_id=annotation.trajectory_id,
        round_id=round_id,
        decision=vote.decision,
        reviewer=annotation.annotator,
        automatic=False,
        reason=(
            f"label-studio annotation #{annotation.id} of task #{annotation.task_id} "
            f"(last edit {annotation.updated_at})"
        ),
        erroneous_steps=vote.erroneous_steps,
        note=vote.note,
    )


def _needs_human(item: GateItem) -> bool:
    return item.curation.routing is Routing.NEEDS_HUMAN


def _note(values: AnnotationValues) -> str | None:
    """The corrected answer, or for reject / quarantine the reason (and any remark)."""
    if values.decision in _REASONED and values.reject_reason is not None:
        reason = values.reject_reason.value
        return f"{reason}: {values.answer}" if values.answer else reason
    return values.answer


def _transient(status: int | None) -> bool:
    return status is None or status >= 500 or status in (408, 429)


def _unavailable(exc: BaseException) -> bool:
    """The server may answer when asked again: a broken connection, a timeout, 429, 5xx."""
    if isinstance(exc, ApiError):
        return _transient(exc.status_code)
    return isinstance(exc, httpx.TransportError)


def _cause(exc: BaseException) -> str:
    """What failed, in a few words: never the response's headers or body."""
    return f"HTTP {exc.status_code}" if isinstance(exc, ApiError) else type(exc).__name__


def _detail(body: object) -> str:
    """The server's short ``detail`` message, if it gave one."""
    if isinstance(body, Mapping) and isinstance(body.get("detail"), str):
        return f" ({body['detail'][:200]})"
    return ""


def _validation_errors(body: object) -> str:
    """What the server found invalid, briefly."""
    if isinstance(body, Mapping):
        body = body.get("validation_errors") or body.get("detail") or body
    return str(body)[:300]


def _trajectory_of(task: Any) -> str | None:
    data = getattr(task, "data", None)
    value = data.get(TRAJECTORY_KEY) if isinstance(data, Mapping) else None
    return value if isinstance(value, str) else None


def _keep_one(tasks: Sequence[Any]) -> tuple[Any, list[Any]]:
    """Of one trajectory's tasks, the one to keep and the unannotated ones to delete.

    Annotated tasks are never deleted (their annotations all count); otherwise the oldest
    task with a prediction, or the oldest, is kept.
    """
    annotated = [t for t in tasks if t.annotations]
    unannotated = [t for t in tasks if not t.annotations]
    if annotated:
        return min(annotated, key=lambda t: int(t.id)), unannotated
    keep = min(tasks, key=lambda t: (not t.predictions, int(t.id)))
    return keep, [t for t in tasks if t is not keep]


def _read_annotations(task: Any, emails: Mapping[int, str]) -> Iterator[Annotation]:
    trajectory_id = _trajectory_of(task)
    if trajectory_id is None:
        return
    steps = task.data.get("steps")
    for raw in task.annotations or []:
        if raw.get("was_cancelled") or raw.get("id") is None:
            continue
        try:
            values = parse_annotation(
                raw.get("result") or [], steps=steps if isinstance(steps, int) else None
            )
        except InvalidInputError as exc:
            log.warning("annotation #%s of task #%s is ignored: %s", raw["id"], task.id, exc)
            continue
        yield Annotation(
            id=int(raw["id"]),
            task_id=int(task.id),
            trajectory_id=trajectory_id,
            annotator=_annotator(raw.get("completed_by"), emails),
            updated_at=str(raw.get("updated_at") or raw.get("created_at") or ""),
            values=values,
        )


def _annotator(completed_by: object, emails: Mapping[int, str]) -> str:
    """The annotator's email: ``completed_by`` is a user id (or, in some versions, a user)."""
    if isinstance(completed_by, Mapping):
        email = completed_by.get("email")
        completed_by = email if isinstance(email, str) and email else completed_by.get("id")
    if isinstance(completed_by, int):
        return emails.get(completed_by, f"user-{completed_by}")
    return str(completed_by)


def _newer(a: Annotation, b: Annotation) -> bool:
    return (a.updated_at, a.id) > (b.updated_at, b.id)
