"""What every policy implements, and what it may see of a task."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from contract import Action, ExecutionError, FaultKind, PolicyInfo, Step, TaskSpec, ToolSpec


@dataclass(frozen=True)
class TaskView:
    """The part of a task a policy sees: never its verifier, reference plan or state."""

    goal: str
    tools: tuple[ToolSpec, ...]
    subagents: tuple[ToolSpec, ...]
    max_steps: int
    follow_ups: tuple[str, ...] = ()
    """The user's later turns (``TaskSpec.follow_ups``): a policy hears each only when it
    has ended the turn before (a finish or a clarify: ``TURN_ENDING_KINDS``)."""
    arriving: tuple[tuple[ToolSpec, ...], ...] = ()
    """Tools that arrive with a follow-up (``TaskSpec.arriving_tools``), by follow-up."""

    def follow_up(self, finished: int) -> str | None:
        """What the user says after the policy's ``finished``-th turn ended (counted from
        1), with the specs of the tools that arrive then, one JSON object a line (as every
        harness renders them, so a model reads them alike in training and in use); None
        when that ended the episode."""
        if finished > len(self.follow_ups):
            return None
        text = self.follow_ups[finished - 1]
        arrived = self.arriving[finished - 1] if finished <= len(self.arriving) else ()
        if not arrived:
            return text
        specs = "\n".join(json.dumps(t.openai_tool(), sort_keys=True) for t in arrived)
        return f"{text}\n{specs}"

    def tools_after(self, finished: int) -> tuple[ToolSpec, ...]:
        """The tools offered once the policy's ``finished``-th turn ended: those of the
        start and every arrival so far."""
        return (*self.tools, *(t for arrived in self.arriving[:finished] for t in arrived))


@dataclass(frozen=True)
class Decision:
    """A policy's turn: the action (None when its output was unusable) and what it cost."""

    action: Action | None
    model_output: str
    input_tokens: int = 0
    output_tokens: int = 0
    error: ExecutionError | None = None
    """Why ``action`` is None: malformed output, unknown tool, endpoint refusal, ...;
    ``endpoint_error`` when the model gave no reply at all (the episode ends there)."""
    injected_fault: FaultKind | None = None
    retries: int = 0


class PolicySession(Protocol):
    """One episode of a policy."""

    def act(self, history: Sequence[Step]) -> Decision: ...


class Policy(Protocol):
    """Chooses actions. Model policies read only the ``TaskView``; the scripted reference
    policy also reads the task's reference plan, which is what it exists to replay."""

    @property
    def info(self) -> PolicyInfo: ...

    def start(self, task: TaskSpec, view: TaskView) -> PolicySession: ...
