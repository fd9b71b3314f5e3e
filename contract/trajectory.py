"""Steps and trajectories: the record of an episode, kept whether it succeeded or not."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from contract.actions import Action
from contract.base import IdentifiedRecord, LateFields, Record
from contract.enums import Capability, FailureType, FaultKind, Outcome, Termination
from contract.feedback import Feedback
from contract.task import TaskSpec
from contract.verifier import Verdict


class Step(Record):
    """One turn: what the policy observed and produced, the action, and the feedback.

    ``action`` is None when the model's output could not be turned into an action; the
    feedback then carries the typed error (malformed output, invalid arguments, ...).
    """

    index: int = Field(ge=0)
    observation: str | None = Field(
        default=None, description="what the backend showed beyond feedback (a screen), if any"
    )
    model_output: str = ""
    action: Action | None
    feedback: Feedback
    input_tokens: int = Field(
        default=0, ge=0, description="model input tokens: the policy's and its GUI sub-agent's"
    )
    output_tokens: int = Field(
        default=0, ge=0, description="model output tokens: the policy's and its GUI sub-agent's"
    )
    injected_fault: FaultKind | None = None
    artifacts: tuple[str, ...] = Field(default=(), description="screenshots, page sources")


class Cost(Record):
    steps: int = Field(ge=0)
    tool_calls: int = Field(ge=0)
    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    latency_ms: float = Field(default=0.0, ge=0)
    usd: float = Field(default=0.0, ge=0)


class PolicyInfo(Record):
    name: str
    version: str
    model: str | None = None


class TrajectoryMetadata(LateFields, Record):
    late_fields: ClassVar[frozenset[str]] = frozenset({"max_steps", "simulated"})

    round: str | None = None
    backend: str
    policy: PolicyInfo
    capabilities: tuple[Capability, ...]
    outcome: Outcome
    termination: Termination
    failure_attribution: FailureType | None = None
    injected_faults: tuple[FaultKind, ...] = ()
    recovered: bool = Field(
        default=False, description="an error occurred and the episode still succeeded"
    )
    retries: int = Field(default=0, ge=0, description="policy or backend retries inside it")
    seed: int = Field(ge=0)
    attempt: int = Field(default=0, ge=0, description="collection attempt (backend retries)")
    device: str | None = Field(default=None, description="backend instance that ran it")
    max_steps: int | None = Field(
        default=None, ge=1, description="the step budget it ran under (None: not recorded)"
    )
    simulated: bool = Field(
        default=False,
        description="its tools were answered by a chat model simulating them (weaker "
        "evidence: never approved without a person or a confident judge)",
    )


class Trajectory(IdentifiedRecord):
    id_prefix: ClassVar[str] = "traj"

    task: TaskSpec
    steps: tuple[Step, ...]
    verdict: Verdict
    cost: Cost
    metadata: TrajectoryMetadata
