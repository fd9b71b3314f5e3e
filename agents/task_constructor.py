"""The task-constructor agent: fills a generation plan's quotas with validated tasks.

A LangGraph ``StateGraph`` of plain nodes: ``propose`` draws template tasks for every
unfilled quota (and, with an LLM, rewords their goals), ``validate`` keeps a task only
when its reference plan passes its own verifier on a fresh sandbox, its goal is
well-formed, it is neither a duplicate nor a near-duplicate, and its fingerprint is not a
development task's; ``record`` stores the tasks and every rejection with its reason.
Proposing repeats until the quotas are filled or ``max_passes`` runs out; a pass draws
its parameters first (light) and builds and validates them ``PROPOSAL_BATCH`` at a time,
so a large plan never holds a pass's built tasks at once.

A plan built from feedback (``curation.planning``) adds repair sets: their tasks come
from the train templates that declare the failure type's pattern, and a proposal is kept
only when ``exhibits`` confirms the pattern on the task itself; they are stored with
source ``repair``. Template weights make down-sampled templates less likely proposals.
The plan's replays and preservation set are resolved to the stored tasks and handed back
(``Construction.recollect``) for the round to collect again; a development task among
them is refused before anything is built or stored.
"""

from __future__ import annotations

import functools
import logging
import random
import zlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal, NamedTuple, Protocol, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from more_itertools import chunked

from agents.llm import JsonLLM, LLMFailure, consult
from contract import (
    REPAIR_PATTERN,
    TRUSTED_IDS,
    Capability,
    Difficulty,
    FailureType,
    FlywheelError,
    GenerationPlan,
    InvalidInputError,
    Quota,
    RejectedTask,
    RejectionReason,
    Replay,
    Split,
    TaskSource,
    TaskSpec,
    apportion,
    goal_problem,
)
from curation.dedup import (
    NearDuplicateIndex,
    Sketch,
    lsh_bands,
    shingle_hashes,
    word_shingles,
)
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.base import TaskTemplate
from envs.sandbox.templates.catalog import build, draw, replay_reference
from envs.sandbox.templates.patterns import exhibits
from envs.sandbox.templates.registry import ALL_TEMPLATES
from storage.stores import GoalSketch

Cell = tuple[Capability, Difficulty]
Slot = Cell | FailureType
"""What a proposal fills: a quota cell, or the repair set of a failure type."""
GOAL_NEAR_DUPLICATE = 0.9
log = logging.getLogger(__name__)

EXHAUSTED_AFTER = 2
"""Passes with (almost) no accepted task after which a cell's templates count as used up."""
MIN_YIELD = 0.1
"""A pass "stalls" for a cell when under this share of its proposals were accepted."""
WORLDS_PER_ROUND = 48
RECORD_BATCH = 500
"""Accepted tasks stored to a write: rebuilt specs, their rows and the store's commit all
grow with the write (17,689 tasks: about 0.2 GB in one DuckDB transaction; a peak of
0.58 GB in writes of 2,000, 0.47 to 0.49 GB in writes of 500, for 1 to 4 s more of 56 s)."""
PROPOSAL_BATCH = 2_000
"""Draws of a pass built into tasks and validated at a time: a built task weighs far more
than its draw, and the first pass of a 20,000-task plan draws 20,000 (built all at once,
they were most of construction's 0.18 GB of Python objects)."""


class TaskSink(Protocol):
    """Where constructed tasks and rejected proposals go (the catalog's ``TaskStore``)."""

    def add(self, round_id: str | None, tasks: Iterable[TaskSpec]) -> int: ...

    def add_serialized(self, round_id: str | None, specs: Iterable[bytes]) -> int: ...

    def add_rejections(self, rejections: Sequence[RejectedTask]) -> int: ...

    def add_goal_sketches(self, sketches: Mapping[str, GoalSketch]) -> int: ...


@dataclass(frozen=True)
class Proposal:
    """A task proposed for a quota cell or a repair set, or why none could be built."""

    cell: Cell
    template: str
    task: TaskSpec | None
    problem: str | None = None
    repair: FailureType | None = None
    """The repair set the task is proposed for (its cell is then only informative)."""
    repeat: Repeat | None = None
    """A draw recognised by its fingerprint as one not to build, and why."""

    @property
    def slot(self) -> Slot:
        return self.repair if self.repair is not None else self.cell


class Pick(NamedTuple):
    """One draw of a pass, before anything is built: the slot it fills, the template,
    the world seed and the parameter variant."""

    slot: Slot
    template: TaskTemplate
    seed: int
    variant: int


@dataclass(frozen=True)
class Repeat:
    """A parameter draw refused before its task was built (no tools recalled, no plan
    rehearsed): a development draw, a known task, or one already proposed."""

    fingerprint: str
    goal: str
    reason: RejectionReason
    detail: str


@dataclass(frozen=True)
class Recollection:
    """A stored task the round collects again, and why."""

    task: TaskSpec
    attempts: int
    kind: Literal["replay", "preserve"]
    reason: str


class Construction(NamedTuple):
    tasks: list[TaskSpec]
    """The accepted tasks, sorted by id; empty when a store was given (they are there)."""
    rejected: list[RejectedTask]
    """The refused proposals; empty when a store was given (they are there)."""
    plan: GenerationPlan
    """The plan as filled: quotas of cells whose templates ran out moved, with reasons."""
    recollect: tuple[Recollection, ...]
    """The plan's replays and preservation set, resolved to the stored tasks."""
    repair_sets: dict[FailureType, tuple[str, ...]]
    """Ids of the accepted tasks of each repair set."""


class Accepted(NamedTuple):
    """An accepted task as construction holds it: what the later passes read of it (id,
    fingerprint, the quota slot it fills) and, until it is stored, its spec as compressed
    canonical JSON (a fortieth of the memory of the spec object). With a store, a
    batch's tasks are stored as the batch is filed and keep no spec after."""

    id: str
    fingerprint: str
    slot: Slot
    spec: bytes | None
    sketch: GoalSketch | None = None
    """What it asks, as near-duplicate detection keeps it, stored with it
    (``TaskSink.add_goal_sketches``)."""

    @classmethod
    def of(cls, task: TaskSpec, slot: Slot, sketch: GoalSketch | None = None) -> Accepted:
        spec = zlib.compress(task.to_json(), 1)
        return cls(task.id, task.fingerprint, slot, spec, sketch)

    def task(self) -> TaskSpec:
        """The spec again (its id is not recomputed: it was written from the spec)."""
        return TaskSpec.model_validate_json(self.serialized(), context={TRUSTED_IDS: True})

    def serialized(self) -> bytes:
        """The spec as ``TaskSpec.to_json`` wrote it."""
        if self.spec is None:
            raise ValueError(f"{self.id} was stored: read it from the store")
        return zlib.decompress(self.spec)

    def stored(self) -> Accepted:
        """This task without its spec and sketch, which the store now holds."""
        return self._replace(spec=None, sketch=None)


Twin = tuple[str | None, float]
"""A near-duplicate's key and its Jaccard similarity; (None, 0.0): none."""


@dataclass(frozen=True)
class Asked:
    """What a task asks, for near-duplicate detection: its id, sketch and shingle set."""

    task_id: str
    sketch: Sketch
    shingles: frozenset[str]

    @functools.cached_property
    def kept(self) -> GoalSketch:
        """As the catalog keeps it: hashed once, for its query or its filing."""
        return goal_sketch(self.sketch, self.shingles)


class KnownGoals(Protocol):
    """What the tasks constructed so far ask (``what_it_asks``): those of other rounds and
    the ones this construction accepted in its earlier batches. Asked for near-duplicates
    of a batch of proposals at once; told of each batch's accepted tasks."""

    def twins(self, proposals: Sequence[Asked]) -> list[Twin]:
        """Per proposal: the most similar known goal at or above the threshold, that of
        the task with the same id aside."""
        ...

    def remember(self, accepted: Sequence[Asked]) -> None:
        """Know the goals of a batch's accepted tasks from now on."""
        ...


class GoalsInMemory:
    """Known goals given as texts (keys ``known-<i>``) and the goals accepted since, in an
    index of their own: for a construction without a catalog."""

    def __init__(self, goals: Sequence[str], threshold: float = GOAL_NEAR_DUPLICATE) -> None:
        self._index = NearDuplicateIndex(threshold=threshold)
        self._index.add_many([(f"known-{i}", text) for i, text in enumerate(goals)])

    def twins(self, proposals: Sequence[Asked]) -> list[Twin]:
        return [self._index.match_sketch(a.sketch, a.shingles) for a in proposals]

    def remember(self, accepted: Sequence[Asked]) -> None:
        for asked in accepted:
            self._index.add_sketch(asked.task_id, asked.sketch, asked.shingles)


class GoalStore(Protocol):
    """Where the goal digests of stored tasks are kept (``storage.TaskStore``)."""

    def goal_twins(
        self, queries: Sequence[tuple[str, GoalSketch]], bands: int, threshold: float
    ) -> list[Twin]: ...


class GoalsInCatalog:
    """Known goals as the catalog keeps their sketches (``GoalSketch``): one query per
    batch finds each proposal's twin among the stored tasks, as an index of them would
    (rensa's LSH candidates, confirmed on the shingles), so the construction holds no
    sketch of a stored task. Ties go to the first by task id. The construction's own
    accepted tasks are known once their batch is filed with their digests
    (``TaskSink.add_goal_sketches``, to the same catalog), so nothing is remembered here,
    and a construction run again meets its stored tasks only as themselves."""

    def __init__(self, store: GoalStore, threshold: float = GOAL_NEAR_DUPLICATE) -> None:
        self._store = store
        self._threshold = threshold

    def twins(self, proposals: Sequence[Asked]) -> list[Twin]:
        queries = [(asked.task_id, asked.kept) for asked in proposals]
        if not queries:
            return []
        bands, _ = lsh_bands(len(queries[0][1].digest), self._threshold)
        return self._store.goal_twins(queries, bands, self._threshold)

    def remember(self, accepted: Sequence[Asked]) -> None:
        return None


class ConstructorState(TypedDict, total=False):
    round_id: str
    seed: int
    plan: GenerationPlan
    known_fingerprints: frozenset[str]
    """Tasks constructed before this round: proposing one again is a duplicate."""
    dev_fingerprints: frozenset[str]
    known_goals: KnownGoals
    """``what_it_asks`` of the tasks constructed so far, asked per batch."""
    passes: int
    stalls: dict[Slot, int]
    """Consecutive passes in which a cell or repair set accepted nothing."""
    have_before: dict[Slot, int]
    proposed: dict[Slot, int]
    exhausted: frozenset[Slot]
    """Cells and repair sets whose templates yield no new tasks: their quota moved."""
    picks: list[Pick]
    """The pass's draws not built yet (``PROPOSAL_BATCH`` are built at a time)."""
    taken: dict[str, tuple[RejectionReason, str]]
    """Fingerprints the pass's draws must not have (``_taken``), and those it proposed."""
    llm_down: LLMFailure | None
    """The LLM endpoint's failure in this pass: its later batches do not ask it."""
    proposals: list[Proposal]
    accepted: list[Accepted]
    repair_of: dict[str, FailureType]
    """Accepted tasks (by id) that fill a repair set, and which."""
    rejected: list[RejectedTask]


class ConstructorNode(Protocol):
    """A node: ``State -> partial State``."""

    def __call__(self, state: ConstructorState) -> ConstructorState: ...


def cell_of(task: TaskSpec) -> Cell:
    return (task.capabilities[0], task.difficulty)


def slot_of(task: TaskSpec, repair_of: Mapping[str, FailureType]) -> Slot:
    return repair_of.get(task.id) or cell_of(task)


def _filled(accepted: Sequence[Accepted]) -> Counter[Slot]:
    return Counter(a.slot for a in accepted)


def shortfall(plan: GenerationPlan, accepted: Sequence[Accepted]) -> dict[Slot, int]:
    """Tasks still missing per quota cell and per repair set (cells first)."""
    have = _filled(accepted)
    missing: dict[Slot, int] = {
        (q.capability, q.difficulty): q.count - have[(q.capability, q.difficulty)]
        for q in plan.quotas
    }
    missing.update({r.failure_type: r.count - have[r.failure_type] for r in plan.repairs})
    return {slot: n for slot, n in missing.items() if n > 0}


def _slot_key(slot: Slot) -> tuple[int, str, str]:
    """Cells in their natural order, then repair sets."""
    if isinstance(slot, tuple):
        return (0, slot[0].value, slot[1].value)
    return (1, slot.value, "")


def templates_for(cell: Cell) -> list[TaskTemplate]:
    """Train templates whose primary capability and difficulty make the cell."""
    capability, difficulty = cell
    return [
        t
        for t in ALL_TEMPLATES
        if t.split is Split.TRAIN and t.capabilities[0] is capability and t.difficulty is difficulty
    ]


def templates_with(failure_type: FailureType) -> list[TaskTemplate]:
    """Train templates that exhibit the pattern of ``failure_type``'s repair set."""
    pattern = REPAIR_PATTERN[failure_type]
    return [t for t in ALL_TEMPLATES if t.split is Split.TRAIN and pattern in t.patterns]


def templates_of(slot: Slot) -> list[TaskTemplate]:
    return templates_for(slot) if isinstance(slot, tuple) else templates_with(slot)


def goal_sketch(sketch: Sketch, shingles: Iterable[str]) -> GoalSketch:
    """What a task asks as the catalog keeps it."""
    return GoalSketch(tuple(sketch.digest()), shingle_hashes(shingles))


def what_it_asks(task: TaskSpec) -> str:
    """The text near-duplicates are judged on: the goal and what its verifier checks.

    Memory tasks share a goal ("run my bedtime routine") and differ in what is checked,
    so the goal alone would call different tasks duplicates.
    """
    return " ".join([task.goal, *(check.describe() for check in task.verifier.checks)])


# -- nodes ---------------------------------------------------------------------------------


def make_propose(sandbox: MobileSandbox, llm: JsonLLM | None) -> ConstructorNode:
    def propose(state: ConstructorState) -> ConstructorState:
        """Build the next ``PROPOSAL_BATCH`` of the pass's draws into proposals (and,
        with an LLM, reword their goals); with none left, start a pass by drawing one
        proposal per missing task of every unfilled cell and repair set."""
        update: ConstructorState = {}
        picks = state.get("picks") or []
        if picks:
            taken, down = state["taken"], state.get("llm_down")
        else:
            picks, proposed = draw_pass(state)
            taken, down = _taken(state), None
            update = {"passes": state.get("passes", 0) + 1, "proposed": proposed}
        proposals: list[Proposal] = []
        for pick in picks[:PROPOSAL_BATCH]:
            cell = pick.slot if isinstance(pick.slot, tuple) else None
            repair = pick.slot if not isinstance(pick.slot, tuple) else None
            proposal = _propose(
                cell, repair, pick.template, pick.seed, pick.variant, sandbox, taken
            )
            if proposal.task is not None:
                taken.setdefault(proposal.task.fingerprint, _PROPOSED)
            proposals.append(proposal)
        if llm is not None:
            proposals, down = reword_all(proposals, llm, down)
        return {
            **update,
            "proposals": proposals,
            "picks": picks[PROPOSAL_BATCH:],
            "taken": taken,
            "llm_down": down,
        }

    return propose


def draw_pass(state: ConstructorState) -> tuple[list[Pick], dict[Slot, int]]:
    """A pass's draws, slot by slot from the seed (templates by the plan's template
    weights, 1 when unlisted), and how many each slot got. Nothing is built: whether a
    draw is taken is known only once it is (``_propose``)."""
    passes = state.get("passes", 0)
    worlds = world_seeds(state["seed"])
    plan = state["plan"]
    weights = {w.template: w.weight for w in plan.template_weights}
    missing_by_slot = shortfall(plan, state.get("accepted", []))
    picks: list[Pick] = []
    proposed: dict[Slot, int] = {}
    for slot in sorted(missing_by_slot, key=_slot_key):
        missing = missing_by_slot[slot]
        pool = templates_of(slot)
        if not pool:
            continue
        if isinstance(slot, tuple):
            rng = random.Random(f"{state['seed']}:{passes}:{slot[0]}:{slot[1]}")
        else:
            rng = random.Random(f"{state['seed']}:{passes}:repair:{slot}")
        pool_weights = [weights.get(t.name, 1.0) for t in pool]
        # Later passes over-propose: what is left is the hard part of the cell.
        count = missing if passes == 0 else 2 * missing + 2
        for _ in range(count):
            if all(w == 1.0 for w in pool_weights):
                template = rng.choice(pool)
            else:
                template = rng.choices(pool, weights=pool_weights)[0]
            seed = worlds[rng.randrange(len(worlds))]
            picks.append(Pick(slot, template, seed, rng.randrange(2**31)))
        proposed[slot] = count
    return picks, proposed


def world_seeds(seed: int) -> list[int]:
    """The seeded worlds a round's tasks live in: few enough to stay in the sandbox's
    world cache, while parameter variants keep the tasks diverse."""
    rng = random.Random(f"worlds:{seed}")
    return [rng.randrange(2**31) for _ in range(WORLDS_PER_ROUND)]


_KNOWN = (RejectionReason.DUPLICATE, "a task with this fingerprint already exists")
_ACCEPTED = (RejectionReason.DUPLICATE, "a task with this fingerprint was just accepted")
_PROPOSED = (RejectionReason.DUPLICATE, "a task with this fingerprint was proposed in this pass")
_DEVELOPMENT = (RejectionReason.DEVELOPMENT_TASK, "its fingerprint is held out for development")


def _taken(state: ConstructorState) -> dict[str, tuple[RejectionReason, str]]:
    """Fingerprints a draw must not have, each with the reason it would be rejected."""
    taken = dict.fromkeys(state.get("known_fingerprints", frozenset()), _KNOWN)
    taken.update(dict.fromkeys((t.fingerprint for t in state.get("accepted", [])), _ACCEPTED))
    taken.update(dict.fromkeys(state.get("dev_fingerprints", frozenset()), _DEVELOPMENT))
    return taken


def _propose(
    cell: Cell | None,
    repair: FailureType | None,
    template: TaskTemplate,
    seed: int,
    variant: int,
    sb: MobileSandbox,
    taken: Mapping[str, tuple[RejectionReason, str]],
) -> Proposal:
    """Draw parameters; build the task only when the draw is new and not held out (the
    costly part: tools recalled, reference plan rehearsed). A repair task is stored with
    source ``repair`` in its template's cell."""
    home = cell if cell is not None else (template.capabilities[0], template.difficulty)
    try:
        drawn = draw(template, seed, sb, variant=variant)
        why = _DEVELOPMENT if drawn.split is Split.DEV else taken.get(drawn.fingerprint)
        if why is not None:
            repeat = Repeat(drawn.fingerprint, drawn.draft.goal, *why)
            return Proposal(home, template.name, None, why[1], repair=repair, repeat=repeat)
        task = build(drawn, sb)
    except FlywheelError as exc:
        return Proposal(home, template.name, None, str(exc), repair=repair)
    if repair is not None:
        update = {"source": TaskSource.REPAIR}
        task = TaskSpec.model_validate(task.model_dump(exclude={"id"}) | update)
    return Proposal(home, template.name, task, repair=repair)


REWORD_SYSTEM = (
    "You rewrite requests that a phone user gives an assistant. Keep every name, number, "
    "date, time and quoted text exactly; change only the wording. Answer with JSON: "
    '{"goal": "<the rewritten request>"}'
)


def reword(proposal: Proposal, llm: JsonLLM) -> Proposal | LLMFailure:
    """The proposal with the LLM's wording of its goal, or why the LLM gave none that
    keeps what the task needs (its names, numbers and quoted text)."""
    task = proposal.task
    if task is None:
        return proposal
    answer = consult(llm, REWORD_SYSTEM, task.goal)
    if isinstance(answer, LLMFailure):
        return answer
    goal = answer.get("goal")
    if not isinstance(goal, str):
        return LLMFailure("the answer has no goal string", endpoint=False)
    lost = [token for token in _literals(task.goal) if token not in goal]
    if lost:
        return LLMFailure(f"the wording lost {lost[:3]}", endpoint=False)
    # A repair task stays one: the wording changes, not why the task was made.
    source = TaskSource.REPAIR if task.source is TaskSource.REPAIR else TaskSource.LLM
    reworded = TaskSpec.model_validate(
        task.model_dump(exclude={"id"}) | {"goal": goal, "source": source}
    )
    return replace(proposal, task=reworded)


class Rewording(NamedTuple):
    """Proposals after rewording, and the endpoint's failure if it went down (the rest of
    the pass then asks it nothing)."""

    proposals: list[Proposal]
    down: LLMFailure | None


def reword_all(
    proposals: Sequence[Proposal], llm: JsonLLM, down: LLMFailure | None = None
) -> Rewording:
    """Every built proposal in the LLM's wording where it gave a usable one; the others
    keep their template wording (the deterministic path: rewording is optional). Once the
    endpoint has failed, its retries spent (here or, ``down``, for an earlier batch of
    the pass), the rest of the pass keeps template wording without asking it again."""
    out: list[Proposal] = []
    kept: Counter[str] = Counter()
    for proposal in proposals:
        if proposal.task is None:
            out.append(proposal)
            continue
        result = reword(proposal, llm) if down is None else down
        if isinstance(result, LLMFailure):
            down = result if result.endpoint else None
            kept[result.reason] += 1
            result = proposal
        out.append(result)
    if kept:
        reason, _ = kept.most_common(1)[0]
        log.warning(
            "LLM rewording: %d of %d proposal(s) keep their template wording (%s)",
            sum(kept.values()),
            len(proposals),
            reason,
        )
    return Rewording(out, down)


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
        batch, their twins among the known goals found at once, then each is checked
        against the batch's accepted goals and replayed, one by one; a repair task must
        also exhibit its repair set's pattern. The accepted goals become known.
        """
        accepted = list(state.get("accepted", []))
        repair_of = dict(state.get("repair_of", {}))
        rejected = list(state.get("rejected", []))
        goals = state.get("known_goals") or GoalsInMemory([], threshold)
        # This batch's accepted goals; the known goals are asked for all at once.
        batch = NearDuplicateIndex(threshold=threshold)
        accepted_goals: list[Asked] = []
        known = state.get("known_fingerprints", frozenset())
        dev = state.get("dev_fingerprints", frozenset())
        survivors: list[tuple[Proposal, TaskSpec]] = []
        for proposal in state.get("proposals", []):
            reason, detail = _cheap_check(proposal, known, dev)
            if reason is not None or proposal.task is None:
                rejected.append(_rejection(state["round_id"], proposal, reason, detail))
            else:
                survivors.append((proposal, proposal.task))
        shingled = [word_shingles(what_it_asks(t)) for _, t in survivors]
        asked = [
            Asked(task.id, sketch, frozenset(shingles))
            for (_, task), sketch, shingles in zip(
                survivors, batch.hasher.sketches(shingled), shingled, strict=True
            )
        ]
        known_twins = goals.twins(asked)
        missing = shortfall(state["plan"], accepted)
        seen = {t.fingerprint for t in accepted}
        for (proposal, task), mine, twin in zip(survivors, asked, known_twins, strict=True):
            if missing.get(proposal.slot, 0) <= 0:
                continue  # the cell filled up within this pass: not a rejection
            reason, detail = _costly_check(task, seen, batch, mine, twin, sandbox)
            if reason is None and proposal.repair is not None:
                reason, detail = _pattern_check(task, proposal.repair, sandbox)
            if reason is not None:
                rejected.append(_rejection(state["round_id"], proposal, reason, detail))
                continue
            missing[proposal.slot] -= 1
            if proposal.repair is not None:
                repair_of[task.id] = proposal.repair
            accepted.append(Accepted.of(task, slot_of(task, repair_of), mine.kept))
            seen.add(task.fingerprint)
            batch.add_sketch(task.id, mine.sketch, mine.shingles)
            accepted_goals.append(mine)
        goals.remember(accepted_goals)
        return {
            "accepted": accepted,
            "repair_of": repair_of,
            "rejected": rejected,
            "proposals": [],
            "known_goals": goals,
        }

    return validate


def _cheap_check(
    proposal: Proposal, known: frozenset[str], dev: frozenset[str]
) -> tuple[RejectionReason | None, str]:
    task = proposal.task
    if proposal.repeat is not None:
        return proposal.repeat.reason, proposal.repeat.detail
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
    batch: NearDuplicateIndex,
    asked: Asked,
    known: Twin,
    sandbox: MobileSandbox,
) -> tuple[RejectionReason | None, str]:
    if task.fingerprint in seen:
        return RejectionReason.DUPLICATE, "a task with this fingerprint was just accepted"
    ours = batch.match_sketch(asked.sketch, asked.shingles)
    twin = known[0] if known[0] is not None and known[1] >= ours[1] else ours[0]
    if twin is not None:
        return RejectionReason.NEAR_DUPLICATE, f"it nearly repeats {twin} (goal and checks)"
    verdict = replay_reference(task, sandbox)
    if not verdict.passed:
        unmet = [c.description for c in verdict.checks if not c.met]
        return RejectionReason.REFERENCE_FAILS, "reference plan misses: " + "; ".join(unmet[:3])
    return None, ""


def _pattern_check(
    task: TaskSpec, failure_type: FailureType, sandbox: MobileSandbox
) -> tuple[RejectionReason | None, str]:
    pattern = REPAIR_PATTERN[failure_type]
    if exhibits(task, pattern, sandbox):
        return None, ""
    return (
        RejectionReason.INVALID,
        f"proposed for the {failure_type.value} repair set, but its reference run does not "
        f"show the {pattern.value} pattern",
    )


def _rejection(
    round_id: str, proposal: Proposal, reason: RejectionReason | None, detail: str
) -> RejectedTask:
    task, repeat = proposal.task, proposal.repeat
    return RejectedTask(
        round_id=round_id,
        fingerprint=task.fingerprint if task else repeat.fingerprint if repeat else None,
        template=proposal.template,
        reason=reason or RejectionReason.INVALID,
        detail=detail,
        goal=task.goal if task else repeat.goal if repeat else None,
    )


def replan(state: ConstructorState) -> ConstructorState:
    """Move the quota of cells whose templates are used up to the other cells of the same
    difficulty (in proportion to their templates), and that of used-up repair sets to
    the open cells, saying so in the quotas' reasons."""
    plan, accepted = state["plan"], state.get("accepted", [])
    have = _filled(accepted)
    before = state.get("have_before", {})
    proposed = state.get("proposed", {})
    stalls = dict(state.get("stalls", {}))
    exhausted = set(state.get("exhausted", frozenset()))
    missing = shortfall(plan, accepted)
    for slot in missing:
        gained = have[slot] - before.get(slot, 0)
        stalled = gained < max(1.0, MIN_YIELD * proposed.get(slot, 0))
        stalls[slot] = stalls.get(slot, 0) + 1 if stalled else 0
    newly = {s for s in missing if stalls[s] >= EXHAUSTED_AFTER and s not in exhausted}
    update: ConstructorState = {"stalls": stalls, "have_before": dict(have)}
    if not newly:
        return update
    exhausted |= newly
    counts = {(q.capability, q.difficulty): q.count for q in plan.quotas}
    reasons = {(q.capability, q.difficulty): q.reason for q in plan.quotas}
    repairs = {r.failure_type: r for r in plan.repairs}
    for slot in sorted(newly, key=_slot_key):
        spare = missing[slot]
        open_cells = [c for c in counts if c not in exhausted and templates_for(c)]
        if isinstance(slot, tuple):
            counts[slot] -= spare
            reasons[slot] += f"; {spare} fewer: its templates are used up"
            takers = [c for c in open_cells if c[1] == slot[1]] or open_cells
            source = f"{slot[0]}/{slot[1]}"
        else:
            held = repairs[slot]
            repairs[slot] = held.model_copy(
                update={
                    "count": held.count - spare,
                    "reason": f"{held.reason}; {spare} fewer: its templates are used up",
                }
            )
            takers = open_cells
            source = f"the {slot} repair set"
        for taker, extra in apportion(spare, {c: len(templates_for(c)) for c in takers}).items():
            counts[taker] += extra
            reasons[taker] += f"; +{extra} from {source}"
    quotas = tuple(
        Quota(capability=c, difficulty=d, count=n, reason=reasons[(c, d)])
        for (c, d), n in counts.items()
    )
    plan = GenerationPlan(
        quotas=quotas,
        source=plan.source,
        repairs=tuple(repairs.values()),
        replays=plan.replays,
        preserve=plan.preserve,
        recurate=plan.recurate,
        template_weights=plan.template_weights,
    )
    return {**update, "plan": plan, "exhausted": frozenset(exhausted)}


def make_file_batch(store: TaskSink | None) -> ConstructorNode:
    def file_batch(state: ConstructorState) -> ConstructorState:
        """Store the batch's rejections, then its accepted tasks ``RECORD_BATCH`` to a
        write, and let their specs go (idempotent by id: a construction stopped half-way
        leaves some stored, and running it again constructs the same tasks, since its own
        stored tasks are known only as themselves: not by fingerprint, which it compares
        with other rounds' tasks, and not as a goal's twin; it adds the rest). Their goal
        digests follow, which the next batches' ``GoalsInCatalog`` asks. Without a store
        the specs stay: they are the construction's result."""
        if store is None:
            return {}
        store.add_rejections(state.get("rejected", []))
        accepted = state.get("accepted", [])
        unstored = (a.serialized() for a in accepted if a.spec is not None)
        for batch in chunked(unstored, RECORD_BATCH):
            store.add_serialized(state["round_id"], batch)
        store.add_goal_sketches({a.id: a.sketch for a in accepted if a.spec and a.sketch})
        return {"rejected": [], "accepted": [a if a.spec is None else a.stored() for a in accepted]}

    return file_batch


def rest_of_pass(state: ConstructorState) -> str:
    """Build the pass's next draws, or, with none left, replan."""
    return "propose" if state.get("picks") else "replan"


def build_task_constructor_graph(
    sandbox: MobileSandbox,
    *,
    store: TaskSink | None = None,
    llm: JsonLLM | None = None,
    max_passes: int = 12,
    near_duplicate_threshold: float = GOAL_NEAR_DUPLICATE,
) -> CompiledStateGraph[ConstructorState, None, ConstructorState, ConstructorState]:
    """The task-constructor; ``sandbox`` replays reference plans, ``store`` keeps results."""

    def more_needed(state: ConstructorState) -> str:
        open_slots = set(shortfall(state["plan"], state.get("accepted", [])))
        open_slots -= state.get("exhausted", frozenset())
        done = not open_slots or state.get("passes", 0) >= max_passes
        return END if done else "propose"

    graph = StateGraph(ConstructorState)
    graph.add_node("propose", make_propose(sandbox, llm))
    graph.add_node("validate", make_validate(sandbox, near_duplicate_threshold))
    graph.add_node("file_batch", make_file_batch(store))
    graph.add_node("replan", replan)
    graph.add_edge(START, "propose")
    graph.add_edge("propose", "validate")
    graph.add_edge("validate", "file_batch")
    graph.add_conditional_edges("file_batch", rest_of_pass, ["propose", "replan"])
    graph.add_conditional_edges("replan", more_needed, ["propose", END])
    return graph.compile(name="task-constructor")


def construct_tasks(
    round_id: str,
    plan: GenerationPlan,
    seed: int,
    sandbox: MobileSandbox,
    *,
    store: TaskSink | None = None,
    llm: JsonLLM | None = None,
    known_fingerprints: frozenset[str] = frozenset(),
    dev_fingerprints: frozenset[str] = frozenset(),
    known_goals: Sequence[str] | KnownGoals = (),
    stored_tasks: Sequence[TaskSpec] = (),
    max_passes: int = 12,
) -> Construction:
    """Run the graph once. Without a ``store`` the accepted tasks and the rejections
    come back; with one they are stored batch by batch as they are decided, and the
    construction keeps of a stored task only its id, fingerprint and slot, so its memory
    stays small for a large plan.

    ``stored_tasks``: the catalog's tasks the plan's replays and preservation set name;
    they come back in ``recollect``. A development task among them (by split or in
    ``dev_fingerprints``), or a fingerprint no stored task has, is refused with an
    ``InvalidInputError`` naming it, before anything is built or stored.
    """
    recollect = resolve_recollection(plan, stored_tasks, dev_fingerprints)
    graph = build_task_constructor_graph(sandbox, store=store, llm=llm, max_passes=max_passes)
    final = graph.invoke(
        {
            "round_id": round_id,
            "seed": seed,
            "plan": plan,
            "known_fingerprints": known_fingerprints,
            "dev_fingerprints": dev_fingerprints,
            "known_goals": (
                GoalsInMemory(known_goals) if isinstance(known_goals, Sequence) else known_goals
            ),
            "passes": 0,
            "picks": [],
            "accepted": [],
            "repair_of": {},
            "rejected": [],
        },
        {"recursion_limit": step_limit(plan, max_passes)},
    )
    repair_of = final.get("repair_of", {})
    return Construction(
        tasks=(
            [a.task() for a in sorted(final.get("accepted", []), key=lambda a: a.id)]
            if store is None
            else []
        ),
        rejected=final.get("rejected", []),
        plan=final["plan"],
        recollect=recollect,
        repair_sets={
            r.failure_type: tuple(sorted(i for i, f in repair_of.items() if f is r.failure_type))
            for r in plan.repairs
        },
    )


def step_limit(plan: GenerationPlan, max_passes: int) -> int:
    """The graph steps a construction of ``plan`` can take: a pass draws at most twice
    the plan's tasks plus two per slot (quotas move between slots, never grow in
    total), built ``PROPOSAL_BATCH`` at a time, three steps each, and its replan."""
    slots = len(plan.quotas) + len(plan.repairs)
    total = sum(q.count for q in plan.quotas) + sum(r.count for r in plan.repairs)
    batches = -(-(2 * total + 2 * slots) // PROPOSAL_BATCH)
    return max_passes * (3 * max(batches, 1) + 1) + 8


def resolve_recollection(
    plan: GenerationPlan, stored_tasks: Sequence[TaskSpec], dev_fingerprints: frozenset[str]
) -> tuple[Recollection, ...]:
    """The plan's replays and preservation set as stored tasks to collect again.

    Development tasks are never re-collected for training: one in the plan is refused
    loudly, naming its fingerprint, as is a fingerprint no stored task has.
    """
    by_fingerprint: dict[str, TaskSpec] = {}
    for task in sorted(stored_tasks, key=lambda t: t.id):
        held = by_fingerprint.get(task.fingerprint)
        if held is None or task.split is Split.DEV:
            by_fingerprint[task.fingerprint] = task
    entries: list[tuple[Literal["replay", "preserve"], Replay]] = [
        *(("replay", r) for r in plan.replays),
        *(("preserve", r) for r in plan.preserve),
    ]
    out: list[Recollection] = []
    for kind, entry in entries:
        field = "plan.replays" if kind == "replay" else "plan.preserve"
        stored = by_fingerprint.get(entry.fingerprint)
        if entry.fingerprint in dev_fingerprints or (
            stored is not None and stored.split is Split.DEV
        ):
            raise InvalidInputError(
                field,
                f"{entry.fingerprint} is a development task: it is never collected for training",
            )
        if stored is None:
            raise InvalidInputError(field, f"{entry.fingerprint} is not a stored task")
        out.append(Recollection(stored, entry.attempts, kind, entry.reason))
    return tuple(out)
