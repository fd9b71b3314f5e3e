"""``flywheel_round`` end to end against the real Prefect server, and its resumability."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from storage import Catalog
from tests.flows.commands import FLYWHEEL, command_env, flywheel_json, run_round

COUNT_KEYS = {
    "constructed",
    "rejected_tasks",
    "collected",
    "curated",
    "approved",
    "rejected",
    "in_dataset",
}


def _catalog_rows(home: Path) -> dict[str, int]:
    with Catalog.open(home / "catalog.duckdb", read_only=True) as catalog:
        return catalog.stats()


@pytest.mark.slow
def test_a_round_freezes_a_dataset_and_shows_on_the_server(
    prefect_api_url: str, tmp_path: Path
) -> None:
    out = run_round(tmp_path, prefect_api_url, "--tasks", "36", "--seed", "3")
    counts = out["counts"]
    assert set(counts) >= COUNT_KEYS
    assert counts["constructed"] == 36
    assert counts["collected"] >= 36
    assert counts["in_dataset"] <= counts["approved"] <= counts["curated"] <= counts["collected"]
    assert counts["approved"] + counts["rejected"] == counts["curated"]
    assert out["dataset_version"].startswith("ds-")
    approval = out["approval"]  # unattended: recorded as an automatic approval
    assert approval["dataset_id"] == out["dataset_version"]
    assert approval["automatic"] is True and approval["approver"] == "auto"

    from prefect import get_client

    from flows.servers import prefect_api

    with prefect_api(prefect_api_url), get_client(sync_client=True) as client:
        run = client.read_flow_run(UUID(out["flow_run_id"]))
        assert run.state is not None and run.state.is_completed()
        artifacts = client.read_artifacts()
    keys = {a.key for a in artifacts if str(a.flow_run_id) == out["flow_run_id"]}
    assert {"round-stage-counts", "round-capabilities", "round-summary", "dataset-proposal"} <= keys
    (collection,) = [a for a in artifacts if a.key == "round-collection"
                     and str(a.flow_run_id) == out["flow_run_id"]]  # fmt: skip
    assert collection.type == "progress" and collection.data == 100
    # The scripted policy's episodes are pure Python: one shard at a time.
    assert "shard(s), 1 at a time on this machine's threads" in _server_records(
        prefect_api_url, out["flow_run_id"]
    )

    dataset = flywheel_json(tmp_path, prefect_api_url, "datasets", "show", out["dataset_version"])
    assert dataset["size"] == counts["in_dataset"]
    assert dataset["round_id"] == out["round_id"] and dataset["human_reviewed"] == 0
    assert sum(dataset["counts"]["difficulty"].values()) == dataset["size"]
    assert flywheel_json(tmp_path, prefect_api_url, "datasets", "show", "latest") == dataset

    [round_row] = flywheel_json(tmp_path, prefect_api_url, "rounds", "list")
    assert round_row["id"] == out["round_id"] and round_row["status"] == "done"
    assert round_row["dataset_id"] == out["dataset_version"]
    assert round_row["counts"] == counts
    datasets = flywheel_json(tmp_path, prefect_api_url, "datasets", "list")
    assert [d["id"] for d in datasets] == [out["dataset_version"]]

    before = _catalog_rows(tmp_path)
    again = run_round(tmp_path, prefect_api_url, "--tasks", "36", "--seed", "3")
    assert again["round_id"] == out["round_id"]
    assert again["dataset_version"] == out["dataset_version"]
    assert again["counts"] == counts
    assert _catalog_rows(tmp_path) == before

    text = subprocess.run(
        [FLYWHEEL, "round", "--tasks", "36", "--seed", "3"],
        capture_output=True,
        text=True,
        timeout=300,
        env=command_env(tmp_path, prefect_api_url),
        check=True,
    ).stdout
    assert f"Proposal {out['dataset_version']} approved automatically." in text
    assert "Approved automatically at" in text and "0 corrected" in text


@pytest.mark.slow
def test_a_round_killed_during_collection_resumes_to_the_same_result(
    prefect_api_url: str, tmp_path: Path
) -> None:
    settings = {"FLYWHEEL_ROUND__SHARD_SIZE": "4", "FLYWHEEL_ROUND__COLLECT_WORKERS": "1"}
    args = ("--tasks", "160", "--seed", "11", "--backend-fault-rate", "0.05")
    crashed, clean = tmp_path / "crashed", tmp_path / "clean"

    proc = subprocess.Popen(
        [FLYWHEEL, "round", *args, "--json"],
        env=command_env(crashed, prefect_api_url, **settings),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    shards: list[Path] = []
    while time.monotonic() < deadline and proc.poll() is None:
        shards = list(crashed.glob("rounds/*/shards/*.parquet"))
        if len(shards) >= 3:
            break
        time.sleep(0.01)
    assert proc.poll() is None, "the round ended before it could be killed during collection"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    total = 160 // 4
    assert 3 <= len(list(crashed.glob("rounds/*/shards/*.parquet"))) < total

    resumed = run_round(crashed, prefect_api_url, *args, **settings)
    reference = run_round(clean, prefect_api_url, *args, **settings)
    assert resumed["round_id"] == reference["round_id"]
    assert resumed["counts"] == reference["counts"]
    assert resumed["dataset_version"] == reference["dataset_version"]
    assert _catalog_rows(crashed) == _catalog_rows(clean)
    with Catalog.open(crashed / "catalog.duckdb", read_only=True) as catalog:
        trajectories = catalog.trajectories.of_round(resumed["round_id"])
    keys = [(t.task.id, t.metadata.attempt) for t in trajectories]
    assert len(keys) == len(set(keys)) == resumed["counts"]["collected"]


@pytest.mark.slow
def test_a_round_with_the_openai_policy_keeps_failures_and_secrets_out(
    prefect_api_url: str, tmp_path: Path
) -> None:
    from tests.fakes.chat_server import ScriptedChatServer, text_reply

    secret = "sk-round-0123456789abcdef"
    with ScriptedChatServer([text_reply("I think I am done.")] * 3) as server:
        out = run_round(
            tmp_path,
            prefect_api_url,
            "--tasks",
            "12",
            "--policy",
            "openai",
            "--backend-fault-rate",
            "0",
            FLYWHEEL_POLICY__BASE_URL=server.base_url,
            FLYWHEEL_POLICY__MODEL="planner-fake",
            FLYWHEEL_POLICY__API_KEY=secret,
        )
    counts = out["counts"]
    assert counts["constructed"] == counts["collected"] == 12
    assert counts["approved"] == counts["in_dataset"] == 0
    assert out["dataset_version"] is None, "nothing was approved: no version is frozen"
    with Catalog.open(tmp_path / "catalog.duckdb", read_only=True) as catalog:
        trajectories = catalog.trajectories.of_round(out["round_id"])
    assert {t.metadata.policy.model for t in trajectories} == {"planner-fake"}
    malformed = [
        s for t in trajectories for s in t.steps
        if s.feedback.error is not None and s.feedback.error.kind == "malformed_output"
    ]  # fmt: skip
    assert len(malformed) == 3
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path
    records = _server_records(prefect_api_url, out["flow_run_id"])
    assert secret not in records
    assert "shard(s), 2 at a time on this machine's threads" in records  # they wait on the model


@pytest.mark.slow
def test_the_teacher_collects_again_what_the_model_failed(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """``[round] correct_failures``: a model that finishes at once fails its tasks; the
    scripted teacher collects each of them again in a shard of its own, and what it got
    right is what the round approves. Run again, the round collects nothing twice."""
    from tests.fakes.chat_server import ScriptedChatServer

    args = ("--tasks", "12", "--policy", "openai", "--backend-fault-rate", "0")
    with ScriptedChatServer() as server:  # every reply: finish
        env = {
            "FLYWHEEL_POLICY__BASE_URL": server.base_url,
            "FLYWHEEL_POLICY__MODEL": "planner-fake",
            "FLYWHEEL_ROUND__CORRECT_FAILURES": "true",
            "FLYWHEEL_EPISODE__FAULT_RATE": "0",
        }
        out = run_round(tmp_path, prefect_api_url, *args, **env)
        again = run_round(tmp_path, prefect_api_url, *args, **env)
    with Catalog.open(tmp_path / "catalog.duckdb", read_only=True) as catalog:
        trajectories = catalog.trajectories.of_round(out["round_id"])
    by_model = [t for t in trajectories if t.metadata.policy.name == "openai"]
    by_teacher = [t for t in trajectories if t.metadata.policy.name == "scripted"]
    failed = {t.task.id for t in by_model if t.metadata.outcome == "failure"}
    assert len(by_model) == 12 and len(failed) >= 10
    assert sorted(t.task.id for t in by_teacher) == sorted(failed)
    shards = {p.stem for p in (tmp_path / "rounds" / out["round_id"] / "shards").glob("*.parquet")}
    assert any(s.startswith("correction-") for s in shards)
    assert out["counts"]["collected"] == len(trajectories) == len(by_model) + len(by_teacher)
    succeeded = sum(t.metadata.outcome == "success" for t in by_teacher)
    assert 0 < out["counts"]["approved"] <= succeeded
    assert out["dataset_version"] is not None
    assert again["round_id"] == out["round_id"]
    assert again["counts"]["collected"] == out["counts"]["collected"]


def _server_records(api: str, flow_run_id: str) -> str:
    """The flow run, its task runs and logs as the Prefect server holds them."""
    from prefect import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterId,
        LogFilter,
        LogFilterFlowRunId,
    )

    from flows.servers import prefect_api

    run_id = UUID(flow_run_id)
    runs = FlowRunFilter(id=FlowRunFilterId(any_=[run_id]))
    with prefect_api(api), get_client(sync_client=True) as client:
        records = [client.read_flow_run(run_id).model_dump_json()]
        records += [t.model_dump_json() for t in client.read_task_runs(flow_run_filter=runs)]
        logs = LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id]))
        records += [log.model_dump_json() for log in client.read_logs(log_filter=logs)]
    assert len(records) > 5
    return "\n".join(records)


@pytest.mark.slow
def test_a_second_round_builds_on_the_first(prefect_api_url: str, tmp_path: Path) -> None:
    first = run_round(tmp_path, prefect_api_url, "--tasks", "24", "--seed", "1")
    second = run_round(tmp_path, prefect_api_url, "--tasks", "24", "--seed", "2")
    assert second["round_id"] != first["round_id"]
    with Catalog.open(tmp_path / "catalog.duckdb", read_only=True) as catalog:
        one = catalog.tasks.of_round(first["round_id"])
        two = catalog.tasks.of_round(second["round_id"])
        version = catalog.datasets.get(second["dataset_version"])
    assert len(one) == len(two) == 24
    assert not {t.fingerprint for t in one} & {t.fingerprint for t in two}
    assert version.parent == first["dataset_version"]
    with Catalog.open(tmp_path / "catalog.duckdb", read_only=True) as catalog:
        parent = catalog.datasets.get(first["dataset_version"])
    inherited = {m.trajectory_id for m in parent.members}
    new = {m.trajectory_id for m in version.members} - inherited
    assert inherited <= {m.trajectory_id for m in version.members}  # a version accumulates
    assert version.inherited == len(inherited) and version.removed == ()
    assert new and new <= {t.id for t in catalog_trajectories(tmp_path, second["round_id"])}

    a, b = first["dataset_version"], second["dataset_version"]
    changes = flywheel_json(tmp_path, prefect_api_url, "datasets", "diff", a, b)
    assert changes["lineage"]["b_descends_from_a"] is True
    assert set(changes["members"]["added"]) == new
    assert second["counts"]["in_dataset"] == len(inherited) + len(new)
    assert changes["members"]["removed"] == []
    assert {a["round_id"] for a in changes["members"]["additions"]} == {second["round_id"]}
    assert flywheel_json(tmp_path, prefect_api_url, "datasets", "diff", a, "latest") == changes


def catalog_trajectories(home: Path, round_id: str) -> list[Any]:
    with Catalog.open(home / "catalog.duckdb", read_only=True) as catalog:
        return list(catalog.trajectories.of_round(round_id))
