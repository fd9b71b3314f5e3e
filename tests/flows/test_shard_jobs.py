"""A round's collection shards: every task in exactly one shard, the teacher's, the
device's and BFCL's in shards of their own, grouped by world; each shard's tasks in its manifest
(read from the catalog a batch at a time), so a shard's Prefect task gets no records."""

from __future__ import annotations

from pathlib import Path

import pytest

from contract import InvalidInputError, Split, TaskSpec, default_plan
from envs.appium.backend import needs_gui
from envs.bfcl.backend import bfcl_task_of
from envs.bfcl.construct import construct_bfcl
from envs.bfcl.tasks import split_of
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import instantiate, sample_tasks, template_named
from flows import round_stages
from flows.execution import collection_threads
from flows.round_config import RoundConfig, resolve_config
from flows.round_stages import ShardJob, manifest_path, shard_jobs, shard_path
from flows.settings import FlywheelSettings, catalog_path
from storage import Catalog, write_trajectory_shard
from storage.task_manifests import read_task_manifest

ROUND = "round-a"


@pytest.fixture
def stored(tmp_path: Path) -> tuple[list[TaskSpec], list[TaskSpec]]:
    """30 tasks of ``ROUND`` (two of them need the GUI agent) and 3 of an older round."""
    sandbox = MobileSandbox()
    gui = [instantiate(template_named("grant_app_permission"), s, sandbox) for s in (3, 4)]
    ours = [*sample_tasks(28, 5, sandbox), *gui]
    older = [t for t in sample_tasks(3, 9, sandbox) if t.id not in {o.id for o in ours}]
    with Catalog.open(catalog_path(tmp_path)) as catalog:
        catalog.tasks.add(ROUND, ours)
        catalog.tasks.add("round-old", older)
    return ours, older


def _config(tmp_path: Path, **changes: object) -> RoundConfig:
    config = resolve_config(FlywheelSettings(home=tmp_path), tasks=30, policy="openai")
    return config.model_copy(update={"shard_size": 4, **changes})


@pytest.mark.parametrize("batch", [1, 7, 2_000])
def test_every_task_is_in_one_shard_whose_manifest_holds_its_spec(
    tmp_path: Path,
    stored: tuple[list[TaskSpec], list[TaskSpec]],
    monkeypatch: pytest.MonkeyPatch,
    batch: int,
) -> None:
    monkeypatch.setattr(round_stages, "SPEC_BATCH", batch)
    ours, older = stored
    config = _config(tmp_path, teacher_share=0.5, devices="gui")
    root = tmp_path / "rounds"

    jobs = shard_jobs(tmp_path, ROUND, [t.id for t in older], config, root)

    by_id = {t.id: t for t in [*ours, *older]}
    manifests = {job.name: read_task_manifest(manifest_path(root, ROUND, job.name)) for job in jobs}
    placed = [t.id for tasks in manifests.values() for t in tasks]
    assert sorted(placed) == sorted(by_id)  # each task once
    assert all(t == by_id[t.id] for tasks in manifests.values() for t in tasks)
    assert all(len(manifests[job.name]) == job.tasks <= 4 for job in jobs)
    teacher = config.teacher_tasks(by_id)
    for job in jobs:
        tasks = manifests[job.name]
        assert (
            job.by_teacher == all(t.id in teacher for t in tasks) == job.name.startswith("teacher")
        )
        assert job.policy == ("scripted" if job.by_teacher else "openai")
        assert (job.backend == "device") == all(needs_gui(t) for t in tasks)
        assert tasks == sorted(tasks, key=lambda t: (t.initial_conditions.seed, t.id))
    assert {t.id for job in jobs if job.backend == "device" for t in manifests[job.name]} == {
        task_id for task_id, t in by_id.items() if needs_gui(t)
    }
    assert sum(needs_gui(t) for t in ours) >= 2


def test_without_devices_or_a_teacher_every_shard_is_the_policys_on_the_sandbox(
    tmp_path: Path, stored: tuple[list[TaskSpec], list[TaskSpec]]
) -> None:
    jobs = shard_jobs(tmp_path, ROUND, [], _config(tmp_path), tmp_path / "rounds")

    assert [job.name for job in jobs] == [f"shard-{i:05d}" for i in range(8)]
    assert {(job.policy, job.backend, job.by_teacher) for job in jobs} == {
        ("openai", "sandbox", False)
    }
    assert sum(job.tasks for job in jobs) == 30


def test_a_shard_already_collected_gets_no_manifest_again(
    tmp_path: Path, stored: tuple[list[TaskSpec], list[TaskSpec]]
) -> None:
    root = tmp_path / "rounds"
    first = shard_jobs(tmp_path, ROUND, [], _config(tmp_path), root)
    for job in first:
        Path(manifest_path(root, ROUND, job.name)).unlink()
    write_trajectory_shard([], shard_path(root, ROUND, first[0].name), shard=first[0].name)

    again = shard_jobs(tmp_path, ROUND, [], _config(tmp_path), root)

    assert again == first
    written = {job.name for job in again if Path(manifest_path(root, ROUND, job.name)).exists()}
    assert written == {job.name for job in again[1:]}


@pytest.mark.parametrize("batch", [1, 2_000])
def test_construction_knows_the_tasks_of_other_rounds_read_a_batch_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch: int
) -> None:
    monkeypatch.setattr(round_stages, "SPEC_BATCH", batch)
    assert round_stages.construct(tmp_path, "round-1", default_plan(12), 3, max_passes=4) == 12
    assert round_stages.construct(tmp_path, "round-2", default_plan(12), 3, max_passes=4) == 12
    with Catalog.open(catalog_path(tmp_path), read_only=True) as catalog:
        first, second = (catalog.tasks.of_round(r) for r in ("round-1", "round-2"))
        refused = catalog.tasks.rejections_of_round("round-2")
    # The same seed draws the first round's tasks again: each is refused as known.
    assert not {t.fingerprint for t in first} & {t.fingerprint for t in second}
    assert {t.fingerprint for t in first} <= {r.fingerprint for r in refused}


def _with_bfcl_tasks(tmp_path: Path) -> tuple[list[TaskSpec], list[ShardJob]]:
    """Six BFCL tasks added to ``ROUND``, then its shard jobs with half the tasks the
    teacher's and the GUI tasks on devices: the BFCL tasks and the jobs."""
    bfcl = construct_bfcl(ROUND, 6, 1, frozenset()).accepted
    with Catalog.open(catalog_path(tmp_path)) as catalog:
        catalog.tasks.add(ROUND, bfcl)
    config = _config(tmp_path, teacher_share=0.5, devices="gui")
    return bfcl, shard_jobs(tmp_path, ROUND, [], config, tmp_path / "rounds")


def test_bfcl_tasks_run_in_shards_of_their_own_on_bfcl_s_world(
    tmp_path: Path, stored: tuple[list[TaskSpec], list[TaskSpec]]
) -> None:
    bfcl, jobs = _with_bfcl_tasks(tmp_path)

    root = tmp_path / "rounds"
    manifests = {job.name: read_task_manifest(manifest_path(root, ROUND, job.name)) for job in jobs}
    on_bfcl = {t.id for job in jobs if job.backend == "bfcl" for t in manifests[job.name]}
    assert on_bfcl == {t.id for t in bfcl}
    for job in jobs:
        backends = {t.initial_conditions.backend for t in manifests[job.name]}
        assert backends == ({"bfcl"} if job.backend == "bfcl" else {"sandbox"})
        if job.backend == "bfcl":
            prefix = "teacher-bfcl-" if job.by_teacher else "bfcl-"
            assert job.name.startswith(prefix) and job.name[len(prefix) :].isdigit()
    assert {job.by_teacher for job in jobs if job.backend == "bfcl"} == {True, False}


def test_a_mixed_construction_takes_bfcl_s_share_and_never_its_development_tasks(
    tmp_path: Path,
) -> None:
    plan = default_plan(8)
    assert round_stages.construct(tmp_path, "round-1", plan, 3, max_passes=4, bfcl_tasks=5) == 13
    assert round_stages.construct(tmp_path, "round-2", plan, 3, max_passes=4, bfcl_tasks=5) == 13
    with Catalog.open(catalog_path(tmp_path), read_only=True) as catalog:
        first, second = (catalog.tasks.of_round(r) for r in ("round-1", "round-2"))
    for tasks in (first, second):
        bfcl = [t for t in tasks if t.initial_conditions.backend == "bfcl"]
        assert len(bfcl) == 5 and all(t.split is Split.TRAIN for t in bfcl)
        assert all(split_of(bfcl_task_of(t)) is Split.TRAIN for t in bfcl)
    # the same seed in another round takes other BFCL tasks: the pool is not reused
    assert not {t.fingerprint for t in first} & {t.fingerprint for t in second}


def test_a_simulated_shard_without_a_simulator_is_refused_before_it_runs(tmp_path: Path) -> None:
    """A round resumed with settings that no longer name a simulator: the shard says why,
    rather than run tasks on simulated tools in the sandbox."""
    settings = FlywheelSettings(home=tmp_path)
    config = resolve_config(settings, tasks=8, simulated_share=0.5)
    with pytest.raises(InvalidInputError) as raised:
        round_stages.collect_one_shard(
            tmp_path, ROUND, "simulated-00000", config, settings, backend="simulated"
        )
    assert raised.value.field == "simulated_share" and "tool_simulator" in str(raised.value)


def test_only_shards_that_wait_are_collected_on_several_threads(
    tmp_path: Path, stored: tuple[list[TaskSpec], list[TaskSpec]]
) -> None:
    settings = FlywheelSettings.model_validate({"home": tmp_path, "round": {"collect_workers": 3}})

    _, mixed = _with_bfcl_tasks(tmp_path)

    # The teacher's shards on the sandbox and on BFCL are pure Python; the model's and
    # the device's wait.
    assert {(job.policy, job.backend, job.waits) for job in mixed} == {
        ("scripted", "sandbox", False),
        ("scripted", "bfcl", False),
        ("scripted", "device", True),
        ("openai", "sandbox", True),
        ("openai", "bfcl", True),
        ("openai", "device", True),
    }
    assert collection_threads(settings, any(job.waits for job in mixed)) == 3
    assert collection_threads(settings, False) == 1
    assert ShardJob("simulated-00000", "scripted", "simulated", 4, False).waits
