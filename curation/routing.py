"""Where a curated trajectory goes: approved, rejected, or to a person, and why."""

from __future__ import annotations

from dataclasses import dataclass, field

import xxhash
from pydantic import JsonValue

from contract import (
    FailureType,
    InvalidInputError,
    Outcome,
    ReviewDecision,
    Routing,
    Trajectory,
)
from curation.dedup import DEFAULT_NUM_PERM, DEFAULT_THRESHOLD
from curation.facts import TrajectoryFacts, facts_of

SAFETY_SENSITIVE_TOOLS: frozenset[str] = frozenset(
    {
        # pay or commit money
        "send_money",
        "request_money",
        "checkout",
        "place_food_order",
        "book_flight",
        "book_hotel",
        "request_ride",
        # send messages on the user's behalf
        "send_message",
        "send_email",
        "reply_to_email",
        "forward_email",
        "share_photo",
        # delete data
        "delete_event",
        "delete_alarm",
        "delete_note",
    }
)
"""Sandbox tools that pay, send messages or delete data: a person checks their use."""


@dataclass(frozen=True)
class CuratorConfig:
    """Thresholds and policies of the curator."""

    approve_quality: float = field(
        default=0.7, metadata={"help": "a supported success at or above this is approved"}
    )
    reject_quality: float = field(
        default=0.3, metadata={"help": "a success below this is rejected; between: a person"}
    )
    near_duplicate_threshold: float = field(
        default=DEFAULT_THRESHOLD,
        metadata={"help": "estimated Jaccard similarity of action shingles in (0, 1]"},
    )
    num_perm: int = field(
        default=DEFAULT_NUM_PERM, metadata={"help": "MinHash permutations (>= 2)"}
    )
    audit_rate: float = field(
        default=0.0,
        metadata={"help": "share of confidently routed items sent to a person anyway"},
    )
    safety_sensitive_tools: frozenset[str] = field(
        default=SAFETY_SENSITIVE_TOOLS,
        metadata={"help": "tools whose use sends an otherwise approved item to a person"},
    )
    simulated_confidence: float = field(
        default=0.8,
        metadata={
            "help": "an LLM judge's confidence at or above which a success on simulated "
            "tools may be approved without a person"
        },
    )

    def __post_init__(self) -> None:
        for name in ("approve_quality", "reject_quality", "audit_rate", "simulated_confidence"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise InvalidInputError(name, f"{value} is outside [0, 1]")
        if self.reject_quality >= self.approve_quality:
            raise InvalidInputError(
                "reject_quality",
                f"{self.reject_quality} must be below approve_quality {self.approve_quality}",
            )
        if not 0.0 < self.near_duplicate_threshold <= 1.0:
            raise InvalidInputError(
                "near_duplicate_threshold", f"{self.near_duplicate_threshold} is outside (0, 1]"
            )
        if self.num_perm < 2:
            raise InvalidInputError("num_perm", f"{self.num_perm} is below 2")
        if not isinstance(self.safety_sensitive_tools, frozenset):
            raise InvalidInputError("safety_sensitive_tools", "must be a frozenset of tool names")


Route = tuple[Routing, ReviewDecision, str]


def route(
    trajectory: Trajectory | TrajectoryFacts,
    supported: bool,
    quality: float,
    config: CuratorConfig,
    judge_answer: JsonValue = None,
    *,
    support_detail: str = "",
    attribution: FailureType | None = None,
) -> Route:
    """``(routing, suggested decision, reason)`` for a trajectory that was kept.

    In order: a backend error is rejected; a conflict (outcome against evidence, or the
    verifier against the LLM judge) goes to a person, quarantined; so does an unusable
    judge answer, suggesting what the rules alone decide; a failure is rejected, naming
    its attribution; a supported success is approved at ``approve_quality``, rejected
    below ``reject_quality`` and sent to a person between them. An approval that used a
    safety-sensitive tool, and an audit sample of confident items, go to a person with
    the same suggestion. A success on simulated tools (a chat model answered them) is
    never approved on the rules alone: only an LLM judge that says it passed with at least
    ``simulated_confidence`` lets the rules stand; otherwise a person decides, and the
    suggestion is quarantine (so no automatic gate approves it). ``attribution`` defaults
    to the one the trajectory holds.
    """
    trajectory = facts_of(trajectory)
    base = _base_route(trajectory, supported, quality, config, judge_answer, support_detail)
    if trajectory.simulated:
        base = _simulated_route(base, judge_answer, config)
    routing, suggested, reason = base
    if routing is Routing.AUTO_APPROVE or suggested is ReviewDecision.APPROVE:
        sensitive = _sensitive_tools(trajectory, config)
        if sensitive:
            routing = Routing.NEEDS_HUMAN
            reason += f"; used safety-sensitive tools: {', '.join(sensitive)}"
    if routing is not Routing.NEEDS_HUMAN and audit_sampled(trajectory.id, config.audit_rate):
        routing = Routing.NEEDS_HUMAN
        reason += f"; audit sample (would be {base[0].value})"
    if suggested is ReviewDecision.REJECT and trajectory.outcome is Outcome.FAILURE:
        kind = attribution or trajectory.attribution
        if kind is not None:
            reason = f"failed ({kind.value}): {reason}"
    return routing, suggested, reason


def _base_route(
    trajectory: TrajectoryFacts,
    supported: bool,
    quality: float,
    config: CuratorConfig,
    judge_answer: JsonValue,
    support_detail: str,
) -> Route:
    outcome = trajectory.outcome
    passed = trajectory.passed
    detail = support_detail or ("supported" if supported else "unsupported")
    if outcome is Outcome.BACKEND_ERROR:
        return Routing.AUTO_REJECT, ReviewDecision.REJECT, "backend error: never training data"
    if is_conflict(trajectory, supported):
        return Routing.NEEDS_HUMAN, ReviewDecision.QUARANTINE, f"conflict: {detail}"
    judged = judge_verdict(judge_answer)
    if isinstance(judged, str):
        _, suggested, reason = _base_route(trajectory, supported, quality, config, None, detail)
        return Routing.NEEDS_HUMAN, suggested, f"{judged}; {reason}"
    if judged is not None and judged[0] != passed:
        said = "passed" if judged[0] else "failed"
        verifier = "passed" if passed else "failed"
        reason = f"conflict: the verifier {verifier} but the LLM judge says {said}: {judged[1]}"
        return Routing.NEEDS_HUMAN, ReviewDecision.QUARANTINE, reason
    if outcome is Outcome.FAILURE:
        return Routing.AUTO_REJECT, ReviewDecision.REJECT, detail
    if quality >= config.approve_quality:
        reason = f"verified success, quality {quality:.2f}"
        return Routing.AUTO_APPROVE, ReviewDecision.APPROVE, reason
    if quality < config.reject_quality:
        reason = f"verified success of low quality {quality:.2f} (< {config.reject_quality})"
        return Routing.AUTO_REJECT, ReviewDecision.REJECT, reason
    reason = (
        f"verified success of middling quality {quality:.2f} "
        f"(between {config.reject_quality} and {config.approve_quality})"
    )
    return Routing.NEEDS_HUMAN, ReviewDecision.APPROVE, reason


def _simulated_route(base: Route, judge_answer: JsonValue, config: CuratorConfig) -> Route:
    routing, suggested, reason = base
    if suggested is not ReviewDecision.APPROVE:
        return base
    confidence = judge_confidence(judge_answer)
    if confidence is not None and confidence >= config.simulated_confidence:
        return routing, suggested, f"{reason}; simulated tools, judged passed ({confidence:.2f})"
    judged = "no judge sure it passed" if confidence is None else f"a judge {confidence:.2f} sure"
    return (
        Routing.NEEDS_HUMAN,
        ReviewDecision.QUARANTINE,
        f"{reason}; simulated tools and {judged} (approval needs "
        f"{config.simulated_confidence:.2f}): a person decides",
    )


def judge_confidence(answer: JsonValue) -> float | None:
    """How sure the judge is that the episode passed, in [0, 1]; None when it was not
    asked, did not say it passed, or gave no confidence."""
    judged = judge_verdict(answer)
    if not isinstance(judged, tuple) or not judged[0] or not isinstance(answer, dict):
        return None
    value = answer.get("confidence")
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        return None
    return float(value)


def is_conflict(trajectory: Trajectory | TrajectoryFacts, supported: bool) -> bool:
    """The reported outcome disagrees with the evidence.

    A failure whose claimed completion is unsupported is an ordinary failure, not this.
    """
    facts = facts_of(trajectory)
    if facts.outcome is Outcome.SUCCESS:
        return not supported
    return facts.outcome is Outcome.FAILURE and facts.passed


def judge_verdict(answer: JsonValue) -> tuple[bool, str] | str | None:
    """The judge's ``(passed, reason)``; a problem description when its answer is not
    usable; None when it was not asked."""
    if answer is None:
        return None
    if isinstance(answer, dict):
        if "error" in answer:
            return f"the LLM judge gave no usable answer: {answer['error']}"
        passed, why = answer.get("passed"), answer.get("reason", "")
        if isinstance(passed, bool):
            return passed, why if isinstance(why, str) else str(why)
    return f"the LLM judge gave no usable answer: {str(answer)[:200]}"


def audit_sampled(trajectory_id: str, rate: float) -> bool:
    """Deterministically picks about ``rate`` of all ids (by hashing the id)."""
    if rate <= 0.0:
        return False
    return xxhash.xxh64_intdigest(trajectory_id.encode()) / 2**64 < rate


def _sensitive_tools(trajectory: TrajectoryFacts, config: CuratorConfig) -> list[str]:
    used = {s.tool for s in trajectory.steps if s.tool in config.safety_sensitive_tools}
    return sorted(str(tool) for tool in used)
