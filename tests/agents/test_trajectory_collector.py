"""The trajectory-collector graph: shards, bounded backend retries, kept failures."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from agents.policies.openai_policy import OpenAIPolicy, make_client
from agents.policies.scripted import FaultConfig, ScriptedPolicy
from agents.trajectory_collector import collect_shard, make_run_episodes
from contract import Outcome, RetryPolicy, Split, TaskSpec, Termination, Trajectory
from envs.backend import Backend
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks
from tests.fakes import refusing_url

THREE = RetryPolicy(attempts=3, backoff_s=0.0, max_backoff_s=0.0)
TWO = RetryPolicy(attempts=2, backoff_s=0.0, max_backoff_s=0.0)


def _lease(rates: dict[int, float]) -> dict[int, Backend]:
    return {a: MobileSandbox(backend_fault_rate=r, device=f"sandbox-{a}") for a, r in rates.items()}


def test_a_clean_shard_has_one_trajectory_per_task(sandbox: MobileSandbox) -> None:
    tasks = sample_tasks(12, 4, sandbox, split=Split.TRAIN)
    out = collect_shard("round-c", tasks, lambda _: sandbox, ScriptedPolicy())
    assert sorted(t.task.id for t in out) == sorted(t.id for t in tasks)
    assert all(t.metadata.round == "round-c" and t.metadata.attempt == 0 for t in out)
    assert all(t.metadata.outcome is Outcome.SUCCESS for t in out)


def test_backend_faults_are_retried_on_another_device_and_kept(sandbox: MobileSandbox) -> None:
    tasks = sample_tasks(6, 5, sandbox, split=Split.TRAIN)
    devices = _lease({0: 1.0, 1: 0.0, 2: 0.0})
    out = collect_shard("round-r", tasks, devices.__getitem__, ScriptedPolicy(), retry=THREE)
    assert len(out) == 12
    by_attempt = Counter((t.metadata.attempt, t.metadata.outcome) for t in out)
    assert by_attempt == {(0, Outcome.BACKEND_ERROR): 6, (1, Outcome.SUCCESS): 6}
    assert {t.metadata.device for t in out} == {"sandbox-0", "sandbox-1"}


def test_every_episode_is_told_as_it_ends_retries_too(sandbox: MobileSandbox) -> None:
    tasks = sample_tasks(4, 5, sandbox, split=Split.TRAIN)
    devices = _lease({0: 1.0, 1: 0.0, 2: 0.0})
    heard: list[Trajectory] = []
    out = collect_shard(
        "round-p", tasks, devices.__getitem__, ScriptedPolicy(), on_episode=heard.append
    )
    assert sorted(t.id for t in heard) == sorted(t.id for t in out)
    assert [t.metadata.attempt for t in heard] == [0] * 4 + [1] * 4  # in the order they ran


def test_retries_are_bounded(sandbox: MobileSandbox) -> None:
    tasks = sample_tasks(3, 6, sandbox, split=Split.TRAIN)
    devices = _lease({0: 1.0, 1: 1.0, 2: 1.0, 3: 0.0})
    out = collect_shard("round-b", tasks, devices.__getitem__, ScriptedPolicy(), retry=THREE)
    assert len(out) == 9
    assert all(t.metadata.outcome is Outcome.BACKEND_ERROR for t in out)
    assert max(t.metadata.attempt for t in out) == 2


def test_the_writer_gets_the_shard_once_in_order(sandbox: MobileSandbox, tmp_path: Path) -> None:
    tasks = sample_tasks(5, 7, sandbox, split=Split.TRAIN)
    calls: list[tuple[list[str], Path]] = []

    def writer(trajectories: Sequence[Trajectory], path: str) -> None:
        calls.append(([t.id for t in trajectories], Path(path)))

    policy = ScriptedPolicy(FaultConfig(rate=1.0))
    out = collect_shard(
        "round-w",
        tasks,
        lambda _: sandbox,
        policy,
        shard_path=tmp_path / "s.parquet",
        writer=writer,
    )
    assert calls == [([t.id for t in out], tmp_path / "s.parquet")]


def test_run_episodes_node_returns_pending_retries(sandbox: MobileSandbox) -> None:
    tasks: list[TaskSpec] = sample_tasks(2, 8, sandbox, split=Split.TRAIN)
    flaky = MobileSandbox(backend_fault_rate=1.0)
    node = make_run_episodes(lambda _: flaky, ScriptedPolicy(), max_steps=15, retry=TWO)
    update = node({"round_id": "r", "tasks": tasks})
    assert [(t.id, a) for t, a in update["pending"]] == [(t.id, 1) for t in tasks]
    assert len(update["trajectories"]) == 2


def test_an_endpoint_failure_is_not_run_again_on_another_device(sandbox: MobileSandbox) -> None:
    """The endpoint's own retries are spent: another device would ask the same endpoint."""
    tasks = sample_tasks(2, 9, sandbox, split=Split.TRAIN)
    client = make_client(refusing_url(), None, 2.0)
    policy = OpenAIPolicy(client, "m", retry=TWO, sleep=lambda s: None)
    leased: list[int] = []

    def lease(attempt: int) -> Backend:
        leased.append(attempt)
        return sandbox

    out = collect_shard("round-e", tasks, lease, policy, retry=THREE)
    assert leased == [0, 0]
    assert [t.metadata.termination for t in out] == [Termination.ENDPOINT_ERROR] * 2
    assert all(t.metadata.outcome is Outcome.BACKEND_ERROR for t in out)
    assert all(t.metadata.retries == 1 for t in out)


def test_another_device_is_tried_after_the_backend_policy_s_wait(sandbox: MobileSandbox) -> None:
    tasks = sample_tasks(2, 6, sandbox, split=Split.TRAIN)
    devices = _lease({0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0})
    waits: list[float] = []
    retry = RetryPolicy(attempts=4, backoff_s=2.0, max_backoff_s=5.0)
    out = collect_shard(
        "round-w", tasks, devices.__getitem__, ScriptedPolicy(), retry=retry, sleep=waits.append
    )
    assert waits == [2.0, 4.0, 5.0]  # one wait per pass of retries, doubling, capped
    assert len(out) == 8
