"""The feedback report format: reading it, and refusals that name the field."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from contract import (
    FailureType,
    FeedbackReport,
    InvalidInputError,
    InvalidRecordError,
    field_path,
    parse_feedback_report,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "feedback-report.json"


@pytest.fixture
def example() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(EXAMPLE.read_text())
    return data


def _refusal(data: object) -> InvalidInputError:
    with pytest.raises(InvalidInputError) as refused:
        parse_feedback_report(json.dumps(data))
    return refused.value


def test_the_example_reads_and_its_id_is_derived_from_its_content(
    example: dict[str, Any],
) -> None:
    report = parse_feedback_report(EXAMPLE.read_bytes())
    assert report.id.startswith("fb-") and len(report.id) == 23
    assert report.tasks[2].failures == {
        FailureType.ARGUMENT_GROUNDING: 6,
        FailureType.PREMATURE_TERMINATION: 1,
    }
    assert report.tasks[0].success_rate == 1.0
    # the same content, keys in another order and the id given: the same report
    again = parse_feedback_report(json.dumps({"id": report.id, **dict(reversed(example.items()))}))
    assert again == report
    assert parse_feedback_report(report.to_json()) == report
    changed = copy.deepcopy(example)
    changed["notes"] = "other"
    assert parse_feedback_report(json.dumps(changed)).id != report.id


def test_field_paths_read_as_in_the_document() -> None:
    assert field_path(("tasks", 2, "successes")) == "tasks[2].successes"
    assert field_path(("capability_scores", "memory", "[key]")) == "capability_scores.memory"
    assert field_path((), "tasks[3].fingerprint") == "tasks[3].fingerprint"
    assert field_path(("tasks",), "[3].fingerprint") == "tasks[3].fingerprint"
    assert field_path(("tasks", 1), "successes") == "tasks[1].successes"


@pytest.mark.parametrize(
    ("change", "field", "needle", "allowed"),
    [
        (lambda d: d["tasks"][2].update(successes=9), "tasks[2].successes", "exceed the 8", None),
        (lambda d: d["tasks"][1].pop("attempts"), "tasks[1].attempts", "is required", None),
        (lambda d: d.pop("cost"), "cost", "is required", None),
        (lambda d: d["capability_scores"].update(memory=1.4), "capability_scores.memory",
         "less than or equal to 1 (got 1.4)", None),
        (lambda d: d["capability_scores"].update(memory=-0.1), "capability_scores.memory",
         "greater than or equal to 0", None),
        (lambda d: d["capability_scores"].update(planning=0.5), "capability_scores.planning",
         "'planning' is not a known key", ("tool_use", "memory", "skills", "subagent")),
        (lambda d: d.update(source="trainr"), "source", "'trainr' is not a known value",
         ("trainer", "evaluation", "deployment", "external")),
        (lambda d: d.update(format_version=2), "format_version", "2 is not supported", (1,)),
        (lambda d: d.update(format_version=True), "format_version", "not supported", (1,)),
        (lambda d: d.update(format_version="1"), "format_version", "not supported", (1,)),
        (lambda d: d.pop("format_version"), "format_version", "is required", (1,)),
        (lambda d: d["tasks"].append(dict(d["tasks"][1])), "tasks[5].fingerprint",
         "appears twice (first at tasks[1])", None),
        (lambda d: d["tasks"][3]["failures"].update(routing=4), "tasks[3].failures",
         "5 attributed failures exceed the 3 failed attempts", None),
        (lambda d: d["failure_counts"].update(routing=-1), "failure_counts.routing",
         "greater than or equal to 0", None),
        (lambda d: d["tasks"][1]["failures"].update(typo=1), "tasks[1].failures.typo",
         "not a known key", ("routing", "argument_grounding", "state_tracking", "recovery",
                             "premature_termination")),
        (lambda d: d["tasks"][4].update(mean_cost=1.5), "tasks[4].mean_cost", "(got 1.5)", None),
        (lambda d: d["tasks"][0].update(attempts=0), "tasks[0].attempts",
         "greater than or equal to 1", None),
        (lambda d: d.update(created_at="2026-11-28T16:30:00"), "created_at", "timezone", None),
        (lambda d: d.update(produced_by=""), "produced_by", "at least 1 character", None),
        (lambda d: d.update(overall=2), "overall", "less than or equal to 1", None),
        (lambda d: d.update(notez="typo"), "notez", "not a field", None),
        (lambda d: d["cost"].update(mean_stepz=1), "cost.mean_stepz", "not a field", None),
        (lambda d: d.update(tasks={"fingerprint": "fp-x"}), "tasks", "must be a list", None),
        (lambda d: d["tasks"].__setitem__(0, "fp-x"), "tasks[0]", "must be an object", None),
        (lambda d: d.update(id="fb-00000000000000000000"), "id", "does not match", None),
    ],
)  # fmt: skip
def test_a_malformed_report_is_refused_naming_the_field(
    example: dict[str, Any],
    change: Any,
    field: str,
    needle: str,
    allowed: tuple[object, ...] | None,
) -> None:
    change(example)
    refused = _refusal(example)
    assert refused.field == field, str(refused)
    assert needle in refused.problem, str(refused)
    assert str(refused).startswith(f"{field}: ")
    if allowed is not None:
        assert refused.allowed is not None
        assert tuple(map(str, refused.allowed)) == tuple(map(str, allowed))
        assert f"(allowed: {', '.join(map(str, allowed))})" in str(refused)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (b"", "not valid JSON"),
        (b'{"format_version": 1,', "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[1, 2]", "must be an object (got [1, 2])"),
        (b'"report"', "must be an object (got 'report')"),
    ],
)
def test_a_document_that_is_not_a_json_object_is_named_report(text: bytes, needle: str) -> None:
    with pytest.raises(InvalidInputError) as refused:
        parse_feedback_report(text)
    assert refused.value.field == "report"
    assert needle in str(refused.value)


@pytest.mark.parametrize(
    ("path", "raw", "field", "needle"),
    [
        (("capability_scores", "memory"), '"0.5"', "capability_scores.memory", "valid number"),
        (("overall",), '"0.4"', "overall", "valid number"),
        (("tasks", 0, "attempts"), '"8"', "tasks[0].attempts", "valid integer"),
        (("tasks", 0, "attempts"), "8.0", "tasks[0].attempts", "valid integer"),
        (("tasks", 2, "successes"), "true", "tasks[2].successes", "valid integer (got True)"),
        (("failure_counts", "routing"), "false", "failure_counts.routing", "valid integer"),
        (("cost", "mean_steps"), "NaN", "cost.mean_steps", "finite number"),
        (("cost", "mean_tool_calls"), "Infinity", "cost.mean_tool_calls", "finite number"),
        (("cost", "mean_output_tokens"), "-Infinity", "cost.mean_output_tokens", "finite"),
        (("cost", "mean_cost"), "1e400", "cost.mean_cost", "finite number"),
        (("tasks", 1, "mean_cost"), "NaN", "tasks[1].mean_cost", "finite number"),
        (("tasks", 0, "fingerprint"), '"../../x"', "tasks[0].fingerprint", "does not match"),
        (("tasks", 0, "fingerprint"), '"/etc/passwd"', "tasks[0].fingerprint", "does not match"),
        (("tasks", 0, "fingerprint"), '"fp-ABC"', "tasks[0].fingerprint", "does not match"),
        (("created_at",), "1764547200", "created_at", "ISO 8601"),
        (("produced_by",), '"' + "x" * 201 + '"', "produced_by", "at most 200"),
    ],
)
def test_values_are_not_coerced_and_numbers_are_finite(
    example: dict[str, Any], path: tuple[str | int, ...], raw: str, field: str, needle: str
) -> None:
    """Strict types: a refusal names the field whose value is wrong, never a neighbour."""
    target: Any = example
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = "__VALUE__"
    text = json.dumps(example).replace('"__VALUE__"', raw)
    with pytest.raises(InvalidInputError) as refused:
        parse_feedback_report(text)
    assert refused.value.field == field, str(refused.value)
    assert needle in refused.value.problem, str(refused.value)


def test_size_and_entry_limits_are_checked_before_the_entries(example: dict[str, Any]) -> None:
    text = json.dumps(example).encode()
    with pytest.raises(InvalidInputError, match="report: is larger than 100 bytes"):
        parse_feedback_report(text, max_bytes=100)
    assert parse_feedback_report(text, max_bytes=len(text)).tasks
    with pytest.raises(InvalidInputError, match="tasks: has 5 entries; at most 4 are accepted"):
        parse_feedback_report(text, max_tasks=4)
    example["tasks"] = [{"not": "checked"}] * 50_000  # refused by count, not entry by entry
    with pytest.raises(InvalidInputError, match="tasks: has 50000 entries"):
        parse_feedback_report(json.dumps(example), max_tasks=10)


def test_an_unknown_version_is_refused_before_anything_else_is_read() -> None:
    refused = _refusal({"format_version": 2, "capabilities": "whatever version 2 has"})
    assert str(refused) == "format_version: 2 is not supported by this reader (allowed: 1)"
    assert isinstance(refused, InvalidRecordError) and len(refused.problems) == 1


def test_several_problems_describe_the_first_and_list_the_others(
    example: dict[str, Any],
) -> None:
    example["source"] = "nobody"
    example["capability_scores"]["memory"] = 3
    example["tasks"][2]["successes"] = 10
    example["cost"].pop("mean_steps")
    refused = _refusal(example)
    assert isinstance(refused, InvalidRecordError)
    assert [p.field for p in refused.problems] == [
        "source",
        "capability_scores.memory",
        "tasks[2].successes",
        "cost.mean_steps",
    ]
    assert str(refused).startswith("source: 'nobody' is not a known value (allowed: trainer")
    assert str(refused).endswith(
        "; 3 more problems: capability_scores.memory, tasks[2].successes, cost.mean_steps"
    )


def test_numbers_that_json_cannot_hold_are_refused_when_built_in_python(
    example: dict[str, Any],
) -> None:
    """A report built in Python with NaN or infinity could be stored but not read back."""
    for bad in (math.inf, math.nan):
        data = copy.deepcopy(example)
        data["cost"]["mean_steps"] = bad
        with pytest.raises(ValidationError, match="finite number"):
            FeedbackReport.model_validate(data)


def test_the_records_messages_name_the_field_for_direct_callers_too(
    example: dict[str, Any],
) -> None:
    example["tasks"][2]["successes"] = 9
    with pytest.raises(ValidationError) as refused:
        FeedbackReport.model_validate(example)
    (error,) = refused.value.errors()
    assert error["loc"] == ("tasks", 2, "successes")
