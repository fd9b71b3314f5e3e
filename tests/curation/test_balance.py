"""Raking weights towards a target mix, on trajectories from real scripted episodes."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from agents.policies.scripted import FaultConfig, ScriptedPolicy
from agents.runner import run_episode
from contract import (
    Capability,
    DatasetMember,
    InvalidInputError,
    MixTarget,
    Outcome,
    Split,
    Trajectory,
)
from curation.balance import (
    DROPPED_DEV,
    DROPPED_NOT_SUCCESS,
    DROPPED_SIMULATED,
    BalanceResult,
    Candidate,
    Shortfall,
    balance_mix,
    candidates_of,
    cap_simulated,
    dataset_content_hash,
    default_target,
    policies_of,
    propose_version,
)
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks

EVEN = default_target()


@pytest.fixture(scope="module")
def episodes(sandbox: MobileSandbox) -> list[Trajectory]:
    """Train and dev tasks, successes and failures (a fault rate of 0.3)."""
    policy = ScriptedPolicy(FaultConfig(rate=0.3))
    return [run_episode(t, sandbox, policy, round_id="r") for t in sample_tasks(200, 7, sandbox)]


@pytest.fixture(scope="module")
def trainable(episodes: list[Trajectory]) -> list[Trajectory]:
    return [
        t for t in episodes if t.task.split is Split.TRAIN and t.metadata.outcome is Outcome.SUCCESS
    ]


def assert_meets(result: BalanceResult, within: float = 0.02) -> None:
    assert result.rows
    for row in result.rows:
        assert abs(row.gap) <= within, row
        assert row.gap == pytest.approx(row.achieved - row.target, abs=1e-6)


def weights(result: BalanceResult) -> list[float]:
    return [m.weight for m in result.members]


def test_default_target_is_even_with_a_fifth_recoveries() -> None:
    assert EVEN.capability == pytest.approx(dict.fromkeys(map(str, Capability), 0.25))
    assert EVEN.difficulty == pytest.approx({"easy": 1 / 3, "medium": 1 / 3, "hard": 1 / 3})
    assert EVEN.domain == {}
    assert EVEN.source == {}
    assert EVEN.recovery_share == 0.2


def test_raking_meets_a_feasible_target(faulty_trajectories: list[Trajectory]) -> None:
    result = balance_mix(faulty_trajectories, EVEN)
    assert result.converged
    assert_meets(result)
    dimensions = {row.dimension for row in result.rows}
    assert dimensions == {"capability", "difficulty", "outcome"}
    assert result.achieved["outcome"]["recovery"] == pytest.approx(0.2, abs=0.02)
    assert set(result.achieved) == {"capability", "difficulty", "domain", "source", "outcome"}


def test_raking_meets_capability_and_difficulty(episodes: list[Trajectory]) -> None:
    target = MixTarget(capability=EVEN.capability, difficulty=EVEN.difficulty)
    result = balance_mix(episodes, target)
    assert_meets(result)
    assert result.shortfalls == ()


def test_a_value_without_candidates_is_reported_and_the_rest_renormalized(
    trainable: list[Trajectory],
) -> None:
    kept = {Capability.TOOL_USE, Capability.MEMORY}
    some = [t for t in trainable if t.task.capabilities[0] in kept]
    result = balance_mix(some, MixTarget(capability=EVEN.capability))
    assert result.shortfalls == (
        Shortfall("capability", "skills", 0.25),
        Shortfall("capability", "subagent", 0.25),
    )
    assert result.target == {"capability": {"memory": 0.5, "tool_use": 0.5}}
    assert_meets(result)


def test_a_dimension_without_any_targeted_value_keeps_no_target(
    trainable: list[Trajectory],
) -> None:
    result = balance_mix(trainable, MixTarget(domain={"teleportation": 1.0}))
    assert result.shortfalls == (Shortfall("domain", "teleportation", 1.0),)
    assert result.target == {}
    assert result.rows == ()
    assert set(weights(result)) == {1.0}


def test_values_the_target_leaves_out_are_weighted_down(trainable: list[Trajectory]) -> None:
    result = balance_mix(trainable, MixTarget(capability={"memory": 1.0}))
    capability = {t.id: t.task.capabilities[0] for t in trainable}
    memory = [m.weight for m in result.members if capability[m.trajectory_id] == "memory"]
    others = [m.weight for m in result.members if capability[m.trajectory_id] != "memory"]
    assert result.target["capability"]["tool_use"] == 0.0
    assert min(memory) == pytest.approx(10 * min(others), rel=1e-4)
    assert max(others) == min(others)


def test_a_target_the_cap_cannot_reach_is_met_as_far_as_the_cap_allows(
    trainable: list[Trajectory],
) -> None:
    recovered = sum(t.metadata.recovered for t in trainable)
    assert 0 < recovered < len(trainable) / 10
    result = balance_mix(trainable, MixTarget(recovery_share=0.9))
    assert not result.converged
    bound = 10 * recovered / (10 * recovered + len(trainable) - recovered)
    assert result.achieved["outcome"]["recovery"] == pytest.approx(bound, abs=1e-4)
    (row,) = [r for r in result.rows if r.value == "recovery"]
    assert row.gap == pytest.approx(bound - 0.9, abs=1e-4)


def test_dev_tasks_and_failures_are_dropped_and_counted(
    episodes: list[Trajectory], sandbox: MobileSandbox
) -> None:
    policy = ScriptedPolicy(FaultConfig(rate=0.3))
    dev = [run_episode(t, sandbox, policy) for t in sample_tasks(10, 3, sandbox, split=Split.DEV)]
    everything = episodes + dev
    result = balance_mix(everything, EVEN)
    by_id = {t.id: t for t in everything}
    members = [by_id[m.trajectory_id] for m in result.members]
    assert all(t.task.split is Split.TRAIN for t in members)
    assert all(t.metadata.outcome is Outcome.SUCCESS for t in members)
    n_dev = sum(t.task.split is Split.DEV for t in everything)
    n_failed = sum(
        t.task.split is Split.TRAIN and t.metadata.outcome is not Outcome.SUCCESS
        for t in everything
    )
    assert n_dev >= 10
    assert n_failed > 0
    assert result.dropped == {DROPPED_DEV: n_dev, DROPPED_NOT_SUCCESS: n_failed}
    assert len(result.members) == len(everything) - n_dev - n_failed


@pytest.mark.parametrize("max_ratio", [10.0, 3.0, 1.0])
def test_weights_have_mean_one_and_respect_the_cap(
    faulty_trajectories: list[Trajectory], max_ratio: float
) -> None:
    ws = weights(balance_mix(faulty_trajectories, EVEN, max_ratio=max_ratio))
    assert sum(ws) / len(ws) == pytest.approx(1.0, abs=1e-5)
    assert min(ws) > 0
    assert max(ws) / min(ws) <= max_ratio * (1 + 1e-4)


def test_a_cap_below_one_is_refused(trainable: list[Trajectory]) -> None:
    with pytest.raises(InvalidInputError, match="max_ratio"):
        balance_mix(trainable, EVEN, max_ratio=0.5)


def test_members_and_hash_do_not_depend_on_input_order(trainable: list[Trajectory]) -> None:
    shuffled = list(trainable)
    random.Random(3).shuffle(shuffled)
    first, second = balance_mix(trainable, EVEN), balance_mix(shuffled + shuffled[:5], EVEN)
    assert first.members == second.members
    ids = [m.trajectory_id for m in first.members]
    assert ids == sorted(ids)
    assert dataset_content_hash(first.members) == dataset_content_hash(first.members[::-1])


def test_the_hash_covers_the_weights(trainable: list[Trajectory]) -> None:
    members = balance_mix(trainable, EVEN).members
    changed = (
        DatasetMember(
            trajectory_id=members[0].trajectory_id,
            task_id=members[0].task_id,
            weight=members[0].weight + 0.5,
        ),
        *members[1:],
    )
    assert dataset_content_hash(changed) != dataset_content_hash(members)


def test_the_same_input_proposes_the_same_version(trainable: list[Trajectory]) -> None:
    def version(items: list[Trajectory], parent: str | None = None) -> str:
        result = balance_mix(items, EVEN)
        return propose_version("r", parent, result, EVEN, policies_of(items), 0).id

    assert version(trainable) == version(trainable[::-1])
    assert version(trainable) != version(trainable, parent="ds-previous")
    proposed = propose_version("r", None, balance_mix(trainable, EVEN), EVEN, ["b@1", "a@2"], 3)
    assert proposed.policies == ("a@2", "b@1")
    assert proposed.content_hash == dataset_content_hash(proposed.members)
    assert proposed.target == EVEN
    assert proposed.human_reviewed == 3


def test_no_candidates_give_no_members_and_no_version(episodes: list[Trajectory]) -> None:
    failures = [t for t in episodes if t.metadata.outcome is not Outcome.SUCCESS]
    result = balance_mix(failures, EVEN)
    assert result.members == ()
    assert result.converged
    with pytest.raises(InvalidInputError, match="empty dataset"):
        propose_version("r", None, result, EVEN, [], 0)


def _on_simulated_tools(candidates: list[Candidate], every: int) -> list[Candidate]:
    """``candidates`` with one in ``every`` marked as run on simulated tools."""
    return [replace(c, simulated=i % every == 0) for i, c in enumerate(candidates)]


def test_simulated_members_hold_at_most_the_cap_of_the_weight(
    trainable: list[Trajectory],
) -> None:
    candidates = _on_simulated_tools(candidates_of(trainable), 2)
    balanced = balance_mix(candidates, EVEN)
    capped = cap_simulated(balanced, candidates, 0.2)

    simulated = {c.trajectory_id for c in candidates if c.simulated}
    share = sum(m.weight for m in capped.members if m.trajectory_id in simulated)
    assert share / len(capped.members) == pytest.approx(0.2, abs=1e-4)
    assert sum(weights(capped)) / len(capped.members) == pytest.approx(1.0, abs=1e-5)
    before = {m.trajectory_id: m.weight for m in balanced.members}
    after = {m.trajectory_id: m.weight for m in capped.members}
    assert set(before) == set(after)  # nobody left out: weighed down
    real = sorted(set(before) - simulated)
    ratios = {round(after[i] / before[i], 4) for i in real}
    assert len(ratios) == 1 and ratios.pop() > 1  # the others keep their proportions
    assert capped.rows != balanced.rows  # the achieved mix is recomputed


def test_a_cap_the_simulated_members_are_within_changes_nothing(
    trainable: list[Trajectory],
) -> None:
    candidates = _on_simulated_tools(candidates_of(trainable), 10)
    balanced = balance_mix(candidates, EVEN)
    assert cap_simulated(balanced, candidates, 0.5) is balanced
    assert cap_simulated(balanced, candidates, None) is balanced
    assert cap_simulated(balanced, candidates_of(trainable), 0.0) is balanced  # none simulated


@pytest.mark.parametrize(("every", "cap"), [(1, 0.2), (3, 0.0)])
def test_simulated_members_with_no_room_are_left_out_and_counted(
    trainable: list[Trajectory], every: int, cap: float
) -> None:
    candidates = _on_simulated_tools(candidates_of(trainable), every)
    capped = cap_simulated(balance_mix(candidates, EVEN), candidates, cap)
    simulated = {c.trajectory_id for c in candidates if c.simulated}
    assert not simulated & {m.trajectory_id for m in capped.members}
    assert capped.dropped[DROPPED_SIMULATED] == len(simulated)
    if capped.members:
        assert sum(weights(capped)) / len(capped.members) == pytest.approx(1.0, abs=1e-5)


def test_a_target_with_the_default_cap_hashes_as_before_the_cap() -> None:
    assert MixTarget().simulated_share == 0.2
    assert "simulated_share" not in MixTarget().model_dump()
    assert MixTarget.model_validate({}).simulated_share == 0.2  # a target stored before it
    assert MixTarget(simulated_share=None).model_dump()["simulated_share"] is None
    assert MixTarget(simulated_share=0.1).model_dump()["simulated_share"] == 0.1
