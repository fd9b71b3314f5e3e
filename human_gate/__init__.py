"""The human gate: annotators approve, correct, reject or quarantine curated data.

``HumanGate`` is the interface; ``AutoGate`` applies the curator's suggestions without a
person. The Label Studio gate arrives with step 3 (issue 4). Items a person has not
decided stay pending: a gate never approves silently.
"""

from contract import InvalidInputError
from human_gate.auto import AUTO_REVIEWER, AutoGate, auto_review
from human_gate.base import (
    CONSENSUS_REVIEWER_PREFIX,
    GateError,
    GateItem,
    GateResult,
    GateUnavailableError,
    HumanGate,
    final_decisions,
    is_consensus,
)

GATES = ("auto",)


def make_gate(name: str) -> HumanGate:
    """The gate called ``name`` (one of ``GATES``)."""
    if name == "auto":
        return AutoGate()
    raise InvalidInputError("gate", f"unknown gate {name!r}", GATES)


__all__ = [
    "AUTO_REVIEWER",
    "CONSENSUS_REVIEWER_PREFIX",
    "GATES",
    "AutoGate",
    "GateError",
    "GateItem",
    "GateResult",
    "GateUnavailableError",
    "HumanGate",
    "auto_review",
    "final_decisions",
    "is_consensus",
    "make_gate",
]
