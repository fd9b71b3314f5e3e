"""A frozen dataset version from real scripted sandbox episodes, for training tests."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from agents.policies.scripted import FaultConfig, ScriptedPolicy
from agents.runner import run_episode
from contract import (
    ApprovalDecision,
    DatasetApproval,
    DatasetMember,
    DatasetVersion,
    MixTarget,
    Outcome,
    Split,
    TaskSpec,
)
from curation.balance import dataset_content_hash
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import instantiate, template_named
from storage import Catalog
from tests.storage.builders import write_shards

ROUND = "round-training-test"


@dataclass(frozen=True)
class FrozenDataset:
    home: Path
    catalog_path: Path
    version: DatasetVersion
    tasks: tuple[TaskSpec, ...]


def train_tasks(template: str, n: int, first_seed: int = 0) -> list[TaskSpec]:
    """Up to ``n`` training-split instances of ``template`` with distinct fingerprints."""
    sandbox = MobileSandbox()
    tasks: dict[str, TaskSpec] = {}
    for seed in range(first_seed, first_seed + 40 * n):
        task = instantiate(template_named(template), seed, sandbox)
        if task.split is Split.TRAIN:
            tasks.setdefault(task.fingerprint, task)
        if len(tasks) == n:
            break
    return list(tasks.values())


def frozen_dataset(home: Path, tasks: Sequence[TaskSpec], fault_rate: float = 0.0) -> FrozenDataset:
    """Scripted episodes of ``tasks`` stored in ``home``'s catalog; the successes frozen
    as an approved dataset version."""
    sandbox = MobileSandbox()
    policy = ScriptedPolicy(FaultConfig(rate=fault_rate, recovery_rate=1.0))
    runs = [run_episode(t, sandbox, policy, round_id=ROUND) for t in tasks]
    shards = home / "shards" / ROUND
    write_shards(runs, shards)
    catalog_path = home / "catalog.duckdb"
    with Catalog.open(catalog_path) as catalog:
        catalog.ingest_shards([shards])
        members = sorted(
            (
                DatasetMember(trajectory_id=t.id, task_id=t.task.id, weight=1.0)
                for t in runs
                if t.metadata.outcome is Outcome.SUCCESS
            ),
            key=lambda m: m.trajectory_id,
        )
        version = DatasetVersion(
            round_id=ROUND,
            parent=None,
            content_hash=dataset_content_hash(members),
            members=tuple(members),
            target=MixTarget(),
            achieved={},
            policies=("scripted@1",),
            human_reviewed=0,
        )
        catalog.decide_dataset(
            version,
            DatasetApproval(
                dataset_id=version.id,
                round_id=ROUND,
                content_hash=version.content_hash,
                target=version.target,
                decision=ApprovalDecision.APPROVE,
                approver="test",
                automatic=True,
                decided_at=datetime(2026, 11, 30, 12, 0, tzinfo=UTC),
            ),
        )
    return FrozenDataset(home, catalog_path, version, tuple(tasks))
