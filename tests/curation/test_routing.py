"""The routing table: what is approved, rejected or sent to a person, and why."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import JsonValue

from contract import (
    FailureType,
    InvalidInputError,
    Outcome,
    ReviewDecision,
    Routing,
    Trajectory,
)
from curation.routing import (
    SAFETY_SENSITIVE_TOOLS,
    CuratorConfig,
    audit_sampled,
    judge_confidence,
    judge_verdict,
    route,
)
from tests.curation.builders import is_clean_success, pick, uses_sensitive_tool, with_outcome

CONFIG = CuratorConfig()
A = Routing.AUTO_APPROVE
R = Routing.AUTO_REJECT
H = Routing.NEEDS_HUMAN
APPROVE = ReviewDecision.APPROVE
REJECT = ReviewDecision.REJECT
QUARANTINE = ReviewDecision.QUARANTINE


@pytest.fixture(scope="module")
def success(faulty_trajectories: list[Trajectory]) -> Trajectory:
    """A verified clean success that used no safety-sensitive tool."""
    return pick(faulty_trajectories, lambda t: is_clean_success(t) and not uses_sensitive_tool(t))


@pytest.fixture(scope="module")
def failure(faulty_trajectories: list[Trajectory]) -> Trajectory:
    return pick(faulty_trajectories, lambda t: t.metadata.outcome is Outcome.FAILURE)


@pytest.mark.parametrize(
    ("supported", "quality", "judge", "expected", "in_reason"),
    [
        (True, 1.0, None, (A, APPROVE), "verified success"),
        (True, 0.7, None, (A, APPROVE), "quality 0.70"),
        (True, 0.5, None, (H, APPROVE), "middling quality"),
        (True, 0.2, None, (R, REJECT), "low quality"),
        (False, 1.0, None, (H, QUARANTINE), "conflict"),
        (True, 1.0, {"passed": True, "reason": "ok"}, (A, APPROVE), "verified success"),
        (True, 1.0, {"passed": False, "reason": "wrong"}, (H, QUARANTINE), "LLM judge says"),
        (True, 1.0, {"error": "not JSON"}, (H, APPROVE), "no usable answer"),
        (True, 1.0, {"verdict": "yes"}, (H, APPROVE), "no usable answer"),
    ],
)
def test_success_routes(
    success: Trajectory,
    supported: bool,
    quality: float,
    judge: JsonValue,
    expected: tuple[Routing, ReviewDecision],
    in_reason: str,
) -> None:
    routing, suggested, reason = route(success, supported, quality, CONFIG, judge)
    assert (routing, suggested) == expected
    assert in_reason in reason


def test_a_failure_is_rejected_naming_its_attribution(failure: Trajectory) -> None:
    routing, suggested, reason = route(failure, False, 0.2, CONFIG, support_detail="refuted")
    assert (routing, suggested) == (R, REJECT)
    assert failure.metadata.failure_attribution is not None
    assert reason.startswith(f"failed ({failure.metadata.failure_attribution.value}): refuted")

    given = route(failure, False, 0.2, CONFIG, attribution=FailureType.RECOVERY)
    assert given[2].startswith("failed (recovery)")


def test_a_failure_the_judge_or_the_verifier_contradicts_goes_to_a_person(
    failure: Trajectory, success: Trajectory
) -> None:
    judged = route(failure, True, 0.2, CONFIG, {"passed": True, "reason": "looks done"})
    assert judged[:2] == (H, QUARANTINE)
    assert "conflict: the verifier failed but the LLM judge says passed" in judged[2]

    reported_failed = with_outcome(success, Outcome.FAILURE)
    assert route(reported_failed, False, 1.0, CONFIG)[:2] == (H, QUARANTINE)


def test_a_backend_error_is_rejected(success: Trajectory) -> None:
    broken = with_outcome(success, Outcome.BACKEND_ERROR)
    assert route(broken, False, 0.0, CONFIG)[:2] == (R, REJECT)


def test_a_safety_sensitive_tool_sends_an_approval_to_a_person(
    faulty_trajectories: list[Trajectory],
) -> None:
    paid = pick(faulty_trajectories, lambda t: is_clean_success(t) and uses_sensitive_tool(t))
    routing, suggested, reason = route(paid, True, 1.0, CONFIG)
    assert (routing, suggested) == (H, APPROVE)
    assert "safety-sensitive" in reason

    relaxed = CuratorConfig(safety_sensitive_tools=frozenset())
    assert route(paid, True, 1.0, relaxed)[:2] == (A, APPROVE)


def test_audit_samples_confident_items_deterministically(
    faulty_trajectories: list[Trajectory], success: Trajectory, failure: Trajectory
) -> None:
    everything = CuratorConfig(audit_rate=1.0)
    assert route(success, True, 1.0, everything)[:2] == (H, APPROVE)
    assert route(failure, True, 0.2, everything)[:2] == (H, REJECT)
    assert "audit sample" in route(success, True, 1.0, everything)[2]

    ids = [t.id for t in faulty_trajectories]
    picked = [i for i in ids if audit_sampled(i, 0.25)]
    assert picked == [i for i in ids if audit_sampled(i, 0.25)]
    assert 0.1 < len(picked) / len(ids) < 0.4
    assert not any(audit_sampled(i, 0.0) for i in ids)


def _simulated(trajectory: Trajectory) -> Trajectory:
    metadata = trajectory.metadata.model_copy(update={"simulated": True})
    return trajectory.model_copy(update={"metadata": metadata})


@pytest.mark.parametrize(
    ("quality", "judge", "expected", "in_reason"),
    [
        (1.0, None, (H, QUARANTINE), "no judge sure it passed"),
        (0.5, None, (H, QUARANTINE), "a person decides"),
        (1.0, {"passed": True, "reason": "ok"}, (H, QUARANTINE), "no judge sure"),
        (1.0, {"passed": True, "confidence": 0.6}, (H, QUARANTINE), "a judge 0.60 sure"),
        (1.0, {"passed": True, "confidence": 0.8}, (A, APPROVE), "judged passed (0.80)"),
        (0.5, {"passed": True, "confidence": 0.95}, (H, APPROVE), "middling quality"),
        (1.0, {"passed": False, "confidence": 0.99}, (H, QUARANTINE), "LLM judge says"),
        (0.2, {"passed": True, "confidence": 1}, (R, REJECT), "low quality"),
        (1.0, {"passed": True, "confidence": True}, (H, QUARANTINE), "no judge sure"),
        (1.0, {"passed": True, "confidence": 7}, (H, QUARANTINE), "no judge sure"),
    ],
)
def test_a_success_on_simulated_tools_needs_a_person_or_a_confident_judge(
    success: Trajectory,
    quality: float,
    judge: JsonValue,
    expected: tuple[Routing, ReviewDecision],
    in_reason: str,
) -> None:
    routing, suggested, reason = route(_simulated(success), True, quality, CONFIG, judge)
    assert (routing, suggested) == expected
    assert in_reason in reason
    # the same episode on real tools: the rules alone decide
    assert route(success, True, 1.0, CONFIG) == (A, APPROVE, "verified success, quality 1.00")


def test_a_failure_on_simulated_tools_is_rejected_as_any_failure(failure: Trajectory) -> None:
    assert route(_simulated(failure), True, 1.0, CONFIG) == route(failure, True, 1.0, CONFIG)
    strict = CuratorConfig(simulated_confidence=1.0)
    judged: JsonValue = {"passed": True, "confidence": 0.99}
    assert route(_simulated(failure), True, 1.0, strict, judged)[0] is H  # a conflict


def test_judge_answers_are_read_leniently() -> None:
    assert judge_confidence({"passed": True, "confidence": 0.9}) == 0.9
    assert judge_confidence({"passed": False, "confidence": 0.9}) is None
    assert judge_confidence({"error": "down", "confidence": 0.9}) is None
    assert judge_verdict(None) is None
    assert judge_verdict({"passed": False, "reason": "no"}) == (False, "no")
    assert judge_verdict({"passed": True}) == (True, "")
    assert isinstance(judge_verdict({"passed": "yes"}), str)
    assert isinstance(judge_verdict(["passed"]), str)


def test_default_config() -> None:
    assert CONFIG.reject_quality < CONFIG.approve_quality
    assert CONFIG.near_duplicate_threshold == 0.9 and CONFIG.num_perm == 64
    assert CONFIG.audit_rate == 0.0
    assert {"send_money", "send_message", "send_email", "delete_note"} <= SAFETY_SENSITIVE_TOOLS


@pytest.mark.parametrize(
    ("field", "changes"),
    [
        ("approve_quality", {"approve_quality": 1.5}),
        ("reject_quality", {"reject_quality": -0.1}),
        ("reject_quality", {"reject_quality": 0.8, "approve_quality": 0.7}),
        ("audit_rate", {"audit_rate": 2.0}),
        ("near_duplicate_threshold", {"near_duplicate_threshold": 0.0}),
        ("num_perm", {"num_perm": 1}),
        ("simulated_confidence", {"simulated_confidence": 1.2}),
        ("safety_sensitive_tools", {"safety_sensitive_tools": {"send_money"}}),
    ],
)
def test_config_validation_names_the_field(field: str, changes: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError) as caught:
        CuratorConfig(**changes)
    assert caught.value.field == field
