"""The curator agent: a LangGraph ``StateGraph`` from the facts of collected trajectories
to curation records.

``normalize -> deduplicate -> check_support -> [judge] -> score -> route``. Every node is
a plain function ``State -> partial State``; the ones that need the curator's settings or
the LLM are wrapped in closures by :func:`build_curator_graph`.

The graph reads :class:`curation.facts.TrajectoryFacts`, which a round's curate stage
builds from the catalog's columns without rebuilding any record; :func:`curate` takes
``Trajectory`` objects in memory. Trajectories are never rewritten (their ids are content
hashes the catalog refers to). A failure's attribution is the one its episode stored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypedDict

import orjson
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from pydantic import JsonValue

from agents.llm import JsonLLM, LLMFailure, consult
from contract import (
    CurationRecord,
    DropReason,
    Outcome,
    ReviewDecision,
    Routing,
    RubricCheck,
    Step,
    Trajectory,
    canonical_json,
)
from curation.dedup import find_duplicates
from curation.facts import TrajectoryFacts, facts_of
from curation.quality import quality_score
from curation.routing import CuratorConfig, is_conflict
from curation.routing import route as route_trajectory
from curation.support import check_support as support_of

RESULT_CHARS = 160
"""How much of a tool result the judge sees per step."""


@dataclass(frozen=True)
class Drop:
    """Why a trajectory is not curated further (it stays in the catalog as evidence)."""

    reason: DropReason
    detail: str
    duplicate_of: str | None = None


class CuratorState(TypedDict, total=False):
    """The curator's state; every node fills some fields, all keyed by trajectory id."""

    round_id: str
    trajectories: list[TrajectoryFacts]
    prompts: dict[str, str]
    """What the LLM judge is shown of each trajectory (``render_for_judge``), by id."""
    drops: dict[str, Drop]
    support: dict[str, tuple[bool, str]]
    judge: dict[str, JsonValue]
    quality: dict[str, float]
    records: list[CurationRecord]


class Node(Protocol):
    """A curator node: ``State -> partial State``."""

    def __call__(self, state: CuratorState) -> CuratorState: ...


# -- nodes ----------------------------------------------------------------------------


def normalize(state: CuratorState) -> CuratorState:
    """Sort by id (one entry per id) and drop malformed trajectories and backend errors."""
    unique = sorted({t.id: t for t in state["trajectories"]}.values(), key=lambda t: t.id)
    drops: dict[str, Drop] = {}
    for t in unique:
        problem = malformation(t)
        if problem is not None:
            drops[t.id] = Drop(DropReason.MALFORMED, f"malformed: {problem}")
        elif t.outcome is Outcome.BACKEND_ERROR:
            detail = "backend error: kept as evidence, never training data"
            drops[t.id] = Drop(DropReason.BACKEND_ERROR, detail)
    return {"trajectories": unique, "drops": drops}


def malformation(trajectory: Trajectory | TrajectoryFacts) -> str | None:
    """What makes a trajectory unusable as a record, or None."""
    facts = facts_of(trajectory)
    steps = facts.steps
    if not steps:
        return "no steps"
    if [s.index for s in steps] != list(range(len(steps))):
        return "step indices are not 0..n-1"
    if not facts.verifier:
        return "the task has an empty verifier"
    if len(facts.checks) != len(facts.verifier):
        return "the verdict does not match the task's verifier"
    if facts.cost_steps != len(steps):
        return f"cost counts {facts.cost_steps} steps, the record has {len(steps)}"
    return None


def deduplicate(state: CuratorState, settings: CuratorConfig) -> CuratorState:
    """Drop exact and near-duplicates of a kept trajectory (``curation.dedup``)."""
    drops = dict(state.get("drops", {}))
    candidates = [t for t in state["trajectories"] if t.id not in drops]
    found = find_duplicates(
        candidates, threshold=settings.near_duplicate_threshold, num_perm=settings.num_perm
    )
    for tid, dup in found.items():
        what = "exact duplicate" if dup.reason is DropReason.DUPLICATE else "near-duplicate"
        detail = f"{what} of {dup.of} (similarity {dup.similarity:.2f})"
        drops[tid] = Drop(dup.reason, detail, duplicate_of=dup.of)
    return {"drops": drops}


def check_support(state: CuratorState) -> CuratorState:
    """Whether each outcome is backed by the verifier's evidence (not for malformed ones)."""
    return {"support": {t.id: support_of(t) for t in _evaluable(state)}}


def judge(state: CuratorState, llm: JsonLLM) -> CuratorState:
    """Ask the LLM about each kept trajectory that rules alone do not settle, showing it
    the trajectory's prompt (one without a prompt is not judged). Once the endpoint has
    failed, its retries spent, the rest are recorded with that error without asking."""
    drops = state.get("drops", {})
    supported = state.get("support", {})
    prompts = state.get("prompts", {})
    answers: dict[str, JsonValue] = {}
    down: LLMFailure | None = None
    for t in state["trajectories"]:
        if t.id in drops or t.id not in prompts:
            continue
        if needs_judge(t, supported.get(t.id, (False, ""))[0]):
            answer = judgement(llm, prompts[t.id]) if down is None else down
            if isinstance(answer, LLMFailure):
                down = answer if answer.endpoint else None
                answer = {"error": answer.reason[:300]}
            answers[t.id] = answer
    return {"judge": answers}


def needs_judge(trajectory: Trajectory | TrajectoryFacts, supported: bool) -> bool:
    """Everything but a failure the verifier agrees with, unless rubric checks need eyes:
    a judge is worth asking where it could catch a verifier's false positive."""
    facts = facts_of(trajectory)
    if facts.has_rubric or facts.outcome is Outcome.SUCCESS:
        return True
    return is_conflict(facts, supported)


def score(state: CuratorState) -> CuratorState:
    """Quality in [0, 1] of each evaluable trajectory (``curation.quality``)."""
    return {"quality": {t.id: quality_score(t) for t in _evaluable(state)}}


def route(state: CuratorState, settings: CuratorConfig) -> CuratorState:
    """One record per trajectory, in id order; dropped ones are rejected automatically."""
    return {"records": [_record(state, t, settings) for t in state["trajectories"]]}


def _record(state: CuratorState, t: TrajectoryFacts, settings: CuratorConfig) -> CurationRecord:
    drop = state.get("drops", {}).get(t.id)
    supported, detail = state.get("support", {}).get(t.id, (False, ""))
    malformed = drop is not None and drop.reason is DropReason.MALFORMED
    attribution = None if malformed else t.attribution
    quality = state.get("quality", {}).get(t.id, 0.0)
    answer = state.get("judge", {}).get(t.id)
    if drop is not None:
        routing, suggested, reason = Routing.AUTO_REJECT, ReviewDecision.REJECT, drop.detail
    else:
        routing, suggested, reason = route_trajectory(
            t, supported, quality, settings, answer, support_detail=detail, attribution=attribution
        )
    return CurationRecord(
        trajectory_id=t.id,
        task_id=t.task_id,
        round_id=state["round_id"],
        kept=drop is None,
        drop_reason=drop.reason if drop else None,
        duplicate_of=drop.duplicate_of if drop else None,
        supported=supported,
        support_detail=detail or (drop.detail if drop else ""),
        failure_attribution=attribution,
        quality=quality,
        routing=routing,
        suggested=suggested,
        reason=reason,
        judge=answer,
    )


def _evaluable(state: CuratorState) -> list[TrajectoryFacts]:
    drops = state.get("drops", {})
    return [
        t
        for t in state["trajectories"]
        if t.id not in drops or drops[t.id].reason is not DropReason.MALFORMED
    ]


# -- the LLM judge ----------------------------------------------------------------------

JUDGE_SYSTEM = (
    "You check whether a phone assistant did what its user asked. You get the user's goal, "
    "any rubric, and the steps: each action with what the phone answered. Judge from the "
    "steps alone. Reply with one JSON object and nothing else: "
    '{"passed": true or false, "confidence": a number from 0 to 1, "reason": "one '
    'sentence"}. "passed" means the goal was fully achieved, with no unwanted side effect; '
    '"confidence" is how sure you are of that verdict.'
)


def ask_judge(llm: JsonLLM, prompt: str) -> JsonValue:
    """``{"passed": bool, "reason": str}`` (and ``"confidence"`` when it gave one) about
    the trajectory ``prompt`` shows (``render_for_judge``), or ``{"error": ...}`` when
    the LLM gave no usable answer (a judge never stops curation)."""
    answer = judgement(llm, prompt)
    return {"error": answer.reason[:300]} if isinstance(answer, LLMFailure) else answer


def judgement(llm: JsonLLM, prompt: str) -> JsonValue | LLMFailure:
    """``{"passed": bool, "reason": str}`` with its ``"confidence"`` when it gave a
    number, or why the LLM gave no such answer."""
    answer = consult(llm, JUDGE_SYSTEM, prompt)
    if isinstance(answer, LLMFailure):
        return answer
    passed, reason = answer.get("passed"), answer.get("reason", "")
    if not isinstance(passed, bool):
        shown = orjson.dumps(answer).decode()[:200]
        return LLMFailure(f"no boolean 'passed' in {shown}", endpoint=False)
    verdict: dict[str, JsonValue] = {
        "passed": passed,
        "reason": reason if isinstance(reason, str) else str(reason),
    }
    confidence = answer.get("confidence")
    if isinstance(confidence, int | float) and not isinstance(confidence, bool):
        verdict["confidence"] = confidence
    return verdict


def render_for_judge(trajectory: Trajectory) -> str:
    """The goal, rubric criteria and steps, one line each."""
    lines = [f"Goal: {trajectory.task.goal.strip()}"]
    for check in trajectory.task.verifier.checks:
        if isinstance(check, RubricCheck):
            lines.append(f"Rubric: {check.criteria.strip()}")
    lines.append("Steps:")
    lines += [f"{s.index + 1}. {_render_step(s)}" for s in trajectory.steps]
    return "\n".join(lines)


def _render_step(step: Step) -> str:
    if step.action is None:
        said = " ".join(step.model_output.split())[:RESULT_CHARS]
        action = f"(no action; the model said {said!r})"
    else:
        action = step.action.describe()
    feedback = step.feedback
    if feedback.error is not None:
        return f"{action} -> error {feedback.error.kind.value}: {feedback.error.message}"
    changes = ", ".join(f"{c.op} {c.collection}/{c.entity_id}" for c in feedback.state_changes)
    result = canonical_json(feedback.result).decode()  # the same live and read back
    if len(result) > RESULT_CHARS:
        result = result[:RESULT_CHARS] + "..."
    return f"{action} -> ok {result}" + (f"; {changes}" if changes else "")


# -- the graph --------------------------------------------------------------------------


def build_curator_graph(
    config: CuratorConfig, llm: JsonLLM | None = None
) -> CompiledStateGraph[CuratorState, None, CuratorState, CuratorState]:
    """The compiled curator graph; ``judge`` runs only when an ``llm`` is given.

    Invoke it with ``{"round_id": ..., "trajectories": [facts, ...]}`` (and ``prompts``
    for a judge); the result's ``records`` hold one ``CurationRecord`` per distinct
    trajectory, sorted by trajectory id.
    """

    def deduplicate_node(state: CuratorState) -> CuratorState:
        return deduplicate(state, config)

    def route_node(state: CuratorState) -> CuratorState:
        return route(state, config)

    nodes: list[tuple[str, Node]] = [
        ("normalize", normalize),
        ("deduplicate", deduplicate_node),
        ("check_support", check_support),
    ]
    if llm is not None:
        judge_llm = llm

        def judge_node(state: CuratorState) -> CuratorState:
            return judge(state, judge_llm)

        nodes.append(("judge", judge_node))
    nodes += [("score", score), ("route", route_node)]
    graph = StateGraph(CuratorState)
    for name, node in nodes:
        graph.add_node(name, node)
    names = [name for name, _ in nodes]
    for first, second in zip([START, *names], [*names, END], strict=True):
        graph.add_edge(first, second)
    return graph.compile()


def curate(
    trajectories: Sequence[Trajectory],
    round_id: str,
    config: CuratorConfig | None = None,
    llm: JsonLLM | None = None,
) -> list[CurationRecord]:
    """Curate trajectories in memory: one record per distinct trajectory, sorted by id."""
    prompts = {t.id: render_for_judge(t) for t in trajectories} if llm is not None else {}
    return curate_facts(
        [TrajectoryFacts.of(t) for t in trajectories], round_id, config, llm, prompts
    )


def curate_facts(
    facts: Sequence[TrajectoryFacts],
    round_id: str,
    config: CuratorConfig | None = None,
    llm: JsonLLM | None = None,
    prompts: Mapping[str, str] | None = None,
) -> list[CurationRecord]:
    """Curate trajectories by their facts (an LLM judges those with a prompt in
    ``prompts``): one record per distinct trajectory, sorted by id."""
    graph = build_curator_graph(config or CuratorConfig(), llm)
    state = graph.invoke(
        {"round_id": round_id, "trajectories": list(facts), "prompts": dict(prompts or {})}
    )
    records: list[CurationRecord] = state["records"]
    return records
