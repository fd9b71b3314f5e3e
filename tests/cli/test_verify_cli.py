"""``flywheel verify`` on a round made before the collateral-damage check: the
trajectories whose verdict changed, with the checks that fail now; nothing stored changes.

``tests/fixtures/round-before-collateral.jsonl`` holds eight trajectories written by the
code of commit a878524, before the check: the issue's example (text_contact, seed 7, a
payment and a deletion before the text), an event question answered without looking it
up, a refusal naming the wrong person, and five scripted episodes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from contract import Trajectory
from flows.settings import catalog_path
from storage import Catalog
from storage.shards import write_trajectory_shard
from tests.cli.commands import run_in

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "round-before-collateral.jsonl"
ROUND = "round-before-collateral"


def _old_round() -> list[Trajectory]:
    """Read with today's records, every content id checked."""
    return [Trajectory.from_json(line) for line in FIXTURE.read_bytes().splitlines()]


def run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_in(home, *args, timeout=300)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("home")
    shard = home / "shards" / ROUND / "part-0.parquet"
    shard.parent.mkdir(parents=True)
    write_trajectory_shard(_old_round(), shard, shard="part-0")
    with Catalog.open(catalog_path(home)) as catalog:
        catalog.rounds.begin(ROUND, {"tasks": 8})
        catalog.trajectories.ingest([shard.parent])
    return home


def test_the_old_records_load_with_their_ids() -> None:
    old = _old_round()
    assert len(old) == 8
    assert all(t.verdict.passed for t in old[:3])
    assert all("max_steps" not in t.task.model_dump(mode="json") for t in old)


def test_verify_names_the_trajectories_whose_verdict_changed(home: Path) -> None:
    before = catalog_path(home).read_bytes()
    result = run(home, "verify", "--round", ROUND, "--json")
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    assert report["round"] == ROUND
    assert report["checked"] == report["verified"] == 8
    by_template = {t["template"]: t for t in report["trajectories"]}
    harmed = by_template["text_contact"]
    assert (harmed["stored_passed"], harmed["passed"], harmed["changed"]) == (True, False, True)
    (collateral,) = harmed["failing_checks"]
    assert collateral["kind"] == "no_collateral"
    unexpected = {(c["collection"], c["id"], c["op"]) for c in collateral["evidence"]["unexpected"]}
    assert ("calendar.events", "ev-1", "deleted") in unexpected
    guessed = by_template["when_does_event_start"]
    assert guessed["changed"] and "after reading" in guessed["failing_checks"][0]["description"]
    wrong_person = by_template["refuse_payment_to_stranger"]
    assert wrong_person["changed"]
    assert [c["kind"] for c in wrong_person["failing_checks"]] == ["answer"]
    changed = {t["trajectory_id"] for t in report["trajectories"] if t["changed"]}
    assert report["changed"] == len(changed) >= 3
    assert report["now_failing"] >= 3
    assert catalog_path(home).read_bytes() == before  # nothing stored is changed


def test_the_text_report_lists_the_changes(home: Path) -> None:
    result = run(home, "verify", "--round", ROUND)
    assert result.returncode == 0, result.stderr
    assert "changed verdict" in result.stdout
    assert "no collateral changes" in result.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ((), "exactly one of --round and --dataset"),
        (("--round", "no-such-round"), "no round 'no-such-round'"),
        (("--round", "../etc"), "--round"),
    ],
)
def test_bad_arguments_are_named(home: Path, args: tuple[str, ...], needle: str) -> None:
    result = run(home, "verify", *args)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert needle in result.stderr


def test_the_strength_suite_runs_from_the_cli(tmp_path: Path) -> None:
    result = run(
        tmp_path, "tasks", "strength", "--template", "text_contact", "--seeds", "2", "--json"
    )
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)
    assert row["template"] == "text_contact" and row["survivors"] == []
    assert row["killed"] == sum(row["mutants"].values()) > 100
