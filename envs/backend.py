"""The interface every execution backend implements."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from contract import Action, Feedback, FlywheelError, TaskSpec, ToolSpec

Row = dict[str, Any]
StateSnapshot = Mapping[str, Mapping[str, Row]]
"""Collections (``"calendar.events"``) of rows keyed by id: what state verifiers read."""


@dataclass(frozen=True)
class PrivilegedEvidence:
    """What a verifier reads beyond the interaction history; never shown to a policy."""

    initial: StateSnapshot
    final: StateSnapshot
    screen: str | None = None
    """The final screen as a screen document (``envs.screen``), where there is one."""


class BackendFaultError(FlywheelError):
    """The backend itself failed (a device that went away): the attempt ends as a
    backend error, and the collector tries the task again elsewhere."""


@dataclass(frozen=True)
class ScreenRecord:
    """What a step showed on a screen: a readable trace, the evidence it kept, and the
    tokens of the model that operated the screen (a GUI sub-agent's)."""

    observation: str
    artifacts: tuple[str, ...] = ()
    input_tokens: int = 0
    output_tokens: int = 0


class Backend(Protocol):
    """Runs actions for one episode at a time and returns contract feedback."""

    name: str
    device: str
    """Which instance (a sandbox, a phone) runs the episodes: retries go to another."""

    def reset(self, task: TaskSpec) -> None:
        """Build the task's initial conditions; the candidate tools become available.
        Raises ``BackendFaultError`` when the backend itself is unavailable."""

    def execute(self, action: Action) -> Feedback:
        """Run one action. Never raises for anything a policy can send."""

    def tool_specs(self) -> tuple[ToolSpec, ...]:
        """Specs of the current task's candidate tools, in the task's order."""

    def subagent_specs(self) -> tuple[ToolSpec, ...]:
        """Sub-agents the policy can call; their parameters describe ``arguments``."""

    def evidence(self) -> PrivilegedEvidence:
        """Initial and current state, for verification (``BackendFaultError`` if it cannot
        be read)."""


@runtime_checkable
class RecordsScreens(Protocol):
    """A backend whose actions can show screens (a device): the runner links what the
    last action showed to its step."""

    def take_screen_record(self) -> ScreenRecord | None:
        """What the last action showed, once (None if it showed nothing)."""
