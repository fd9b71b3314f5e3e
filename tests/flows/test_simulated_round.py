"""A round with tasks on simulated tools, end to end as a user runs it, against the real
Prefect server; the simulating model is the project's fake chat server with a rule that
does what each tool's description says. Every simulated trajectory is flagged, and none
is approved without a person or a confident judge: with the automatic gate they are
quarantined, and no version takes them."""

from __future__ import annotations

from pathlib import Path

import pytest

from contract import Outcome, ReviewDecision, Routing
from storage import Catalog
from tests.fakes import ScriptedChatServer
from tests.fakes.tool_simulator import simulate_tool
from tests.flows.commands import refused, run_round

pytestmark = pytest.mark.slow


def _simulator_at(url: str) -> dict[str, str]:
    """Settings (as environment) for an agent LLM that only simulates tools."""
    return {
        "FLYWHEEL_AGENT_LLM__ENDPOINT__BASE_URL": url,
        "FLYWHEEL_AGENT_LLM__ENDPOINT__MODEL": "simulator",
        "FLYWHEEL_AGENT_LLM__ROLES": '["tool_simulator"]',
    }


def test_a_round_on_simulated_tools_sends_every_simulated_success_to_the_gate(
    prefect_api_url: str, tmp_path: Path
) -> None:
    with ScriptedChatServer(responder=simulate_tool) as simulator:
        out = run_round(
            tmp_path,
            prefect_api_url,
            *("--tasks", "24", "--seed", "6", "--simulated-share", "0.5"),
            **_simulator_at(simulator.base_url),
        )
        asked = len(simulator.requests)
    with Catalog.open(tmp_path / "catalog.duckdb", read_only=True) as catalog:
        tasks = catalog.tasks.of_round(out["round_id"])
        trajectories = catalog.trajectories.of_round(out["round_id"])
        curations = {
            c.trajectory_id: c
            for c in catalog.reviews.curations_of_round(out["round_id"])
            if c.kept
        }
        version = catalog.datasets.get(out["dataset_version"])
        refused = catalog.tasks.rejections_of_round(out["round_id"])
    on_simulated = [t for t in tasks if t.initial_conditions.backend == "simulated"]
    assert len(on_simulated) == 12
    assert not [r for r in refused if (r.template or "").startswith("simulated_")]
    assert asked >= 12  # each task's reference plan was checked against the simulator
    simulated = [t for t in trajectories if t.metadata.simulated]
    assert {t.task.id for t in simulated} == {t.id for t in on_simulated}
    assert {t.metadata.backend for t in simulated} == {"simulated"}
    successes = [t for t in simulated if t.metadata.outcome is Outcome.SUCCESS]
    assert successes
    for trajectory in successes:
        curation = curations[trajectory.id]
        assert curation.routing is Routing.NEEDS_HUMAN
        assert curation.suggested is ReviewDecision.QUARANTINE
        assert "simulated tools" in curation.reason
    members = {m.trajectory_id for m in version.members}
    assert members and not members & {t.id for t in simulated}
    assert all(not t.metadata.simulated for t in trajectories if t.id in members)


def test_a_round_on_simulated_tools_without_a_simulator_is_refused_by_name(
    prefect_api_url: str, tmp_path: Path
) -> None:
    error = refused(tmp_path, prefect_api_url, "round", "--tasks", "8", "--simulated-share", "0.5")
    assert error["field"] == "simulated_share" and "tool_simulator" in error["problem"]
