"""Tool specifications: what a policy is told about a tool."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from contract.base import Record
from contract.enums import ToolEffect


class ToolSpec(Record):
    """A typed tool: its name, app domain, description and JSON-Schema parameters."""

    name: str = Field(
        pattern=r"^[A-Za-z][A-Za-z0-9_]{1,63}$",
        description="snake_case in the sandbox; a foreign backend keeps its own "
        "(BFCL's fillFuelTank)",
    )
    domain: str
    description: str = Field(min_length=1)
    parameters: dict[str, Any] = Field(
        description="JSON Schema (an object schema) of the tool's arguments"
    )
    effect: ToolEffect = ToolEffect.READ

    @field_validator("parameters")
    @classmethod
    def _object_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value.get("type") != "object":
            raise ValueError("parameters must be a JSON Schema with type 'object'")
        return value

    def openai_tool(self) -> dict[str, Any]:
        """The tool in the chat-completions ``tools`` shape."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }
