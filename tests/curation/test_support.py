"""Reported outcomes are checked against the verifier's evidence and the steps."""

from __future__ import annotations

from contract import Finish, Outcome, Trajectory
from curation.support import check_support
from envs.sandbox import MobileSandbox
from tests.curation.builders import already_satisfied, pick, with_outcome


def test_every_scripted_success_is_supported(faulty_trajectories: list[Trajectory]) -> None:
    successes = [t for t in faulty_trajectories if t.metadata.outcome is Outcome.SUCCESS]
    assert successes
    for t in successes:
        supported, detail = check_support(t)
        assert supported, (t.task.goal, detail)
        assert "verifier passed" in detail


def test_a_state_that_held_before_the_episode_is_unsupported(sandbox: MobileSandbox) -> None:
    trajectory = already_satisfied(sandbox)
    assert trajectory.verdict.passed
    assert trajectory.metadata.outcome is Outcome.SUCCESS

    supported, detail = check_support(trajectory)

    assert not supported
    assert "already so before the episode" in detail
    assert "clock.world_clocks" in detail


def test_a_claimed_completion_the_verifier_refutes_is_unsupported(
    faulty_trajectories: list[Trajectory],
) -> None:
    failed = pick(
        faulty_trajectories,
        lambda t: t.metadata.outcome is Outcome.FAILURE and isinstance(t.steps[-1].action, Finish),
    )
    supported, detail = check_support(failed)
    assert not supported
    assert detail.startswith("claimed completion (finish)")
    assert "unmet" in detail


def test_a_failure_without_a_claim_agrees_with_the_verifier(
    faulty_trajectories: list[Trajectory],
) -> None:
    failed = pick(
        faulty_trajectories,
        lambda t: (
            t.metadata.outcome is Outcome.FAILURE and not isinstance(t.steps[-1].action, Finish)
        ),
    )
    assert check_support(failed) == (True, check_support(failed)[1])
    assert "agrees with the verifier" in check_support(failed)[1]


def test_an_outcome_against_the_verdict_is_unsupported(
    faulty_trajectories: list[Trajectory],
) -> None:
    success = pick(faulty_trajectories, lambda t: t.metadata.outcome is Outcome.SUCCESS)
    failure = pick(faulty_trajectories, lambda t: t.metadata.outcome is Outcome.FAILURE)

    supported, detail = check_support(with_outcome(success, Outcome.FAILURE))
    assert not supported and "verifier passed every check" in detail

    supported, detail = check_support(with_outcome(failure, Outcome.SUCCESS))
    assert not supported and "verifier failed" in detail

    supported, detail = check_support(with_outcome(success, Outcome.BACKEND_ERROR))
    assert not supported and "backend failed" in detail
