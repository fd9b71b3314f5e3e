"""The balancer agent: from reviewed trajectories to a proposed dataset version.

It reads trajectories as balancing candidates (``curation.balance.Candidate``: ids,
split, outcome, policy, mix labels), so a round of any size is balanced from the
catalog's columns. The pool holds the round's trajectories and the parent version's
members (a version accumulates). ``select`` keeps those whose final review approves or
corrects them and records why a parent member was left out; ``weigh`` drops dev-split
tasks and non-successes, rakes sampling weights towards the target mix and scales down
mastered templates; ``report`` lays achieved against target (and, given an LLM, asks it
for a short rationale); ``propose`` builds the ``DatasetVersion``, or None when nothing
is left: an empty dataset is not frozen.
"""

from __future__ import annotations

from collections.abc import Collection, Container, Iterable, Mapping
from dataclasses import replace
from typing import Any, Protocol, TypedDict, cast

import orjson
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from agents.llm import JsonLLM, LLMFailure, consult
from contract import (
    DatasetVersion,
    FinalReview,
    MixTarget,
    RemovalReason,
    RemovedMember,
    Review,
    ReviewDecision,
    Trajectory,
)
from curation.balance import (
    DEFAULT_MAX_RATIO,
    BalanceResult,
    Candidate,
    MixRow,
    Shortfall,
    balance_mix,
    candidates_of,
    cap_simulated,
    down_weigh,
    policies_of,
    propose_version,
    with_reviews,
)
from human_gate import final_decisions

TRAINABLE_DECISIONS = frozenset({ReviewDecision.APPROVE, ReviewDecision.CORRECT})
DROPPED_UNREVIEWED = "unreviewed"
DROPPED_NOT_APPROVED = "not_approved"
DROPPED_NOW_FAILING = "verdict_now_fails"
"""Approved under an older verifier, failed by today's (``flywheel verify``)."""

RATIONALE_SYSTEM = (
    "You explain how a training set was balanced to the ML team that trains on it. "
    "Given the achieved mix against the target, the values no candidate had, and what "
    'was dropped, answer with a JSON object {"rationale": "..."}: two or three plain '
    "sentences on where the mix meets the target, where it falls short, and why."
)


Decision = Review | FinalReview
"""The review that counts for a trajectory: a whole record (``final_decisions`` of
reviews in memory) or what a store computed of it (``ReviewStore.final_reviews``)."""


class BalancerState(TypedDict, total=False):
    """The balancer's state. Inputs: ``round_id``, ``parent``, ``pool``,
    ``decisions`` and optionally ``human_reviewed``; the nodes fill in the rest."""

    round_id: str
    parent: str | None
    pool: list[Candidate]
    """Every reviewed trajectory of the round (and those carried into it)."""
    decisions: Mapping[str, Decision]
    """The review that counts per trajectory id (a person's over an automatic one)."""
    human_reviewed: int | None
    """Reviews by a person behind the version; None (or absent): the members whose final
    review is a person's."""
    now_failing: frozenset[str]
    """Trajectories today's verifier fails although their stored verdict passed."""
    inherited: frozenset[str]
    """The parent version's members (in ``pool`` with their reviews): kept unless a rule
    or a later review removes them, each removal recorded with its reason."""
    down_weights: dict[str, float]
    """Weight factors by template (the plan's mastered templates), applied after raking."""
    preserved: frozenset[str]
    """Fingerprints of the preservation set: never down-weighted."""
    removed: list[RemovedMember]
    candidates: list[Candidate]
    """Trajectories whose final decision is approve or correct."""
    dropped: dict[str, int]
    """How many trajectories were left out, by reason."""
    result: BalanceResult
    report: list[MixRow]
    shortfalls: list[Shortfall]
    rationale: str | None
    errors: list[str]
    version: DatasetVersion | None


class Node(Protocol):
    """A node: the state in, the keys it changes out."""

    def __call__(self, state: BalancerState) -> BalancerState: ...


def select(state: BalancerState) -> BalancerState:
    """Trajectories whose final review approves or corrects them."""
    decisions = state["decisions"]
    candidates: list[Candidate] = []
    dropped = {DROPPED_UNREVIEWED: 0, DROPPED_NOT_APPROVED: 0, DROPPED_NOW_FAILING: 0}
    now_failing = state.get("now_failing", frozenset())
    inherited = state.get("inherited", frozenset())
    removed: list[RemovedMember] = []
    for candidate in state["pool"]:
        review = decisions.get(candidate.trajectory_id)
        if candidate.trajectory_id in now_failing:
            dropped[DROPPED_NOW_FAILING] += 1
            reason, detail = RemovalReason.VERDICT_NOW_FAILS, "today's verifier fails it"
        elif review is None:
            dropped[DROPPED_UNREVIEWED] += 1
            reason, detail = RemovalReason.REJECTED, "no review of it is stored"
        elif review.decision not in TRAINABLE_DECISIONS:
            dropped[DROPPED_NOT_APPROVED] += 1
            by = "automatically" if review.automatic else f"by {review.reviewer}"
            reason = RemovalReason.REJECTED
            detail = f"{review.decision.value} {by}" + (
                f": {review.reason}" if review.reason else ""
            )
        else:
            candidates.append(candidate)
            continue
        if candidate.trajectory_id in inherited:
            removed.append(_removal(candidate, reason, detail))
    return {
        "candidates": candidates,
        "dropped": dropped,
        "removed": removed,
    }


def _removal(candidate: Candidate, reason: RemovalReason, detail: str) -> RemovedMember:
    return RemovedMember(
        trajectory_id=candidate.trajectory_id,
        task_id=candidate.task_id,
        reason=reason,
        detail=detail,
    )


def _why_left_out(
    candidate: Candidate, trainable: Container[str], target: MixTarget
) -> tuple[RemovalReason, str]:
    if candidate.trajectory_id in trainable:
        cap = f"the cap of {target.simulated_share} on simulated tools' share"
        return RemovalReason.SIMULATED_CAP, f"{cap} left it no room"
    outcome = f"{candidate.split.value} split, {candidate.outcome.value}"
    return RemovalReason.NOT_TRAINABLE, outcome


def make_weigh(target: MixTarget, max_ratio: float) -> Node:
    def weigh(state: BalancerState) -> BalancerState:
        """Rake weights over the trainable candidates (dev tasks and failures dropped),
        then scale down the members of mastered templates (the preservation set kept)."""
        candidates = state["candidates"]
        result = balance_mix(candidates, target, max_ratio=max_ratio)
        result = down_weigh(
            result,
            candidates,
            state.get("down_weights", {}),
            state.get("preserved", frozenset()),
        )
        trainable = {m.trajectory_id for m in result.members}
        result = cap_simulated(result, candidates, target.simulated_share)
        inherited = state.get("inherited", frozenset())
        kept = {m.trajectory_id for m in result.members}
        removed = list(state.get("removed", [])) + [
            _removal(c, *_why_left_out(c, trainable, target))
            for c in candidates
            if c.trajectory_id in inherited and c.trajectory_id not in kept
        ]
        return {
            "result": result,
            "dropped": {**state["dropped"], **result.dropped},
            "removed": removed,
        }

    return weigh


def make_report(llm: JsonLLM | None) -> Node:
    def report(state: BalancerState) -> BalancerState:
        """Achieved against target; an LLM's rationale when one is given."""
        result = state["result"]
        update: BalancerState = {
            "report": list(result.rows),
            "shortfalls": list(result.shortfalls),
            "rationale": None,
            "errors": [],
        }
        if llm is not None and result.members:
            rationale, error = ask_rationale(llm, result, state["dropped"])
            update["rationale"] = rationale
            update["errors"] = [error] if error else []
        return update

    return report


def make_propose(target: MixTarget) -> Node:
    def propose(state: BalancerState) -> BalancerState:
        """The dataset version of the weighted members, each carrying its final review
        (masks and corrections included); None when there are none."""
        result = state["result"]
        if not result.members:
            return {"version": None}
        result = replace(result, members=with_reviews(result.members, state["decisions"]))
        human = state.get("human_reviewed")
        if human is None:
            human = sum(m.human for m in result.members)
        members = {m.trajectory_id for m in result.members}
        policies = policies_of(c for c in state["candidates"] if c.trajectory_id in members)
        inherited = state.get("inherited", frozenset())
        version = propose_version(
            state["round_id"],
            state.get("parent"),
            result,
            target,
            policies,
            human,
            inherited=sum(m.trajectory_id in inherited for m in result.members),
            removed=state.get("removed", ()),
        )
        return {"version": version, "human_reviewed": human}

    return propose


def rationale_prompt(result: BalanceResult, dropped: dict[str, int]) -> str:
    """The user message asking for a rationale: the report as JSON."""
    payload: dict[str, Any] = {
        "members": len(result.members),
        "converged": result.converged,
        "rows": [vars(row) for row in result.rows],
        "shortfalls": [vars(s) for s in result.shortfalls],
        "dropped": dropped,
    }
    return orjson.dumps(payload, option=orjson.OPT_SORT_KEYS).decode()


def ask_rationale(
    llm: JsonLLM, result: BalanceResult, dropped: dict[str, int]
) -> tuple[str | None, str | None]:
    """The LLM's rationale, or None and why not: its failures never stop the balancer."""
    answer = consult(llm, RATIONALE_SYSTEM, rationale_prompt(result, dropped))
    if isinstance(answer, LLMFailure):
        return None, f"rationale: {answer.reason}"
    rationale = answer.get("rationale")
    if not isinstance(rationale, str) or not rationale.strip():
        return None, f"rationale: the answer has no 'rationale' text: {str(answer)[:200]}"
    return rationale.strip(), None


def build_balancer_graph(
    target: MixTarget, llm: JsonLLM | None = None, *, max_ratio: float = DEFAULT_MAX_RATIO
) -> CompiledStateGraph[BalancerState, None, BalancerState, BalancerState]:
    """The compiled graph ``select -> weigh -> report -> propose``."""
    graph = StateGraph(BalancerState)
    graph.add_node("select", select)
    graph.add_node("weigh", make_weigh(target, max_ratio))
    graph.add_node("report", make_report(llm))
    graph.add_node("propose", make_propose(target))
    graph.add_edge(START, "select")
    graph.add_edge("select", "weigh")
    graph.add_edge("weigh", "report")
    graph.add_edge("report", "propose")
    graph.add_edge("propose", END)
    return graph.compile()


def run_balancer(
    round_id: str,
    trajectories: Iterable[Candidate | Trajectory],
    decisions: Mapping[str, Decision],
    target: MixTarget,
    *,
    parent: str | None = None,
    human_reviewed: int | None = None,
    llm: JsonLLM | None = None,
    max_ratio: float = DEFAULT_MAX_RATIO,
    now_failing: Collection[str] = (),
    inherited: Collection[str] = (),
    down_weights: Mapping[str, float] | None = None,
    preserved: Collection[str] = (),
) -> BalancerState:
    """Run the balancer graph once; the final state (``version`` None when empty).
    ``decisions``: the review that counts per trajectory id (``final_decisions`` of the
    reviews, or a store's ``final_reviews``);
    ``now_failing``: trajectories left out because today's verifier fails them;
    ``inherited``: those of ``trajectories`` that are the parent's members (a removal of
    one is recorded with its reason); ``down_weights``: weight factors by template,
    except for tasks whose fingerprint is ``preserved``."""
    graph = build_balancer_graph(target, llm, max_ratio=max_ratio)
    state: BalancerState = {
        "round_id": round_id,
        "parent": parent,
        "pool": candidates_of(trajectories),
        "decisions": decisions,
        "human_reviewed": human_reviewed,
        "now_failing": frozenset(now_failing),
        "inherited": frozenset(inherited),
        "down_weights": dict(down_weights or {}),
        "preserved": frozenset(preserved),
    }
    return cast(BalancerState, graph.invoke(state))


def balance(
    round_id: str,
    trajectories: Iterable[Candidate | Trajectory],
    reviews: Iterable[Review],
    target: MixTarget,
    *,
    parent: str | None = None,
    human_reviewed: int | None = None,
    llm: JsonLLM | None = None,
    max_ratio: float = DEFAULT_MAX_RATIO,
) -> DatasetVersion | None:
    """The proposed dataset version, or None when no candidate is left."""
    state = run_balancer(
        round_id,
        trajectories,
        final_decisions(reviews),
        target,
        parent=parent,
        human_reviewed=human_reviewed,
        llm=llm,
        max_ratio=max_ratio,
    )
    return state["version"]
