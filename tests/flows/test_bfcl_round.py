"""Rounds on BFCL's multi-turn tasks, alone and mixed with the sandbox's, end to end as a
user runs them (``flywheel round``, then ``flywheel datasets export``) against the real
Prefect server: BFCL's tasks are collected on BFCL's world, never from its held-out
development split, curated and gated like the sandbox's, and exported with their own
tools and every user turn."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import datasets
import pytest

from agents.policies.chat_format import HARNESS
from contract import Outcome, Split
from envs.bfcl.backend import bfcl_task_of
from envs.bfcl.tasks import function_docs, split_of
from storage import Catalog
from tests.flows.commands import flywheel_json, refused, run_round

pytestmark = pytest.mark.slow


def _export(home: Path, api: str, version: str) -> datasets.DatasetDict:
    out = home / "export"
    flywheel_json(home, api, "datasets", "export", version, "--out", str(out))
    return datasets.load_from_disk(str(out / "hf"))


def _offered(row: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in row["tools"]}


def test_a_bfcl_round_collects_curates_and_exports_bfcl_s_tasks(
    prefect_api_url: str, tmp_path: Path
) -> None:
    out = run_round(tmp_path, prefect_api_url, "--backend", "bfcl", "--tasks", "24", "--seed", "3")
    with Catalog.open(tmp_path / "catalog.duckdb", read_only=True) as catalog:
        tasks = catalog.tasks.of_round(out["round_id"])
        trajectories = catalog.trajectories.of_round(out["round_id"])
    assert out["counts"]["constructed"] == len(tasks) == 24
    assert {t.initial_conditions.backend for t in tasks} == {"bfcl"}
    assert all(split_of(bfcl_task_of(t)) is Split.TRAIN for t in tasks)
    assert {t.metadata.backend for t in trajectories} == {"bfcl"}
    outcomes = Counter(t.metadata.outcome for t in trajectories)
    assert outcomes[Outcome.SUCCESS] and outcomes[Outcome.FAILURE]  # the scripted faults
    assert out["dataset_version"] and out["counts"]["in_dataset"] == out["counts"]["approved"]

    export = _export(tmp_path, prefect_api_url, out["dataset_version"])
    by_task = {t.id: t for t in tasks}
    assert len(export["sft"]) == out["counts"]["in_dataset"]
    arrivals = 0
    for row in export["sft"]:
        task = by_task[row["task_id"]]
        bfcl = bfcl_task_of(task)
        assert _offered(row) == set(task.tools) | set(HARNESS)  # and no sub-agents
        assert set(task.tools) <= {d["name"] for d in function_docs(bfcl.classes)}
        users = [m["content"] for m in row["messages"] if m["role"] == "user"]
        assert len(users) == len(bfcl.turns) > 1
        assert [u.splitlines()[0] for u in users] == [
            t.splitlines()[0] for t in (task.goal, *task.follow_ups)
        ]
        for said, names in zip(users[1:], task.arriving_tools, strict=False):
            described = [json.loads(line)["function"]["name"] for line in said.splitlines()[1:]]
            assert described == list(names)  # a held-back function is described when it arrives
            arrivals += bool(names)
    assert arrivals  # miss_func's tasks are among them


def test_a_mixed_round_takes_bfcl_s_share_and_exports_both_kinds(
    prefect_api_url: str, tmp_path: Path
) -> None:
    out = run_round(
        tmp_path, prefect_api_url, "--bfcl-share", "0.25", "--tasks", "32", "--seed", "4"
    )
    with Catalog.open(tmp_path / "catalog.duckdb", read_only=True) as catalog:
        tasks = catalog.tasks.of_round(out["round_id"])
        trajectories = catalog.trajectories.of_round(out["round_id"])
    kinds = Counter(t.initial_conditions.backend for t in tasks)
    assert kinds == {"bfcl": 8, "sandbox": 24}
    for trajectory in trajectories:
        ran_on = trajectory.metadata.backend
        assert ran_on == (
            "bfcl" if trajectory.task.initial_conditions.backend == "bfcl" else "sandbox"
        )

    export = _export(tmp_path, prefect_api_url, out["dataset_version"])
    by_task = {t.id: t for t in tasks}
    rows = {"bfcl": 0, "sandbox": 0}
    for row in export["sft"]:
        task = by_task[row["task_id"]]
        rows[task.initial_conditions.backend] += 1
        assert set(task.tools) <= _offered(row)
        subagents = {"subagent_gui", "subagent_search"} & _offered(row)
        assert (task.initial_conditions.backend == "bfcl") == (not subagents)
    assert rows["bfcl"] and rows["sandbox"]
    rl_backends = {
        json.loads(r["task_spec"])["initial_conditions"]["backend"] for r in export["rl_tasks"]
    }
    assert rl_backends == {"bfcl", "sandbox"}


def test_a_backend_that_contradicts_the_share_is_refused_before_any_run(
    prefect_api_url: str, tmp_path: Path
) -> None:
    args = ("round", "--backend", "sandbox", "--bfcl-share", "0.5")
    error = refused(tmp_path, prefect_api_url, *args)
    assert error["field"] == "bfcl_share" and "--bfcl-share alone" in error["problem"]
    assert not (tmp_path / "catalog.duckdb").exists()
