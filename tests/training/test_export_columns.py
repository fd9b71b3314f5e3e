"""The export reads the catalog's columns, not records: its rows are byte for byte the
rows built from the rebuilt trajectories (the record path, kept in tests as the oracle:
``oracle_row``)."""

from __future__ import annotations

import shutil
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import duckdb
import orjson
import pyarrow as pa
import pytest

import training.export
from agents.policies.chat_format import (
    ChatStep,
    format_tools,
    task_view,
    template_messages,
    trajectory_conversation,
)
from bench.synthetic import synthetic_round
from contract import DatasetMember, DatasetVersion, Outcome, Trajectory
from curation.attribution import erroneous_steps
from envs.sandbox import MobileSandbox
from storage import Catalog, UnknownIdError
from tests.storage.builders import make_version
from training.card import CardTally
from training.export import (
    ChunkJob,
    ChunkResult,
    ChunkSpread,
    build_chunk,
    export_dataset,
    loss_masked_steps,
    outcome_label,
)


def stored_chat_steps(catalog: Catalog, version: DatasetVersion) -> dict[str, list[ChatStep]]:
    """The steps of every member of ``version`` as the export reads them."""
    steps = catalog.trajectories.export_columns(
        version.id, 0, len(version.members)
    ).steps.to_pylist()
    found: dict[str, list[ChatStep]] = {}
    for s in steps:
        step = ChatStep.from_json(s["idx"], s["action"], s["model_output"], s["feedback"])
        found.setdefault(s["trajectory_id"], []).append(step)
    return found


def oracle_row(trajectory: Trajectory, member: DatasetMember, budget: int) -> dict[str, Any]:
    """The ``sft`` row of ``trajectory`` as the record path builds it."""
    view = task_view(trajectory.task, MobileSandbox(), budget)
    masked = loss_masked_steps(member.masked_steps, member.human, erroneous_steps(trajectory.steps))
    chat = trajectory_conversation(
        trajectory, view, masked_steps=masked, correction=member.correction
    )
    meta = trajectory.metadata
    return {
        "messages": [orjson.dumps(m).decode() for m in template_messages(chat.messages)],
        "tools": [orjson.dumps(t).decode() for t in format_tools(view)],
        "trained": chat.trained,
        "masked_steps": list(masked),
        "outcome": outcome_label(meta.outcome.value, meta.recovered),
        "policy": f"{meta.policy.name}@{meta.policy.version}",
        "fingerprint": trajectory.task.fingerprint,
        "capabilities": [c.value for c in trajectory.task.capabilities],
        "difficulty": trajectory.task.difficulty.value,
    }


def read_split(folder: Path) -> pa.Table:
    """An ``hf`` split's Arrow files as written: JSON columns as their stored text."""
    tables = []
    for path in sorted(folder.glob("data-*.arrow")):
        with pa.memory_map(str(path)) as source:
            tables.append(pa.ipc.open_stream(source).read_all())
    return pa.concat_tables(tables)


ROUND = "round-columns"


@dataclass(frozen=True)
class Made:
    """A catalog of 2,000 trajectories of every outcome, and a version holding them all."""

    path: Path
    version: DatasetVersion
    records: dict[str, Trajectory]
    """Rebuilt from the catalog: feedback keys sorted, as stored."""


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Made:
    path = tmp_path_factory.mktemp("columns") / "catalog.duckdb"
    synthetic_round(path, ROUND, 2000, seed=5)
    with Catalog.open(path) as catalog:
        ids = sorted(tid for tid, _ in catalog.trajectories.fingerprints(ROUND))
        records = {t.id: t for t in catalog.trajectories.by_ids(ids)}
        version = make_version([records[i] for i in ids], round_id=ROUND)
        catalog.datasets.freeze(version)
    return Made(path, version, records)


def test_chat_steps_from_stored_columns_equal_those_of_the_records(made: Made) -> None:
    with Catalog.open(made.path, read_only=True) as catalog:
        stored = stored_chat_steps(catalog, made.version)

    for trajectory in made.records.values():
        assert stored.get(trajectory.id, []) == [ChatStep.of(s) for s in trajectory.steps]
    assert {t.metadata.outcome for t in made.records.values()} == set(Outcome)
    kinds = {s.error_kind for steps in stored.values() for s in steps}
    assert len(kinds - {None}) >= 3  # errors of several kinds were rendered from JSON


def test_rows_of_a_synthetic_version_equal_the_record_paths(
    made: Made, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Thousands of members of every outcome, several chunks, worker processes."""
    monkeypatch.setattr(training.export, "CHUNK", 700)
    with Catalog.open(made.path, read_only=True) as catalog:
        report = export_dataset(catalog, made.version.id, tmp_path / "out", "hf", workers=2)
    sft = read_split(report.out_dir / "hf" / "sft").to_pylist()

    assert len(sft) == len(made.version.members)
    for row, member in zip(sft, made.version.members, strict=True):
        trajectory = made.records[member.trajectory_id]
        budget = trajectory.metadata.max_steps or trajectory.task.max_steps
        assert budget is not None
        expected = oracle_row(trajectory, member, budget)
        assert {name: row[name] for name in expected} == expected
    assert not list((report.out_dir / "hf").rglob("*.arrow.tmp"))


def test_a_member_whose_trajectory_is_gone_is_named(made: Made, tmp_path: Path) -> None:
    """A catalog damaged by hand: the export names the missing trajectory."""
    path = tmp_path / "catalog.duckdb"
    shutil.copy(made.path, path)
    gone = made.version.members[3].trajectory_id
    with duckdb.connect(str(path)) as con:
        con.execute("DELETE FROM trajectories WHERE id = ?", [gone])
    with (
        Catalog.open(path, read_only=True) as catalog,
        pytest.raises(UnknownIdError, match=gone),
    ):
        catalog.trajectories.export_columns(made.version.id, 0, 10)


def test_worker_chunks_emit_each_task_once_as_one_process_does(made: Made) -> None:
    """Tasks that come back in later chunks: a worker does not know what earlier chunks
    had, the exporting process drops their ``rl_tasks`` rows again; the tables and the
    tally are those of one process, whichever spread built the chunks (the export's own
    processes, or any ``ChunkSpread``: here one that builds them in this process, as a
    cluster's tasks would, from the job alone)."""
    members = made.version.members
    chunk_of: dict[str, set[int]] = {}
    for position, member in enumerate(members):
        chunk_of.setdefault(member.task_id, set()).add(position // 300)
    assert any(len(chunks) > 1 for chunks in chunk_of.values())  # the case this is about

    jobs: list[tuple[int, int]] = []

    def inline(job: ChunkJob, ranges: Sequence[tuple[int, int]]) -> Generator[ChunkResult]:
        for start, stop in ranges:
            jobs.append((start, stop))
            yield build_chunk(job, start, stop)

    def built(
        workers: int, spread: ChunkSpread | None = None
    ) -> tuple[list[Any], list[Any], CardTally]:
        with Catalog.open(made.path, read_only=True) as catalog, TemporaryDirectory() as tmp:
            rows = training.export._Rows(
                catalog, made.version, None, verify=False, workers=workers, chunk=300, spread=spread
            )
            chunks = [(c.sft.to_pylist(), c.rl.to_pylist()) for c in rows.chunks(Path(tmp))]
            assert list(Path(tmp).iterdir()) == []  # the workers' files are gone
        return [sft for sft, _ in chunks], [rl for _, rl in chunks], rows.tally

    sft, rl, tally = built(1)
    assert len(sft) > 1
    assert built(2) == (sft, rl, tally)
    assert built(1, inline) == (sft, rl, tally)
    assert jobs == [
        (start, min(start + 300, len(members))) for start in range(0, len(members), 300)
    ]
    training.export._worker_builders.clear()
    assert sum(map(len, rl)) == tally.rl_tasks == len(chunk_of)
    assert tally.sft_rows == len(members)
