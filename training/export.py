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

An export streams: members are read, turned into rows and written ``CHUNK`` at a time,
so its memory is bounded by a chunk, not by the version (hundreds of thousands of
members); the card counts the rows as they pass (``CardTally``). Rows are built from the
catalog's columns (``TrajectoryStore.export_columns``: actions and feedback as stored JSON, each
task's spec once), not from rebuilt ``Trajectory`` records; the chat is the one a record
gives (``ChatStep``: both paths meet in ``conversation``), and each set of candidate tools
is rendered once.
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
from collections.abc import Callable, Container, Generator, Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple, Protocol, get_args

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
    OPENAI_POLICY,
    ChatStep,
    conversation,
    format_tools,
    opening_messages,
    template_messages,
)
from agents.runner import DEFAULT_MAX_STEPS
from contract import (
    DatasetVersion,
    InvalidInputError,
    Outcome,
    Split,
    ToolSpec,
    canonical_json,
    content_hash,
)
from envs.backends import ToolSource, arriving_specs, tool_source
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
CHUNK = 10_000
"""Members read, turned into rows and written at a time: an export's memory grows with
the chunk (a 10,000-member chunk of a 200,000-trajectory catalog peaked at 1.5 GB in one
process, imports included), not with the version. Each read also costs a scan of the
catalog's steps, which grows with the catalog: fewer, larger chunks (at 200,000
trajectories, 4,000-member chunks made the export 20% slower)."""
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
    tools: ToolSources | None = None,
    verify: bool = False,
    workers: int = 0,
    chunk: int | None = None,
    spread: ChunkSpread | None = None,
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
    ``tools`` gives the tool specs the policy saw, by the backend a task names (default:
    ``envs.backends.tool_source``).
    ``verify`` recomputes every member's content id from its stored rows while loading
    it (a drifted row is refused); off by default, as freezing the version and ingesting
    its trajectories checked them already, and it costs a third of the loading.
    ``workers`` processes read members and build rows, ``chunk`` members at a time
    (default ``CHUNK``), while
    this one writes them, in member order (0: one per CPU, at most 8): the rows and the
    card are the same as from one process. A worker is sent a range of member positions
    and hands its rows back as Arrow files in the staging folder (no rows are pickled).
    ``spread`` runs the chunks elsewhere instead (``flows.execution.export_spread``: as
    tasks of a Ray cluster, which must see the catalog and the staging folder at the same
    paths). One process does it all when neither spreads (``workers`` 1), when the
    version is a single chunk (starting a worker costs seconds of imports), or when
    ``tools`` is given (a worker uses the sandbox's tools). Workers are started with
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
    if workers <= 0:
        workers = min(os.cpu_count() or 1, 8)
    chunk = CHUNK if chunk is None else chunk
    if chunk < 1:
        raise InvalidInputError("chunk", f"{chunk} is not a positive number of members")
    with gc_paused():  # the version's members and the card's tally: many small objects
        version = catalog.datasets.get(dataset_id)
        _refuse_development(catalog, version)
        summary = catalog.datasets.describe(dataset_id)
        rows = _Rows(
            catalog, version, tools, verify=verify, workers=workers, chunk=chunk, spread=spread
        )
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


def loss_masked_steps(
    marks: Iterable[int], human: bool, erroneous: Iterable[int]
) -> tuple[int, ...]:
    """The steps whose assistant turns the SFT loss skips, of a member whose marks are
    ``marks`` (``DatasetMember.masked_steps``) and that a person decided or not (``human``).

    When a person decided the item, their marks are the
    authority: the labeling view pre-selected the curator's marks and the person kept,
    added or removed them. Otherwise the curator's marks apply: ``erroneous``, the steps
    with an execution error in their feedback or an injected fault (``erroneous_steps``).
    Either way the feedback of a masked step stays in the context, and the turns after
    it, the verified recovery, stay supervised.
    """
    masked = set(marks)
    if not human:
        masked.update(erroneous)
    return tuple(sorted(masked))


def outcome_label(outcome: str, recovered: bool) -> str:
    """``success``, ``recovery`` (a success that went through an error), or ``outcome``."""
    return RECOVERY if outcome == Outcome.SUCCESS.value and recovered else outcome


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
    built here, or by workers (``spread``, else ``workers`` processes) when there are
    several chunks and the tools are the sandbox's (``tools`` None)."""

    def __init__(
        self,
        catalog: Catalog,
        version: DatasetVersion,
        tools: ToolSources | None,
        *,
        verify: bool,
        workers: int,
        chunk: int,
        spread: ChunkSpread | None,
    ) -> None:
        self.catalog = catalog
        self.version = version
        self.tools = tools
        self.verify = verify
        self.workers = workers
        self.chunk = chunk
        self.spread = spread
        self.tally = CardTally()
        self._seen: set[str] = set()

    def chunks(self, scratch: Path) -> Generator[_Chunk]:
        """The rows of the version's members, ``chunk`` members at a time, in member
        order. A worker reads its range of members from the catalog and writes its rows to
        Arrow files in ``scratch``, which this process maps, passes on, and deletes."""
        size = len(self.version.members)
        ranges = [(start, min(start + self.chunk, size)) for start in range(0, size, self.chunk)]
        spread = self.spread
        if spread is None and min(self.workers, len(ranges)) > 1:
            spread = process_spread(min(self.workers, len(ranges)))
        if spread is None or len(ranges) <= 1 or self.tools is not None:
            builder = _Builder(self.catalog, self.tools or tool_source, verify=self.verify)
            for start, stop in ranges:
                yield self._accept(builder.build(self.version.id, start, stop, skip=self._seen))
            return
        job = ChunkJob(
            catalog=str(self.catalog.path),
            lock_wait_s=self.catalog.lock_wait_s,
            dataset_id=self.version.id,
            verify=self.verify,
            scratch=str(scratch),
        )
        with closing(spread(job, ranges)) as results:
            for result in results:
                if isinstance(result, _Raised):
                    raise result.exception()
                with result.mapped() as built:
                    yield self._accept(built)

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


@dataclass(frozen=True, slots=True)
class _Task:
    """What the rows say of a task, read once a chunk from its stored spec."""

    spec: str
    """The spec as the catalog stores it (canonical JSON, what ``to_json`` writes)."""
    goal: str
    follow_ups: tuple[str, ...]
    tools: tuple[str, ...]
    arriving_tools: tuple[tuple[str, ...], ...]
    backend: str
    fingerprint: str
    capabilities: list[str]
    difficulty: str
    seed: int
    max_steps: int | None
    verifier: str

    @classmethod
    def of(cls, spec: str) -> _Task:
        parsed = orjson.loads(spec)
        return cls(
            spec=spec,
            goal=parsed["goal"],
            follow_ups=tuple(parsed.get("follow_ups", ())),
            tools=tuple(parsed["tools"]),
            arriving_tools=tuple(tuple(names) for names in parsed.get("arriving_tools", ())),
            backend=parsed["initial_conditions"].get("backend", "sandbox"),
            fingerprint=parsed["fingerprint"],
            capabilities=parsed["capabilities"],
            difficulty=parsed["difficulty"],
            seed=parsed["initial_conditions"]["seed"],
            max_steps=parsed["max_steps"],
            verifier=canonical_json(parsed["verifier"]).decode(),
        )


class _Block(NamedTuple):
    """A task's offered tools: their specs, its backend's sub-agents, the rendered block."""

    specs: tuple[ToolSpec, ...]
    subagents: tuple[ToolSpec, ...]
    rendered: list[str]


ToolSources = Callable[[str], ToolSource]
"""The tool source of a backend, by the name a task's initial conditions give."""


class _Member(NamedTuple):
    """A member as its row says it: the decision on it and its trajectory's columns."""

    trajectory_id: str
    task_id: str
    weight: float
    decision: str
    human: bool
    masked_steps: list[int]
    correction: str | None
    round_id: str | None
    policy: str
    policy_version: str
    outcome: str
    recovered: bool
    max_steps: int | None


_MEMBER = _Member._fields
"""The columns of ``ExportColumns.members`` a ``_Member`` is made of, in its order."""


class _Builder:
    """Turns members into rows, a chunk at a time (``build``), from the catalog's columns
    (``TrajectoryStore.export_columns``): no trajectory record is rebuilt.

    What repeats across rows is computed once: the step budget of each round, and the
    rendered tool block of each set of candidate tools (JSON texts: the task's tools,
    then the sub-agents and harness functions every task offers).
    """

    def __init__(self, catalog: Catalog, tools: ToolSources, *, verify: bool) -> None:
        self.catalog = catalog
        self.sources = tools
        self.verify = verify
        self._budgets: dict[str | None, int] = {}
        self._blocks: dict[tuple[str, tuple[str, ...]], _Block] = {}

    def build(self, dataset_id: str, start: int, stop: int, *, skip: Container[str]) -> _Built:
        """The rows of the members of ``dataset_id`` at positions ``[start, stop)``:
        ``rl_tasks`` rows for the tasks not in ``skip``, each from the first member that
        has it."""
        with gc_paused():
            columns = self.catalog.trajectories.export_columns(dataset_id, start, stop)
            members = columns.members
            if self.verify:  # recompute each content id from the stored rows
                ids = members.column("trajectory_id").to_pylist()
                self.catalog.trajectories.by_ids(ids, verify_ids=True)
            tasks = {task_id: _Task.of(spec) for task_id, spec in columns.specs.items()}
            steps = _chat_steps(columns.steps)
            sft: list[dict[str, Any]] = []
            rl: dict[str, dict[str, Any]] = {}
            counted: list[tuple[dict[str, Any], list[bool]]] = []
            for values in zip(*(members.column(n).to_pylist() for n in _MEMBER), strict=True):
                member = _Member(*values)
                chat, erroneous = steps.get(member.trajectory_id, ([], []))
                task = tasks[member.task_id]
                row, assistant = self._sft_row(member, chat, erroneous, task, rl, skip)
                sft.append(row)
                counted.append(({name: row[name] for name in _COUNTED}, assistant))
            del steps, columns
            ordered = [rl[task_id] for task_id in sorted(rl)]
            return _Built(_table(sft, SFT_FEATURES), _table(ordered, RL_FEATURES), counted)

    def _sft_row(
        self,
        member: _Member,
        steps: Sequence[ChatStep],
        erroneous: Iterable[int],
        task: _Task,
        rl: dict[str, dict[str, Any]],
        skip: Container[str],
    ) -> tuple[dict[str, Any], list[bool]]:
        """The member's ``sft`` row and its assistant messages' ``trained`` flags; its
        task's ``rl_tasks`` row goes into ``rl`` the first time the task comes, unless
        ``skip`` has it."""
        max_steps = self._budget(member, task)
        block = self._block(task.backend, task.tools)
        tools = block.rendered
        view = TaskView(
            goal=task.goal,
            tools=block.specs,
            subagents=block.subagents,
            max_steps=max_steps,
            follow_ups=task.follow_ups,
            arriving=arriving_specs(task.arriving_tools, self.sources(task.backend)),
        )
        masked = loss_masked_steps(member.masked_steps, member.human, erroneous)
        chat = conversation(
            steps,
            view,
            recorded=member.policy == OPENAI_POLICY,
            masked_steps=masked,
            correction=member.correction,
        )
        messages = chat.messages
        row = {
            "messages": _json_texts(template_messages(messages)),
            "tools": tools,
            "trained": chat.trained,
            "weight": member.weight,
            "trajectory_id": member.trajectory_id,
            "task_id": member.task_id,
            "fingerprint": task.fingerprint,
            "capabilities": task.capabilities,
            "difficulty": task.difficulty,
            "outcome": outcome_label(member.outcome, member.recovered),
            "decision": member.decision,
            "human": member.human,
            "masked_steps": list(masked),
            "correction": member.correction,
            "policy": f"{member.policy}@{member.policy_version}",
        }
        assistant = [
            flag
            for message, flag in zip(messages, chat.trained, strict=True)
            if message["role"] == "assistant"
        ]
        if member.task_id not in rl and member.task_id not in skip:
            rl[member.task_id] = {
                "task_id": member.task_id,
                "fingerprint": task.fingerprint,
                "seed": task.seed,
                "task_spec": task.spec,
                "verifier": task.verifier,
                "capabilities": task.capabilities,
                "difficulty": task.difficulty,
                "goal": task.goal,
                "max_steps": max_steps,
                "prompt": _json_texts(opening_messages(view)),
                "tools": tools,
            }
        return row, assistant

    def _block(self, backend: str, names: tuple[str, ...]) -> _Block:
        """The specs of a task's candidate tools and its backend's sub-agents, and the
        tool block offered with them (``format_tools`` as JSON texts), rendered once per
        backend and set of tools."""
        block = self._blocks.get((backend, names))
        if block is None:
            source = self.sources(backend)
            specs = tuple(source.tool_spec(name) for name in names)
            subagents = source.subagent_specs()
            view = TaskView(goal="", tools=specs, subagents=subagents, max_steps=0)
            block = _Block(specs, subagents, _json_texts(format_tools(view)))
            self._blocks[backend, names] = block
        return block

    def _budget(self, member: _Member, task: _Task) -> int:
        """The step budget the member's episode ran under, as its system prompt states
        it: the one it records; for a trajectory stored before budgets were recorded, its
        task's, else its round's ``max_steps``, else the runner's default."""
        if member.max_steps is not None:
            return member.max_steps
        if task.max_steps is not None:
            return task.max_steps
        round_id = member.round_id
        budget = self._budgets.get(round_id)
        if budget is None:
            info = self.catalog.rounds.get(round_id) if round_id is not None else None
            found = info.config.get("max_steps") if info is not None else None
            budget = found if isinstance(found, int) else DEFAULT_MAX_STEPS
            self._budgets[round_id] = budget
        return budget


def _chat_steps(steps: pa.Table) -> dict[str, tuple[list[ChatStep], list[int]]]:
    """Per trajectory id: its steps read from the stored JSON (``steps``, the columns of
    ``ExportColumns.steps``), and the curator's marks (``erroneous_steps``: the steps with
    an error or an injected fault)."""
    found: dict[str, tuple[list[ChatStep], list[int]]] = {}
    for trajectory_id, index, action, output, feedback, fault in zip(
        *(steps.column(name).to_pylist() for name in _STEP_COLUMNS), strict=True
    ):
        chat, erroneous = found.setdefault(trajectory_id, ([], []))
        step = ChatStep.from_json(index, action, output, feedback)
        chat.append(step)
        if step.error_kind is not None or fault is not None:
            erroneous.append(index)
    return found


_STEP_COLUMNS = ("trajectory_id", "idx", "action", "model_output", "feedback", "injected_fault")


# -- worker processes --------------------------------------------------------------------


@dataclass(frozen=True)
class ChunkJob:
    """What a worker needs to build a chunk besides its range: where the catalog is,
    which version, and where to write the rows."""

    catalog: str
    lock_wait_s: float
    dataset_id: str
    verify: bool
    scratch: str


@dataclass(frozen=True)
class _Spilled:
    """A chunk a worker built, its tables written as Arrow stream files (``sft``, ``rl``)
    in the export's scratch folder: only their paths and the card's counts come back."""

    sft: Path
    rl: Path
    counted: list[tuple[dict[str, Any], list[bool]]]

    @contextmanager
    def mapped(self) -> Iterator[_Built]:
        """The chunk, its tables mapped from the files, which are deleted afterwards."""
        try:
            yield _Built(_mapped(self.sft), _mapped(self.rl), self.counted)
        finally:
            self.sft.unlink()
            self.rl.unlink()


def _mapped(path: Path) -> pa.Table:
    with pa.memory_map(str(path)) as source:
        return pa.ipc.open_stream(source).read_all()


_worker_builders: dict[ChunkJob, _Builder] = {}
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


ChunkResult = _Spilled | _Raised
"""What building a chunk gives back: its files, or the exception it raised."""
ChunkSpread = Callable[[ChunkJob, Sequence[tuple[int, int]]], Generator[ChunkResult]]
"""Runs ``build_chunk`` for each member range somewhere and yields the results in range
order: the export's own worker processes (``process_spread``), or tasks of a cluster."""


def process_spread(workers: int) -> ChunkSpread:
    """Chunks built by ``workers`` processes of this machine, two a worker in flight (the
    memory stays bounded), started with ``spawn`` (safe in a process with threads) and
    gone when the results are read or closed."""

    def spread(job: ChunkJob, ranges: Sequence[tuple[int, int]]) -> Generator[ChunkResult]:
        context = multiprocessing.get_context("spawn")
        executor = ProcessPoolExecutor(workers, mp_context=context)
        try:
            queue = iter(ranges)
            pending: deque[Future[ChunkResult]] = deque()

            def submit() -> None:
                bounds = next(queue, None)
                if bounds is not None:
                    pending.append(executor.submit(build_chunk, job, *bounds))

            for _ in range(2 * workers):
                submit()
            while pending:
                result = pending.popleft().result()
                submit()
                yield result
        finally:
            executor.shutdown(wait=True, cancel_futures=True)

    return spread


def build_chunk(job: ChunkJob, start: int, stop: int) -> ChunkResult:
    """The rows of the members at positions ``[start, stop)``, built in a worker (a
    process of the export's pool, or a Ray task) from the catalog opened read-only, with
    the sandbox's tools, and written to files in ``job.scratch``; an exception comes back
    as a ``_Raised``, for the exporting process to raise."""
    try:
        builder = _worker_builders.get(job)
        if builder is None:
            catalog = Catalog.open(Path(job.catalog), read_only=True, lock_wait_s=job.lock_wait_s)
            builder = _worker_builders[job] = _Builder(catalog, tool_source, verify=job.verify)
        built = builder.build(job.dataset_id, start, stop, skip=())
        scratch = Path(job.scratch)
        spilled = _Spilled(
            scratch / f"sft-{start:09d}.arrow", scratch / f"rl-{start:09d}.arrow", built.counted
        )
        for path, table in ((spilled.sft, built.sft), (spilled.rl, built.rl)):
            with _arrow_stream(path, table.schema) as writer:
                writer.write_table(table)
        return spilled
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
            columns.append(_text_lists(values).cast(schema.field(name).type))
        else:
            columns.append(pa.array(values, schema.field(name).type))
    return pa.Table.from_arrays(columns, schema=schema)


def _text_lists(values: Sequence[list[str]]) -> pa.Array:
    """``values`` as an Arrow array of lists of strings; a list that several rows share
    (the same object: a tool block) is converted once and repeated by Arrow."""
    first: dict[int, int] = {}
    distinct: list[list[str]] = []
    picks = []
    for value in values:
        pick = first.setdefault(id(value), len(distinct))
        if pick == len(distinct):
            distinct.append(value)
        picks.append(pick)
    array = pa.array(distinct, pa.list_(pa.string()))
    return array if len(distinct) == len(values) else array.take(pa.array(picks, pa.int32()))


def _refuse_development(catalog: Catalog, version: DatasetVersion) -> None:
    """Freezing refuses development tasks already; an export checks again, before it
    writes anything, by split, by the catalog's development fingerprints, and by the
    template's own hold-out rule. It reads the member tasks' columns in the catalog, not
    the trajectories."""
    development = catalog.tasks.fingerprints(Split.DEV)
    templates = {t.name: t for t in ALL_TEMPLATES}
    found = []
    ids = [m.trajectory_id for m in version.members]
    for trajectory_id, (task_id, split, fingerprint, template_name) in zip(
        ids, catalog.trajectories.member_tasks(ids), strict=True
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
        with _arrow_stream(scratch, RL_FEATURES.arrow_schema) as unsorted:
            for chunk in stack.enter_context(closing(rows.chunks(work))):
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
def _arrow_stream(path: Path, schema: pa.Schema) -> Iterator[pa.ipc.RecordBatchStreamWriter]:
    """An Arrow stream file with ``schema``: what ``save_to_disk`` writes and
    ``Dataset.from_file`` reads."""
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as w:
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
