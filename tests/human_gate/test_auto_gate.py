"""The automatic gate and the rule that picks the review that counts."""

from __future__ import annotations

import pytest

from agents.policies.scripted import FaultConfig, ScriptedPolicy
from agents.runner import run_episode
from contract import (
    CurationRecord,
    InvalidInputError,
    Review,
    ReviewDecision,
    Routing,
    Trajectory,
)
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks
from human_gate import (
    GATES,
    AutoGate,
    GateItem,
    GateResult,
    HumanGate,
    final_decisions,
    make_gate,
)


@pytest.fixture(scope="module")
def trajectories(sandbox: MobileSandbox) -> list[Trajectory]:
    policy = ScriptedPolicy(FaultConfig(rate=0.3))
    return [run_episode(t, sandbox, policy, round_id="r") for t in sample_tasks(12, 5, sandbox)]


def record(t: Trajectory, suggested: ReviewDecision, reason: str = "checked") -> CurationRecord:
    routing = Routing.AUTO_REJECT if suggested is ReviewDecision.REJECT else Routing.AUTO_APPROVE
    return CurationRecord(
        trajectory_id=t.id,
        task_id=t.task.id,
        round_id="r",
        kept=True,
        supported=True,
        quality=0.9,
        routing=routing,
        suggested=suggested,
        reason=reason,
    )


def suggestion(i: int) -> ReviewDecision:
    """Both decisions, whatever the episodes' outcomes: the gate applies what the
    curator suggested, and nothing else."""
    return ReviewDecision.REJECT if i % 3 == 0 else ReviewDecision.APPROVE


def review(trajectory_id: str, decision: ReviewDecision, reviewer: str, auto: bool) -> Review:
    return Review(
        trajectory_id=trajectory_id,
        round_id="r",
        decision=decision,
        reviewer=reviewer,
        automatic=auto,
    )


def test_auto_gate_applies_the_suggested_decisions(trajectories: list[Trajectory]) -> None:
    items = [
        GateItem(t, record(t, suggestion(i), f"why {t.id}")) for i, t in enumerate(trajectories)
    ]
    gate: HumanGate = AutoGate()
    gate.submit("r2", items)
    result = gate.collect("r2", items)
    assert result.pending == ()
    assert [r.trajectory_id for r in result.reviews] == [t.id for t in trajectories]
    for item, r in zip(items, result.reviews, strict=True):
        assert r.decision is item.curation.suggested
        assert r.automatic
        assert r.reviewer == "auto"
        assert r.reason == item.curation.reason
        assert r.round_id == "r2"
    assert {r.decision for r in result.reviews} == {ReviewDecision.APPROVE, ReviewDecision.REJECT}


def test_auto_gate_with_nothing_to_review() -> None:
    assert AutoGate().collect("r", []) == GateResult()


def test_gate_item_refuses_a_record_of_another_trajectory(
    trajectories: list[Trajectory],
) -> None:
    first, second = trajectories[:2]
    with pytest.raises(InvalidInputError, match="gate item"):
        GateItem(first, record(second, ReviewDecision.APPROVE))


def test_make_gate_knows_auto_and_lists_the_gates() -> None:
    gate = make_gate("auto")
    assert isinstance(gate, AutoGate)
    assert gate.name == "auto"
    with pytest.raises(InvalidInputError) as info:
        make_gate("mturk")
    assert info.value.field == "gate"
    assert info.value.allowed == GATES == ("auto", "label-studio")
    with pytest.raises(InvalidInputError, match="needs a server"):
        make_gate("label-studio")


def test_a_person_wins_over_the_automatic_review_in_any_order() -> None:
    auto = review("traj-a", ReviewDecision.REJECT, "auto", auto=True)
    human = review("traj-a", ReviewDecision.CORRECT, "ann", auto=False)
    assert final_decisions([auto, human])["traj-a"] == human
    assert final_decisions([human, auto])["traj-a"] == human


def test_the_latest_review_of_the_same_kind_wins() -> None:
    first = review("traj-a", ReviewDecision.APPROVE, "ann", auto=False)
    second = review("traj-a", ReviewDecision.QUARANTINE, "bob", auto=False)
    autos = [review("traj-a", d, "auto", auto=True) for d in ReviewDecision]
    assert final_decisions([first, *autos, second])["traj-a"] == second
    assert final_decisions(autos)["traj-a"] == autos[-1]


def test_final_decisions_are_keyed_and_sorted_by_trajectory_id() -> None:
    reviews = [review(i, ReviewDecision.APPROVE, "auto", auto=True) for i in ("c", "a", "b")]
    assert list(final_decisions(reviews)) == ["a", "b", "c"]
    assert final_decisions([]) == {}
