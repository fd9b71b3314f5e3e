"""A frozen dataset version from real scripted sandbox episodes, for training tests."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from agents.policies.chat_format import format_tools, opening_messages, task_view
from agents.policies.scripted import FaultConfig, ScriptedPolicy
from agents.runner import run_episode
from bench.training import freeze_successes
from contract import DatasetVersion, Split, TaskSpec
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import instantiate, template_named
from storage import Catalog
from training.base_model import BaseModel, load_base

ROUND = "round-training-test"


@dataclass(frozen=True)
class FrozenDataset:
    home: Path
    catalog_path: Path
    version: DatasetVersion
    tasks: tuple[TaskSpec, ...]


def base_for_task(
    task: TaskSpec, max_steps: int, *, name: str = "tiny", seed: int = 0, extra: str = ""
) -> BaseModel:
    """A built base whose tokenizer is trained on ``task``'s opening turns and tool
    schemas (and ``extra`` text): enough vocabulary for a policy test of that one task."""
    view = task_view(task, MobileSandbox(), max_steps)
    corpus = [json.dumps(format_tools(view)) + json.dumps(opening_messages(view)) + extra]
    return load_base(name, corpus, seed=seed)


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
    catalog_path = home / "catalog.duckdb"
    shards = home / "shards" / ROUND
    shards.mkdir(parents=True, exist_ok=True)
    with Catalog.open(catalog_path) as catalog:
        version = freeze_successes(catalog, runs, shards, round_id=ROUND, approver="test")
    return FrozenDataset(home, catalog_path, version, tuple(tasks))
