"""The development set: stratified, two labelled parts, drawn without favouring held-out
templates, the same for the same seed."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from contract import LOOP_DEV_TASKS, Capability, InvalidInputError, Split, goal_problem
from envs.sandbox import MobileSandbox
from envs.sandbox.state import Collections
from envs.sandbox.templates import development
from envs.sandbox.templates.base import Draft, Params
from envs.sandbox.templates.catalog import sample_tasks, template_named
from envs.sandbox.templates.development import (
    DevelopmentSet,
    draw_development_set,
    part_of,
)
from envs.sandbox.templates.registry import ALL_TEMPLATES

SANDBOX = MobileSandbox()


@pytest.fixture(scope="module")
def default_set() -> DevelopmentSet:
    return draw_development_set(120, 7, SANDBOX)


def test_the_default_set_has_120_distinct_development_tasks_in_two_parts(
    default_set: DevelopmentSet,
) -> None:
    tasks = default_set.tasks
    assert len(tasks) == len({t.fingerprint for t in tasks}) == 120
    assert all(t.split is Split.DEV for t in tasks)
    parts = Counter(part_of(t) for t in tasks)
    assert parts == {"seen": 90, "unseen": 30} == default_set.wanted
    for task in tasks:
        template = template_named(str(task.template))
        assert (template.split is Split.TRAIN) is (part_of(task) == "seen")


def test_each_part_is_stratified_by_capability(default_set: DevelopmentSet) -> None:
    seen = Counter(t.capabilities[0] for t in default_set.tasks if part_of(t) == "seen")
    assert set(seen) == set(Capability)
    assert max(seen.values()) - min(seen.values()) <= 1  # 90 over 4 capabilities
    unseen = Counter(t.capabilities[0] for t in default_set.tasks if part_of(t) == "unseen")
    held_out = {t.capabilities[0] for t in ALL_TEMPLATES if t.split is Split.DEV}
    assert set(unseen) == held_out
    assert max(unseen.values()) - min(unseen.values()) <= 1
    composition = default_set.composition()
    assert sum(composition["seen"].values()) == 90
    assert all("/" in cell for cell in composition["unseen"])


def test_the_loop_benchmarks_set_keeps_every_seen_capabilitys_share() -> None:
    """``bench loop``'s set (960 tasks): the held-out draws of the training templates must
    not run out before each capability has its quarter of the 720 seen ones."""
    drawn = draw_development_set(LOOP_DEV_TASKS, 0, SANDBOX)
    seen = Counter(t.capabilities[0] for t in drawn.tasks if part_of(t) == "seen")
    assert len(drawn.tasks) == LOOP_DEV_TASKS and sum(seen.values()) == drawn.wanted["seen"]
    assert drawn.wanted["seen"] % len(Capability) == 0
    assert set(seen.values()) == {drawn.wanted["seen"] // len(Capability)}, seen


def test_the_same_seed_draws_the_same_set_and_another_seed_another() -> None:
    first = [t.fingerprint for t in draw_development_set(24, 3, SANDBOX).tasks]
    again = [t.fingerprint for t in draw_development_set(24, 3, SANDBOX).tasks]
    other = [t.fingerprint for t in draw_development_set(24, 4, SANDBOX).tasks]
    assert first == again != other


def test_the_target_mix_sets_the_capability_shares() -> None:
    mix = {"tool_use": 0.7, "memory": 0.1, "skills": 0.1, "subagent": 0.1}
    drawn = draw_development_set(40, 5, SANDBOX, capability_mix=mix, unseen_share=0.0)
    counts = Counter(t.capabilities[0].value for t in drawn.tasks)
    assert counts == {"tool_use": 28, "memory": 4, "skills": 4, "subagent": 4}


@pytest.mark.parametrize(("size", "share"), [(0, 0.25), (10, 1.5)])
def test_a_bad_size_or_share_is_refused(size: int, share: float) -> None:
    with pytest.raises(InvalidInputError):
        draw_development_set(size, 1, SANDBOX, unseen_share=share)


def test_sampling_development_tasks_does_not_favour_held_out_templates() -> None:
    """A held-out template's draws are all development tasks, a training template's one
    in ten: redrawing the template on every try made held-out ones about ten times too
    likely. Each template is now drawn once per task."""
    tasks = sample_tasks(60, 11, SANDBOX, split=Split.DEV)
    held_out = sum(template_named(str(t.template)).split is Split.DEV for t in tasks)
    share_of_templates = sum(t.split is Split.DEV for t in ALL_TEMPLATES) / len(ALL_TEMPLATES)
    assert held_out / len(tasks) < 2 * share_of_templates


def test_a_template_whose_goals_a_round_refuses_gives_no_development_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What a round can never train on is not scored either: the cell's quota goes to
    the templates whose draws a round accepts."""
    original = template_named("text_contact")

    def with_placeholder(world: Collections, p: Params) -> Draft:
        draft = original.build(world, p)
        return dataclasses.replace(draft, goal=draft.goal + " Sign it <your name>.")

    broken = dataclasses.replace(original, build=with_placeholder)
    templates = [broken if t is original else t for t in ALL_TEMPLATES]
    monkeypatch.setattr(development, "ALL_TEMPLATES", templates)
    drawn = draw_development_set(60, 7, SANDBOX).tasks
    assert len(drawn) == 60
    assert "text_contact" not in {t.template for t in drawn}
    assert all(goal_problem(t.goal) is None for t in drawn)
