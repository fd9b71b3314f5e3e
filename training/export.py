"""Export a frozen dataset version in the shapes trainers read.

Two splits, written as Hugging Face ``datasets`` (``save_to_disk``) or as Parquet, with a
dataset card (``README.md``):

- ``sft``: one row per member, the trajectory as the chat the OpenAI-compatible policy
  has at inference (``messages`` with assistant tool calls and tool results, ``tools``),
  TRL's conversational shape, with ``trained``, a flag per message: the assistant turns
  the loss covers (see ``loss_masked_steps``).
- ``rl_tasks``: one row per distinct task: the full task spec (seed, initial state,
  verifier), what online RL needs to reset the sandbox and verify a rollout.

Messages and tools are ``datasets.Json`` values: each message keeps exactly its own keys
(Arrow structs would give every message every key, ``None`` where absent, which chat
templates misread), and tool-call arguments are JSON objects, as chat templates expect.

An export streams: members are loaded, turned into rows and written ``CHUNK`` at a time,
so its memory is bounded by a chunk, not by the version (hundreds of thousands of
members); the card counts the rows as they pass (``CardTally``).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import re
import shutil
import traceback
from collections import deque
from collections.abc import Container, Generator, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, get_args

import datasets
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from datasets import Features, Json, List, Value
from datasets.arrow_writer import get_parquet_column_options

from agents.policies.base import TaskView
from agents.policies.chat_format import (
    ToolSource,
    format_tools,
    opening_messages,
    task_view,
    template_messages,
    trajectory_conversation,
)
from agents.runner import DEFAULT_MAX_STEPS
from contract import (
    DatasetMember,
    DatasetVersion,
    InvalidInputError,
    Outcome,
    Split,
    Trajectory,
    canonical_json,
    content_hash,
)
from curation.attribution import erroneous_steps
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import split_of
from envs.sandbox.templates.registry import ALL_TEMPLATES
from storage import Catalog
from storage.bulk import gc_paused
from training.card import CardTally, dataset_card
from training.export_folder import CARD, export_target, staging, write_manifest

ExportFormat = Literal["hf", "parquet"]
FORMATS: tuple[str, ...] = get_args(ExportFormat)
SFT = "sft"
RL_TASKS = "rl_tasks"
RECOVERY = "recovery"
"""The outcome of a success that went through an error: a verified recovery."""
CHUNK = 4_000
"""Members loaded, turned into rows and written at a time: an export's memory grows with
the chunk (about 150 KB a member: the loaded trajectories, their rows, the catalog's
query), not with the version. Each load also costs a scan of the catalog's steps, which
grows with the catalog: fewer, larger chunks."""
SHARD_BYTES = 500_000_000
"""The size at which an ``hf`` split goes on in a new Arrow file: ``save_to_disk``'s
default ``max_shard_size``."""
_WORK = ".work"
"""The staging folder's scratch space (removed before the export is renamed into place)."""

SFT_FEATURES = Features(
    {
        "messages": List(Json()),
        "tools": List(Json()),
        "trained": List(Value("bool")),
        "weight": Value("float64"),
        "trajectory_id": Value("string"),
        "task_id": Value("string"),
        "fingerprint": Value("string"),
        "capabilities": List(Value("string")),
        "difficulty": Value("string"),
        "outcome": Value("string"),
        "decision": Value("string"),
        "human": Value("bool"),
        "masked_steps": List(Value("int32")),
        "correction": Value("string"),
        "policy": Value("string"),
    }
)
RL_FEATURES = Features(
    {
        "task_id": Value("string"),
        "fingerprint": Value("string"),
        "seed": Value("int64"),
        "task_spec": Value("string"),
        "verifier": Value("string"),
        "capabilities": List(Value("string")),
        "difficulty": Value("string"),
        "goal": Value("string"),
        "max_steps": Value("int32"),
        "prompt": List(Json()),
        "tools": List(Json()),
    }
)
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")


@dataclass(frozen=True)
class ExportReport:
    """What an export wrote, and where."""

    dataset_id: str
    format: str
    out_dir: Path
    files: tuple[str, ...]
    """Paths relative to ``out_dir``, sorted."""
    sft_rows: int
    rl_tasks: int
    assistant_turns: int
    trained_turns: int
    masked_turns: int
    corrected: int
    pushed_to: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "dataset_id": self.dataset_id,
            "format": self.format,
            "out": str(self.out_dir),
            "files": list(self.files),
            "sft_rows": self.sft_rows,
            "rl_tasks": self.rl_tasks,
            "assistant_turns": self.assistant_turns,
            "trained_turns": self.trained_turns,
            "masked_turns": self.masked_turns,
            "corrected": self.corrected,
            "pushed_to": self.pushed_to,
        }


def export_dataset(
    catalog: Catalog,
    dataset_id: str,
    out_dir: Path,
    fmt: ExportFormat = "hf",
    *,
    overwrite: bool = False,
    push_to_hub: str | None = None,
    tools: ToolSource | None = None,
    verify: bool = False,
    workers: int = 0,
) -> ExportReport:
    """Write dataset version ``dataset_id`` to ``out_dir``: ``hf/`` (a ``DatasetDict``
    with splits ``sft`` and ``rl_tasks`` as ``save_to_disk`` lays it out, for
    ``load_from_disk``) or ``parquet/sft.parquet`` and ``parquet/rl_tasks.parquet``, and
    the dataset card ``README.md``.

    The export is built in a folder beside ``out_dir`` and renamed into place: a failure
    leaves nothing half-written. ``out_dir`` is resolved first (``..``, symbolic links;
    ``export_folder``). Refused before anything is written: an unknown format
    (InvalidInputError) or dataset id (UnknownIdError), an ``out_dir`` that exists and is
    not empty (unless ``overwrite``, and then only an earlier export with nothing added),
    a member whose task is a development task, a malformed ``push_to_hub`` repository id.

    ``push_to_hub`` (a dataset repository id, ``owner/name``) uploads the finished
    export there, creating the repository as private if it does not exist; credentials
    come from the Hugging Face client's own configuration. Never the default; a failed
    upload raises and leaves the export in place.
    ``tools`` gives the tool specs the policy saw (default: the sandbox's).
    ``verify`` recomputes every member's content id from its stored rows while loading
    it (a drifted row is refused); off by default, as freezing the version and ingesting
    its trajectories checked them already, and it costs a third of the loading.
    ``workers`` processes load members and build rows, ``CHUNK`` members at a time, while
    this one writes them, in member order (0: one per CPU, at most 8): the rows and the
    card are the same as from one process. One process does it all when ``workers`` is 1,
    when the version is a single chunk (starting a worker costs seconds of imports), or
    when ``tools`` is given (a worker uses the sandbox's tools). Workers are started with
    ``spawn`` (safe in a process with threads), open the catalog read-only, and are gone
    when the export returns or raises; an exception of a worker is raised here as itself.
    """
    if fmt not in FORMATS:
        raise InvalidInputError("format", f"unknown export format {fmt!r}", FORMATS)
    if push_to_hub is not None and not _REPO_ID.match(push_to_hub):
        raise InvalidInputError(
            "push_to_hub", f"{push_to_hub!r} is not a repository id (owner/name)"
        )
    out_dir = export_target(out_dir, overwrite)
    version = catalog.get_dataset(dataset_id)
    _refuse_development(catalog, version)
    summary = catalog.dataset_summary(dataset_id)
    if workers <= 0:
        workers = min(os.cpu_count() or 1, 8)
    rows = _Rows(catalog, version, tools, verify=verify, workers=workers)
    with staging(out_dir) as folder:
        _write(folder, fmt, rows)
        card = dataset_card(version, summary, rows.tally, fmt=fmt)
        (folder / CARD).write_text(card, encoding="utf-8")
        files = write_manifest(folder, dataset_id)
    pushed = None
    if push_to_hub is not None:
        _push(out_dir, push_to_hub, dataset_id)
        pushed = push_to_hub
    tally = rows.tally
    return ExportReport(
        dataset_id=dataset_id,
        format=fmt,
        out_dir=out_dir,
        files=files,
        sft_rows=tally.sft_rows,
        rl_tasks=tally.rl_tasks,
        assistant_turns=tally.assistant_turns,
        trained_turns=tally.trained_turns,
        masked_turns=tally.masked_turns,
        corrected=tally.corrected,
        pushed_to=pushed,
    )


def loss_masked_steps(trajectory: Trajectory, member: DatasetMember) -> tuple[int, ...]:
    """The steps whose assistant turns the SFT loss skips.

    When a person decided the item, their marks (``member.masked_steps``) are the
    authority: the labeling view pre-selected the curator's marks and the person kept,
    added or removed them. Otherwise the curator's marks apply: steps with an execution
    error in their feedback or an injected fault (``erroneous_steps``). Either way the
    feedback of a masked step stays in the context, and the turns after it, the verified
    recovery, stay supervised.
    """
    marks = set(member.masked_steps)
    if not member.human:
        marks |= set(erroneous_steps(trajectory.steps))
    return tuple(sorted(marks))


def outcome_of(trajectory: Trajectory) -> str:
    """``success``, ``recovery`` (a success that went through an error), or the outcome."""
    meta = trajectory.metadata
    if meta.outcome is Outcome.SUCCESS and meta.recovered:
        return RECOVERY
    return meta.outcome.value


# -- rows --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Chunk:
    """The rows of a chunk of members, as Arrow tables: every member's ``sft`` row, and an
    ``rl_tasks`` row for each task no earlier chunk had, sorted by task id."""

    sft: pa.Table
    rl: pa.Table


@dataclass(frozen=True)
class _Built:
    """A chunk as ``_Builder`` makes it, wherever it runs: the ``sft`` rows, an ``rl_tasks``
    row for each task the chunk has first (sorted by task id; a worker does not know what
    earlier chunks had), and what the card counts of each ``sft`` row, in member order."""

    sft: pa.Table
    rl: pa.Table
    counted: list[tuple[dict[str, Any], list[bool]]]
    """Per ``sft`` row: its fields ``CardTally.add`` reads, and its assistant flags."""


_COUNTED: tuple[str, ...] = ("capabilities", "difficulty", "outcome", "decision", "human")
_COUNTED += ("weight", "masked_steps", "correction")
"""The fields of an ``sft`` row that ``CardTally.add`` reads."""


class _Rows:
    """The version's rows, chunk by chunk in member order, counted for the card (``tally``):
    built here, or by ``workers`` processes when there are several chunks and the tools
    are the sandbox's (``tools`` None)."""

    def __init__(
        self,
        catalog: Catalog,
        version: DatasetVersion,
        tools: ToolSource | None,
        *,
        verify: bool,
        workers: int,
    ) -> None:
        self.catalog = catalog
        self.version = version
        self.tools = tools
        self.verify = verify
        self.workers = workers
        self.tally = CardTally()
        self._seen: set[str] = set()

    def chunks(self) -> Generator[_Chunk]:
        """The rows of the version's members, ``CHUNK`` members at a time, in member order."""
        members = self.version.members
        parts = [members[start : start + CHUNK] for start in range(0, len(members), CHUNK)]
        workers = min(self.workers, len(parts))
        if workers <= 1 or self.tools is not None:
            builder = _Builder(self.catalog, self.tools or MobileSandbox(), verify=self.verify)
            for part in parts:
                yield self._accept(builder.build(part, skip=self._seen))
            return
        path, wait_s = str(self.catalog.path), self.catalog.lock_wait_s
        context = multiprocessing.get_context("spawn")  # the caller may have threads
        executor = ProcessPoolExecutor(workers, mp_context=context)
        try:
            queue = iter(parts)
            pending: deque[Future[_Built | _Raised]] = deque()

            def submit() -> None:
                part = next(queue, None)
                if part is not None:
                    pending.append(
                        executor.submit(_build_in_worker, path, wait_s, part, self.verify)
                    )

            for _ in range(2 * workers):  # two chunks a worker in flight: memory stays bounded
                submit()
            while pending:
                built = pending.popleft().result()
                submit()
                if isinstance(built, _Raised):
                    raise built.exception()
                yield self._accept(built)
        finally:
            executor.shutdown(wait=True, cancel_futures=True)

    def _accept(self, built: _Built) -> _Chunk:
        """``built``, counted, less the ``rl_tasks`` rows of tasks earlier chunks had."""
        for row, assistant in built.counted:
            self.tally.add(row, assistant)
        rl = built.rl
        ids = rl.column("task_id").to_pylist()
        new = [task_id not in self._seen for task_id in ids]
        if not all(new):
            rl = rl.filter(pa.array(new, pa.bool_()))
        self._seen.update(ids)
        self.tally.rl_tasks += sum(new)
        return _Chunk(built.sft, rl)


class _Builder:
    """Turns members into rows, a chunk at a time (``build``).

    What repeats across rows is computed once: the step budget of each round, and the
    JSON text of each function offered (``tools``: a task's candidate tools, then the
    sub-agents and harness functions every task offers).
    """

    def __init__(self, catalog: Catalog, tools: ToolSource, *, verify: bool) -> None:
        self.catalog = catalog
        self.source = tools
        self.verify = verify
        self._budgets: dict[str | None, int] = {}
        self._tool_texts: dict[str, str] = {}
        self._common: list[str] | None = None

    def build(self, part: Sequence[DatasetMember], *, skip: Container[str]) -> _Built:
        """The rows of the members ``part``: ``rl_tasks`` rows for the tasks not in
        ``skip``, each from the first member that has it."""
        with gc_paused():
            trajectories, specs = self.catalog.trajectories_with_specs(
                [m.trajectory_id for m in part], verify_ids=self.verify
            )
            sft: list[dict[str, Any]] = []
            rl: dict[str, dict[str, Any]] = {}
            counted: list[tuple[dict[str, Any], list[bool]]] = []
            for member, trajectory in zip(part, trajectories, strict=True):
                row, assistant = self._sft_row(member, trajectory, rl, skip, specs)
                sft.append(row)
                counted.append(({name: row[name] for name in _COUNTED}, assistant))
            del trajectories
            ordered = [rl[task_id] for task_id in sorted(rl)]
            return _Built(_table(sft, SFT_FEATURES), _table(ordered, RL_FEATURES), counted)

    def _sft_row(
        self,
        member: DatasetMember,
        trajectory: Trajectory,
        rl: dict[str, dict[str, Any]],
        skip: Container[str],
        specs: Mapping[str, str],
    ) -> tuple[dict[str, Any], list[bool]]:
        """``trajectory``'s ``sft`` row and its assistant messages' ``trained`` flags; its
        task's ``rl_tasks`` row goes into ``rl`` the first time the task comes, unless
        ``skip`` has it, with the spec as the catalog stores it (``specs``: canonical JSON,
        what ``to_json`` writes)."""
        task = trajectory.task
        max_steps = self._budget(trajectory)
        view = task_view(task, self.source, max_steps)
        masked = loss_masked_steps(trajectory, member)
        conversation = trajectory_conversation(
            trajectory, view, masked_steps=masked, correction=member.correction
        )
        policy = trajectory.metadata.policy
        capabilities = [c.value for c in task.capabilities]
        messages = conversation.messages
        row = {
            "messages": _json_texts(template_messages(messages)),
            "tools": self._tools(view),
            "trained": conversation.trained,
            "weight": member.weight,
            "trajectory_id": trajectory.id,
            "task_id": task.id,
            "fingerprint": task.fingerprint,
            "capabilities": capabilities,
            "difficulty": task.difficulty.value,
            "outcome": outcome_of(trajectory),
            "decision": member.decision.value,
            "human": member.human,
            "masked_steps": list(masked),
            "correction": member.correction,
            "policy": f"{policy.name}@{policy.version}",
        }
        assistant = [
            flag
            for message, flag in zip(messages, conversation.trained, strict=True)
            if message["role"] == "assistant"
        ]
        if task.id not in rl and task.id not in skip:
            stored = specs.get(task.id) or task.to_json().decode()
            rl[task.id] = {
                "task_id": task.id,
                "fingerprint": task.fingerprint,
                "seed": task.initial_conditions.seed,
                "task_spec": stored,
                "verifier": canonical_json(orjson.loads(stored)["verifier"]).decode(),
                "capabilities": capabilities,
                "difficulty": row["difficulty"],
                "goal": task.goal,
                "max_steps": max_steps,
                "prompt": _json_texts(opening_messages(view)),
                "tools": row["tools"],
            }
        return row, assistant

    def _tools(self, view: TaskView) -> list[str]:
        """``format_tools(view)`` as JSON texts, each function serialized once per export:
        the task's app tools (by name), then the sub-agents and harness functions, which
        are the same for every task."""
        texts = self._tool_texts
        if self._common is None:
            common = TaskView(goal="", tools=(), subagents=view.subagents, max_steps=0)
            self._common = _json_texts(format_tools(common))
        app = []
        for spec in view.tools:
            text = texts.get(spec.name)
            if text is None:
                text = texts[spec.name] = orjson.dumps(spec.openai_tool()).decode()
            app.append(text)
        return app + self._common

    def _budget(self, trajectory: Trajectory) -> int:
        """The step budget ``trajectory`` ran under, as its system prompt states it: the
        one it records; for a trajectory stored before budgets were recorded, its task's,
        else its round's ``max_steps``, else the runner's default."""
        if trajectory.metadata.max_steps is not None:
            return trajectory.metadata.max_steps
        if trajectory.task.max_steps is not None:
            return trajectory.task.max_steps
        round_id = trajectory.metadata.round
        budget = self._budgets.get(round_id)
        if budget is None:
            info = self.catalog.get_round(round_id) if round_id is not None else None
            found = info.config.get("max_steps") if info is not None else None
            budget = found if isinstance(found, int) else DEFAULT_MAX_STEPS
            self._budgets[round_id] = budget
        return budget


# -- worker processes --------------------------------------------------------------------

_worker_builders: dict[tuple[str, bool], _Builder] = {}
"""A worker process's builder, made by its first chunk (a pool lives for one export)."""


@dataclass(frozen=True)
class _Raised:
    """An exception raised in a worker, carried back whole: its type, arguments and
    attributes (an exception whose constructor takes other arguments than ``args``, as
    ``UnknownIdError``'s does, does not survive pickling as itself)."""

    kind: type[BaseException]
    args: tuple[Any, ...]
    state: dict[str, Any]
    trace: str

    def exception(self) -> BaseException:
        exc = self.kind.__new__(self.kind, *self.args)
        exc.args = self.args
        exc.__dict__.update(self.state)
        exc.add_note(f"raised in an export worker process:\n{self.trace}")
        return exc


def _build_in_worker(
    path: str, lock_wait_s: float, part: Sequence[DatasetMember], verify: bool
) -> _Built | _Raised:
    """The rows of the members ``part``, built in a worker process from the catalog at
    ``path`` opened read-only, with the sandbox's tools; an exception comes back as a
    ``_Raised``, for the parent to raise."""
    try:
        builder = _worker_builders.get((path, verify))
        if builder is None:
            catalog = Catalog.open(Path(path), read_only=True, lock_wait_s=lock_wait_s)
            builder = _worker_builders[path, verify] = _Builder(
                catalog, MobileSandbox(), verify=verify
            )
        return builder.build(part, skip=())
    except Exception as exc:
        raised = _Raised(type(exc), exc.args, dict(vars(exc)), traceback.format_exc())
        try:
            pickle.dumps(raised)
        except Exception:
            message = f"{type(exc).__name__}: {exc}"
            raised = _Raised(RuntimeError, (message,), {}, raised.trace)
        return raised


def _json_texts(values: Iterable[Any]) -> list[str]:
    """Each value as JSON text: what a ``datasets.Json`` column holds."""
    return [orjson.dumps(value).decode() for value in values]


def _table(rows: Sequence[dict[str, Any]], features: Features) -> pa.Table:
    """``rows`` as an Arrow table with ``features``' schema, built column by column (JSON
    values come serialized: a list of JSON texts per row)."""
    schema = features.arrow_schema
    columns = []
    for name, feature in features.items():
        values = [row[name] for row in rows]
        if isinstance(feature, List) and isinstance(feature.feature, Json):
            columns.append(pa.array(values, pa.list_(pa.string())).cast(schema.field(name).type))
        else:
            columns.append(pa.array(values, schema.field(name).type))
    return pa.Table.from_arrays(columns, schema=schema)


def _refuse_development(catalog: Catalog, version: DatasetVersion) -> None:
    """Freezing refuses development tasks already; an export checks again, before it
    writes anything, by split, by the catalog's development fingerprints, and by the
    template's own hold-out rule. It reads the member tasks' columns in the catalog, not
    the trajectories."""
    development = catalog.fingerprints(Split.DEV)
    templates = {t.name: t for t in ALL_TEMPLATES}
    found = []
    ids = [m.trajectory_id for m in version.members]
    for trajectory_id, (task_id, split, fingerprint, template_name) in zip(
        ids, catalog.member_tasks(ids), strict=True
    ):
        template = templates.get(template_name or "")
        if (
            split == Split.DEV.value
            or fingerprint in development
            or (template is not None and split_of(template, fingerprint) is Split.DEV)
        ):
            found.append(f"{trajectory_id} (task {task_id})")
    if found:
        raise InvalidInputError(
            "members",
            f"{version.id} holds {len(found)} trajectories of development tasks, which are "
            f"never trained on: {', '.join(found[:5])}",
        )


# -- writing -----------------------------------------------------------------------------


def _write(folder: Path, fmt: ExportFormat, rows: _Rows) -> None:
    """Write the rows as ``fmt`` into ``folder``, a chunk at a time, each split straight
    into its final files. ``rl_tasks`` rows come in member order: they wait in a scratch
    file until the last chunk, and are then written sorted by task id."""
    work = folder / _WORK
    work.mkdir()
    scratch = work / f"{RL_TASKS}.arrow"
    with quiet_datasets(), ExitStack() as stack:
        sft, rl = _sinks(stack, folder, fmt, rows.version)
        with _arrow_stream(scratch, RL_FEATURES) as unsorted:
            for chunk in stack.enter_context(closing(rows.chunks())):
                sft.write_table(chunk.sft)
                unsorted.write_table(chunk.rl)
        for part in _by_task_id(scratch):
            rl.write_table(part)
    shutil.rmtree(work)


def _sinks(
    stack: ExitStack, folder: Path, fmt: ExportFormat, version: DatasetVersion
) -> tuple[_Sink, _Sink]:
    """The writers of the ``sft`` and ``rl_tasks`` splits, closed by ``stack``."""
    if fmt == "parquet":
        (folder / "parquet").mkdir()
        return (
            stack.enter_context(_parquet(folder / "parquet" / f"{SFT}.parquet", SFT_FEATURES)),
            stack.enter_context(_parquet(folder / "parquet" / f"{RL_TASKS}.parquet", RL_FEATURES)),
        )
    saved = folder / "hf"
    saved.mkdir()
    (saved / "dataset_dict.json").write_text(json.dumps({"splits": [SFT, RL_TASKS]}))
    return (
        stack.enter_context(_saved_split(saved / SFT, SFT_FEATURES, _fingerprint(version, SFT))),
        stack.enter_context(
            _saved_split(saved / RL_TASKS, RL_FEATURES, _fingerprint(version, RL_TASKS))
        ),
    )


class _Sink(Protocol):
    """Where a split's rows go, a table at a time."""

    def write_table(self, table: pa.Table) -> None: ...


@contextmanager
def _arrow_stream(path: Path, features: Features) -> Iterator[pa.ipc.RecordBatchStreamWriter]:
    """An Arrow stream file with ``features``' schema: what ``save_to_disk`` writes and
    ``Dataset.from_file`` reads."""
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, features.arrow_schema) as w:
        yield w


class _SplitShards:
    """Arrow stream files of about ``SHARD_BYTES``, opened as rows come."""

    def __init__(self, folder: Path, features: Features) -> None:
        self.folder = folder
        self.schema = features.arrow_schema
        self.paths: list[Path] = []
        self._file: pa.OSFile | None = None
        self._writer: pa.ipc.RecordBatchStreamWriter | None = None
        self._bytes = 0

    def write_table(self, table: pa.Table) -> None:
        if self._writer is None or self._bytes >= SHARD_BYTES:
            self._next()
        assert self._writer is not None
        self._writer.write_table(table)
        self._bytes += table.nbytes

    def _next(self) -> None:
        self.close()
        path = self.folder / f"shard-{len(self.paths):05d}.arrow"
        self.paths.append(path)
        self._file = pa.OSFile(str(path), "wb")
        self._writer = pa.ipc.new_stream(self._file, self.schema)
        self._bytes = 0

    def close(self) -> None:
        if self._writer is not None and self._file is not None:
            self._writer.close()
            self._file.close()
        self._writer = self._file = None


@contextmanager
def _saved_split(folder: Path, features: Features, fingerprint: str) -> Iterator[_SplitShards]:
    """One split of a ``DatasetDict.save_to_disk`` folder, written as its rows come: the
    Arrow files ``data-00000-of-00002.arrow`` ..., and ``dataset_info.json`` (the features)
    and ``state.json`` (the files, the fingerprint) as ``Dataset.save_to_disk`` writes
    them, which ``load_from_disk`` reads (``datasets`` 5)."""
    folder.mkdir()
    shards = _SplitShards(folder, features)
    try:
        yield shards
        if not shards.paths:  # no rows: one file with the schema alone
            shards.write_table(features.arrow_schema.empty_table())
    finally:
        shards.close()
    count = len(shards.paths)
    names = [f"data-{i:05d}-of-{count:05d}.arrow" for i in range(count)]
    for path, name in zip(shards.paths, names, strict=True):
        path.rename(folder / name)
    state: dict[str, Any] = {
        "_data_files": [{"filename": name} for name in names],
        "_fingerprint": fingerprint,
        "_format_columns": None,
        "_format_kwargs": {},
        "_format_type": None,
        "_output_all_columns": False,
        "_split": None,
    }
    (folder / "state.json").write_text(json.dumps(state, indent=2, sort_keys=True))
    info = {"citation": "", "description": "", "features": features.to_dict()}
    info |= {"homepage": "", "license": ""}
    (folder / "dataset_info.json").write_text(json.dumps(info, indent=2))


def _fingerprint(version: DatasetVersion, split: str) -> str:
    """The ``datasets`` fingerprint of a split: the same version gives the same rows, and
    the same fingerprint (16 hex digits, as ``datasets`` makes them)."""
    return content_hash({"dataset": version.id, "split": split}, 16)


@contextmanager
def _parquet(path: Path, features: Features) -> Iterator[pq.ParquetWriter]:
    """A Parquet file written as ``Dataset.to_parquet`` writes one: the features in the
    schema's metadata (``load_dataset`` restores the JSON columns from them), and the same
    per-column options, page index and content-defined chunking."""
    schema = features.arrow_schema
    cdc = datasets.config.DEFAULT_CDC_OPTIONS
    writer = pq.ParquetWriter(
        str(path),
        schema=schema,
        use_content_defined_chunking=cdc,
        write_page_index=True,
        **get_parquet_column_options(features, schema),
    )
    try:
        yield writer
        writer.add_key_value_metadata({"content_defined_chunking": json.dumps(cdc)})
    finally:
        writer.close()


def _by_task_id(path: Path) -> Iterator[pa.Table]:
    """The rows of the Arrow stream file ``path``, whose record batches are each sorted
    by ``task_id`` (ids unique across batches), merged into ``task_id`` order, ``CHUNK``
    rows at a time.

    A part's rows from one batch are a contiguous slice of it: a part reads each batch's
    pages in order and once, never the whole file (a take over all the batches would
    first concatenate them in memory). The file is mapped afresh for each part, so the
    pages a part touched are unmapped once it is copied out.
    """
    with pa.memory_map(str(path)) as source:
        table = pa.ipc.open_stream(source).read_all()
        order = pc.sort_indices(table.column("task_id")).to_numpy().astype(np.int64)
        starts = np.cumsum([0, *(len(batch) for batch in table.to_batches())])
        del table
    for start in range(0, len(order), CHUNK):
        rows = order[start : start + CHUNK]
        batch_of = np.searchsorted(starts, rows, side="right") - 1
        with pa.memory_map(str(path)) as source:
            batches = pa.ipc.open_stream(source).read_all().to_batches()
            pieces = []
            for b in np.unique(batch_of):
                local = rows[batch_of == b] - starts[b]
                assert local[-1] - local[0] == len(local) - 1, "a batch was not sorted"
                pieces.append(batches[b].slice(local[0], len(local)))
            part = pa.Table.from_batches(pieces, batches[0].schema).combine_chunks()
            del batches, pieces
        # the part holds the rows batch by batch; put them back in task id order
        yield part.take(pa.array(np.argsort(np.argsort(batch_of, kind="stable"))))


@contextmanager
def quiet_datasets() -> Iterator[None]:
    """No progress bars from ``datasets`` inside the block (a CLI or a flow reports its
    own progress)."""
    enabled = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if enabled:
            datasets.enable_progress_bars()


def _push(out_dir: Path, repo_id: str, dataset_id: str) -> None:
    """Upload the export (card included) to the dataset repository ``repo_id``."""
    from huggingface_hub import HfApi

    api = HfApi()
    api.create_repo(repo_id, repo_type="dataset", private=True, exist_ok=True)
    api.upload_folder(
        repo_id=repo_id,
        folder_path=out_dir,
        repo_type="dataset",
        commit_message=f"Export of flywheel dataset {dataset_id}",
    )
