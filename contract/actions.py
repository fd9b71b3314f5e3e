"""Actions: what a planner chooses at a step, from a structured set (not pixels)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, JsonValue, TypeAdapter

from contract.base import Record, canonical_json


class _Action(Record):
    @property
    def target(self) -> str:
        """What the action addresses: a tool, a memory key, a skill, a sub-agent."""
        return ""

    def describe(self) -> str:
        """One readable line, e.g. ``send_message(contact_id="c-3", text="hi")``."""
        fields = self.model_dump(mode="json", exclude={"kind"})
        args = ", ".join(f"{k}={canonical_json(v).decode()}" for k, v in fields.items())
        return f"{self.kind}({args})"  # type: ignore[attr-defined]


class ToolCall(_Action):
    kind: Literal["tool_call"] = "tool_call"
    tool: str
    arguments: dict[str, JsonValue] = Field(default_factory=dict)

    @property
    def target(self) -> str:
        return self.tool

    def describe(self) -> str:
        """Its arguments by name: equal calls (whatever order a model wrote their
        arguments in, or the catalog stored them in) describe alike."""
        items = sorted(self.arguments.items())
        args = ", ".join(f"{k}={canonical_json(v).decode()}" for k, v in items)
        return f"{self.tool}({args})"


class MemoryRead(_Action):
    """Read one remembered fact by key."""

    kind: Literal["memory_read"] = "memory_read"
    key: str

    @property
    def target(self) -> str:
        return self.key


class MemoryWrite(_Action):
    kind: Literal["memory_write"] = "memory_write"
    key: str
    value: str

    @property
    def target(self) -> str:
        return self.key


class MemorySearch(_Action):
    kind: Literal["memory_search"] = "memory_search"
    query: str

    @property
    def target(self) -> str:
        return self.query


class SkillLoad(_Action):
    """Load a documented multi-step routine from the skills library."""

    kind: Literal["skill_load"] = "skill_load"
    name: str

    @property
    def target(self) -> str:
        return self.name


class SubAgentCall(_Action):
    """Hand part of the task to a sub-agent (a GUI agent on the screen, a search agent)."""

    kind: Literal["subagent_call"] = "subagent_call"
    agent: str
    instruction: str = Field(description="what the sub-agent is asked, in natural language")
    arguments: dict[str, JsonValue] = Field(
        default_factory=dict, description="structured inputs, checked against the agent's schema"
    )

    @property
    def target(self) -> str:
        return self.agent


class Clarify(_Action):
    kind: Literal["clarify"] = "clarify"
    question: str


class Refuse(_Action):
    kind: Literal["refuse"] = "refuse"
    reason: str


class Finish(_Action):
    """Declare the task complete, with an answer for the user."""

    kind: Literal["finish"] = "finish"
    answer: str = ""


Action = Annotated[
    ToolCall
    | MemoryRead
    | MemoryWrite
    | MemorySearch
    | SkillLoad
    | SubAgentCall
    | Clarify
    | Refuse
    | Finish,
    Field(discriminator="kind"),
]
ActionKind = Literal[
    "tool_call",
    "memory_read",
    "memory_write",
    "memory_search",
    "skill_load",
    "subagent_call",
    "clarify",
    "refuse",
    "finish",
]
TERMINAL_KINDS: frozenset[str] = frozenset({"clarify", "refuse", "finish"})
TURN_ENDING_KINDS: frozenset[str] = frozenset({"clarify", "finish"})
"""Actions after which a task of several user turns goes on with the user's next turn
(an answer, or the missing detail a question asked for); after the last, the episode
ends."""

action_adapter: TypeAdapter[Action] = TypeAdapter(Action)


_FIELDS: dict[str, tuple[str, ...]] = {
    model.model_fields["kind"].default: tuple(f for f in model.model_fields if f != "kind")
    for model in (
        MemoryRead,
        MemoryWrite,
        MemorySearch,
        SkillLoad,
        SubAgentCall,
        Clarify,
        Refuse,
        Finish,
    )
}


def describe_json(action: Mapping[str, Any]) -> str:
    """``describe()`` of an action from its JSON as ``to_json`` wrote it (every field
    present), without validating it: the catalog's readers build the line from the stored
    column. A tool call's arguments come sorted by name, as ``describe()`` writes them."""
    kind = action["kind"]
    if kind == "tool_call":
        name, items = action["tool"], sorted(action["arguments"].items())
    else:
        name, items = kind, [(field, action[field]) for field in _FIELDS[kind]]
    return f"{name}({', '.join(f'{k}={canonical_json(v).decode()}' for k, v in items)})"
