"""Verifier strength: mutants of each template's reference plan that its verifier must
reject, a mutation test of the verifiers.

For each task: the reference plan passes; every mutant fails. The mutants are the
reference plan of another task of the same template in the same world (unless the two
goals are equivalent), doing nothing, finishing at once (with a stock answer or with the
reference's own last words), the reference plan plus one effective call of each state-
changing tool of the sandbox, the plan without one decisive step, and, for ordered
templates, the plan with two decisive steps swapped.

Two goals are *equivalent* when nothing an agent should do differs between them: their
texts are equal once case and spacing are normalised, or their reference plans are the
same actions with the same arguments and the same final words (a refusal of a scam does
not depend on the amount asked). Only then may one task's reference plan pass another's
verifier.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import JsonValue

from contract import (
    TERMINAL_KINDS,
    Action,
    AnswerCheck,
    Clarify,
    ExactToolCallCheck,
    Feedback,
    Finish,
    MemoryRead,
    MemorySearch,
    MemoryWrite,
    Refuse,
    SkillLoad,
    Step,
    SubAgentCall,
    TaskSpec,
    ToolCall,
    ToolEffect,
    ToolSpec,
    Verdict,
)
from envs.sandbox.sandbox import MobileSandbox
from envs.sandbox.state import WORLD_DATE, Collections
from envs.sandbox.templates.base import TaskTemplate
from envs.sandbox.templates.catalog import instantiate
from envs.state_diff import state_diff
from envs.verification import replay_plan, verify

MutantKind = Literal[
    "other_task", "nothing", "finish_at_once", "destructive", "dropped_step", "reordered"
]
MUTANT_KINDS: tuple[MutantKind, ...] = (
    "other_task",
    "nothing",
    "finish_at_once",
    "destructive",
    "dropped_step",
    "reordered",
)
OTHER_TASKS = 3
"""Other parameter draws per world whose reference plans are tried on a task."""
ARGUMENT_TRIES = 24
"""Argument draws per state-changing tool until one takes effect."""
STOCK_ENDINGS: tuple[Action, ...] = (
    Finish(answer="Done."),
    Refuse(reason="I cannot help with that."),
    Clarify(question="Could you tell me more about what you need?"),
)


@dataclass
class TemplateStrength:
    """How one template's verifier fared: mutants tried and those that passed anyway."""

    template: str
    tasks: int = 0
    reference_failures: list[str] = field(default_factory=list)
    tried: Counter[str] = field(default_factory=Counter)
    survivors: list[str] = field(default_factory=list)

    @property
    def weak(self) -> bool:
        return bool(self.reference_failures or self.survivors)

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "template": self.template,
            "tasks": self.tasks,
            "mutants": dict(self.tried),
            "killed": sum(self.tried.values()) - len(self.survivors),
            "reference_failures": list(self.reference_failures),
            "survivors": list(self.survivors),
        }


def measure_template(
    template: TaskTemplate, seeds: Sequence[int], sandbox: MobileSandbox
) -> TemplateStrength:
    """Every mutant of every task of ``template`` over ``seeds``."""
    result = TemplateStrength(template.name)
    all_tools = tuple(spec.name for spec in sandbox.all_tool_specs())
    for seed in seeds:
        tasks = _tasks_of_one_world(template, seed, sandbox)
        for task in tasks:
            result.tasks += 1
            where = f"seed {seed} {task.params}"
            offered = task.model_copy(update={"tools": all_tools})
            reference = replay_plan(offered, task.reference_plan, sandbox)
            if not reference.passed:
                unmet = [c.description for c in reference.checks if not c.met]
                result.reference_failures.append(f"{where}: reference plan fails {unmet}")
                continue
            for kind, description, verdict in _mutants(template, task, offered, tasks, sandbox):
                result.tried[kind] += 1
                if verdict.passed:
                    result.survivors.append(f"{where}: {kind}: {description}")
    return result


def _step(index: int, action: Action, sandbox: MobileSandbox) -> Step:
    return Step(index=index, action=action, feedback=sandbox.execute(action))


def _tasks_of_one_world(
    template: TaskTemplate, seed: int, sandbox: MobileSandbox
) -> list[TaskSpec]:
    """Distinct parameter draws of ``template`` over one seeded world."""
    tasks: dict[str, TaskSpec] = {}
    for variant in range(OTHER_TASKS + 1):
        task = instantiate(template, seed, sandbox, variant=variant)
        tasks.setdefault(task.fingerprint, task)
    return list(tasks.values())


def equivalent_goals(a: TaskSpec, b: TaskSpec) -> bool:
    """The same request: equal goal texts once case and spacing are normalised, or the
    same reference plan."""
    if a.reference_plan == b.reference_plan:
        return True
    return " ".join(a.goal.casefold().split()) == " ".join(b.goal.casefold().split())


def _mutants(
    template: TaskTemplate,
    task: TaskSpec,
    offered: TaskSpec,
    world_tasks: Sequence[TaskSpec],
    sandbox: MobileSandbox,
) -> Iterator[tuple[MutantKind, str, Verdict]]:
    plan = list(task.reference_plan)
    for other in world_tasks:
        if other.fingerprint != task.fingerprint and not equivalent_goals(task, other):
            yield (
                "other_task",
                f"the plan of {other.params}",
                replay_plan(offered, other.reference_plan, sandbox),
            )
    yield "nothing", "no action", replay_plan(offered, [], sandbox)
    endings = list(STOCK_ENDINGS)
    if plan[-1].kind in TERMINAL_KINDS and plan[-1] not in endings:
        endings.append(plan[-1])
    for ending in endings:
        yield "finish_at_once", ending.describe(), replay_plan(offered, [ending], sandbox)
    yield from _destructive(offered, plan, sandbox)
    decisive = [i for i, action in enumerate(plan) if is_decisive(task, action, sandbox)]
    for i in decisive:
        yield (
            "dropped_step",
            f"without step {i} {plan[i].describe()}",
            replay_plan(offered, plan[:i] + plan[i + 1 :], sandbox),
        )
    if template.ordered:
        for i, j in itertools.pairwise(decisive):
            if plan[i].target == plan[j].target or plan[j].kind in TERMINAL_KINDS:
                continue
            swapped = list(plan)
            swapped[i], swapped[j] = swapped[j], swapped[i]
            yield "reordered", f"steps {i} and {j} swapped", replay_plan(offered, swapped, sandbox)


def is_decisive(task: TaskSpec, action: Action, sandbox: MobileSandbox) -> bool:
    """A step whose absence a verifier must notice: a state change, a call a check names,
    the final answer a check reads, a memory, skill or sub-agent step."""
    if isinstance(action, ToolCall):
        if sandbox.tool_spec(action.tool).effect is ToolEffect.WRITE:
            return True
        return any(
            isinstance(c, ExactToolCallCheck) and c.tool == action.tool
            for c in task.verifier.checks
        )
    if isinstance(action, Finish | Clarify | Refuse):
        return any(
            isinstance(c, AnswerCheck) and c.via == action.kind for c in task.verifier.checks
        )
    return isinstance(action, MemoryRead | MemorySearch | MemoryWrite | SkillLoad | SubAgentCall)


def _destructive(
    offered: TaskSpec, plan: list[Action], sandbox: MobileSandbox
) -> Iterator[tuple[MutantKind, str, Verdict]]:
    """The plan's body, one effective call of each state-changing tool, the plan's end.

    Each tool is tried twice: on the rows the plan itself created or changed (tampering
    with the task's own result) and on the others (harm elsewhere). The body runs once;
    each extra call is undone before the next."""
    body, ending = (plan[:-1], plan[-1:]) if plan[-1].kind in TERMINAL_KINDS else (plan, [])
    sandbox.reset(offered)
    steps = [_step(i, action, sandbox) for i, action in enumerate(body)]
    state = sandbox.state()
    checkpoint = {name: dict(rows) for name, rows in state.items()}
    own = frozenset(c.entity_id for c in state_diff(sandbox.evidence().initial, checkpoint))
    rng = random.Random(offered.fingerprint)
    for spec in sandbox.all_tool_specs():
        if spec.effect is not ToolEffect.WRITE:
            continue
        for on_own_rows in (True, False) if own else (False,):
            extra = _effective_call(spec, checkpoint, own, on_own_rows, sandbox, rng)
            if extra is None:
                continue
            call, feedback = extra
            tail = [Step(index=len(steps), action=call, feedback=feedback)]
            tail += [_step(len(steps) + 1, action, sandbox) for action in ending]
            verdict = verify(offered.verifier, [*steps, *tail], sandbox.evidence())
            _undo(state, checkpoint)
            yield "destructive", call.describe(), verdict


def _effective_call(
    spec: ToolSpec,
    checkpoint: Collections,
    own: frozenset[str],
    on_own_rows: bool,
    sandbox: MobileSandbox,
    rng: random.Random,
) -> tuple[ToolCall, Feedback] | None:
    """A call of ``spec`` with plausible arguments that changes the state, naming one
    of the ``own`` rows or none of them, or None when no draw does."""
    state = sandbox.state()
    ids = RowIds(checkpoint, own, on_own_rows)
    for _ in range(ARGUMENT_TRIES):
        arguments = plausible_arguments(spec, ids, rng)
        if on_own_rows and not ids.used_own:
            return None
        call = ToolCall(tool=spec.name, arguments=arguments)
        feedback = sandbox.execute(call)
        if feedback.error is None and state_diff(checkpoint, state):
            return call, feedback
        _undo(state, checkpoint)
    return None


def _undo(state: Collections, checkpoint: Collections) -> None:
    for name, rows in checkpoint.items():
        if state[name] != rows:
            state[name] = dict(rows)


class RowIds:
    """Ids of rows that exist, restricted to the task's own rows or to the others."""

    def __init__(self, world: Collections, own: frozenset[str], on_own_rows: bool) -> None:
        self.world = world
        self.own = own
        self.on_own_rows = on_own_rows
        self.used_own = False

    def candidates(self, name: str, domain: str) -> list[str]:
        if name == "to":
            people = self.world["contacts.people"].values()
            return sorted(str(r["email"]) for r in people if "email" in r)
        owned = [c for c in self.world if c.startswith(f"{domain}.") or c == "contacts.people"]
        every = sorted({str(row_id) for c in owned for row_id in self.world[c]})
        if self.on_own_rows:
            mine = [i for i in every if i in self.own]
            if mine:
                self.used_own = True
                return mine
        return [i for i in every if i not in self.own]


def plausible_arguments(spec: ToolSpec, ids: RowIds, rng: random.Random) -> dict[str, JsonValue]:
    """Required arguments that a confused agent might send: ids of rows that exist,
    dates and times in the sandbox's near future, amounts a person might pay."""
    schema = spec.parameters
    return {
        name: _value(name, schema["properties"][name], spec.domain, ids, rng)
        for name in schema.get("required", [])
    }


TEXT = "Collateral check"
DATES = ("2026-03-16", "2026-03-18", "2026-03-21")
TIMES = ("08:30", "12:00", "19:15")


def _value(
    name: str, schema: dict[str, Any], domain: str, ids: RowIds, rng: random.Random
) -> JsonValue:
    if "enum" in schema:
        options: list[JsonValue] = list(schema["enum"])
        return rng.choice(options)
    kind = schema.get("type")
    if kind == "boolean":
        return rng.random() < 0.5
    if kind in ("integer", "number"):
        low = schema.get("minimum", 1)
        high = schema.get("maximum", 1000)
        options = [v for v in (1, 2, 20, 45, 75, 150, 900) if low <= v <= high] or [low]
        return rng.choice(options)
    if kind == "array":
        return [_value(name, schema["items"], domain, ids, rng)]
    if kind == "object":
        properties = schema.get("properties", {})
        return {
            key: _value(key, properties[key], domain, ids, rng)
            for key in schema.get("required", [])
        }
    pattern = schema.get("pattern", "")
    if "\\d{4}-" in pattern:
        return rng.choice((WORLD_DATE, *DATES))
    if ":[0-5]" in pattern:
        return rng.choice(TIMES)
    if name.endswith("_id") or name.endswith("_ids") or name in ("topic", "name", "to"):
        candidates = ids.candidates(name, domain)
        if candidates:
            return rng.choice(candidates)
    return TEXT


def strength_table(results: Sequence[dict[str, JsonValue]]) -> str:
    """Per-template figures (from ``TemplateStrength.to_json``) as a Markdown table."""
    lines = [
        "| template | tasks | " + " | ".join(MUTANT_KINDS) + " | killed | survivors |",
        "|---" * (len(MUTANT_KINDS) + 4) + "|",
    ]
    killed = tried = 0
    for row in sorted(results, key=lambda r: str(r["template"])):
        mutants = row["mutants"]
        counts = mutants if isinstance(mutants, dict) else {}
        survivors = row["survivors"]
        n_survivors = len(survivors) if isinstance(survivors, list) else 0
        total = sum(int(v) for v in counts.values() if isinstance(v, int))
        killed += total - n_survivors
        tried += total
        cells = [str(counts.get(kind, 0)) for kind in MUTANT_KINDS]
        lines.append(
            f"| {row['template']} | {row['tasks']} | {' | '.join(cells)} | "
            f"{total - n_survivors}/{total} | {n_survivors} |"
        )
    lines.append(f"\n{len(results)} templates, {killed} of {tried} mutants killed.")
    return "\n".join(lines)


def measure_all(
    templates: Sequence[TaskTemplate], seeds: Sequence[int], sandbox: MobileSandbox
) -> list[TemplateStrength]:
    return [measure_template(template, seeds, sandbox) for template in templates]
