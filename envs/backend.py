"""The interface every execution backend implements."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from contract import Action, Feedback, TaskSpec, ToolSpec

Row = dict[str, Any]
StateSnapshot = Mapping[str, Mapping[str, Row]]
"""Collections (``"calendar.events"``) of rows keyed by id: what state verifiers read."""


@dataclass(frozen=True)
class PrivilegedEvidence:
    """What a verifier reads beyond the interaction history; never shown to a policy."""

    initial: StateSnapshot
    final: StateSnapshot


class Backend(Protocol):
    """Runs actions for one episode at a time and returns contract feedback."""

    name: str
    device: str
    """Which instance (a sandbox, a phone) runs the episodes: retries go to another."""

    def reset(self, task: TaskSpec) -> None:
        """Build the task's initial conditions; the candidate tools become available."""

    def execute(self, action: Action) -> Feedback:
        """Run one action. Never raises for anything a policy can send."""

    def tool_specs(self) -> tuple[ToolSpec, ...]:
        """Specs of the current task's candidate tools, in the task's order."""

    def subagent_specs(self) -> tuple[ToolSpec, ...]:
        """Sub-agents the policy can call; their parameters describe ``arguments``."""

    def evidence(self) -> PrivilegedEvidence:
        """Initial and current state, for verification."""
