"""Waiting for people: ``sync_until`` stores what arrives and gives up at the deadline."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from agents.curator import curate
from agents.policies.scripted import FaultConfig, ScriptedPolicy
from agents.runner import run_episode
from contract import Review, ReviewDecision
from curation.routing import CuratorConfig
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks
from flows.gates import sync_until
from human_gate import GateItem, GateResult, GateUnavailableError, Workplace


class StepGate:
    """A gate whose answers are given in advance, one per sync (a Label Studio stand-in
    for the timing logic only; the real server is tested in tests/human_gate)."""

    name = "scripted"
    asks_people = True

    def __init__(self, answers: list[GateResult | Exception], down_at_submit: int = 0) -> None:
        self.answers = answers
        self.calls = 0
        self.down_at_submit = down_at_submit
        self.submitted = 0

    def submit(self, round_id: str, items: Sequence[GateItem]) -> None:
        if self.down_at_submit:
            self.down_at_submit -= 1
            raise GateUnavailableError("down")
        self.submitted += 1

    def workplace(self, round_id: str) -> Workplace | None:
        return None

    def collect(self, round_id: str, items: Sequence[GateItem]) -> GateResult:
        answer = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        if isinstance(answer, Exception):
            raise answer
        return answer


def _review(trajectory_id: str) -> Review:
    return Review(
        trajectory_id=trajectory_id,
        round_id="r",
        decision=ReviewDecision.APPROVE,
        reviewer="ana@example.com",
        automatic=False,
    )


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_syncs_until_nothing_is_pending_storing_each_answer() -> None:
    done = GateResult(reviews=(_review("t1"), _review("t2")))
    gate = StepGate([GateResult(pending=("t1", "t2")), GateUnavailableError("down"), done])
    stored: list[Sequence[Review]] = []
    clock = Clock()
    outcome = sync_until(
        gate,
        "r",
        [],
        stored.append,
        wait_s=100,
        poll_s=2,
        sleep=clock.sleep,
        clock=lambda: clock.now,
    )
    assert outcome.pending == () and outcome.syncs == 2 and gate.calls == 3
    assert stored == [(), done.reviews]
    assert clock.sleeps == [2, 4]


def test_the_deadline_leaves_items_pending_never_approved() -> None:
    gate = StepGate([GateResult(pending=("t1",))])
    clock = Clock()
    outcome = sync_until(
        gate,
        "r",
        [],
        lambda _: None,
        wait_s=10,
        poll_s=2,
        sleep=clock.sleep,
        clock=lambda: clock.now,
    )
    assert outcome.pending == ("t1",) and outcome.reviews == ()
    assert sum(clock.sleeps) <= 10


def test_no_wait_means_one_sync() -> None:
    gate = StepGate([GateResult(pending=("t1",))])
    outcome = sync_until(gate, "r", [], lambda _: None, wait_s=0, poll_s=5)
    assert gate.calls == 1 and outcome.pending == ("t1",)


@pytest.fixture(scope="module")
def items(sandbox: MobileSandbox) -> list[GateItem]:
    """Real curated episodes, every kept one for a person."""
    policy = ScriptedPolicy(FaultConfig(rate=0.0))
    trajectories = [run_episode(t, sandbox, policy) for t in sample_tasks(4, 3, sandbox)]
    records = curate(trajectories, "r", CuratorConfig(audit_rate=1.0))
    by_id = {t.id: t for t in trajectories}
    return [GateItem(by_id[r.trajectory_id], r) for r in records if r.kept]


def test_a_gate_down_at_submission_is_waited_for_then_submitted_once(
    items: list[GateItem],
) -> None:
    first = items[0].trajectory_id
    gate = StepGate([GateResult(pending=(first,)), GateResult(reviews=(_review(first),))], 2)
    clock = Clock()
    outcome = sync_until(
        gate,
        "r",
        items[:1],
        lambda _: None,
        wait_s=100,
        poll_s=1,
        sleep=clock.sleep,
        clock=lambda: clock.now,
    )
    assert (gate.submitted, gate.calls) == (1, 2)
    assert clock.sleeps == [1, 2, 4]
    assert outcome.pending == () and outcome.syncs == 2


def test_a_gate_down_until_the_deadline_leaves_everything_pending(
    items: list[GateItem],
) -> None:
    gate = StepGate([GateResult()], down_at_submit=100)
    clock = Clock()
    outcome = sync_until(
        gate,
        "r",
        items,
        lambda _: None,
        wait_s=10,
        poll_s=1,
        sleep=clock.sleep,
        clock=lambda: clock.now,
    )
    assert items and gate.submitted == gate.calls == 0
    assert outcome.pending == tuple(i.trajectory_id for i in items) and outcome.syncs == 0
    assert clock.now <= 10
