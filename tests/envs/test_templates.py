"""Every template's checker accepts its reference plan and rejects typical wrong outcomes."""

from __future__ import annotations

import pytest

from agents.policies.perturb import FREE_ARGUMENTS, perturb
from agents.task_constructor import GOAL_NEAR_DUPLICATE, what_it_asks
from contract import (
    Action,
    Capability,
    Difficulty,
    Finish,
    InvalidInputError,
    MemoryRead,
    Refuse,
    SkillLoad,
    Split,
    SubAgentCall,
    TaskSpec,
    ToolCall,
    Verdict,
    default_plan,
    goal_problem,
)
from curation.dedup import jaccard, word_shingles
from envs.sandbox import MobileSandbox
from envs.sandbox.state import Collections
from envs.sandbox.subagents import SUBAGENTS
from envs.sandbox.templates.base import Draft, Params, TaskTemplate, TemplateSet
from envs.sandbox.templates.catalog import (
    build,
    draw,
    instantiate,
    replay_reference,
    sample_tasks,
    split_of,
    template_named,
)
from envs.sandbox.templates.registry import ALL_TEMPLATES
from envs.sandbox.templates.strength import is_decisive
from envs.verification import replay_plan

SEEDS = (3, 17, 2024)
SANDBOX = MobileSandbox()


def _replay(task: TaskSpec, plan: list[Action]) -> Verdict:
    return replay_plan(task, plan, SANDBOX)


def _is_decisive(task: TaskSpec, action: Action) -> bool:
    return is_decisive(task, action, SANDBOX)


def _schema_of(action: Action, name: str) -> dict[str, object]:
    if isinstance(action, ToolCall):
        props = SANDBOX.tool_spec(action.tool).parameters["properties"]
    elif isinstance(action, SubAgentCall):
        props = SUBAGENTS[action.agent].spec.parameters["properties"]
    else:
        return {}
    return dict(props.get(name, {}))


def _wrong_variants(action: Action) -> list[tuple[str, Action]]:
    if isinstance(action, ToolCall | SubAgentCall):
        variants: list[tuple[str, Action]] = []
        for name, value in action.arguments.items():
            if name in FREE_ARGUMENTS:
                continue
            args = {**action.arguments, name: perturb(value, _schema_of(action, name))}
            variants.append((name, action.model_copy(update={"arguments": args})))
        return variants
    if isinstance(action, MemoryRead):
        return [("key", MemoryRead(key=f"{action.key}_other"))]
    if isinstance(action, SkillLoad):
        return [("name", SkillLoad(name=f"{action.name}_other"))]
    if isinstance(action, Finish):
        return [("answer", Finish(answer="I could not find it."))]
    if isinstance(action, Refuse):
        return [("refuse", Finish(answer="Done."))]
    return []


def _tasks(template: TaskTemplate) -> list[TaskSpec]:
    return [instantiate(template, seed, SANDBOX) for seed in SEEDS]


@pytest.mark.parametrize("template", ALL_TEMPLATES, ids=lambda t: t.name)
def test_reference_plan_passes_on_fresh_seeds(template: TaskTemplate) -> None:
    for task in _tasks(template):
        verdict = replay_reference(task, SANDBOX)
        failed = [c.description for c in verdict.checks if not c.met]
        assert verdict.passed, f"seed {task.initial_conditions.seed}: unmet {failed}"
        assert verdict.progress == 1.0


@pytest.mark.parametrize("template", ALL_TEMPLATES, ids=lambda t: t.name)
def test_verifier_rejects_a_wrong_argument(template: TaskTemplate) -> None:
    for task in _tasks(template):
        plan = list(task.reference_plan)
        for i, action in enumerate(plan):
            if not _is_decisive(task, action):
                continue
            for name, wrong in _wrong_variants(action):
                verdict = _replay(task, [*plan[:i], wrong, *plan[i + 1 :]])
                assert not verdict.passed, f"step {i} with a wrong {name} still passes"
                assert verdict.progress < 1.0


@pytest.mark.parametrize("template", ALL_TEMPLATES, ids=lambda t: t.name)
def test_tasks_are_well_formed(template: TaskTemplate) -> None:
    for task in _tasks(template):
        plan_tools = {a.tool for a in task.reference_plan if isinstance(a, ToolCall)}
        assert plan_tools <= set(task.tools)
        assert len(task.tools) <= 15
        assert len(task.tools) > len(plan_tools), "tool recall needs distractors"
        assert set(task.domains) <= set(SANDBOX.domains)
        assert task.template == template.name
        if template.split is Split.DEV:
            assert task.split is Split.DEV


@pytest.mark.parametrize("template", ALL_TEMPLATES, ids=lambda t: t.name)
def test_every_draw_writes_a_goal_a_round_accepts(template: TaskTemplate) -> None:
    """A round refuses a malformed goal, so a template whose goals all had one (a
    placeholder such as ``<the code>``) would be held out of every training set while
    the development set kept scoring it."""
    for seed in SEEDS:
        for variant in range(12):
            goal = draw(template, seed, SANDBOX, variant=variant).draft.goal
            assert goal_problem(goal) is None, goal


def test_a_draw_with_a_placeholder_left_in_its_goal_is_refused() -> None:
    registry = TemplateSet()

    @registry.template([Capability.TOOL_USE], Difficulty.EASY, ["notes"])
    def placeholder_goal(world: Collections, p: Params) -> Draft:
        title = p.pick("title", ["Gym", "Work"])
        return Draft(
            goal=f'Write a note titled "{title}" that says <the text>.', plan=[], checks=[]
        )

    [template] = registry.templates
    with pytest.raises(InvalidInputError) as caught:
        draw(template, 3, SANDBOX)
    assert caught.value.field == "goal"
    assert "placeholder" in str(caught.value) and "placeholder_goal" in str(caught.value)


def test_catalogue_covers_every_capability_and_difficulty() -> None:
    assert len(ALL_TEMPLATES) >= 40
    assert len({t.name for t in ALL_TEMPLATES}) == len(ALL_TEMPLATES)
    covered = {(c, t.difficulty) for t in ALL_TEMPLATES for c in t.capabilities}
    assert covered == {(c, d) for c in Capability for d in Difficulty}
    assert any(t.split is Split.DEV for t in ALL_TEMPLATES)
    for capability in Capability:
        assert any(t.split is Split.TRAIN and capability in t.capabilities for t in ALL_TEMPLATES)


def _new_tasks(cell: list[TaskTemplate], draws: int) -> int:
    """Tasks a construction can keep of ``draws`` draws per template: distinct train
    draws whose goal and checks are less alike than a near-duplicate to any kept one."""
    kept: list[frozenset[str]] = []
    seen: set[str] = set()
    for template in cell:
        for variant in range(draws):
            drawn = draw(template, SEEDS[variant % len(SEEDS)], SANDBOX, variant=variant)
            if drawn.split is not Split.TRAIN or drawn.fingerprint in seen:
                continue
            seen.add(drawn.fingerprint)
            asks = frozenset(word_shingles(what_it_asks(build(drawn, SANDBOX))))
            if all(jaccard(asks, k) < GOAL_NEAR_DUPLICATE for k in kept):
                kept.append(asks)
    return len(kept)


@pytest.mark.parametrize("capability", list(Capability))
@pytest.mark.parametrize("difficulty", list(Difficulty))
def test_every_cell_has_new_tasks_for_a_third_round(
    capability: Capability, difficulty: Difficulty
) -> None:
    """The loop's rounds (2,000 tasks, an even mix) fill a cell's quota with new tasks
    only; a cell that two rounds use up moves its third quota to other cells, and that
    capability then gets no new data. 600 draws per template give a lower bound of what
    a cell holds."""
    quota = max(
        q.count
        for q in default_plan(2000).quotas
        if q.capability is capability and q.difficulty is difficulty
    )
    cell = [
        t
        for t in ALL_TEMPLATES
        if t.split is Split.TRAIN and t.capabilities[0] is capability and t.difficulty is difficulty
    ]
    assert _new_tasks(cell, 600) > 2 * quota


def test_sandbox_has_enough_domains_and_tools() -> None:
    specs = SANDBOX.all_tool_specs()
    assert len(specs) >= 60
    assert len({s.domain for s in specs}) >= 12


@pytest.mark.parametrize("capability", list(Capability))
@pytest.mark.parametrize("difficulty", list(Difficulty))
def test_development_split_scores_every_capability_and_difficulty(
    capability: Capability, difficulty: Difficulty
) -> None:
    dev = sample_tasks(3, 5, SANDBOX, capability=capability, difficulty=difficulty, split=Split.DEV)
    assert all(t.split is Split.DEV and capability in t.capabilities for t in dev)
    train = sample_tasks(
        30, 5, SANDBOX, capability=capability, difficulty=difficulty, split=Split.TRAIN
    )
    assert all(split_of(template_named(t.template or ""), t.fingerprint) is Split.TRAIN
               for t in train)  # fmt: skip


def test_template_parameters_are_checked_by_name_and_value() -> None:
    template = template_named("text_contact")
    task = instantiate(
        template, 1, SANDBOX, {"contact_id": "c-2", "text": "Dinner is at 8 tonight"}
    )
    assert task.params == {"contact_id": "c-2", "text": "Dinner is at 8 tonight"}
    with pytest.raises(InvalidInputError, match=r"params\.colour: unknown parameter.*contact_id"):
        instantiate(template, 1, SANDBOX, {"colour": "red"})
    with pytest.raises(InvalidInputError, match=r"params\.contact_id: 'c-99' is not an option"):
        instantiate(template, 1, SANDBOX, {"contact_id": "c-99"})
    with pytest.raises(InvalidInputError, match=r"template.*allowed: .*text_contact"):
        template_named("no_such_template")
