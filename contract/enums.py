"""Closed vocabularies of the contract."""

from __future__ import annotations

from enum import StrEnum


class Capability(StrEnum):
    """The four capabilities of MobilePA-Bench."""

    TOOL_USE = "tool_use"
    MEMORY = "memory"
    SKILLS = "skills"
    SUBAGENT = "subagent"


class Difficulty(StrEnum):
    EASY = "easy"
    MEDIUM = "medium"
    HARD = "hard"


class Split(StrEnum):
    """Train tasks may be trained on; dev tasks never are."""

    TRAIN = "train"
    DEV = "dev"


class TaskSource(StrEnum):
    TEMPLATE = "template"
    LLM = "llm"
    REPAIR = "repair"


class ToolEffect(StrEnum):
    """Whether a tool only reads state or changes it (writes are what verifiers check)."""

    READ = "read"
    WRITE = "write"


class ErrorKind(StrEnum):
    """Typed execution errors returned in feedback instead of exceptions."""

    UNKNOWN_TOOL = "unknown_tool"
    INVALID_ARGUMENTS = "invalid_arguments"
    PRECONDITION_FAILED = "precondition_failed"
    BACKEND_ERROR = "backend_error"
    TIMEOUT = "timeout"
    MALFORMED_OUTPUT = "malformed_output"
    """The model produced no usable action (text without a tool call)."""
    ENDPOINT_REFUSAL = "endpoint_refusal"
    """The model endpoint refused to answer (its safety system, not the agent's decision)."""
    ELEMENT_NOT_FOUND = "element_not_found"
    """No element on the device's screen matches the locator."""
    INVALID_LOCATOR = "invalid_locator"
    """The locator is malformed (an XPath that does not parse, an unknown strategy)."""
    ENDPOINT_ERROR = "endpoint_error"
    """The model gave no reply: its endpoint stayed unreachable or answered no completion
    after the retries of ``[retries] llm`` (not the backend's fault: no other device helps)."""


class Termination(StrEnum):
    """Why an episode ended."""

    VERIFIED = "verified"
    """The verifier passed after a state change; the policy had nothing left to do."""
    FINISHED = "finished"
    CLARIFIED = "clarified"
    REFUSED = "refused"
    BUDGET_EXHAUSTED = "budget_exhausted"
    BACKEND_ERROR = "backend_error"
    """The backend (a device, the sandbox) failed: the collector tries another one."""
    ENDPOINT_ERROR = "endpoint_error"
    """The model's endpoint failed after its own retries: final, the outcome a backend error."""


class Outcome(StrEnum):
    SUCCESS = "success"
    FAILURE = "failure"
    BACKEND_ERROR = "backend_error"
    """The backend or the model endpoint failed: never training data."""


class FailureType(StrEnum):
    """The five failure types of the paper's attribution."""

    ROUTING = "routing"
    ARGUMENT_GROUNDING = "argument_grounding"
    STATE_TRACKING = "state_tracking"
    RECOVERY = "recovery"
    PREMATURE_TERMINATION = "premature_termination"


class FaultKind(StrEnum):
    """Faults the scripted reference policy can inject."""

    WRONG_ARGUMENT = "wrong_argument"
    SKIPPED_STEP = "skipped_step"
    PREMATURE_FINISH = "premature_finish"
    REDUNDANT_CALL = "redundant_call"
    LOOPING_CALL = "looping_call"
    INVALID_TOOL = "invalid_tool"
