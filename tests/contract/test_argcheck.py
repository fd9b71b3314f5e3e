"""The compiled argument checker agrees with the reference jsonschema implementation."""

from __future__ import annotations

import random
from typing import Any

import jsonschema
import pytest

from agents.policies.perturb import perturb
from contract import SchemaError, ToolSpec
from contract.argcheck import compile_schema
from envs.sandbox import MobileSandbox

JUNK: list[Any] = [None, True, 0, -5, 3.5, "", "x" * 3000, [], [1, "a"], {}, {"z": 1}, "07:61"]


def _samples(spec: ToolSpec, rng: random.Random) -> list[dict[str, Any]]:
    props: dict[str, Any] = spec.parameters["properties"]
    good = {name: _example(schema) for name, schema in props.items()}
    samples = [good, {}, {**good, "unexpected": 1}]
    for name, schema in props.items():
        samples.extend({**good, name: value} for value in rng.sample(JUNK, 4))
        samples.append({**good, name: perturb(good[name], schema)})
        samples.append({k: v for k, v in good.items() if k != name})
    return samples


def _example(schema: dict[str, Any]) -> Any:
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "integer":
        return schema.get("minimum", 1)
    if kind == "number":
        return float(schema.get("minimum", 1.0))
    if kind == "boolean":
        return True
    if kind == "array":
        return [_example(schema["items"])] * max(1, schema.get("minItems", 1))
    if kind == "object":
        return {k: _example(v) for k, v in schema.get("properties", {}).items()}
    pattern = schema.get("pattern", "")
    if "\\d{4}-" in pattern:
        return "2026-03-20"
    if "[0-5]" in pattern:
        return "07:30"
    if "@" in pattern:
        return "a@b.co"
    if "0-9" in pattern:
        return "+351 912345678"
    return "text"


@pytest.mark.parametrize("spec", MobileSandbox().all_tool_specs(), ids=lambda s: s.name)
def test_checker_agrees_with_jsonschema(spec: ToolSpec) -> None:
    jsonschema.Draft202012Validator.check_schema(spec.parameters)
    reference = jsonschema.Draft202012Validator(spec.parameters)
    check = compile_schema(spec.parameters)
    for sample in _samples(spec, random.Random(spec.name)):
        ours = check(sample, "")
        theirs = reference.is_valid(sample)
        assert (ours is None) == theirs, (sample, ours)


def test_problems_name_the_field_and_the_allowed_values() -> None:
    check = compile_schema(
        {
            "type": "object",
            "properties": {"mode": {"type": "string", "enum": ["walk", "drive"]}},
            "required": ["mode"],
            "additionalProperties": False,
        }
    )
    assert check({"mode": "fly"}, "") == ("mode", "'fly' is not allowed (allowed: walk, drive)")
    assert check({}, "") == ("mode", "is required")
    assert check({"mode": "walk", "x": 1}, "") == ("x", "is not a known field (known: mode)")


def test_unsupported_keywords_are_refused_at_compile_time() -> None:
    with pytest.raises(SchemaError, match="oneOf"):
        compile_schema({"type": "object", "oneOf": []})
