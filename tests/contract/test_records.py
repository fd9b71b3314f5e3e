"""Contract records round-trip through JSON, keep stable content ids and refuse bad input."""

from __future__ import annotations

import orjson
import pytest
from pydantic import ValidationError

from contract import (
    Check,
    Feedback,
    Finish,
    StatePredicateCheck,
    TaskSpec,
    ToolCall,
    Trajectory,
    VerifierSpec,
    action_adapter,
)
from contract.schema import contract_schemas


def test_trajectories_round_trip_through_json(faulty_trajectories: list[Trajectory]) -> None:
    for trajectory in faulty_trajectories:
        data = trajectory.to_json()
        loaded = Trajectory.from_json(data)
        assert loaded == trajectory
        assert loaded.id == trajectory.id
        assert loaded.to_json() == data


def test_ids_are_derived_from_content(faulty_trajectories: list[Trajectory]) -> None:
    task = faulty_trajectories[0].task
    rebuilt = TaskSpec.model_validate(task.model_dump(mode="json", exclude={"id"}))
    assert rebuilt.id == task.id
    changed = TaskSpec.model_validate(
        {**task.model_dump(mode="json", exclude={"id"}), "goal": task.goal + " please"}
    )
    assert changed.id != task.id
    assert task.id.startswith("task-")
    assert faulty_trajectories[0].id.startswith("traj-")


def test_a_record_whose_id_does_not_match_its_content_is_refused(
    faulty_trajectories: list[Trajectory],
) -> None:
    data = faulty_trajectories[0].task.model_dump(mode="json")
    data["goal"] = "Something else entirely"
    with pytest.raises(ValidationError, match="does not match the record's content"):
        TaskSpec.model_validate(data)


def test_records_are_immutable_and_refuse_unknown_fields() -> None:
    call = ToolCall(tool="send_message", arguments={"text": "hi"})
    with pytest.raises(ValidationError):
        call.tool = "other"  # type: ignore[misc]
    with pytest.raises(ValidationError, match="Extra inputs"):
        ToolCall.model_validate({"tool": "x", "arguments": {}, "colour": "red"})


def test_actions_are_parsed_by_kind() -> None:
    action = action_adapter.validate_python({"kind": "finish", "answer": "done"})
    assert action == Finish(answer="done")
    with pytest.raises(ValidationError, match="tool_call"):
        action_adapter.validate_python({"kind": "teleport"})


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"checks": []}, "checks"),
        ({"checks": [{"kind": "vibes"}]}, "checks.0"),
        ({"checks": [{"kind": "state", "collection": "NoDot"}]}, "collection"),
        ({"checks": [{"kind": "state", "collection": "a.b", "expect": "maybe"}]}, "expect"),
        ({"checks": [{"kind": "exact_tool_call"}]}, "tool"),
    ],
)
def test_malformed_verifier_specs_name_the_field(spec: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        VerifierSpec.model_validate(spec)
    locations = [".".join(map(str, e["loc"])) for e in info.value.errors()]
    assert any(field in loc for loc in locations), locations


def test_unknown_check_kind_lists_the_allowed_kinds() -> None:
    with pytest.raises(ValidationError) as info:
        VerifierSpec.model_validate({"checks": [{"kind": "vibes"}]})
    assert "exact_tool_call" in str(info.value) and "collaboration" in str(info.value)


def test_every_check_kind_round_trips() -> None:
    from pydantic import TypeAdapter

    adapter: TypeAdapter[Check] = TypeAdapter(Check)
    samples = [
        {"kind": "exact_tool_call", "tool": "t", "arguments": {"a": 1}, "match": "exact"},
        {"kind": "state", "collection": "a.b", "where": [{"field": "x", "op": "gte", "value": 2}]},
        {"kind": "action_order", "sequence": [{"kind": "skill_load", "target": "s"}]},
        {"kind": "collaboration", "agent": "gui", "then": {"kind": "tool_call"}},
        {"kind": "answer", "via": "refuse", "contains": ["cannot"]},
        {"kind": "rubric", "criteria": "polite"},
    ]
    for sample in samples:
        check = adapter.validate_python(sample)
        assert adapter.validate_json(adapter.dump_json(check)) == check
    assert isinstance(adapter.validate_python(samples[1]), StatePredicateCheck)


def test_schema_covers_every_record() -> None:
    schemas = contract_schemas()
    for name in ("TaskSpec", "ToolSpec", "Action", "Feedback", "VerifierSpec", "Verdict",
                 "Step", "Trajectory", "Capability", "Difficulty"):  # fmt: skip
        assert name in schemas
    orjson.dumps(schemas)
    assert "fingerprint" in schemas["TaskSpec"]["properties"]
    assert {"tool_use", "memory", "skills", "subagent"} == set(schemas["Capability"]["enum"])


def test_feedback_failure_is_a_typed_error() -> None:
    feedback = Feedback.failure(
        kind="invalid_arguments",  # type: ignore[arg-type]
        message="x: expected integer",
        field="x",
    )
    assert not feedback.ok
    assert feedback.error is not None and feedback.error.field == "x"
