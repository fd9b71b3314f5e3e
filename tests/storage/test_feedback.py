"""Feedback reports in the catalog: stored once, read back equal, the latest found, and
malformed ones refused with nothing stored."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest

from contract import FeedbackReport, FeedbackSource, InvalidInputError, parse_feedback_report
from storage import Catalog, CatalogError, UnknownIdError
from storage import feedback as feedback_module

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "feedback-report.json"


def _example() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(EXAMPLE.read_text())
    return data


def _report(**changes: Any) -> FeedbackReport:
    return parse_feedback_report(json.dumps(_example() | changes))


def _task_rows(catalog: Catalog) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(catalog.path), read_only=True) as con:
        return con.execute(
            "SELECT report_id, fingerprint, attempts, successes, mean_cost, failures "
            "FROM feedback_tasks ORDER BY report_id, fingerprint"
        ).fetchall()


def test_a_report_round_trips_with_one_row_per_task(catalog: Catalog) -> None:
    report = parse_feedback_report(EXAMPLE.read_bytes())

    assert catalog.feedback.add(report) is True

    assert catalog.feedback.get(report.id) == report
    stats = catalog.stats()
    assert (stats["feedback_reports"], stats["feedback_tasks"]) == (1, 5)
    rows = _task_rows(catalog)
    assert [r[1] for r in rows] == sorted(t.fingerprint for t in report.tasks)
    grounding = next(r for r in rows if r[1] == "fp-b13d180c0f3fd56dd192")
    assert grounding[2:5] == (8, 0, 0.61)
    assert json.loads(grounding[5]) == {"argument_grounding": 6, "premature_termination": 1}
    (summary,) = catalog.feedback.summaries()
    assert summary.id == report.id
    assert summary.source is FeedbackSource.TRAINER
    assert (summary.model, summary.tasks, summary.overall) == ("mobile-planner-r1", 5, 0.682)
    assert summary.created_at == datetime(2026, 11, 28, 16, 30, tzinfo=UTC)
    assert summary.ingested_at.tzinfo is UTC


def test_ingesting_the_same_report_again_stores_nothing(catalog: Catalog) -> None:
    report = _report()
    assert catalog.feedback.add(report) is True
    before = catalog.stats()

    # the same content read again, even written differently, is the same report
    assert catalog.feedback.add(parse_feedback_report(report.to_json())) is False
    assert catalog.feedback.add(_report()) is False

    assert catalog.stats() == before
    assert len(catalog.feedback.summaries()) == 1


def test_a_report_without_tasks_or_optional_fields_is_stored(catalog: Catalog) -> None:
    report = _report(tasks=[], source="deployment", model=None, overall=None)
    assert catalog.feedback.add(report) is True
    assert catalog.feedback.get(report.id) == report
    (summary,) = catalog.feedback.summaries()
    assert (summary.tasks, summary.overall, summary.model) == (0, None, None)


def test_the_latest_report_is_the_last_created_then_the_last_stored(catalog: Catalog) -> None:
    assert catalog.feedback.latest() is None
    assert catalog.feedback.summaries() == []
    start = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)
    newer = _report(created_at=(start + timedelta(days=2)).isoformat(), notes="newer")
    older = _report(created_at=start.isoformat(), notes="older")
    # the same instant written in another time zone sorts as that instant
    middle = _report(created_at="2026-11-02T11:00:00+02:00", notes="middle")

    for report in (newer, older, middle):
        catalog.feedback.add(report)

    assert catalog.feedback.latest() == newer
    assert [s.id for s in catalog.feedback.summaries()] == [older.id, middle.id, newer.id]

    twin = _report(created_at=newer.created_at.isoformat(), notes="a twin, stored later")
    catalog.feedback.add(twin)
    assert catalog.feedback.latest() == twin
    catalog.feedback.add(newer)  # stored before: changes nothing
    assert catalog.feedback.latest() == twin


def test_an_unknown_id_lists_the_recent_ones(catalog: Catalog) -> None:
    with pytest.raises(UnknownIdError, match="the catalog has no feedback report yet"):
        catalog.feedback.get("fb-nothing")
    report = _report()
    catalog.feedback.add(report)
    with pytest.raises(
        UnknownIdError, match=f"unknown feedback report id 'fb-nothing'; most recent: {report.id}"
    ):
        catalog.feedback.get("fb-nothing")


def _broken(change: Any) -> bytes:
    data = _example()
    change(data)
    return json.dumps(data).encode()


@pytest.mark.parametrize(
    ("text", "field"),
    [
        pytest.param(b'{"format_version": 1, "source": ', "report", id="bad JSON"),
        pytest.param(_broken(lambda d: d.pop("created_at")), "created_at", id="missing field"),
        pytest.param(
            _broken(lambda d: d["tasks"][2].update(successes=9)),
            "tasks[2].successes",
            id="successes exceed attempts",
        ),
        pytest.param(
            _broken(lambda d: d["capability_scores"].update(memory=1.2)),
            "capability_scores.memory",
            id="score out of range",
        ),
        pytest.param(
            _broken(lambda d: d.update(format_version=2)), "format_version", id="unknown version"
        ),
        pytest.param(_broken(lambda d: d.update(source="foo")), "source", id="unknown source"),
        pytest.param(
            _broken(lambda d: d["tasks"].append(d["tasks"][0])),
            "tasks[5].fingerprint",
            id="duplicate fingerprint",
        ),
    ],
)
def test_a_malformed_report_is_refused_and_nothing_is_stored(
    catalog: Catalog, text: bytes, field: str
) -> None:
    catalog.feedback.add(_report())
    before = catalog.stats()

    with pytest.raises(InvalidInputError) as refused:
        catalog.feedback.add(parse_feedback_report(text))

    assert refused.value.field == field
    assert str(refused.value).startswith(f"{field}: ")
    assert catalog.stats() == before


def test_a_failure_while_storing_leaves_nothing_behind(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report row and its task rows are written in one transaction."""

    def fail(*args: object, **kwargs: object) -> int:
        raise RuntimeError("disk full, say")

    monkeypatch.setattr(feedback_module, "insert_rows", fail)
    with pytest.raises(RuntimeError, match="disk full"):
        catalog.feedback.add(_report())
    assert catalog.stats()["feedback_reports"] == 0
    monkeypatch.undo()
    assert catalog.feedback.add(_report()) is True


def test_a_stored_report_of_a_newer_format_is_refused_with_advice(catalog: Catalog) -> None:
    report = _report()
    catalog.feedback.add(report)
    with duckdb.connect(str(catalog.path)) as con:
        con.execute("UPDATE feedback_reports SET format_version = 2")
    for read in (lambda: catalog.feedback.get(report.id), catalog.feedback.latest):
        with pytest.raises(CatalogError, match="format_version 2; this code reads 1: upgrade"):
            read()
