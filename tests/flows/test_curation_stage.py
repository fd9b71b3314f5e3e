"""The curate stage: partitions curated in worker processes give the records of one pass."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agents.curator import curate, render_for_judge
from agents.llm import OpenAIJsonLLM
from agents.policies.openai_policy import make_client
from agents.policies.scripted import FaultConfig, ScriptedPolicy
from agents.runner import run_episode
from contract import CurationRecord, Trajectory
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks
from flows import curation_stage
from flows.curation_stage import (
    CurationCounts,
    curate_round,
    curator_config,
    worker_count,
)
from flows.settings import CurationSettings, catalog_path
from storage import Catalog
from storage.curation_files import read_curation_file
from tests.fakes import ScriptedChatServer, text_reply
from tests.storage.builders import curations_in, write_shards

ROUND = "round-c"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory, sandbox: MobileSandbox) -> Path:
    """A state folder whose catalog holds a round of 90 trajectories (30 tasks, 3 attempts)."""
    home = tmp_path_factory.mktemp("home")
    policy = ScriptedPolicy(FaultConfig(rate=0.5, recovery_rate=0.5))
    tasks = sample_tasks(30, 5, sandbox)
    trajectories = [
        run_episode(task, sandbox, policy, round_id=ROUND, attempt=attempt)
        for attempt in range(3)
        for task in tasks
    ]
    with Catalog.open(catalog_path(home)) as catalog:
        catalog.rounds.begin(ROUND, {})
        catalog.tasks.add(ROUND, tasks)
        catalog.trajectories.ingest(write_shards(trajectories, home / "shards"))
    return home


def _curations(home: Path) -> list[CurationRecord]:
    with Catalog.open(catalog_path(home), read_only=True) as catalog:
        return catalog.reviews.curations_of_round(ROUND)


def _stored(home: Path) -> list[Trajectory]:
    with Catalog.open(catalog_path(home), read_only=True) as catalog:
        return catalog.trajectories.of_round(ROUND)


@pytest.mark.parametrize("workers", [1, 2])
def test_partitions_in_workers_give_and_store_the_records_of_one_pass(
    home: Path, workers: int
) -> None:
    settings = CurationSettings(partition_size=12, workers=workers)
    whole = curate(_stored(home), ROUND, curator_config(settings))

    counts = curate_round(home, ROUND, settings, home / f"rounds-{workers}")

    assert _curations(home) == whole
    assert counts == CurationCounts(curated=len(whole), kept=sum(r.kept for r in whole))
    files = sorted((home / f"rounds-{workers}" / ROUND / "curations").iterdir())
    assert len(files) > 1
    partitioned = [record for file in files for record in curations_in(read_curation_file(file))]
    assert sorted(partitioned, key=lambda r: r.trajectory_id) == whole


def test_a_judge_is_shown_every_trajectory_it_is_asked_about(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records are rendered a few at a time for the judge: none is missed."""
    monkeypatch.setattr(curation_stage, "PROMPT_BATCH", 7)
    stored = {t.id: t for t in _stored(home)}
    answer = text_reply('{"passed": true, "reason": "as asked"}')
    settings = CurationSettings(partition_size=40)
    with ScriptedChatServer([answer] * len(stored)) as server:
        llm = OpenAIJsonLLM(make_client(server.base_url, None, timeout_s=5.0), "judge")
        curate_round(home, ROUND, settings, home / "judged", llm)
        records = _curations(home)
        shown = [request["messages"][1]["content"] for request in server.requests]
    with ScriptedChatServer([answer] * len(stored)) as server:
        llm = OpenAIJsonLLM(make_client(server.base_url, None, timeout_s=5.0), "judge")
        in_memory = curate(list(stored.values()), ROUND, curator_config(settings), llm)

    assert records == in_memory
    judged = [r for r in records if r.judge is not None]
    assert len(judged) > curation_stage.PROMPT_BATCH
    assert all(r.judge == {"passed": True, "reason": "as asked"} for r in judged)
    assert sorted(shown) == sorted(render_for_judge(stored[r.trajectory_id]) for r in judged)


def test_one_worker_when_an_llm_judges_or_there_is_one_partition() -> None:
    many = 10**7
    assert worker_count(4, 10, judged=True, trajectories=many) == 1
    assert worker_count(4, 1, judged=False, trajectories=many) == 1
    assert worker_count(4, 10, judged=False, trajectories=many) == 4
    assert worker_count(0, 100, judged=False, trajectories=many) == min(os.cpu_count() or 1, 8)


def test_by_default_a_small_round_is_curated_in_this_process() -> None:
    per = curation_stage.TRAJECTORIES_PER_WORKER
    cores = min(os.cpu_count() or 1, curation_stage.MAX_AUTO_WORKERS)
    assert worker_count(0, 40, judged=False, trajectories=per - 1) == 1
    assert worker_count(0, 40, judged=False, trajectories=2 * per) == min(2, cores)
    assert worker_count(3, 40, judged=False, trajectories=10) == 3, "a setting is obeyed"


def test_curating_again_stores_the_same_records_once(home: Path) -> None:
    """An interrupted stage is run again whole: the same records, nothing stored twice."""
    settings = CurationSettings(partition_size=12)
    curate_round(home, ROUND, settings, home / "again")
    first, rows = _curations(home), _rows(home)

    counts = curate_round(home, ROUND, settings, home / "again")

    assert _curations(home) == first
    assert _rows(home) == rows
    assert rows["curations"] == counts.curated == len(first)


def _rows(home: Path) -> dict[str, int]:
    with Catalog.open(catalog_path(home), read_only=True) as catalog:
        return catalog.stats()
