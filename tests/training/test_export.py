"""Exporting a frozen dataset version: real sandbox episodes (scripted, and the OpenAI
policy through the real client against a scripted model) in a real catalog, frozen by an
approval, exported and loaded back with ``datasets``, TRL's data utilities and a chat
template."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import datasets
import duckdb
import orjson
import pyarrow.parquet as pq
import pytest
import yaml  # type: ignore[import-untyped]
from trl.data_utils import is_conversational

import storage.datasets
import training.export
from agents.policies.chat_format import (
    ChatStep,
    format_tools,
    opening_messages,
    task_view,
    template_messages,
)
from agents.policies.scripted import FaultConfig, ScriptedPolicy
from agents.runner import run_episode
from contract import (
    ApprovalDecision,
    DatasetApproval,
    DatasetMember,
    DatasetVersion,
    InvalidInputError,
    MixTarget,
    Outcome,
    ReviewDecision,
    Split,
    TaskSpec,
    Termination,
    Trajectory,
    canonical_json,
)
from curation.attribution import erroneous_steps
from curation.balance import dataset_content_hash
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import (
    instantiate,
    replay_reference,
    sample_tasks,
    template_named,
)
from storage import Catalog, UnknownIdError
from storage.trajectory_store import DuckDBTrajectoryStore
from tests.agents.conversations import MAX_STEPS, messy_replies, run_openai
from tests.storage.builders import make_version, write_shards
from tests.training.test_export_columns import oracle_row, read_split, stored_chat_steps
from training.export import ExportFormat, ExportReport, export_dataset, loss_masked_steps
from training.export_folder import MANIFEST

ROUND = "round-export"
LLM_ROUND = "round-llm"
CORRECTION = "Your order is placed and your friend has the order number."
FLYWHEEL = str(Path(sys.executable).parent / "flywheel")


@dataclass(frozen=True)
class Frozen:
    """A catalog holding one approved dataset version, and what went into it."""

    home: Path
    catalog: Catalog
    version: DatasetVersion
    trajectories: dict[str, Trajectory]
    sent: list[dict[str, Any]]
    """The messages the OpenAI policy's session held at the end of its episode."""
    llm_id: str
    marked_id: str
    corrected_id: str

    def member(self, trajectory_id: str) -> DatasetMember:
        return next(m for m in self.version.members if m.trajectory_id == trajectory_id)


def _train_task(name: str, sandbox: MobileSandbox) -> TaskSpec:
    for seed in range(7, 40):
        task = instantiate(template_named(name), seed, sandbox)
        if task.split is Split.TRAIN:
            return task
    raise AssertionError(f"no train task of {name}")


@pytest.fixture(scope="module")
def frozen(tmp_path_factory: pytest.TempPathFactory) -> Frozen:
    """Scripted episodes with faults and recoveries, and one OpenAI-policy episode full of
    malformed replies; a person marked steps of two items and corrected one; the rest were
    approved automatically; ann approved the version."""
    root = tmp_path_factory.mktemp("export")
    sandbox = MobileSandbox()
    policy = ScriptedPolicy(FaultConfig(rate=0.7, recovery_rate=0.8))
    tasks = sample_tasks(36, 21, sandbox, split=Split.TRAIN)
    scripted = [run_episode(t, sandbox, policy, round_id=ROUND) for t in tasks]
    llm_task = _train_task("text_contact", sandbox)
    llm, capturing, _ = run_openai(llm_task, messy_replies(llm_task))
    llm = Trajectory.model_validate(
        llm.model_dump(mode="json", exclude={"id"})
        | {"metadata": llm.metadata.model_copy(update={"round": LLM_ROUND}).model_dump()}
    )
    assert llm.metadata.outcome is Outcome.SUCCESS
    write_shards(scripted, root / "shards" / ROUND)
    write_shards([llm], root / "shards" / LLM_ROUND)
    catalog = Catalog.open(root / "state" / "catalog.duckdb")
    catalog.trajectories.ingest([root / "shards" / ROUND, root / "shards" / LLM_ROUND])
    catalog.rounds.begin(LLM_ROUND, {"max_steps": MAX_STEPS})

    successes = [t for t in scripted if t.metadata.outcome is Outcome.SUCCESS]
    marked = next(t for t in successes if t.metadata.recovered and erroneous_steps(t.steps)[0])
    corrected = next(
        t
        for t in successes
        if t.metadata.termination is Termination.VERIFIED and not erroneous_steps(t.steps)
    )
    members = [
        DatasetMember(
            trajectory_id=llm.id,
            task_id=llm.task.id,
            weight=2.0,
            human=True,
            masked_steps=erroneous_steps(llm.steps),
        ),
        DatasetMember(  # the person marked step 0, not the step that erred
            trajectory_id=marked.id,
            task_id=marked.task.id,
            weight=1.5,
            human=True,
            masked_steps=(0,),
        ),
        DatasetMember(
            trajectory_id=corrected.id,
            task_id=corrected.task.id,
            weight=1.0,
            decision=ReviewDecision.CORRECT,
            human=True,
            correction=CORRECTION,
        ),
        *(
            DatasetMember(trajectory_id=t.id, task_id=t.task.id, weight=0.75)
            for t in successes
            if t.id not in {marked.id, corrected.id}
        ),
    ]
    members.sort(key=lambda m: m.trajectory_id)
    version = DatasetVersion(
        round_id=ROUND,
        parent=None,
        content_hash=dataset_content_hash(members),
        members=tuple(members),
        target=MixTarget(recovery_share=0.2),
        achieved={"outcome": {"recovery": 0.2, "success": 0.8}},
        policies=("openai@scripted-model", "scripted@1"),
        human_reviewed=3,
    )
    approval = DatasetApproval(
        dataset_id=version.id,
        round_id=ROUND,
        content_hash=version.content_hash,
        target=version.target,
        decision=ApprovalDecision.APPROVE,
        approver="ann",
        automatic=False,
        decided_at=datetime(2026, 11, 30, 14, 5, tzinfo=UTC),
        comment="balanced enough",
    )
    catalog.datasets.decide(version, approval)
    return Frozen(
        home=root / "state",
        catalog=catalog,
        version=version,
        trajectories={t.id: t for t in [*scripted, llm]},
        sent=capturing.sessions[0].messages,
        llm_id=llm.id,
        marked_id=marked.id,
        corrected_id=corrected.id,
    )


@pytest.fixture(scope="module")
def hf_export(frozen: Frozen, tmp_path_factory: pytest.TempPathFactory) -> ExportReport:
    out = tmp_path_factory.mktemp("out") / "hf-export"
    return export_dataset(frozen.catalog, frozen.version.id, out, "hf")


@pytest.fixture(scope="module")
def sft(hf_export: ExportReport) -> datasets.Dataset:
    return datasets.load_from_disk(str(hf_export.out_dir / "hf"))["sft"]


@pytest.fixture(scope="module")
def rows(sft: datasets.Dataset) -> dict[str, dict[str, Any]]:
    return {row["trajectory_id"]: row for row in sft}


def _assistant_flags(row: dict[str, Any]) -> list[bool]:
    return [
        bool(flag)
        for message, flag in zip(row["messages"], row["trained"], strict=True)
        if message["role"] == "assistant"
    ]


def _calls(row: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for message in row["messages"]:
        yield from message.get("tool_calls") or ()


# -- sft ---------------------------------------------------------------------------------


def test_the_hf_export_loads_in_trls_conversational_shape(
    frozen: Frozen, hf_export: ExportReport, sft: datasets.Dataset
) -> None:
    loaded = datasets.load_from_disk(str(hf_export.out_dir / "hf"))
    assert set(loaded) == {"sft", "rl_tasks"}
    assert [row["trajectory_id"] for row in sft] == [
        m.trajectory_id for m in frozen.version.members
    ]
    assert {"README.md", "hf/dataset_dict.json"} <= set(hf_export.files)
    assert hf_export.sft_rows == len(sft)
    for row in sft:
        assert is_conversational(row)
        assert len(row["trained"]) == len(row["messages"])
        assert row["messages"][0]["role"] == "system"
        assert row["tools"][0]["type"] == "function"
        member = frozen.member(row["trajectory_id"])
        assert (row["weight"], row["decision"], row["human"]) == (
            member.weight,
            member.decision.value,
            member.human,
        )
        trajectory = frozen.trajectories[row["trajectory_id"]]
        assert row["fingerprint"] == trajectory.task.fingerprint
        assert row["outcome"] == ("recovery" if trajectory.metadata.recovered else "success")
    for call in (c for row in sft for c in _calls(row)):
        assert set(call) == {"id", "type", "function"}
        assert call["type"] == "function"
        assert isinstance(call["function"]["name"], str)
    # a message keeps exactly its own keys: no None-filled struct fields
    assert all(
        set(m) <= {"role", "content", "tool_calls", "tool_call_id"}
        and ("tool_call_id" in m) == (m["role"] == "tool")
        for row in sft
        for m in row["messages"]
    )


def test_arguments_are_objects_except_where_the_model_wrote_no_json(
    frozen: Frozen, rows: dict[str, dict[str, Any]]
) -> None:
    for trajectory_id, row in rows.items():
        arguments = [c["function"]["arguments"] for c in _calls(row)]
        if trajectory_id != frozen.llm_id:
            assert all(isinstance(a, dict) for a in arguments)
    llm_arguments = [c["function"]["arguments"] for c in _calls(rows[frozen.llm_id])]
    assert llm_arguments.count('{"query": "Yus') == 1
    assert sum(isinstance(a, dict) for a in llm_arguments) == len(llm_arguments) - 1


def test_masks_match_the_marks(frozen: Frozen, rows: dict[str, dict[str, Any]]) -> None:
    marked = frozen.trajectories[frozen.marked_id]
    erred = erroneous_steps(marked.steps)
    assert 0 not in erred  # the person's marks, not the curator's, are the authority
    assert _assistant_flags(rows[frozen.marked_id]) == [i != 0 for i in range(len(marked.steps))]
    assert rows[frozen.marked_id]["masked_steps"] == [0]
    for trajectory_id, row in rows.items():
        trajectory = frozen.trajectories[trajectory_id]
        member = frozen.member(trajectory_id)
        masked = loss_masked_steps(
            member.masked_steps, member.human, erroneous_steps(trajectory.steps)
        )
        if not member.human:  # automatic: the curator's marks
            assert masked == erroneous_steps(trajectory.steps)
        flags = _assistant_flags(row)
        steps = [i not in masked for i in range(len(trajectory.steps))]
        assert flags[: len(steps)] == steps
        assert row["masked_steps"] == list(masked)
        non_assistant = [
            f
            for m, f in zip(row["messages"], row["trained"], strict=True)
            if m["role"] != "assistant"
        ]
        assert not any(non_assistant)
    assert any(not all(_assistant_flags(row)) for row in rows.values())


def test_the_correction_is_the_final_answer(
    frozen: Frozen, rows: dict[str, dict[str, Any]]
) -> None:
    row = rows[frozen.corrected_id]
    trajectory = frozen.trajectories[frozen.corrected_id]
    final = row["messages"][-1]
    (call,) = final["tool_calls"]
    assert call["function"] == {"name": "finish", "arguments": {"answer": CORRECTION}}
    assert row["trained"][-1]
    assert row["correction"] == CORRECTION
    assert len(_assistant_flags(row)) == len(trajectory.steps) + 1  # ended verified: appended
    assert sum(row["correction"] is not None for row in rows.values()) == 1


def test_the_openai_row_is_what_the_policy_sent(
    frozen: Frozen, rows: dict[str, dict[str, Any]]
) -> None:
    row = rows[frozen.llm_id]
    expected = template_messages(frozen.sent)
    assert len(row["messages"]) == len(expected)
    for got, want in zip(row["messages"], expected, strict=True):
        if want["role"] == "tool":
            # the catalog keeps feedback as canonical JSON: same values, keys sorted
            assert got.keys() == want.keys()
            assert _json_or_text(got["content"]) == _json_or_text(want["content"])
        else:
            assert got == want
    assert f"at most {MAX_STEPS} function calls" in row["messages"][0]["content"]
    assert _assistant_flags(row) == [False, False, False, False, True, False, True]


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


# -- rl_tasks ----------------------------------------------------------------------------


def test_rl_tasks_rebuild_specs_whose_reference_passes_on_a_fresh_sandbox(
    frozen: Frozen, hf_export: ExportReport
) -> None:
    rl = datasets.load_from_disk(str(hf_export.out_dir / "hf"))["rl_tasks"]
    assert len(rl) == len({m.task_id for m in frozen.version.members}) == hf_export.rl_tasks
    assert list(rl["task_id"]) == sorted(rl["task_id"])
    for row in rl:
        task = TaskSpec.model_validate_json(row["task_spec"])  # the id is checked too
        assert task.id == row["task_id"]
        assert task.fingerprint == row["fingerprint"]
        assert task.initial_conditions.seed == row["seed"]
        assert json.loads(row["verifier"]) == task.verifier.model_dump(mode="json")
        assert row["capabilities"] == [c.value for c in task.capabilities]
        assert replay_reference(task, MobileSandbox()).passed
        view = task_view(task, MobileSandbox(), row["max_steps"])
        assert row["prompt"] == opening_messages(view)
        assert is_conversational({"prompt": row["prompt"]})
        assert "reference_plan" not in json.dumps(row["prompt"]) + json.dumps(row["tools"])


def test_tools_are_the_functions_the_policy_was_offered(
    frozen: Frozen, hf_export: ExportReport, rows: dict[str, dict[str, Any]]
) -> None:
    rl = {
        row["task_id"]: row
        for row in datasets.load_from_disk(str(hf_export.out_dir / "hf"))["rl_tasks"]
    }
    for trajectory_id, row in rows.items():
        task = frozen.trajectories[trajectory_id].task
        offered = format_tools(task_view(task, MobileSandbox(), rl[task.id]["max_steps"]))
        assert row["tools"] == offered
        assert rl[task.id]["tools"] == offered


# -- streaming ---------------------------------------------------------------------------


def _export_of(path: Path) -> dict[str, Any]:
    """What an export wrote: each split's features and rows, and the card."""
    if (path / "hf").exists():
        loaded = datasets.load_from_disk(str(path / "hf"))
        splits = {name: (loaded[name].features, list(loaded[name])) for name in loaded}
    else:
        splits = {
            name: pq.read_table(path / "parquet" / f"{name}.parquet")
            for name in ("sft", "rl_tasks")
        }
    return {"splits": splits, "card": (path / "README.md").read_text()}


@pytest.mark.parametrize("fmt", ["hf", "parquet"])
def test_an_export_in_chunks_is_the_export_in_one(
    frozen: Frozen, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: ExportFormat
) -> None:
    """Members are loaded, turned into rows and written a chunk at a time, and the hf
    splits go on in new Arrow files past a size: where chunks and files end changes
    nothing in the rows, the card or the report."""
    assert len(frozen.version.members) < training.export.CHUNK
    whole = export_dataset(frozen.catalog, frozen.version.id, tmp_path / "one", fmt)
    monkeypatch.setattr(training.export, "CHUNK", 4)
    monkeypatch.setattr(training.export, "SHARD_BYTES", 50_000)
    chunked = export_dataset(frozen.catalog, frozen.version.id, tmp_path / "many", fmt, verify=True)
    assert _export_of(chunked.out_dir) == _export_of(whole.out_dir)
    assert {**chunked.to_json(), "out": None, "files": None} == {
        **whole.to_json(),
        "out": None,
        "files": None,
    }
    if fmt == "hf":
        assert len([f for f in chunked.files if f.startswith("hf/sft/data-")]) > 1
        assert [f for f in whole.files if f.startswith("hf/sft/data-")] == [
            "hf/sft/data-00000-of-00001.arrow"
        ]
    assert not any(".work" in name for name in chunked.files)


def _no_loading_here(*args: object, **kwargs: object) -> None:
    raise AssertionError("the worker processes load the members, not the exporting one")


@pytest.mark.parametrize("fmt", ["hf", "parquet"])
def test_an_export_by_worker_processes_is_the_export_in_one(
    frozen: Frozen, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: ExportFormat
) -> None:
    """Worker processes load the members and build the rows, chunk by chunk (a spawned
    worker imports the module afresh: it builds the chunks the exporting process cut, with
    the ``CHUNK`` patched here): the rows, the card and the report are those of the export
    in one process."""
    whole = export_dataset(frozen.catalog, frozen.version.id, tmp_path / "one", fmt, workers=1)
    monkeypatch.setattr(training.export, "CHUNK", 4)
    monkeypatch.setattr(DuckDBTrajectoryStore, "by_ids", _no_loading_here)
    parallel = export_dataset(frozen.catalog, frozen.version.id, tmp_path / "two", fmt, workers=2)
    assert _export_of(parallel.out_dir) == _export_of(whole.out_dir)
    assert {**parallel.to_json(), "out": None} == {**whole.to_json(), "out": None}
    assert _leftovers(tmp_path) == ["one", "two"]


def test_an_unknown_member_found_by_a_worker_is_raised_and_leaves_nothing(
    frozen: Frozen, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trajectory the catalog does not hold, met by a worker process: its
    ``UnknownIdError`` is raised as is, the workers are gone, nothing is written. (A
    catalog damaged by hand: freezing refuses a member the catalog does not hold.)"""
    path = tmp_path / "damaged.duckdb"
    shutil.copy(frozen.catalog.path, path)
    gone = frozen.version.members[6].trajectory_id
    with duckdb.connect(str(path)) as con:
        con.execute("DELETE FROM trajectories WHERE id = ?", [gone])
    monkeypatch.setattr(training.export, "_refuse_development", lambda catalog, version: None)
    monkeypatch.setattr(training.export, "CHUNK", 4)
    monkeypatch.setattr(DuckDBTrajectoryStore, "by_ids", _no_loading_here)
    out = tmp_path / "exports"
    out.mkdir()
    with Catalog.open(path, read_only=True) as damaged:
        for fmt in ("hf", "parquet"):
            with pytest.raises(UnknownIdError, match=f"unknown trajectory id '{gone}'") as caught:
                export_dataset(damaged, frozen.version.id, out / "out", fmt, workers=2)
            assert (caught.value.kind, caught.value.value) == ("trajectory", gone)
            assert any("export worker" in note for note in caught.value.__notes__)
    assert _leftovers(out) == []
    assert multiprocessing.active_children() == []


# -- parquet, the card, a chat template ---------------------------------------------------


def test_the_parquet_export_loads_with_load_dataset(
    frozen: Frozen, tmp_path: Path, sft: datasets.Dataset
) -> None:
    out = tmp_path / "pq"
    report = export_dataset(frozen.catalog, frozen.version.id, out, "parquet")
    assert set(report.files) == {"README.md", "parquet/sft.parquet", "parquet/rl_tasks.parquet"}
    loaded = {  # the splits have different columns: one load each
        split: datasets.load_dataset(
            "parquet",
            data_files=str(out / "parquet" / f"{split}.parquet"),
            split="train",
            cache_dir=str(tmp_path / "cache"),
        )
        for split in ("sft", "rl_tasks")
    }
    assert list(loaded["sft"]) == list(sft)
    assert all(is_conversational(row) for row in loaded["sft"])
    # the card's configurations name the files: the folder loads as a dataset repository
    by_card = datasets.load_dataset(str(out), "rl_tasks", cache_dir=str(tmp_path / "cache"))
    assert by_card["train"]["task_id"] == loaded["rl_tasks"]["task_id"]


def test_the_card_has_front_matter_composition_and_lineage(
    frozen: Frozen, hf_export: ExportReport, sft: datasets.Dataset, tmp_path: Path
) -> None:
    text = (hf_export.out_dir / "README.md").read_text()
    _, front, body = text.split("---\n", 2)
    meta = yaml.safe_load(front)
    assert meta["flywheel"] == {
        "dataset_id": frozen.version.id,
        "content_hash": frozen.version.content_hash,
        "parent": None,
        "round": ROUND,
        "format": "hf",
    }
    assert [c["config_name"] for c in meta["configs"]] == ["sft", "rl_tasks"]
    for heading in ("## Lineage", "## Composition", "## The training mask", "## Loading"):
        assert heading in body
    for table in ("| capability |", "| difficulty |", "| outcome |", "| decided by |"):
        assert table in body
    assert "| a person | 3 |" in body
    assert f"| masked | {hf_export.masked_turns} |" in body
    assert 'approve by ann at 2026-11-30T14:05:00Z: "balanced enough"' in body
    assert "`openai@scripted-model`, `scripted@1`" in body
    assert "load_from_disk" in body
    by_card = datasets.load_dataset(str(hf_export.out_dir), "sft", cache_dir=str(tmp_path))
    assert by_card["train"]["trajectory_id"] == sft["trajectory_id"]
    again = export_dataset(frozen.catalog, frozen.version.id, hf_export.out_dir.with_name("b"))
    assert (again.out_dir / "README.md").read_text() == text  # the same bytes


def test_a_chat_template_renders_every_row(rows: dict[str, dict[str, Any]]) -> None:
    """A word-level tokenizer built here (no download) with the Qwen3 training template
    that TRL ships: every row renders with its tools, and the template's assistant mask
    has one span per assistant message, so ``trained`` maps onto tokens."""
    import trl
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import supports_tool_calling

    template = Path(trl.__file__).parent / "chat_templates" / "qwen3_training.jinja"
    core = Tokenizer(models.WordLevel({"[UNK]": 0, "<|im_end|>": 1}, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=core,
        unk_token="[UNK]",
        eos_token="<|im_end|>",
        chat_template=template.read_text(),
    )
    assert supports_tool_calling(tokenizer)
    for row in rows.values():
        text = tokenizer.apply_chat_template(row["messages"], tools=row["tools"], tokenize=False)
        for call in _calls(row):
            assert f'"name": "{call["function"]["name"]}"' in text
        assert row["tools"][0]["function"]["name"] in text
        encoded: Any = tokenizer.apply_chat_template(
            row["messages"],
            tools=row["tools"],
            tokenize=True,
            return_dict=True,
            return_assistant_tokens_mask=True,
        )
        mask = list(encoded["assistant_masks"])
        spans = sum(1 for i, m in enumerate(mask) if m and (i == 0 or not mask[i - 1]))
        assert spans == len(_assistant_flags(row))


# -- refusals ----------------------------------------------------------------------------


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_an_unknown_dataset_or_format_writes_nothing(frozen: Frozen, tmp_path: Path) -> None:
    with pytest.raises(UnknownIdError, match="unknown dataset id 'ds-nope'"):
        export_dataset(frozen.catalog, "ds-nope", tmp_path / "a" / "out")
    with pytest.raises(InvalidInputError, match="format") as caught:
        export_dataset(frozen.catalog, frozen.version.id, tmp_path / "b", "csv")  # type: ignore[arg-type]
    assert caught.value.field == "format"
    with pytest.raises(InvalidInputError) as bad_repo:
        export_dataset(frozen.catalog, frozen.version.id, tmp_path / "c", push_to_hub="no repo")
    assert bad_repo.value.field == "push_to_hub"
    assert _leftovers(tmp_path) == []


def test_a_non_empty_folder_is_refused_unless_it_is_an_earlier_export_and_overwrite(
    frozen: Frozen, tmp_path: Path
) -> None:
    foreign = tmp_path / "notes"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    for overwrite in (False, True):
        with pytest.raises(InvalidInputError) as caught:
            export_dataset(frozen.catalog, frozen.version.id, foreign, overwrite=overwrite)
        assert caught.value.field == "out"
    assert _leftovers(foreign) == ["keep.txt"]

    out = tmp_path / "export"
    export_dataset(frozen.catalog, frozen.version.id, out, "parquet")
    with pytest.raises(InvalidInputError, match="not empty"):
        export_dataset(frozen.catalog, frozen.version.id, out, "hf")
    report = export_dataset(frozen.catalog, frozen.version.id, out, "hf", overwrite=True)
    assert _leftovers(out) == [MANIFEST, "README.md", "hf"]
    assert report.format == "hf"
    assert _leftovers(tmp_path) == ["export", "notes"]
    (tmp_path / "empty").mkdir()
    export_dataset(frozen.catalog, frozen.version.id, tmp_path / "empty", "parquet")
    assert _leftovers(tmp_path / "empty") == [MANIFEST, "README.md", "parquet"]


@pytest.mark.parametrize(
    "spoil",
    [
        lambda out: (out / "stale.txt").write_text("a person's notes"),
        lambda out: (out / "hf" / "mine.json").write_text("{}"),
        lambda out: (out / "README.md").write_text("my own readme\nflywheel:\n  dataset_id: x"),
        lambda out: (out / MANIFEST).unlink(),
        lambda out: (out / MANIFEST).write_text("not json"),
        lambda out: (out / "hf" / "dataset_dict.json").write_text("{}"),
        lambda out: (out / "link").symlink_to(out.parent),
    ],
    ids=["added-file", "added-nested", "foreign-card", "no-manifest", "bad-manifest",
         "changed-file", "symlink"],
)  # fmt: skip
def test_an_earlier_export_with_anything_changed_is_not_replaced(
    frozen: Frozen, tmp_path: Path, spoil: Any
) -> None:
    """Recognised by more than a marker: every file listed with its size, nothing else."""
    out = tmp_path / "export"
    export_dataset(frozen.catalog, frozen.version.id, out, "hf")
    spoil(out)
    before = _tree_of(out)
    with pytest.raises(InvalidInputError, match="is not an earlier export") as caught:
        export_dataset(frozen.catalog, frozen.version.id, out, "parquet", overwrite=True)
    assert caught.value.field == "out"
    assert _tree_of(out) == before
    assert _leftovers(tmp_path) == ["export"]


def test_a_path_through_a_missing_folder_is_resolved_before_it_is_checked(
    frozen: Frozen, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``missing/../notes`` is ``notes``: checked as such, and ``missing`` is never made."""
    monkeypatch.chdir(tmp_path)
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "keep.txt").write_text("mine")
    for given in (Path("missing/../notes"), tmp_path / "a" / "b" / ".." / ".." / "notes"):
        with pytest.raises(InvalidInputError, match="is not an earlier export") as caught:
            export_dataset(frozen.catalog, frozen.version.id, given, overwrite=True)
        assert "that is" in str(caught.value) and str(notes) in str(caught.value)
    assert _leftovers(tmp_path) == ["notes"]
    assert _leftovers(notes) == ["keep.txt"]


def test_a_symbolic_link_is_followed_to_its_folder(frozen: Frozen, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    link = tmp_path / "link"
    link.symlink_to(empty)
    report = export_dataset(frozen.catalog, frozen.version.id, link, "parquet")
    assert report.out_dir == empty.resolve()
    assert link.is_symlink() and link.resolve() == empty.resolve()
    assert _leftovers(empty) == [MANIFEST, "README.md", "parquet"]
    assert _leftovers(tmp_path) == ["empty", "link"]

    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    (tmp_path / "to-full").symlink_to(full)
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    for given, problem in (("to-full", "not an earlier export"), ("dangling", "broken")):
        with pytest.raises(InvalidInputError, match=problem):
            export_dataset(frozen.catalog, frozen.version.id, tmp_path / given, overwrite=True)
    assert _leftovers(full) == ["keep.txt"]
    assert not (tmp_path / "gone").exists()


def _tree_of(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b"<link>"
        for p in folder.rglob("*")
        if p.is_file() or p.is_symlink()
    }


def test_a_failure_while_writing_leaves_nothing(
    frozen: Frozen, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(folder: Path, fmt: str, rows: object) -> None:
        (folder / "parquet").mkdir()
        (folder / "parquet" / "sft.parquet").write_bytes(b"half")
        raise OSError("disk full")

    monkeypatch.setattr(training.export, "_write", fail)
    with pytest.raises(OSError, match="disk full"):
        export_dataset(frozen.catalog, frozen.version.id, tmp_path / "out", "parquet")
    assert _leftovers(tmp_path) == []


def test_a_development_task_member_is_refused(
    tmp_path: Path, sandbox: MobileSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    (task,) = sample_tasks(1, 5, sandbox, split=Split.DEV)
    trajectory = run_episode(task, sandbox, ScriptedPolicy(), round_id=ROUND)
    write_shards([trajectory], tmp_path / "shards")
    catalog = Catalog.open(tmp_path / "state" / "catalog.duckdb")
    catalog.trajectories.ingest([tmp_path / "shards"])
    version = make_version([trajectory], round_id=ROUND)
    with pytest.raises(InvalidInputError, match="development"):
        catalog.datasets.freeze(version)
    monkeypatch.setattr(storage.datasets, "_check_members", lambda con: None)  # a bug, say
    assert catalog.datasets.freeze(version)

    def no_loading(*args: object, **kwargs: object) -> None:
        raise AssertionError("the check reads the catalog's task columns, not trajectories")

    monkeypatch.setattr(DuckDBTrajectoryStore, "by_ids", no_loading)
    with pytest.raises(InvalidInputError, match="development tasks") as caught:
        export_dataset(catalog, version.id, tmp_path / "out")
    assert caught.value.field == "members"
    assert _leftovers(tmp_path) == ["shards", "state"]


def test_a_task_the_templates_hold_out_is_refused_whatever_its_label(
    tmp_path: Path, sandbox: MobileSandbox
) -> None:
    """A development task relabeled "train" passes freezing (it checks the stored split and
    the development fingerprints, and the catalog holds neither): the export still refuses
    it, by the template's own hold-out rule."""
    (held_out,) = sample_tasks(1, 5, sandbox, split=Split.DEV)
    task = TaskSpec.model_validate(
        held_out.model_dump(mode="json", exclude={"id"}) | {"split": "train"}
    )
    trajectory = run_episode(task, sandbox, ScriptedPolicy(), round_id=ROUND)
    write_shards([trajectory], tmp_path / "shards")
    catalog = Catalog.open(tmp_path / "state" / "catalog.duckdb")
    catalog.trajectories.ingest([tmp_path / "shards"])
    version = make_version([trajectory], round_id=ROUND)
    assert catalog.datasets.freeze(version)
    with pytest.raises(InvalidInputError, match=f"development tasks.*{task.id}"):
        export_dataset(catalog, version.id, tmp_path / "out", "parquet")
    assert _leftovers(tmp_path) == ["shards", "state"]


# -- the command line --------------------------------------------------------------------


def test_the_command_exports_and_prints_what_it_wrote(frozen: Frozen, tmp_path: Path) -> None:
    env = {**os.environ, "FLYWHEEL_HOME": str(frozen.home)}
    out = tmp_path / "cli-export"
    args = [FLYWHEEL, "datasets", "export", frozen.version.id, "--out", str(out)]

    def flywheel(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*args, *extra],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=120,
            check=False,
        )

    done = flywheel("--format", "parquet", "--json", "--verify")
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert printed["dataset_id"] == frozen.version.id
    assert printed["files"] == ["README.md", "parquet/rl_tasks.parquet", "parquet/sft.parquet"]
    assert printed["sft_rows"] == len(frozen.version.members)
    assert all((out / name).is_file() for name in printed["files"])

    again = flywheel()
    assert again.returncode == 1
    assert "error: out:" in again.stderr and "not empty" in again.stderr
    text = flywheel("--overwrite")
    assert text.returncode == 0, text.stderr
    assert f"Exported {frozen.version.id} (hf)" in text.stdout
    assert "README.md" in text.stdout


def test_the_cards_trl_snippet_trains_with_the_mask_applied(
    hf_export: ExportReport, sft: datasets.Dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The card's TRL lines, run as they are (a tiny model folder for ``BASE``): plain
    ``SFTTrainer`` trains, and its labels leave out exactly the untrained turns' tokens."""
    from trl.trainer.sft_config import SFTConfig
    from trl.trainer.sft_trainer import SFTTrainer

    from training.base_model import BaseModel, save_model, tiny_model, train_tokenizer
    from training.sft import tokenize_rows

    card = (hf_export.out_dir / "README.md").read_text()
    snippet = card.split("## Training with TRL", 1)[1].split("```python\n", 1)[1]
    snippet = snippet.split("```", 1)[0]
    template = train_tokenizer(["a"])  # renders rows; a vocabulary learnt from them follows
    rendered = [
        str(template.apply_chat_template(row["messages"], tools=row["tools"], tokenize=False))
        for row in sft
    ]
    tokenizer = train_tokenizer(rendered)
    folder = tmp_path / "tiny"
    save_model(BaseModel(tiny_model(tokenizer), tokenizer, "tiny"), folder)
    monkeypatch.chdir(hf_export.out_dir)  # the card's paths are relative to its folder
    exec(snippet, {"BASE": str(folder), "STEPS": 1})
    assert (hf_export.out_dir / "out").is_dir()

    tokenized = tokenize_rows(tokenizer, sft, max_length=4096)
    trainer = SFTTrainer(
        tiny_model(tokenizer),
        SFTConfig(str(tmp_path / "check"), max_steps=1, max_length=4096, bf16=False),
        train_dataset=tokenized.dataset(),
        processing_class=tokenizer,
    )
    assert isinstance(trainer.train_dataset, datasets.Dataset)
    labels = trainer.train_dataset["labels"]
    for ids, mask, row_labels in zip(
        tokenized.input_ids, tokenized.assistant_masks, labels, strict=True
    ):
        assert row_labels == [t if m else -100 for t, m in zip(ids, mask, strict=True)]
    assert any(0 in mask for mask in tokenized.assistant_masks), "some turns are masked"


# -- the record path as the oracle -------------------------------------------------------


def test_the_openai_episode_reads_back_as_recorded(frozen: Frozen) -> None:
    """Raw replies, malformed calls, refusals and endpoint failures: the steps of the
    OpenAI-policy episode read from the columns equal those of the record."""
    trajectory = frozen.catalog.trajectories.get(frozen.llm_id)  # feedback keys sorted, as stored
    stored = stored_chat_steps(frozen.catalog, frozen.version)[frozen.llm_id]
    assert stored == [ChatStep.of(s) for s in trajectory.steps]
    assert any(s.model_output for s in stored)
    assert any(s.call is None for s in stored)  # replies that gave no action


def test_export_rows_are_the_record_paths_rows_byte_for_byte(
    frozen: Frozen, tmp_path: Path
) -> None:
    report = export_dataset(frozen.catalog, frozen.version.id, tmp_path / "out", "hf")
    sft = read_split(report.out_dir / "hf" / "sft").to_pylist()
    rl = {r["task_id"]: r for r in read_split(report.out_dir / "hf" / "rl_tasks").to_pylist()}

    assert [r["trajectory_id"] for r in sft] == [m.trajectory_id for m in frozen.version.members]
    for row in sft:
        trajectory = frozen.catalog.trajectories.get(row["trajectory_id"])
        budget = trajectory.metadata.max_steps
        assert budget is not None
        expected = oracle_row(trajectory, frozen.member(trajectory.id), budget)
        assert {name: row[name] for name in expected} == expected
        task = rl[trajectory.task.id]
        assert task["task_spec"] == trajectory.task.to_json().decode()
        spec = trajectory.task.model_dump(mode="json")
        assert task["verifier"] == canonical_json(spec["verifier"]).decode()
        assert task["seed"] == trajectory.task.initial_conditions.seed
        view = task_view(trajectory.task, MobileSandbox(), budget)
        assert task["prompt"] == [orjson.dumps(m).decode() for m in opening_messages(view)]
    assert any(row["correction"] for row in sft)
    assert any(not all(row["trained"]) for row in sft)
