"""Fingerprint partitions: the curator's records are the same, partition by partition."""

from __future__ import annotations

import pytest

from agents.curator import curate
from agents.policies.scripted import FaultConfig, ScriptedPolicy
from agents.runner import run_episode
from contract import DropReason, InvalidInputError, Trajectory
from curation.partitions import fingerprint_partitions
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks


@pytest.fixture(scope="module")
def attempts(sandbox: MobileSandbox) -> list[Trajectory]:
    """40 tasks run three times each: attempts of one task share its fingerprint, and
    some repeat another exactly or nearly (the curator drops those)."""
    policy = ScriptedPolicy(FaultConfig(rate=0.5, recovery_rate=0.5))
    tasks = sample_tasks(40, 3, sandbox)
    return [
        run_episode(task, sandbox, policy, round_id="r", attempt=attempt)
        for attempt in range(3)
        for task in tasks
    ]


def test_a_fingerprint_is_never_split_and_partitions_are_about_the_size() -> None:
    pairs = [(f"t{i:03d}", f"fp{i % 7}") for i in range(70)]

    partitions = fingerprint_partitions(pairs, size=15)

    assert sorted(i for part in partitions for i in part) == sorted(i for i, _ in pairs)
    fingerprint = dict(pairs)
    owners = {fingerprint[i]: n for n, part in enumerate(partitions) for i in part}
    assert all(owners[fingerprint[i]] == n for n, part in enumerate(partitions) for i in part)
    assert [len(part) for part in partitions] == [20, 20, 20, 10]
    assert all(part == sorted(part) for part in partitions)


def test_fingerprints_are_taken_in_the_order_they_first_appear() -> None:
    pairs = [("t1", "fp-b"), ("t2", "fp-a"), ("t3", "fp-b"), ("t4", "fp-c"), ("t0", "fp-a")]

    assert fingerprint_partitions(pairs, 2) == [["t1", "t3"], ["t0", "t2"], ["t4"]]
    assert fingerprint_partitions([], 9) == []


def test_a_size_below_one_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidInputError, match="partition_size"):
        fingerprint_partitions([("t", "fp")], 0)


def test_curating_partition_by_partition_gives_the_records_of_curating_all(
    attempts: list[Trajectory],
) -> None:
    by_id = {t.id: t for t in attempts}
    partitions = fingerprint_partitions(((t.id, t.task.fingerprint) for t in attempts), 10)

    records = [r for ids in partitions for r in curate([by_id[i] for i in ids], "r")]

    whole = curate(attempts, "r")
    assert len(partitions) > 5
    assert sorted(records, key=lambda r: r.trajectory_id) == whole
    duplicates = {DropReason.DUPLICATE, DropReason.NEAR_DUPLICATE}
    assert sum(r.drop_reason in duplicates for r in whole) > 0
