"""Instantiating and sampling template tasks, with the development split held out."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import overload

from pydantic import JsonValue

from contract import (
    MAX_CANDIDATE_TOOLS,
    Action,
    AllowedChange,
    Capability,
    CollateralCheck,
    Difficulty,
    InitialConditions,
    InvalidInputError,
    Split,
    TaskSource,
    TaskSpec,
    ToolCall,
    Verdict,
    VerifierSpec,
    goal_problem,
    step_budget_for,
    task_fingerprint,
)
from envs.sandbox.sandbox import MobileSandbox
from envs.sandbox.templates.base import Draft, Params, TaskTemplate
from envs.sandbox.templates.registry import ALL_TEMPLATES
from envs.state_diff import allowances_for, state_diff
from envs.verification import replay_plan

DEV_PARAMETER_SHARE = 10
"""One train-template parameter combination in this many is held out for development,
chosen by the fingerprint, so the choice never depends on who samples."""

CANDIDATE_TOOLS = {Difficulty.EASY: 6, Difficulty.MEDIUM: 10, Difficulty.HARD: MAX_CANDIDATE_TOOLS}
MAX_SAMPLING_TRIES = 200
HARMLESS_CHANGES = (
    AllowedChange(
        collection="memory.facts",
        op="created",
        reason="a note the agent keeps for itself changes nothing the user has",
    ),
)
"""Tolerated in every task: logs that harm no one."""


def template_named(name: str) -> TaskTemplate:
    for template in ALL_TEMPLATES:
        if template.name == name:
            return template
    raise InvalidInputError(
        "template", f"unknown template {name!r}", [t.name for t in ALL_TEMPLATES]
    )


def split_of(template: TaskTemplate, fingerprint: str) -> Split:
    """Dev when the template is held out, or when the parameter draw is (by fingerprint)."""
    if template.split is Split.DEV:
        return Split.DEV
    held_out = int(fingerprint.removeprefix("fp-")[:8], 16) % DEV_PARAMETER_SHARE == 0
    return Split.DEV if held_out else Split.TRAIN


@dataclass(frozen=True)
class Draw:
    """One parameter draw of a template, before its tools are recalled and its plan
    rehearsed: enough to recognise a repeat (``fingerprint``) or a held-out draw
    (``split``) at the cost of reading the seeded world."""

    template: TaskTemplate
    seed: int
    draft: Draft
    values: dict[str, JsonValue]
    fingerprint: str
    split: Split


def draw(
    template: TaskTemplate,
    seed: int,
    sandbox: MobileSandbox,
    params: Mapping[str, JsonValue] | None = None,
    variant: int = 0,
) -> Draw:
    """Draw parameters from ``seed`` and ``variant`` (``params`` fixes some or all): many
    variants over one seeded world reuse the cached world."""
    world = sandbox.build_world(seed)
    stream = f"{seed}:{template.name}" + (f":{variant}" if variant else "")
    drawn = Params(random.Random(stream), params)
    draft = template.build(world, drawn)
    values = drawn.finish()
    problem = goal_problem(draft.goal)
    if problem is not None:
        raise InvalidInputError("goal", f"template {template.name} wrote a goal that {problem}")
    fingerprint = task_fingerprint(template.name, values, draft.goal)
    return Draw(template, seed, draft, values, fingerprint, split_of(template, fingerprint))


def build(drawn: Draw, sandbox: MobileSandbox) -> TaskSpec:
    """The task of a draw: its tools (the plan's and distractors) and its collateral
    check, found by rehearsing the reference plan."""
    template, draft, seed = drawn.template, drawn.draft, drawn.seed
    needed = [a.tool for a in draft.plan if isinstance(a, ToolCall)] + draft.extra_tools
    tools = recall_tools(sandbox, needed, template, random.Random(f"{seed}:{drawn.fingerprint}"))
    conditions = InitialConditions(seed=seed, setup=tuple(draft.setup))
    collateral = collateral_check(sandbox, conditions, tools, draft.plan, draft.tolerate)
    return TaskSpec(
        fingerprint=drawn.fingerprint,
        goal=draft.goal,
        capabilities=template.capabilities,
        difficulty=template.difficulty,
        domains=template.domains,
        tools=tools,
        initial_conditions=conditions,
        verifier=VerifierSpec(checks=(*draft.checks, collateral)),
        reference_plan=tuple(draft.plan),
        source=TaskSource.TEMPLATE,
        template=template.name,
        params=drawn.values,
        split=drawn.split,
        max_steps=step_budget_for(draft.plan),
    )


@overload
def instantiate(
    template: TaskTemplate,
    seed: int,
    sandbox: MobileSandbox,
    params: Mapping[str, JsonValue] | None = None,
    variant: int = 0,
    split: None = None,
) -> TaskSpec: ...


@overload
def instantiate(
    template: TaskTemplate,
    seed: int,
    sandbox: MobileSandbox,
    params: Mapping[str, JsonValue] | None = None,
    variant: int = 0,
    *,
    split: Split,
) -> TaskSpec | None: ...


def instantiate(
    template: TaskTemplate,
    seed: int,
    sandbox: MobileSandbox,
    params: Mapping[str, JsonValue] | None = None,
    variant: int = 0,
    split: Split | None = None,
) -> TaskSpec | None:
    """Build one task (:func:`draw`, then :func:`build`). With ``split``, a draw in the
    other split is None, found before its tools are recalled and its plan rehearsed."""
    drawn = draw(template, seed, sandbox, params, variant)
    if split is not None and drawn.split is not split:
        return None
    return build(drawn, sandbox)


def collateral_check(
    sandbox: MobileSandbox,
    conditions: InitialConditions,
    tools: Sequence[str],
    plan: Sequence[Action],
    tolerate: Sequence[AllowedChange] = (),
) -> CollateralCheck:
    """What the task may change: the reference plan's own changes, the template's
    tolerances and the harmless ones; anything else the policy changes fails the task."""
    evidence = sandbox.rehearse(conditions, tools, plan)
    own = allowances_for(state_diff(evidence.initial, evidence.final), "the reference plan")
    return CollateralCheck(
        allowed=(*own, *tolerate, *HARMLESS_CHANGES),
        note="anything changed beyond what the task needs is collateral damage",
    )


def recall_tools(
    sandbox: MobileSandbox, needed: Sequence[str], template: TaskTemplate, rng: random.Random
) -> tuple[str, ...]:
    """The tools the plan needs plus plausible distractors (same domains first), shuffled."""
    chosen = list(dict.fromkeys(needed))
    size = max(len(chosen), CANDIDATE_TOOLS[template.difficulty])
    specs = sandbox.all_tool_specs()
    near = [s.name for s in specs if s.domain in template.domains and s.name not in chosen]
    far = [s.name for s in specs if s.domain not in template.domains]
    rng.shuffle(near)
    rng.shuffle(far)
    near_share = (size - len(chosen) + 1) // 2
    chosen += near[:near_share]
    chosen += far[: max(0, size - len(chosen))]
    if len(chosen) > MAX_CANDIDATE_TOOLS:
        raise InvalidInputError("tools", f"template {template.name} needs more than 15 tools")
    rng.shuffle(chosen)
    return tuple(chosen)


def eligible_templates(
    capability: Capability | None = None,
    difficulty: Difficulty | None = None,
) -> list[TaskTemplate]:
    return [
        t
        for t in ALL_TEMPLATES
        if (capability is None or capability in t.capabilities)
        and (difficulty is None or t.difficulty is difficulty)
    ]


def sample_tasks(
    n: int,
    seed: int,
    sandbox: MobileSandbox,
    *,
    capability: Capability | None = None,
    difficulty: Difficulty | None = None,
    split: Split | None = None,
) -> list[TaskSpec]:
    """``n`` tasks drawn from the seed: the same arguments always give the same tasks.

    Each task's template is drawn once, evenly from the eligible ones; only its seed is
    drawn again until the task falls in ``split``. (Redrawing the template as well would
    favour the templates whose every draw is in the split: the held-out ones.) A template
    that yields no task of the split in ``MAX_SAMPLING_TRIES`` draws is left out."""
    if n < 0:
        raise InvalidInputError("n", "must be >= 0")
    pool = eligible_templates(capability, difficulty)
    if split is Split.TRAIN:
        pool = [t for t in pool if t.split is Split.TRAIN]
    if not pool:
        raise InvalidInputError("filters", "no template matches capability, difficulty and split")
    rng = random.Random(seed)
    tasks: list[TaskSpec] = []
    while len(tasks) < n:
        if not pool:
            raise InvalidInputError("split", f"could not draw a {split} task from the filters")
        template = rng.choice(pool)
        for _ in range(MAX_SAMPLING_TRIES):
            seed_of_task = rng.randrange(2**31)
            if split is None:
                tasks.append(instantiate(template, seed_of_task, sandbox))
                break
            task = instantiate(template, seed_of_task, sandbox, split=split)
            if task is not None:
                tasks.append(task)
                break
        else:
            pool = [t for t in pool if t is not template]
    return tasks


def replay_reference(task: TaskSpec, sandbox: MobileSandbox) -> Verdict:
    """Run the reference plan on a fresh sandbox and verify it (a task's self-check)."""
    return replay_plan(task, task.reference_plan, sandbox)
