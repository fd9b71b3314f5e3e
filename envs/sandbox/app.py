"""How a sandbox app declares its state seeding and its typed tools."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import JsonValue

from contract import ToolEffect, ToolSpec
from contract.argcheck import Checker, compile_schema
from envs.sandbox.state import Collections, ToolContext

Handler = Callable[[ToolContext, dict[str, Any]], JsonValue]
Seeder = Callable[[Collections, random.Random], None]


@dataclass(frozen=True)
class Param:
    """One tool parameter: its JSON Schema and whether it may be left out."""

    schema: dict[str, Any]
    optional: bool = False


def text(
    description: str,
    *,
    enum: list[str] | None = None,
    pattern: str | None = None,
    optional: bool = False,
    max_length: int = 2000,
) -> Param:
    schema: dict[str, Any] = {"type": "string", "description": description}
    if enum is not None:
        schema["enum"] = enum
    else:
        schema["minLength"] = 1
        schema["maxLength"] = max_length
    if pattern is not None:
        schema["pattern"] = pattern
    return Param(schema, optional)


def integer(
    description: str,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    optional: bool = False,
) -> Param:
    schema: dict[str, Any] = {"type": "integer", "description": description}
    if minimum is not None:
        schema["minimum"] = minimum
    if maximum is not None:
        schema["maximum"] = maximum
    return Param(schema, optional)


def number(
    description: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    optional: bool = False,
) -> Param:
    schema: dict[str, Any] = {"type": "number", "description": description}
    if minimum is not None:
        schema["minimum"] = minimum
    if maximum is not None:
        schema["maximum"] = maximum
    return Param(schema, optional)


def boolean(description: str, *, optional: bool = False) -> Param:
    return Param({"type": "boolean", "description": description}, optional)


def array(
    description: str,
    items: Param,
    *,
    min_items: int = 1,
    max_items: int = 20,
    optional: bool = False,
) -> Param:
    schema = {
        "type": "array",
        "description": description,
        "items": items.schema,
        "minItems": min_items,
        "maxItems": max_items,
    }
    return Param(schema, optional)


def obj(description: str, fields: dict[str, Param], *, optional: bool = False) -> Param:
    return Param({"description": description, **object_schema(fields)}, optional)


def object_schema(fields: dict[str, Param]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: p.schema for name, p in fields.items()},
        "required": [name for name, p in fields.items() if not p.optional],
        "additionalProperties": False,
    }


DATE = r"^\d{4}-\d{2}-\d{2}$"
TIME = r"^([01]\d|2[0-3]):[0-5]\d$"


@dataclass(frozen=True)
class SandboxTool:
    spec: ToolSpec
    check: Checker
    handler: Handler
    latency_ms: float


@dataclass
class App:
    """An app of the simulated phone: a domain, its seeded state, its tools."""

    domain: str
    seeders: list[Seeder] = field(default_factory=list)
    tools: dict[str, SandboxTool] = field(default_factory=dict)

    def seeder(self, fn: Seeder) -> Seeder:
        self.seeders.append(fn)
        return fn

    def tool(
        self,
        description: str,
        params: dict[str, Param] | None = None,
        *,
        effect: ToolEffect = ToolEffect.READ,
        latency_ms: float = 40.0,
    ) -> Callable[[Handler], Handler]:
        """Register the decorated handler as a tool named after the function."""

        def register(fn: Handler) -> Handler:
            schema = object_schema(params or {})
            spec = ToolSpec(
                name=fn.__name__,
                domain=self.domain,
                description=description,
                parameters=schema,
                effect=effect,
            )
            if spec.name in self.tools:
                raise ValueError(f"tool {spec.name!r} registered twice in {self.domain}")
            self.tools[spec.name] = SandboxTool(spec, compile_schema(schema), fn, latency_ms)
            return fn

        return register
