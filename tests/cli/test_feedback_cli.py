"""``flywheel feedback``, run as a user runs it; the committed schema matches the code."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import jsonschema

from contract import FeedbackReport, feedback_report_schema, parse_feedback_report
from storage import Catalog
from tests.cli.commands import run_in

DOCS = Path(__file__).resolve().parents[2] / "docs"
EXAMPLE = DOCS / "examples" / "feedback-report.json"
SCHEMA = DOCS / "feedback-report.schema.json"
REGENERATE = "flywheel feedback schema > docs/feedback-report.schema.json"


def run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_in(home, *args)


def _ok(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _fails(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    """Exit 1, no traceback; the refusal on stderr, or with ``--json`` as a JSON error on
    stdout (and nothing else on either)."""
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    said = result.stderr
    if "--json" in result.args:
        assert result.stderr == ""
        said = json.loads(result.stdout)["error"]["problem"]
    else:
        assert result.stdout == ""
    for needle in needles:
        assert needle in said, said


def test_ingest_list_show_and_ingest_again(tmp_path: Path) -> None:
    report = parse_feedback_report(EXAMPLE.read_bytes())

    first = _ok(run(tmp_path, "feedback", "ingest", str(EXAMPLE), "--json"))
    assert first == {
        "id": report.id,
        "new": True,
        "source": "trainer",
        "created_at": "2026-11-28T16:30:00+00:00",
        "tasks": 5,
    }
    again = run(tmp_path, "feedback", "ingest", str(EXAMPLE))
    assert again.returncode == 0, again.stderr
    assert f"{report.id} was stored before: nothing new stored" in again.stdout

    (listed,) = _ok(run(tmp_path, "feedback", "list", "--json"))
    assert listed["id"] == report.id
    assert (listed["source"], listed["tasks"], listed["overall"]) == ("trainer", 5, 0.682)
    assert set(listed) == {
        "id", "format_version", "source", "produced_by", "model", "created_at",
        "ingested_at", "overall", "tasks",
    }  # fmt: skip

    shown = run(tmp_path, "feedback", "show", report.id, "--json")
    assert _ok(shown) == report.model_dump(mode="json")
    # what show prints is a report file: ingesting it stores nothing new
    (tmp_path / "shown.json").write_text(shown.stdout)
    reingested = _ok(run(tmp_path, "feedback", "ingest", str(tmp_path / "shown.json"), "--json"))
    assert reingested["new"] is False
    with Catalog.open(tmp_path / "catalog.duckdb", read_only=True) as catalog:
        assert catalog.stats()["feedback_reports"] == 1

    text = run(tmp_path, "feedback", "show", report.id)
    assert text.returncode == 0
    assert "fp-b13d180c0f3fd56dd192" in text.stdout and "argument_grounding 6" in text.stdout
    assert "memory      0.41" in text.stdout
    listing = run(tmp_path, "feedback", "list")
    assert report.id in listing.stdout and "mobile-planner-r1" in listing.stdout


def test_a_malformed_report_exits_1_naming_the_field_and_stores_nothing(tmp_path: Path) -> None:
    data = json.loads(EXAMPLE.read_text())
    data["tasks"][2]["successes"] = 9
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))

    # before any catalog exists: none is created
    _fails(run(tmp_path, "feedback", "ingest", str(bad)), str(bad), "tasks[2].successes")
    assert not (tmp_path / "catalog.duckdb").exists()

    _ok(run(tmp_path, "feedback", "ingest", str(EXAMPLE), "--json"))
    with Catalog.open(tmp_path / "catalog.duckdb", read_only=True) as catalog:
        before = catalog.stats()
    data["tasks"][2]["successes"] = 0
    data["format_version"] = 2
    bad.write_text(json.dumps(data))
    _fails(
        run(tmp_path, "feedback", "ingest", str(bad), "--json"),
        f"{bad}: format_version: 2 is not supported by this reader (allowed: 1)",
    )
    bad.write_text("{not json")
    _fails(run(tmp_path, "feedback", "ingest", str(bad)), "report: not valid JSON")
    _fails(run(tmp_path, "feedback", "ingest", str(tmp_path / "missing.json")), "cannot read it")
    with Catalog.open(tmp_path / "catalog.duckdb", read_only=True) as catalog:
        assert catalog.stats() == before


def test_show_of_an_unknown_id_and_listing_without_a_catalog_exit_1(tmp_path: Path) -> None:
    _fails(run(tmp_path, "feedback", "list"), "no catalog")
    first = _ok(run(tmp_path, "feedback", "ingest", str(EXAMPLE), "--json"))
    nothing = "fb-" + "0" * 20
    _fails(
        run(tmp_path, "feedback", "show", nothing, "--json"),
        f"unknown feedback report id '{nothing}'",
        first["id"],
    )
    _fails(run(tmp_path, "feedback", "show", "../fb-x"), "is not a feedback report id")


def test_the_committed_schema_is_the_codes() -> None:
    committed = json.loads(SCHEMA.read_text())
    assert committed == feedback_report_schema(), (
        f"{SCHEMA} differs from FeedbackReport's schema: regenerate it with `{REGENERATE}`"
    )


def test_schema_prints_the_committed_file_byte_for_byte(tmp_path: Path) -> None:
    printed = run(tmp_path, "feedback", "schema")
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == SCHEMA.read_text(), f"regenerate it with `{REGENERATE}`"


def test_the_documented_examples_are_valid_reports() -> None:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    markdown = (DOCS / "feedback-report.md").read_text()
    (embedded,) = re.findall(r"```json\n(.*?)```", markdown, re.DOTALL)
    for text in (EXAMPLE.read_text(), embedded):
        jsonschema.validate(json.loads(text), schema)
        assert isinstance(parse_feedback_report(text), FeedbackReport)
