"""The human gate: annotators approve, correct, reject or quarantine curated data.

``HumanGate`` is the interface; ``AutoGate`` applies the curator's suggestions without a
person. ``human_gate.label_studio`` is the Label Studio gate. Items a person has not
decided stay pending: a gate never approves silently.
"""

from contract import InvalidInputError
from contract.curation import CONSENSUS_REVIEWER_PREFIX
from human_gate.auto import AUTO_REVIEWER, AutoGate, auto_review
from human_gate.base import (
    GateError,
    GateItem,
    GateResult,
    GateUnavailableError,
    HumanGate,
    Workplace,
    final_decisions,
    is_consensus,
)

GATES = ("auto", "label-studio")


def make_gate(name: str) -> HumanGate:
    """The gate called ``name`` when it needs no server (``auto``); the Label Studio gate
    needs its server's address and token: ``LabelStudioGate.connect``."""
    if name == "auto":
        return AutoGate()
    if name in GATES:
        raise InvalidInputError("gate", f"{name!r} needs a server: build it with its client")
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
    "Workplace",
    "auto_review",
    "final_decisions",
    "is_consensus",
    "make_gate",
]
