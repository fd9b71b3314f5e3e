"""Two rounds with a feedback report in between: the plan shifts, the data follows it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contract import Capability, Split, TaskSource
from storage import Catalog
from tests.flows.commands import flywheel_json, run_round

TASKS = 24


def _report(mastered: str, inconsistent: str) -> dict[str, Any]:
    """Memory is weak; argument grounding fails; one task mastered, one inconsistent."""
    return {
        "format_version": 1,
        "source": "evaluation",
        "produced_by": "test evaluation",
        "created_at": "2026-11-30T12:00:00Z",
        "capability_scores": {"tool_use": 0.9, "memory": 0.2, "skills": 0.8, "subagent": 0.8},
        "tasks": [
            {"fingerprint": mastered, "attempts": 8, "successes": 8, "mean_cost": 0.1},
            {
                "fingerprint": inconsistent,
                "attempts": 8,
                "successes": 4,
                "mean_cost": 0.4,
                "failures": {"argument_grounding": 4},
            },
        ],
        "failure_counts": {"argument_grounding": 12},
        "cost": {"mean_cost": 0.3, "mean_steps": 4, "mean_tool_calls": 3, "mean_output_tokens": 90},
    }


def _quota(plan: dict[str, Any], capability: str) -> int:
    return sum(q["count"] for q in plan["quotas"] if q["capability"] == capability)


@pytest.mark.slow
def test_feedback_between_two_rounds_shifts_the_plan(prefect_api_url: str, tmp_path: Path) -> None:
    first = run_round(tmp_path, prefect_api_url, "--tasks", str(TASKS), "--seed", "1")
    even = flywheel_json(tmp_path, prefect_api_url, "plan", "show", "--tasks", str(TASKS))
    assert even["changes"] == [] and even["source"] == "default"

    with Catalog.open(tmp_path / "catalog.duckdb", read_only=True) as catalog:
        tasks = catalog.tasks.of_round(first["round_id"])
    train = sorted((t for t in tasks if t.split is Split.TRAIN), key=lambda t: t.fingerprint)
    mastered, inconsistent = train[0].fingerprint, train[1].fingerprint
    report_file = tmp_path / "report.json"
    report_file.write_text(json.dumps(_report(mastered, inconsistent)))
    ingested = flywheel_json(tmp_path, prefect_api_url, "feedback", "ingest", str(report_file))

    plan = flywheel_json(tmp_path, prefect_api_url, "plan", "show", "--tasks", str(TASKS))
    assert plan["source"] == f"feedback {ingested['id']}"
    assert _quota(plan, "memory") > _quota(even, "memory")
    assert [r["failure_type"] for r in plan["repairs"]] == ["argument_grounding"]
    assert [r["fingerprint"] for r in plan["preserve"]] == [mastered]
    assert [r["fingerprint"] for r in plan["replays"]] == [inconsistent]
    assert all(c["reason"] for c in plan["changes"])
    assert any(c["what"].startswith("quota memory/") for c in plan["changes"])

    second = run_round(tmp_path, prefect_api_url, "--tasks", str(TASKS), "--seed", "2")

    assert second["counts"]["constructed"] == plan["total"]
    assert second["counts"]["recollected"] == 2  # the inconsistent task and the preserved one
    with Catalog.open(tmp_path / "catalog.duckdb", read_only=True) as catalog:
        info = catalog.rounds.get(second["round_id"])
        built = catalog.tasks.of_round(second["round_id"])
        runs = catalog.trajectories.of_round(second["round_id"])
        version = catalog.datasets.get(second["dataset_version"])
    assert info is not None and info.config["plan"]["source"] == plan["source"]
    repairs = [t for t in built if t.source is TaskSource.REPAIR]
    assert len(repairs) == plan["repairs"][0]["count"]
    # Memory's templates may run out before its larger quota is met (the constructor then
    # hands the rest to other cells and says so); it never gets less than the even mix.
    memory = sum(t.capabilities[0] is Capability.MEMORY for t in built if t not in repairs)
    assert _quota(even, "memory") <= memory <= _quota(plan, "memory")
    assert {t.task.fingerprint for t in runs} >= {mastered, inconsistent}
    assert version.parent == first["dataset_version"]

    from prefect import get_client

    from flows.servers import prefect_api

    with prefect_api(prefect_api_url), get_client(sync_client=True) as client:
        artifacts = client.read_artifacts()
    keys = {a.key for a in artifacts if str(a.flow_run_id) == second["flow_run_id"]}
    assert "round-plan" in keys
