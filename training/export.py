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
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import datasets
import orjson
import pyarrow as pa
from datasets import Dataset, DatasetDict, DatasetInfo, Features, Json, List, Value
from datasets.table import InMemoryTable

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
    TaskSpec,
    Trajectory,
)
from curation.attribution import erroneous_steps
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import split_of
from envs.sandbox.templates.registry import ALL_TEMPLATES
from storage import Catalog
from training.card import CARD_MARK, dataset_card

ExportFormat = Literal["hf", "parquet"]
FORMATS: tuple[str, ...] = get_args(ExportFormat)
SFT = "sft"
RL_TASKS = "rl_tasks"
CARD = "README.md"
RECOVERY = "recovery"
"""The outcome of a success that went through an error: a verified recovery."""

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


@dataclass
class _Rows:
    sft: list[dict[str, Any]] = field(default_factory=list)
    rl: list[dict[str, Any]] = field(default_factory=list)


def export_dataset(
    catalog: Catalog,
    dataset_id: str,
    out_dir: Path,
    fmt: ExportFormat = "hf",
    *,
    overwrite: bool = False,
    push_to_hub: str | None = None,
    tools: ToolSource | None = None,
) -> ExportReport:
    """Write dataset version ``dataset_id`` to ``out_dir``: ``hf/`` (``save_to_disk`` of
    a ``DatasetDict`` with splits ``sft`` and ``rl_tasks``) or ``parquet/sft.parquet``
    and ``parquet/rl_tasks.parquet``, and the dataset card ``README.md``.

    The export is built in a folder beside ``out_dir`` and renamed into place: a failure
    leaves nothing half-written. Refused before anything is written: an unknown format
    (InvalidInputError) or dataset id (UnknownIdError), an ``out_dir`` that exists and is
    not empty (unless ``overwrite``, and then only an earlier export), a member whose task
    is a development task, a malformed ``push_to_hub`` repository id.

    ``push_to_hub`` (a dataset repository id, ``owner/name``) uploads the finished
    export there, creating the repository as private if it does not exist; credentials
    come from the Hugging Face client's own configuration. Never the default; a failed
    upload raises and leaves the export in place.
    ``tools`` gives the tool specs the policy saw (default: the sandbox's).
    """
    if fmt not in FORMATS:
        raise InvalidInputError("format", f"unknown export format {fmt!r}", FORMATS)
    if push_to_hub is not None and not _REPO_ID.match(push_to_hub):
        raise InvalidInputError(
            "push_to_hub", f"{push_to_hub!r} is not a repository id (owner/name)"
        )
    out_dir = Path(out_dir)
    _check_out(out_dir, overwrite)
    version = catalog.get_dataset(dataset_id)
    trajectories = catalog.trajectories_by_ids([m.trajectory_id for m in version.members])
    _refuse_development(catalog, version, trajectories)
    budgets = _budgets(catalog, trajectories)
    rows = _rows(version, trajectories, budgets, tools or MobileSandbox())
    card = dataset_card(
        version,
        catalog.dataset_summary(dataset_id),
        rows.sft,
        rows.rl,
        fmt=fmt,
    )
    with _staging(out_dir) as staging:
        _write(staging, fmt, rows)
        (staging / CARD).write_text(card, encoding="utf-8")
        files = tuple(sorted(str(p.relative_to(staging)) for p in _files(staging)))
    pushed = None
    if push_to_hub is not None:
        _push(out_dir, push_to_hub, dataset_id)
        pushed = push_to_hub
    assistant = [
        flag
        for row in rows.sft
        for message, flag in zip(row["messages"], row["trained"], strict=True)
        if message["role"] == "assistant"
    ]
    return ExportReport(
        dataset_id=dataset_id,
        format=fmt,
        out_dir=out_dir,
        files=files,
        sft_rows=len(rows.sft),
        rl_tasks=len(rows.rl),
        assistant_turns=len(assistant),
        trained_turns=sum(assistant),
        masked_turns=len(assistant) - sum(assistant),
        corrected=sum(row["correction"] is not None for row in rows.sft),
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


def _rows(
    version: DatasetVersion,
    trajectories: Sequence[Trajectory],
    budgets: Mapping[str, int],
    tools: ToolSource,
) -> _Rows:
    rows = _Rows()
    seen: set[str] = set()
    for member, trajectory in zip(version.members, trajectories, strict=True):
        task = trajectory.task
        max_steps = budgets[trajectory.id]
        view = task_view(task, tools, max_steps)
        masked = loss_masked_steps(trajectory, member)
        conversation = trajectory_conversation(
            trajectory, view, masked_steps=masked, correction=member.correction
        )
        policy = trajectory.metadata.policy
        rows.sft.append(
            {
                "messages": template_messages(conversation.messages),
                "tools": conversation.tools,
                "trained": conversation.trained,
                "weight": member.weight,
                "trajectory_id": trajectory.id,
                "task_id": task.id,
                "fingerprint": task.fingerprint,
                "capabilities": [c.value for c in task.capabilities],
                "difficulty": task.difficulty.value,
                "outcome": outcome_of(trajectory),
                "decision": member.decision.value,
                "human": member.human,
                "masked_steps": list(masked),
                "correction": member.correction,
                "policy": f"{policy.name}@{policy.version}",
            }
        )
        if task.id not in seen:
            seen.add(task.id)
            rows.rl.append(_rl_row(task, view, max_steps))
    rows.rl.sort(key=lambda row: row["task_id"])
    return rows


def _rl_row(task: TaskSpec, view: TaskView, max_steps: int) -> dict[str, Any]:
    return {
        "task_id": task.id,
        "fingerprint": task.fingerprint,
        "seed": task.initial_conditions.seed,
        "task_spec": task.to_json().decode(),
        "verifier": task.verifier.to_json().decode(),
        "capabilities": [c.value for c in task.capabilities],
        "difficulty": task.difficulty.value,
        "goal": task.goal,
        "max_steps": max_steps,
        "prompt": opening_messages(view),
        "tools": format_tools(view),
    }


def _budgets(catalog: Catalog, trajectories: Sequence[Trajectory]) -> dict[str, int]:
    """The step budget each trajectory ran under (its round's ``max_steps``; the runner's
    default when the round is unknown): the system prompt states it."""
    rounds: dict[str | None, int] = {}
    for trajectory in trajectories:
        round_id = trajectory.metadata.round
        if round_id not in rounds:
            info = catalog.get_round(round_id) if round_id is not None else None
            budget = info.config.get("max_steps") if info is not None else None
            rounds[round_id] = budget if isinstance(budget, int) else DEFAULT_MAX_STEPS
    return {t.id: rounds[t.metadata.round] for t in trajectories}


def _refuse_development(
    catalog: Catalog, version: DatasetVersion, trajectories: Sequence[Trajectory]
) -> None:
    """Freezing refuses development tasks already; an export checks again, by split, by
    the catalog's development fingerprints, and by the template's own hold-out rule."""
    development = catalog.fingerprints(Split.DEV)
    templates = {t.name: t for t in ALL_TEMPLATES}
    found = []
    for trajectory in trajectories:
        task = trajectory.task
        template = templates.get(task.template or "")
        if (
            task.split is Split.DEV
            or task.fingerprint in development
            or (template is not None and split_of(template, task.fingerprint) is Split.DEV)
        ):
            found.append(f"{trajectory.id} (task {task.id})")
    if found:
        raise InvalidInputError(
            "members",
            f"{version.id} holds {len(found)} trajectories of development tasks, which are "
            f"never trained on: {', '.join(found[:5])}",
        )


# -- writing -----------------------------------------------------------------------------


def _files(folder: Path) -> Iterator[Path]:
    return (path for path in folder.rglob("*") if path.is_file())


def _check_out(out_dir: Path, overwrite: bool) -> None:
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise InvalidInputError("out", f"{out_dir} is a file, not a folder")
    if not any(out_dir.iterdir()):
        return
    if not overwrite:
        raise InvalidInputError(
            "out", f"{out_dir} exists and is not empty: choose a new folder, or overwrite"
        )
    if not _is_export(out_dir):
        raise InvalidInputError(
            "out", f"{out_dir} is not an earlier export (no flywheel dataset card): not replaced"
        )


def _is_export(folder: Path) -> bool:
    card = folder / CARD
    try:
        return CARD_MARK in card.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False


@contextmanager
def _staging(out_dir: Path) -> Iterator[Path]:
    """A new folder beside ``out_dir``; renamed to ``out_dir`` (replacing what is there)
    when the block succeeds, removed when it fails."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex[:12]
    staging = out_dir.with_name(f".{out_dir.name}.partial-{token}")
    staging.mkdir()
    try:
        yield staging
        if out_dir.exists():
            old = out_dir.with_name(f".{out_dir.name}.old-{token}")
            os.replace(out_dir, old)
            try:
                os.replace(staging, out_dir)
            except BaseException:
                os.replace(old, out_dir)
                raise
            shutil.rmtree(old)
        else:
            os.replace(staging, out_dir)
    finally:
        if staging.exists():
            shutil.rmtree(staging)


def _write(folder: Path, fmt: ExportFormat, rows: _Rows) -> None:
    with _quiet():
        sft = _dataset(rows.sft, SFT_FEATURES)
        rl = _dataset(rows.rl, RL_FEATURES)
        if fmt == "hf":
            DatasetDict({SFT: sft, RL_TASKS: rl}).save_to_disk(str(folder / "hf"))
            return
        (folder / "parquet").mkdir()
        sft.to_parquet(str(folder / "parquet" / f"{SFT}.parquet"))
        rl.to_parquet(str(folder / "parquet" / f"{RL_TASKS}.parquet"))


def _dataset(rows: Sequence[Mapping[str, Any]], features: Features) -> Dataset:
    """``rows`` as a dataset with ``features``, built column by column in Arrow: JSON
    values are serialized once here (``Dataset.from_list`` would encode them one by one
    through Python, several times slower)."""
    schema = features.arrow_schema
    columns = {}
    for name, feature in features.items():
        values = [row[name] for row in rows]
        if isinstance(feature, List) and isinstance(feature.feature, Json):
            text = [[orjson.dumps(item).decode() for item in items] for items in values]
            columns[name] = pa.array(text, pa.list_(pa.string())).cast(pa.list_(pa.json_()))
        else:
            columns[name] = pa.array(values, schema.field(name).type)
    table = InMemoryTable(pa.table(columns))
    return Dataset(table, info=DatasetInfo(features=features))


@contextmanager
def _quiet() -> Iterator[None]:
    """No progress bars from ``datasets`` while writing (the CLI prints its own report)."""
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
