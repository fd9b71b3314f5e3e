"""``flywheel loop`` against the real Prefect server: two turns of round → train → deploy,
the second round collected by the served champion through its OpenAI-compatible endpoint."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from prefect import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

from contract import DeploymentDecision, ModelAlias
from flows.servers import ModelServer, free_port, prefect_api
from storage import Catalog
from tests.flows.commands import flywheel_json
from tests.flows.test_trainer_flow import TINY_TRAINING


@pytest.mark.slow
def test_two_turns_close_the_loop(prefect_api_url: str, tmp_path: Path) -> None:
    port = free_port()
    settings = {
        "FLYWHEEL_SERVING__PORT": str(port),
        "FLYWHEEL_SERVING__THREADS": "1",
        "FLYWHEEL_SERVING__MAX_NEW_TOKENS": "8",
        "FLYWHEEL_SERVING__ENGINE": "local",
        "FLYWHEEL_EPISODE__MAX_STEPS": "3",
        "OMP_NUM_THREADS": "1",
    }
    try:
        result: dict[str, Any] = flywheel_json(
            tmp_path,
            prefect_api_url,
            "loop",
            "--rounds",
            "2",
            "--tasks",
            "10",
            "--champion-tasks",
            "3",
            "--correct-failures",
            *TINY_TRAINING,
            **settings,
        )
    finally:
        ModelServer(tmp_path, port).stop()

    first, second = result["turns"]
    # Turn 1: the scripted teacher collects; the first model trained is promoted.
    assert first["collected_by"] == "scripted"
    assert first["dataset_size"] > 0 and first["decision"] == DeploymentDecision.PROMOTED
    assert first["champion_id"] == first["model_id"] and first["overall"] is not None
    # The first candidate is the champion: its own figures are the champion's.
    assert first["candidate_overall"] == first["overall"]
    assert first["candidate_seen"] == first["overall_seen"] is not None
    # Turn 2: the served champion collected the round through the model server, and the
    # scripted teacher the rest: half (--teacher-share 0.5, the default) and more, as the
    # champion collects at most 3 of a round's tasks (--champion-tasks).
    assert second["collected_by"] == f"{first['model_id']}, scripted"
    with Catalog.open(tmp_path / "catalog.duckdb", read_only=True) as catalog:
        collected = catalog.trajectories.of_round(second["round_id"])
        champion = catalog.models.alias(ModelAlias.CHAMPION)
        trained = catalog.models.get(second["model_id"])
        first_model = catalog.models.get(first["model_id"])
        (deployed, promoted) = catalog.models.deployments()
    by_policy = Counter(t.metadata.policy.name for t in collected)
    assert by_policy["openai"] > 0 and by_policy["scripted"] > 0
    assert len({t.task.id for t in collected if t.metadata.policy.name == "openai"}) == 3
    # --correct-failures: each task the champion failed was collected again by the
    # teacher, in a correction shard (the teacher's share takes other tasks).
    failed = {
        t.task.id
        for t in collected
        if t.metadata.policy.name == "openai" and t.metadata.outcome == "failure"
    }
    taught = {t.task.id for t in collected if t.metadata.policy.name == "scripted"}
    assert failed and failed <= taught
    shards = tmp_path / "rounds" / second["round_id"] / "shards"
    assert list(shards.glob("correction-*.parquet"))
    assert by_policy.total() == second["trajectories"]
    assert all(
        t.metadata.policy.model == first["model_id"]
        for t in collected
        if t.metadata.policy.name == "openai"
    )
    # What it approved was trained on, from the champion's weights, and deployed against
    # the champion: the tiny models both score 0, so the gate keeps the champion.
    assert second["dataset_id"] is not None and second["dataset_size"] > 0
    assert trained.dataset_id == second["dataset_id"]
    assert Path(trained.base) == Path(first_model.path)
    assert deployed.candidate_id == second["model_id"]
    assert second["decision"] == deployed.decision == DeploymentDecision.REFUSED
    assert promoted.candidate_id == first["model_id"]
    assert champion is not None and champion.id == second["champion_id"] == first["model_id"]
    # A refused candidate's figures are its own evaluation's, kept beside the champion's.
    with Catalog.open(tmp_path / "catalog.duckdb", read_only=True) as catalog:
        report = catalog.feedback.get(trained.feedback_id or "")
    assert report is not None and second["candidate_overall"] == report.overall
    assert second["candidate_seen"] == report.parts["seen"].overall

    # The loop's progress is in the Prefect UI: a table and plots, per turn.
    with prefect_api(prefect_api_url), get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(
                flow_run_id=ArtifactFilterFlowRunId(any_=[UUID(result["flow_run_id"])])
            )
        )
    tables = [str(a.data) for a in artifacts if a.key == "loop-progress-table"]
    plots = [str(a.data) for a in artifacts if a.key == "loop-progress"]
    assert len(tables) == len(plots) == 2, "one of each per turn"
    assert any(first["round_id"] in t and second["round_id"] in t for t in tables)
    assert all(p.count("data:image/svg+xml;base64,") == 3 for p in plots)
