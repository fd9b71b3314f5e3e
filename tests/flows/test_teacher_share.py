"""Which tasks of a round the scripted teacher collects, and the round ids it leaves alone."""

from __future__ import annotations

import pytest

from contract import content_hash
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks
from flows.round_config import RoundConfig, resolve_config, teacher_share_for
from flows.settings import FlywheelSettings, PolicyName


def _config(policy: PolicyName, share: float) -> RoundConfig:
    return resolve_config(FlywheelSettings(), tasks=10, policy=policy, teacher_share=share)


@pytest.mark.parametrize(("share", "expected"), [(0.0, 0), (0.25, 2), (0.5, 5), (1.0, 10)])
def test_the_teacher_takes_its_share_of_the_tasks(share: float, expected: int) -> None:
    tasks = sample_tasks(10, 3, MobileSandbox())
    chosen = _config("openai", share).teacher_tasks(t.id for t in tasks)
    assert len(chosen) == expected and chosen <= {t.id for t in tasks}
    # The same tasks whatever their order: the choice is by id.
    assert _config("openai", share).teacher_tasks(t.id for t in reversed(tasks)) == chosen


def test_the_scripted_policy_needs_no_teacher() -> None:
    tasks = sample_tasks(4, 3, MobileSandbox())
    assert _config("scripted", 0.5).teacher_tasks(t.id for t in tasks) == set()


def test_a_round_without_a_teacher_keeps_the_id_it_had_before_the_share_existed() -> None:
    config = _config("scripted", 0.0)
    later_fields = {"teacher_share", "devices", "gui_agent", "gui_model", "bfcl_share"}
    later_fields |= {"simulated_share", "correct_failures"}
    earlier = config.model_dump(mode="json", exclude=later_fields)
    assert config.round_id() == "round-" + content_hash(earlier, 12)
    assert _config("openai", 0.5).round_id() != _config("openai", 0.0).round_id()


@pytest.mark.parametrize("tasks", [1, 7, 10, 300, 2000, 2001, 4999])
def test_the_champion_collects_at_most_its_cap_and_the_share_is_kept_above_it(
    tasks: int,
) -> None:
    for cap in sorted({0, 1, 3, tasks // 3, tasks // 2, tasks - 1, tasks, tasks + 5}):
        share = teacher_share_for(0.5, cap, tasks)
        ids = [f"task-{i:05d}" for i in range(tasks)]
        teacher = len(_config("openai", share).teacher_tasks(ids))
        assert tasks - teacher == min(cap, tasks - int(tasks * 0.5)), (cap, share)
    assert teacher_share_for(0.5, None, tasks) == 0.5
    assert teacher_share_for(0.9, tasks, tasks) == 0.9, "a cap never lowers the share"
