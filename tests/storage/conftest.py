"""Storage fixtures: a round of real scripted trajectories, their shards, a fresh catalog."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agents.policies.scripted import FaultConfig, ScriptedPolicy
from agents.runner import run_episode
from contract import Trajectory
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks
from storage import Catalog
from tests.storage.builders import ROUND, with_screens, write_shards


@pytest.fixture(scope="session")
def round_trajectories(sandbox: MobileSandbox) -> list[Trajectory]:
    """One round: 48 tasks with faults and recoveries, 6 of them run a second time, and
    one episode with screens, artifacts and tokens."""
    policy = ScriptedPolicy(FaultConfig(rate=0.6, recovery_rate=0.6))
    tasks = sample_tasks(48, 7, sandbox)
    trajectories = [run_episode(t, sandbox, policy, round_id=ROUND) for t in tasks]
    trajectories += [run_episode(t, sandbox, policy, round_id=ROUND, attempt=1) for t in tasks[:6]]
    trajectories.append(with_screens(trajectories[0]))
    return trajectories


@pytest.fixture
def shard_folder(tmp_path: Path, round_trajectories: list[Trajectory]) -> Path:
    folder = tmp_path / "shards"
    write_shards(round_trajectories, folder)
    return folder


def _duckdb(folder: Path, *, read_only: bool) -> Catalog:
    return Catalog.open(folder / "catalog.duckdb", read_only=read_only)


IMPLEMENTATIONS: dict[str, Callable[..., Catalog]] = {"duckdb": _duckdb}
"""Every implementation of the catalog's stores: (state folder, read_only=) -> its stores.
The conformance suite and every storage test run against each."""


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def catalog(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Catalog]:
    with IMPLEMENTATIONS[request.param](tmp_path / "state", read_only=False) as opened:
        yield opened


@pytest.fixture
def ingested(catalog: Catalog, shard_folder: Path) -> Catalog:
    catalog.trajectories.ingest([shard_folder])
    return catalog
