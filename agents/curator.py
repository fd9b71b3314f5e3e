"""The curator agent: a LangGraph ``StateGraph`` from collected trajectories to curation
records.

``normalize -> deduplicate -> check_support -> attribute -> [judge] -> score -> route``.
Every node is a plain function ``State -> partial State``; the ones that need the
curator's settings or the LLM are wrapped in closures by :func:`build_curator_graph`.
Trajectories are never rewritten (their ids are content hashes the catalog refers to):
``normalize`` derives the normalized action tokens the later nodes compare.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypedDict

import orjson
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from pydantic import JsonValue

from agents.llm import JsonLLM, LLMError
from contract import (
    CurationRecord,
    DropReason,
    FailureType,
    Outcome,
    ReviewDecision,
    Routing,
    RubricCheck,
    Step,
    Trajectory,
)
from curation.attribution import attribute_failure, planned_targets
from curation.dedup import action_tokens, find_duplicates
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
    trajectories: list[Trajectory]
    tokens: dict[str, list[str]]
    """Normalized action tokens (see ``curation.dedup.action_tokens``)."""
    drops: dict[str, Drop]
    support: dict[str, tuple[bool, str]]
    attributions: dict[str, FailureType | None]
    judge: dict[str, JsonValue]
    quality: dict[str, float]
    records: list[CurationRecord]


class Node(Protocol):
    """A curator node: ``State -> partial State``."""

    def __call__(self, state: CuratorState) -> CuratorState: ...


# -- nodes ----------------------------------------------------------------------------


def normalize(state: CuratorState) -> CuratorState:
    """Sort by id (one entry per id), derive normalized action tokens, and drop malformed
    trajectories and backend errors."""
    unique = sorted({t.id: t for t in state["trajectories"]}.values(), key=lambda t: t.id)
    drops: dict[str, Drop] = {}
    for t in unique:
        problem = malformation(t)
        if problem is not None:
            drops[t.id] = Drop(DropReason.MALFORMED, f"malformed: {problem}")
        elif t.metadata.outcome is Outcome.BACKEND_ERROR:
            detail = "backend error: kept as evidence, never training data"
            drops[t.id] = Drop(DropReason.BACKEND_ERROR, detail)
    tokens = {t.id: action_tokens(t.steps) for t in unique if t.id not in drops}
    return {"trajectories": unique, "tokens": tokens, "drops": drops}


def malformation(trajectory: Trajectory) -> str | None:
    """What makes a trajectory unusable as a record, or None."""
    steps = trajectory.steps
    if not steps:
        return "no steps"
    if [s.index for s in steps] != list(range(len(steps))):
        return "step indices are not 0..n-1"
    if not trajectory.task.verifier.checks:
        return "the task has an empty verifier"
    if len(trajectory.verdict.checks) != len(trajectory.task.verifier.checks):
        return "the verdict does not match the task's verifier"
    if trajectory.cost.steps != len(steps):
        return f"cost counts {trajectory.cost.steps} steps, the record has {len(steps)}"
    return None


def deduplicate(state: CuratorState, settings: CuratorConfig) -> CuratorState:
    """Drop exact and near-duplicates of a kept trajectory (``curation.dedup``)."""
    drops = dict(state.get("drops", {}))
    candidates = [t for t in state["trajectories"] if t.id not in drops]
    found = find_duplicates(
        candidates,
        threshold=settings.near_duplicate_threshold,
        num_perm=settings.num_perm,
        tokens=state.get("tokens", {}),
    )
    for tid, dup in found.items():
        what = "exact duplicate" if dup.reason is DropReason.DUPLICATE else "near-duplicate"
        detail = f"{what} of {dup.of} (similarity {dup.similarity:.2f})"
        drops[tid] = Drop(dup.reason, detail, duplicate_of=dup.of)
    return {"drops": drops}


def check_support(state: CuratorState) -> CuratorState:
    """Whether each outcome is backed by the verifier's evidence (not for malformed ones)."""
    return {"support": {t.id: support_of(t) for t in _evaluable(state)}}


def attribute(state: CuratorState) -> CuratorState:
    """Failure attribution re-run from the evidence, whatever policy produced it."""
    return {
        "attributions": {
            t.id: attribute_failure(
                t.steps,
                t.verdict,
                t.metadata.termination,
                t.metadata.outcome,
                planned=planned_targets(t.task),
            )
            for t in _evaluable(state)
        }
    }


def judge(state: CuratorState, llm: JsonLLM) -> CuratorState:
    """Ask the LLM about each kept trajectory that rules alone do not settle."""
    drops = state.get("drops", {})
    supported = state.get("support", {})
    answers: dict[str, JsonValue] = {}
    for t in state["trajectories"]:
        if t.id in drops or not needs_judge(t, supported.get(t.id, (False, ""))[0]):
            continue
        answers[t.id] = ask_judge(llm, t)
    return {"judge": answers}


def needs_judge(trajectory: Trajectory, supported: bool) -> bool:
    """Everything but a failure the verifier agrees with, unless rubric checks need eyes:
    a judge is worth asking where it could catch a verifier's false positive."""
    if any(isinstance(c, RubricCheck) for c in trajectory.task.verifier.checks):
        return True
    if trajectory.metadata.outcome is Outcome.SUCCESS:
        return True
    return is_conflict(trajectory, supported)


def score(state: CuratorState) -> CuratorState:
    """Quality in [0, 1] of each evaluable trajectory (``curation.quality``)."""
    return {"quality": {t.id: quality_score(t) for t in _evaluable(state)}}


def route(state: CuratorState, settings: CuratorConfig) -> CuratorState:
    """One record per trajectory, in id order; dropped ones are rejected automatically."""
    return {"records": [_record(state, t, settings) for t in state["trajectories"]]}


def _record(state: CuratorState, t: Trajectory, settings: CuratorConfig) -> CurationRecord:
    drop = state.get("drops", {}).get(t.id)
    supported, detail = state.get("support", {}).get(t.id, (False, ""))
    attribution = state.get("attributions", {}).get(t.id)
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
        task_id=t.task.id,
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


def _evaluable(state: CuratorState) -> list[Trajectory]:
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
    '{"passed": true or false, "reason": "one sentence"}. "passed" means the goal was fully '
    "achieved, with no unwanted side effect."
)


def ask_judge(llm: JsonLLM, trajectory: Trajectory) -> JsonValue:
    """``{"passed": bool, "reason": str}``, or ``{"error": ...}`` when the LLM gave no
    usable answer (a judge never stops curation)."""
    try:
        answer = llm.ask_json(JUDGE_SYSTEM, render_for_judge(trajectory))
    except LLMError as exc:
        return {"error": str(exc)[:300]}
    passed, reason = answer.get("passed"), answer.get("reason", "")
    if not isinstance(passed, bool):
        return {"error": f"no boolean 'passed' in {orjson.dumps(answer).decode()[:200]}"}
    return {"passed": passed, "reason": reason if isinstance(reason, str) else str(reason)}


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
    result = orjson.dumps(feedback.result).decode()
    if len(result) > RESULT_CHARS:
        result = result[:RESULT_CHARS] + "..."
    return f"{action} -> ok {result}" + (f"; {changes}" if changes else "")


# -- the graph --------------------------------------------------------------------------


def build_curator_graph(
    config: CuratorConfig, llm: JsonLLM | None = None
) -> CompiledStateGraph[CuratorState, None, CuratorState, CuratorState]:
    """The compiled curator graph; ``judge`` runs only when an ``llm`` is given.

    Invoke it with ``{"round_id": ..., "trajectories": [...]}``; the result's ``records``
    hold one ``CurationRecord`` per distinct trajectory, sorted by trajectory id.
    """

    def deduplicate_node(state: CuratorState) -> CuratorState:
        return deduplicate(state, config)

    def route_node(state: CuratorState) -> CuratorState:
        return route(state, config)

    nodes: list[tuple[str, Node]] = [
        ("normalize", normalize),
        ("deduplicate", deduplicate_node),
        ("check_support", check_support),
        ("attribute", attribute),
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
    """Curate a batch: one record per distinct trajectory, sorted by trajectory id."""
    graph = build_curator_graph(config or CuratorConfig(), llm)
    state = graph.invoke({"round_id": round_id, "trajectories": list(trajectories)})
    records: list[CurationRecord] = state["records"]
    return records
