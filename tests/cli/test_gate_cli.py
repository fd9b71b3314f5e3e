"""``flywheel gate``: which round it reads when none is named, and where people work."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from bench.synthetic import synthetic_round
from cli.gate import newest_gated
from contract import InvalidInputError, Review, ReviewDecision
from storage import Catalog, RoundInfo
from tests.cli.commands import run_in
from tests.fakes.chat_server import refusing_url
from tests.storage.builders import make_version

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def _round(name: str, gate: str, minutes: int) -> RoundInfo:
    return RoundInfo(
        id=name,
        status="done",
        stage="freeze",
        config={"gate": gate},
        flow_run_id=None,
        dataset_id=None,
        counts={},
        started_at=T0 + timedelta(minutes=minutes),
        finished_at=None,
    )


def test_the_default_round_is_the_newest_one_people_gate() -> None:
    people = _round("round-people", "label-studio", 1)
    older_people = _round("round-older", "label-studio", 0)
    automatic = _round("round-auto", "auto", 5)  # newer, but nothing waits for people there
    assert newest_gated([older_people, automatic, people]) is people
    assert newest_gated([automatic, _round("round-auto-0", "auto", 0)]) is automatic
    with pytest.raises(InvalidInputError, match="no round yet"):
        newest_gated([])


def test_status_names_where_people_decide_without_starting_label_studio(tmp_path: Path) -> None:
    with Catalog.open(tmp_path / "catalog.duckdb") as catalog:
        catalog.rounds.begin("round-people", {"gate": "label-studio"})
    port = str(urlsplit(refusing_url()).port)  # nothing answers there; none is started

    result = run_in(tmp_path, "gate", "status", "--json", FLYWHEEL_LABEL_STUDIO__PORT=port)

    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)
    assert status["round_id"] == "round-people"
    assert "flywheel server start label-studio" in status["workplace"]["problem"]
    assert status["waiting_to_join"] == 0
    text = run_in(tmp_path, "gate", "status", FLYWHEEL_LABEL_STUDIO__PORT=port).stdout
    assert f"Where people decide: no Label Studio answers on http://127.0.0.1:{port}" in text


def test_datasets_show_counts_the_decisions_waiting_to_join(tmp_path: Path) -> None:
    path = tmp_path / "catalog.duckdb"
    synthetic_round(path, "round-a", 20, seed=3)
    with Catalog.open(path) as catalog:
        ids = sorted(tid for tid, _ in catalog.trajectories.fingerprints("round-a"))
        catalog.datasets.freeze(make_version(catalog.trajectories.by_ids(ids[:10]), "round-a"))
        catalog.reviews.carry_over("round-a", "label-studio", ids[10:])
        catalog.reviews.add(
            [
                Review(
                    trajectory_id=t,
                    round_id="round-a",
                    decision=ReviewDecision.APPROVE,
                    reviewer="ann",
                    automatic=False,
                )
                for t in ids[10:13]
            ]
        )

    shown = json.loads(run_in(tmp_path, "datasets", "show", "latest", "--json").stdout)
    text = run_in(tmp_path, "datasets", "show", "latest").stdout

    assert shown["size"] == 10 and shown["decisions_waiting_to_join"] == 3
    assert "3 decision(s) made in the gate on items carried over wait to join" in text
    assert "flywheel round --gate label-studio" in text
