"""JSON Schemas of every contract record (``flywheel contract schema``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, TypeAdapter

from contract.actions import action_adapter
from contract.enums import Capability, Difficulty
from contract.feedback import Feedback
from contract.task import TaskSpec
from contract.tools import ToolSpec
from contract.trajectory import Step, Trajectory
from contract.verifier import Verdict, VerifierSpec

_RECORDS: dict[str, type[BaseModel]] = {
    "ToolSpec": ToolSpec,
    "TaskSpec": TaskSpec,
    "Feedback": Feedback,
    "VerifierSpec": VerifierSpec,
    "Verdict": Verdict,
    "Step": Step,
    "Trajectory": Trajectory,
}


def contract_schemas() -> dict[str, Any]:
    """Map each record name to its JSON Schema (validation mode)."""
    schemas: dict[str, Any] = {name: model.model_json_schema() for name, model in _RECORDS.items()}
    schemas["Action"] = action_adapter.json_schema()
    schemas["Capability"] = TypeAdapter(Capability).json_schema()
    schemas["Difficulty"] = TypeAdapter(Difficulty).json_schema()
    return schemas
