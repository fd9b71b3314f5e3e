"""A person approves (or rejects) a round's dataset in the Prefect UI before it is frozen.

The round pauses with a typed form; the test answers it through the same API the UI's
Resume button calls, and checks what the catalog then holds.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast
from uuid import UUID

import pytest
from prefect import get_client
from prefect.client.schemas.objects import FlowRun
from prefect.flow_runs import resume_flow_run
from prefect.input.actions import read_flow_run_input
from prefect.input.run_input import keyset_from_paused_state

from flows.servers import prefect_api
from storage import Catalog, UnknownIdError
from tests.flows.commands import FLYWHEEL, command_env

PAUSE_DEADLINE_S = 300.0


@contextmanager
def _round_in_background(home: Path, api: str, *args: str) -> Iterator[subprocess.Popen[str]]:
    """``flywheel round --approval person ARGS --json`` running while the test acts."""
    env = command_env(home, api, FLYWHEEL_APPROVAL__POLL_S="1")
    process = subprocess.Popen(
        [FLYWHEEL, "round", "--approval", "person", *args, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()


def _paused_run(home: Path, api: str, process: subprocess.Popen[str]) -> FlowRun:
    """The round's flow run once it is paused for approval."""
    deadline = time.monotonic() + PAUSE_DEADLINE_S
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[1][-3000:]
        run_id = _flow_run_id(home)
        if run_id is not None:
            with prefect_api(api), get_client(sync_client=True) as client:
                run = client.read_flow_run(UUID(run_id))
            if run.state is not None and run.state.is_paused():
                return run
        time.sleep(0.5)
    raise AssertionError(f"the round did not pause for approval within {PAUSE_DEADLINE_S} s")


def _flow_run_id(home: Path) -> str | None:
    path = home / "catalog.duckdb"
    if not path.exists():
        return None
    with Catalog.open(path, read_only=True) as catalog:
        rounds = catalog.rounds.every()
    return rounds[0].flow_run_id if rounds else None


def _finish(process: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err[-3000:]
    result: dict[str, Any] = json.loads(out)
    return result


@pytest.mark.slow
def test_a_person_approves_the_dataset_in_the_prefect_ui(
    prefect_api_url: str, tmp_path: Path
) -> None:
    with _round_in_background(tmp_path, prefect_api_url, "--tasks", "24", "--seed", "5") as run:
        paused = _paused_run(tmp_path, prefect_api_url, run)
        assert paused.state is not None
        keys = keyset_from_paused_state(paused.state)
        with prefect_api(prefect_api_url):
            description = cast(str, read_flow_run_input(keys["description"], paused.id))
            schema = cast(dict[str, Any], read_flow_run_input(keys["schema"], paused.id))
            with Catalog.open(tmp_path / "catalog.duckdb", read_only=True) as catalog:
                assert catalog.datasets.summaries() == [], "nothing is frozen before the decision"
            resume_flow_run(
                paused.id,
                run_input={"approve": True, "approver": "Ada Lovelace", "comment": "mix is fine"},
            )
        out = _finish(run)

    # The form shows the proposal's composition and asks for a typed decision.
    assert "Proposed dataset version" in description and "| capability |" in description
    assert {"approve", "approver", "comment"} <= set(schema["properties"])
    assert out["dataset_version"] in description

    approval = out["approval"]
    assert approval["decision"] == "approve" and approval["approver"] == "Ada Lovelace"
    assert approval["automatic"] is False
    with Catalog.open(tmp_path / "catalog.duckdb", read_only=True) as catalog:
        summary = catalog.datasets.describe(out["dataset_version"])
    assert summary["approval"] is not None
    assert summary["approval"]["approver"] == "Ada Lovelace"
    assert summary["approval"]["comment"] == "mix is fine"
    assert summary["approval"]["flow_run_id"] == str(paused.id)
    assert summary["size"] == out["counts"]["in_dataset"] > 0


@pytest.mark.slow
def test_a_rejected_dataset_is_not_frozen_and_the_rejection_is_kept(
    prefect_api_url: str, tmp_path: Path
) -> None:
    with _round_in_background(tmp_path, prefect_api_url, "--tasks", "24", "--seed", "6") as run:
        paused = _paused_run(tmp_path, prefect_api_url, run)
        with prefect_api(prefect_api_url):
            resume_flow_run(
                paused.id,
                run_input={"approve": False, "approver": "Grace", "comment": "too few recoveries"},
            )
        out = _finish(run)

    assert out["dataset_version"] is None and out["counts"]["in_dataset"] == 0
    rejection = out["approval"]
    assert rejection["decision"] == "reject" and rejection["approver"] == "Grace"
    with Catalog.open(tmp_path / "catalog.duckdb", read_only=True) as catalog:
        assert catalog.datasets.summaries() == []
        stored = catalog.datasets.round_approval(out["round_id"])
        assert stored is not None and stored.comment == "too few recoveries"
        with pytest.raises(UnknownIdError):
            catalog.datasets.get(stored.dataset_id)
