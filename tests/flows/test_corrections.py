"""Corrections (``correct_failures``): the tasks a round's policy failed, read from the
catalog, go to the scripted teacher in shards of their own, each with its manifest."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.policies.scripted import ScriptedPolicy
from agents.runner import run_episode
from contract import Outcome, PolicyInfo, TaskSpec, Trajectory
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks
from flows.round_config import RoundConfig, resolve_config
from flows.round_stages import correction_jobs, manifest_path, shard_path
from flows.settings import FlywheelSettings, catalog_path
from storage import Catalog, write_trajectory_shard
from storage.task_manifests import read_task_manifest

ROUND = "round-c"
MODEL = PolicyInfo(name="openai", version="planner-fake", model="planner-fake")


def _episode(task: TaskSpec, *, outcome: Outcome, round_id: str = ROUND) -> Trajectory:
    """A real episode of ``task`` by the scripted policy ending in ``outcome``: cut short
    after one step for a failure, on a backend failing every call for a backend error."""
    backend = MobileSandbox(backend_fault_rate=1.0 if outcome is Outcome.BACKEND_ERROR else 0.0)
    steps = 1 if outcome is Outcome.FAILURE else None
    trajectory = run_episode(task, backend, ScriptedPolicy(), max_steps=steps, round_id=round_id)
    assert trajectory.metadata.outcome is outcome, trajectory.metadata
    return trajectory


def _by_model(trajectory: Trajectory, attempt: int = 0) -> Trajectory:
    """The same episode as the model policy's (its id follows its content)."""
    metadata = trajectory.metadata.model_copy(update={"policy": MODEL, "attempt": attempt})
    data = trajectory.model_dump(mode="json", exclude={"id"})
    data["metadata"] = metadata.model_dump(mode="json")
    return Trajectory.model_validate(data)


@pytest.fixture
def tasks() -> list[TaskSpec]:
    """Seven tasks of several steps (one step does not finish them)."""
    longer = [t for t in sample_tasks(30, 11, MobileSandbox()) if len(t.reference_plan) > 2]
    assert len(longer) >= 7
    return longer[:7]


@pytest.fixture
def home(tmp_path: Path, tasks: list[TaskSpec]) -> Path:
    """A catalog holding, for the round's tasks 0-5 and another round's task 6:
    0 the model failed; 1 the model failed, then succeeded; 2 the model met only backend
    errors; 3 only the teacher failed; 4 the model failed, the teacher succeeded; 5 the
    model succeeded; 6 the model failed, in another round."""
    episodes = [
        _by_model(_episode(tasks[0], outcome=Outcome.FAILURE)),
        _by_model(_episode(tasks[1], outcome=Outcome.FAILURE)),
        _by_model(_episode(tasks[1], outcome=Outcome.SUCCESS), attempt=1),
        _by_model(_episode(tasks[2], outcome=Outcome.BACKEND_ERROR)),
        _episode(tasks[3], outcome=Outcome.FAILURE),
        _by_model(_episode(tasks[4], outcome=Outcome.FAILURE)),
        _episode(tasks[4], outcome=Outcome.SUCCESS),
        _by_model(_episode(tasks[5], outcome=Outcome.SUCCESS)),
    ]
    other = [_by_model(_episode(tasks[6], outcome=Outcome.FAILURE, round_id="round-d"))]
    with Catalog.open(catalog_path(tmp_path)) as catalog:
        catalog.tasks.add(ROUND, tasks[:6])
        catalog.tasks.add("round-d", tasks[6:])
        write_trajectory_shard(episodes, tmp_path / "a.parquet", shard="shard-00000")
        write_trajectory_shard(other, tmp_path / "b.parquet", shard="shard-00000")
        catalog.trajectories.ingest([tmp_path / "a.parquet", tmp_path / "b.parquet"])
    return tmp_path


def _config(home: Path, **changes: object) -> RoundConfig:
    config = resolve_config(FlywheelSettings(home=home), tasks=6, policy="openai")
    return config.model_copy(update={"shard_size": 1, "correct_failures": True, **changes})


def test_a_task_counts_as_failed_when_the_policy_failed_it_and_never_succeeded(
    home: Path, tasks: list[TaskSpec]
) -> None:
    with Catalog.open(catalog_path(home), read_only=True) as catalog:
        failed = catalog.trajectories.failed_tasks(ROUND, "scripted")
        assert failed == sorted([tasks[0].id, tasks[4].id])
        assert catalog.trajectories.failed_tasks("round-d", "scripted") == [tasks[6].id]
        assert catalog.trajectories.failed_tasks("round-none", "scripted") == []


def test_the_teacher_gets_the_failed_tasks_in_correction_shards(
    home: Path, tasks: list[TaskSpec]
) -> None:
    root = home / "rounds"
    jobs = correction_jobs(home, ROUND, _config(home), root)

    assert sorted(job.name for job in jobs) == ["correction-00000", "correction-00001"]
    assert {(job.policy, job.backend, job.by_teacher, job.tasks) for job in jobs} == {
        ("scripted", "sandbox", True, 1)
    }
    manifests = [read_task_manifest(manifest_path(root, ROUND, job.name)) for job in jobs]
    assert sorted(t.id for m in manifests for t in m) == sorted([tasks[0].id, tasks[4].id])
    assert [t for m in manifests for t in m if t.id == tasks[0].id] == [tasks[0]]


def test_a_correction_shard_already_collected_gets_no_manifest_again(home: Path) -> None:
    root = home / "rounds"
    first = correction_jobs(home, ROUND, _config(home), root)
    done = first[0].name
    (tasks,) = [read_task_manifest(manifest_path(root, ROUND, done))]
    write_trajectory_shard(
        [_episode(t, outcome=Outcome.SUCCESS) for t in tasks],
        shard_path(root, ROUND, done),
        shard=done,
    )
    Path(manifest_path(root, ROUND, done)).unlink()

    again = correction_jobs(home, ROUND, _config(home), root)

    assert again == first, "the same shards: the teacher's episodes never count as failures"
    assert not Path(manifest_path(root, ROUND, done)).exists()


@pytest.mark.parametrize(
    "changes", [{"correct_failures": False}, {"policy": "scripted", "model": None}]
)
def test_no_corrections_unless_asked_for_and_another_policy_collects(
    home: Path, changes: dict[str, object]
) -> None:
    assert correction_jobs(home, ROUND, _config(home, **changes), home / "rounds") == []


def test_the_setting_reaches_the_round_and_changes_its_id() -> None:
    settings = FlywheelSettings.model_validate({"round": {"correct_failures": True}})
    on = resolve_config(settings, tasks=6, policy="openai")
    off = resolve_config(FlywheelSettings(), tasks=6, policy="openai")
    assert on.correct_failures and not off.correct_failures
    assert on.round_id() != off.round_id()
    assert resolve_config(settings, tasks=6, policy="openai", correct_failures=False) == off
    scripted = resolve_config(settings, tasks=6, policy="scripted")
    assert scripted == resolve_config(FlywheelSettings(), tasks=6, policy="scripted")
