"""The task-constructor agent: fills a generation plan's quotas with validated tasks.

A LangGraph ``StateGraph`` of plain nodes: ``propose`` draws template tasks for every
unfilled quota (and, with an LLM, rewords their goals), ``validate`` keeps a task only
when its reference plan passes its own verifier on a fresh sandbox, its goal is
well-formed, it is neither a duplicate nor a near-duplicate, and its fingerprint is not a
development task's; ``record`` stores the tasks and every rejection with its reason.
Proposing repeats until the quotas are filled or ``max_passes`` runs out.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from agents.llm import JsonLLM, LLMOutputError
from contract import (
    Capability,
    Difficulty,
    FlywheelError,
    GenerationPlan,
    Quota,
    RejectedTask,
    RejectionReason,
    Split,
    TaskSource,
    TaskSpec,
)
from curation.dedup import NearDuplicateIndex, Signature, word_shingles
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.base import TaskTemplate
from envs.sandbox.templates.catalog import instantiate, replay_reference
from envs.sandbox.templates.registry import ALL_TEMPLATES

Cell = tuple[Capability, Difficulty]
MAX_GOAL_WORDS = 80
GOAL_NEAR_DUPLICATE = 0.9
EXHAUSTED_AFTER = 2
"""Passes with (almost) no accepted task after which a cell's templates count as used up."""
MIN_YIELD = 0.1
"""A pass "stalls" for a cell when under this share of its proposals were accepted."""
WORLDS_PER_ROUND = 48


class TaskStore(Protocol):
    """Where constructed tasks and rejected proposals go (the catalog)."""

    def add_tasks(self, round_id: str, tasks: Sequence[TaskSpec]) -> int: ...

    def add_rejections(self, rejections: Sequence[RejectedTask]) -> int: ...


@dataclass(frozen=True)
class Proposal:
    """A task proposed for a quota cell, or why none could be built."""

    cell: Cell
    template: str
    task: TaskSpec | None
    problem: str | None = None


class Construction(NamedTuple):
    tasks: list[TaskSpec]
    rejected: list[RejectedTask]
    plan: GenerationPlan
    """The plan as filled: quotas of cells whose templates ran out moved, with reasons."""


class ConstructorState(TypedDict, total=False):
    round_id: str
    seed: int
    plan: GenerationPlan
    known_fingerprints: frozenset[str]
    """Tasks constructed before this round: proposing one again is a duplicate."""
    dev_fingerprints: frozenset[str]
    known_goals: list[str]
    """``what_it_asks`` of tasks constructed before this round."""
    passes: int
    stalls: dict[Cell, int]
    """Consecutive passes in which a cell accepted nothing."""
    have_before: dict[Cell, int]
    proposed: dict[Cell, int]
    goal_index: NearDuplicateIndex
    """MinHash index of ``what_it_asks`` of known and accepted tasks, kept across passes."""
    exhausted: frozenset[Cell]
    """Cells whose templates yield no new tasks: their quota moved elsewhere."""
    proposals: list[Proposal]
    accepted: list[TaskSpec]
    rejected: list[RejectedTask]


class ConstructorNode(Protocol):
    """A node: ``State -> partial State``."""

    def __call__(self, state: ConstructorState) -> ConstructorState: ...


def cell_of(task: TaskSpec) -> Cell:
    return (task.capabilities[0], task.difficulty)


def shortfall(plan: GenerationPlan, accepted: Sequence[TaskSpec]) -> dict[Cell, int]:
    """Tasks still missing per quota cell."""
    have = Counter(cell_of(t) for t in accepted)
    missing = {
        (q.capability, q.difficulty): q.count - have[(q.capability, q.difficulty)]
        for q in plan.quotas
    }
    return {cell: n for cell, n in missing.items() if n > 0}


def templates_for(cell: Cell) -> list[TaskTemplate]:
    """Train templates whose primary capability and difficulty make the cell."""
    capability, difficulty = cell
    return [
        t
        for t in ALL_TEMPLATES
        if t.split is Split.TRAIN and t.capabilities[0] is capability and t.difficulty is difficulty
    ]


def what_it_asks(task: TaskSpec) -> str:
    """The text near-duplicates are judged on: the goal and what its verifier checks.

    Memory tasks share a goal ("run my bedtime routine") and differ in what is checked,
    so the goal alone would call different tasks duplicates.
    """
    return " ".join([task.goal, *(check.describe() for check in task.verifier.checks)])


def goal_problem(goal: str) -> str | None:
    """Why a goal is not a well-formed request, or None."""
    words = goal.split()
    if len(words) < 3:
        return "fewer than 3 words"
    if len(words) > MAX_GOAL_WORDS:
        return f"more than {MAX_GOAL_WORDS} words"
    if any(mark in goal for mark in ("{", "}", "<", ">", "None", "TODO")):
        return "contains an unfilled placeholder"
    if not goal[0].isupper():
        return "does not start with a capital letter"
    return None


# -- nodes ---------------------------------------------------------------------------------


def make_propose(sandbox: MobileSandbox, llm: JsonLLM | None) -> ConstructorNode:
    def propose(state: ConstructorState) -> ConstructorState:
        """One proposal per missing task of every unfilled cell, drawn from the seed."""
        passes = state.get("passes", 0)
        proposals: list[Proposal] = []
        proposed: dict[Cell, int] = {}
        worlds = world_seeds(state["seed"])
        for cell, missing in sorted(shortfall(state["plan"], state.get("accepted", [])).items()):
            pool = templates_for(cell)
            if not pool:
                continue
            before = len(proposals)
            rng = random.Random(f"{state['seed']}:{passes}:{cell[0]}:{cell[1]}")
            # Later passes over-propose: what is left is the hard part of the cell.
            for _ in range(missing if passes == 0 else 2 * missing + 2):
                template = rng.choice(pool)
                seed = worlds[rng.randrange(len(worlds))]
                proposals.append(_instantiate(cell, template, seed, rng.randrange(2**31), sandbox))
            proposed[cell] = proposed.get(cell, 0) + len(proposals) - before
        if llm is not None:
            proposals = [reword(p, llm) for p in proposals]
        return {"proposals": proposals, "passes": passes + 1, "proposed": proposed}

    return propose


def world_seeds(seed: int) -> list[int]:
    """The seeded worlds a round's tasks live in: few enough to stay in the sandbox's
    world cache, while parameter variants keep the tasks diverse."""
    rng = random.Random(f"worlds:{seed}")
    return [rng.randrange(2**31) for _ in range(WORLDS_PER_ROUND)]


def _instantiate(
    cell: Cell, template: TaskTemplate, seed: int, variant: int, sb: MobileSandbox
) -> Proposal:
    try:
        return Proposal(cell, template.name, instantiate(template, seed, sb, variant=variant))
    except FlywheelError as exc:
        return Proposal(cell, template.name, None, str(exc))


REWORD_SYSTEM = (
    "You rewrite requests that a phone user gives an assistant. Keep every name, number, "
    "date, time and quoted text exactly; change only the wording. Answer with JSON: "
    '{"goal": "<the rewritten request>"}'
)


def reword(proposal: Proposal, llm: JsonLLM) -> Proposal:
    """Ask the LLM for a new wording; validation checks it kept what the task needs."""
    task = proposal.task
    if task is None:
        return proposal
    try:
        goal = llm.ask_json(REWORD_SYSTEM, task.goal).get("goal")
    except (LLMOutputError, OSError) as exc:
        return Proposal(proposal.cell, proposal.template, None, f"LLM rewording failed: {exc}")
    if not isinstance(goal, str):
        return Proposal(proposal.cell, proposal.template, None, "LLM answer has no goal string")
    lost = [token for token in _literals(task.goal) if token not in goal]
    if lost:
        return Proposal(proposal.cell, proposal.template, None, f"LLM wording lost {lost[:3]}")
    reworded = TaskSpec.model_validate(
        task.model_dump(exclude={"id"}) | {"goal": goal, "source": TaskSource.LLM}
    )
    return Proposal(proposal.cell, proposal.template, reworded)


def _literals(goal: str) -> list[str]:
    """Tokens a rewording must keep: numbers and capitalized words after the first."""
    words = [w.strip(".,!?;:'\"()") for w in goal.split()]
    return [
        w
        for i, w in enumerate(words)
        if w and (any(ch.isdigit() for ch in w) or (i > 0 and w[0].isupper()))
    ]


def make_validate(sandbox: MobileSandbox, threshold: float) -> ConstructorNode:
    def validate(state: ConstructorState) -> ConstructorState:
        """Accept proposals that pass every check, in order; reject the rest with a reason.

        Cheap checks (built, not a development task, not a known fingerprint, a
        well-formed goal) run first; the survivors are MinHash-signed in one vectorized
        batch, then checked for near-duplicates and replayed one by one.
        """
        accepted = list(state.get("accepted", []))
        rejected = list(state.get("rejected", []))
        index = state.get("goal_index") or _goal_index(state, accepted, threshold)
        known = state.get("known_fingerprints", frozenset())
        dev = state.get("dev_fingerprints", frozenset())
        survivors: list[tuple[Proposal, TaskSpec]] = []
        for proposal in state.get("proposals", []):
            reason, detail = _cheap_check(proposal, known, dev)
            if reason is not None or proposal.task is None:
                rejected.append(_rejection(state["round_id"], proposal, reason, detail))
            else:
                survivors.append((proposal, proposal.task))
        signatures = index.hasher.signatures([word_shingles(what_it_asks(t)) for _, t in survivors])
        missing = shortfall(state["plan"], accepted)
        seen = {t.fingerprint for t in accepted}
        for (proposal, task), signature in zip(survivors, signatures, strict=True):
            if missing.get(proposal.cell, 0) <= 0:
                continue  # the cell filled up within this pass: not a rejection
            reason, detail = _costly_check(task, seen, index, signature, sandbox)
            if reason is not None:
                rejected.append(_rejection(state["round_id"], proposal, reason, detail))
                continue
            missing[proposal.cell] -= 1
            accepted.append(task)
            seen.add(task.fingerprint)
            index.add_signature(task.id, signature)
        return {"accepted": accepted, "rejected": rejected, "proposals": [], "goal_index": index}

    return validate


def _goal_index(
    state: ConstructorState, accepted: Sequence[TaskSpec], threshold: float
) -> NearDuplicateIndex:
    index = NearDuplicateIndex(threshold=threshold)
    index.add_many(
        [(f"known-{i}", text) for i, text in enumerate(state.get("known_goals", []))]
        + [(t.id, what_it_asks(t)) for t in accepted]
    )
    return index


def _cheap_check(
    proposal: Proposal, known: frozenset[str], dev: frozenset[str]
) -> tuple[RejectionReason | None, str]:
    task = proposal.task
    if task is None:
        return RejectionReason.INVALID, proposal.problem or "no task was built"
    if task.split is Split.DEV or task.fingerprint in dev:
        return RejectionReason.DEVELOPMENT_TASK, "its fingerprint is held out for development"
    if task.fingerprint in known:
        return RejectionReason.DUPLICATE, "a task with this fingerprint already exists"
    problem = goal_problem(task.goal)
    if problem is not None:
        return RejectionReason.MALFORMED_GOAL, problem
    return None, ""


def _costly_check(
    task: TaskSpec,
    seen: set[str],
    index: NearDuplicateIndex,
    signature: Signature,
    sandbox: MobileSandbox,
) -> tuple[RejectionReason | None, str]:
    if task.fingerprint in seen:
        return RejectionReason.DUPLICATE, "a task with this fingerprint was just accepted"
    twin = index.query_signature(signature)
    if twin is not None:
        return RejectionReason.NEAR_DUPLICATE, f"it nearly repeats {twin} (goal and checks)"
    verdict = replay_reference(task, sandbox)
    if not verdict.passed:
        unmet = [c.description for c in verdict.checks if not c.met]
        return RejectionReason.REFERENCE_FAILS, "reference plan misses: " + "; ".join(unmet[:3])
    return None, ""


def _rejection(
    round_id: str, proposal: Proposal, reason: RejectionReason | None, detail: str
) -> RejectedTask:
    task = proposal.task
    return RejectedTask(
        round_id=round_id,
        fingerprint=task.fingerprint if task else None,
        template=proposal.template,
        reason=reason or RejectionReason.INVALID,
        detail=detail,
        goal=task.goal if task else None,
    )


def replan(state: ConstructorState) -> ConstructorState:
    """Move the quota of cells whose templates are used up to the other cells of the same
    difficulty (in proportion to their templates), saying so in the quotas' reasons."""
    plan, accepted = state["plan"], state.get("accepted", [])
    have = Counter(cell_of(t) for t in accepted)
    before = state.get("have_before", {})
    proposed = state.get("proposed", {})
    stalls = dict(state.get("stalls", {}))
    exhausted = set(state.get("exhausted", frozenset()))
    missing = shortfall(plan, accepted)
    for cell in missing:
        gained = have[cell] - before.get(cell, 0)
        stalled = gained < max(1.0, MIN_YIELD * proposed.get(cell, 0))
        stalls[cell] = stalls.get(cell, 0) + 1 if stalled else 0
    newly = {c for c in missing if stalls[c] >= EXHAUSTED_AFTER and c not in exhausted}
    update: ConstructorState = {"stalls": stalls, "have_before": dict(have)}
    if not newly:
        return update
    exhausted |= newly
    counts = {(q.capability, q.difficulty): q.count for q in plan.quotas}
    reasons = {(q.capability, q.difficulty): q.reason for q in plan.quotas}
    for cell in sorted(newly):
        spare = missing[cell]
        counts[cell] -= spare
        reasons[cell] += f"; {spare} fewer: its templates are used up"
        open_cells = [c for c in counts if c not in exhausted and templates_for(c)]
        takers = [c for c in open_cells if c[1] == cell[1]] or open_cells
        for taker, extra in _apportion(spare, {c: len(templates_for(c)) for c in takers}).items():
            counts[taker] += extra
            reasons[taker] += f"; +{extra} from {cell[0]}/{cell[1]}"
    quotas = tuple(
        Quota(capability=c, difficulty=d, count=n, reason=reasons[(c, d)])
        for (c, d), n in counts.items()
    )
    plan = GenerationPlan(quotas=quotas, source=plan.source)
    return {**update, "plan": plan, "exhausted": frozenset(exhausted)}


def _apportion(total: int, weights: dict[Cell, int]) -> dict[Cell, int]:
    """``total`` split by weight (largest remainders), deterministic."""
    if not weights or total <= 0:
        return {}
    whole = sum(weights.values())
    shares = {c: total * w / whole for c, w in sorted(weights.items())}
    out = {c: int(v) for c, v in shares.items()}
    rest = total - sum(out.values())
    for c in sorted(shares, key=lambda c: (out[c] - shares[c], c))[:rest]:
        out[c] += 1
    return {c: n for c, n in out.items() if n}


def make_record(store: TaskStore | None) -> ConstructorNode:
    def record(state: ConstructorState) -> ConstructorState:
        """Store the accepted tasks and the rejections (idempotent by id)."""
        if store is not None:
            store.add_tasks(state["round_id"], state.get("accepted", []))
            store.add_rejections(state.get("rejected", []))
        return {}

    return record


def build_task_constructor_graph(
    sandbox: MobileSandbox,
    *,
    store: TaskStore | None = None,
    llm: JsonLLM | None = None,
    max_passes: int = 12,
    near_duplicate_threshold: float = GOAL_NEAR_DUPLICATE,
) -> CompiledStateGraph[ConstructorState, None, ConstructorState, ConstructorState]:
    """The task-constructor; ``sandbox`` replays reference plans, ``store`` keeps results."""

    def more_needed(state: ConstructorState) -> str:
        open_cells = set(shortfall(state["plan"], state.get("accepted", [])))
        open_cells -= state.get("exhausted", frozenset())
        done = not open_cells or state.get("passes", 0) >= max_passes
        return "record" if done else "propose"

    graph = StateGraph(ConstructorState)
    graph.add_node("propose", make_propose(sandbox, llm))
    graph.add_node("validate", make_validate(sandbox, near_duplicate_threshold))
    graph.add_node("replan", replan)
    graph.add_node("record", make_record(store))
    graph.add_edge(START, "propose")
    graph.add_edge("propose", "validate")
    graph.add_edge("validate", "replan")
    graph.add_conditional_edges("replan", more_needed, ["propose", "record"])
    graph.add_edge("record", END)
    return graph.compile(name="task-constructor")


def construct_tasks(
    round_id: str,
    plan: GenerationPlan,
    seed: int,
    sandbox: MobileSandbox,
    *,
    store: TaskStore | None = None,
    llm: JsonLLM | None = None,
    known_fingerprints: frozenset[str] = frozenset(),
    dev_fingerprints: frozenset[str] = frozenset(),
    known_goals: Sequence[str] = (),
    max_passes: int = 12,
) -> Construction:
    """Run the graph once; accepted tasks come back sorted by id."""
    graph = build_task_constructor_graph(sandbox, store=store, llm=llm, max_passes=max_passes)
    final = graph.invoke(
        {
            "round_id": round_id,
            "seed": seed,
            "plan": plan,
            "known_fingerprints": known_fingerprints,
            "dev_fingerprints": dev_fingerprints,
            "known_goals": list(known_goals),
            "passes": 0,
            "accepted": [],
            "rejected": [],
        },
        {"recursion_limit": 4 * max_passes + 8},
    )
    return Construction(
        tasks=sorted(final.get("accepted", []), key=lambda t: t.id),
        rejected=final.get("rejected", []),
        plan=final["plan"],
    )
