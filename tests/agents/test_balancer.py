"""The balancer graph on real episodes; the rationale LLM through the real ``openai``
client against the scripted chat server."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from agents.balancer import (
    DROPPED_NOT_APPROVED,
    DROPPED_NOW_FAILING,
    DROPPED_UNREVIEWED,
    BalancerState,
    balance,
    build_balancer_graph,
    run_balancer,
)
from agents.llm import OpenAIJsonLLM
from agents.policies.openai_policy import make_client
from agents.policies.scripted import FaultConfig, ScriptedPolicy
from agents.runner import run_episode
from contract import (
    CurationRecord,
    DatasetVersion,
    Outcome,
    RemovalReason,
    Review,
    ReviewDecision,
    Routing,
    Split,
    Trajectory,
)
from curation.balance import (
    DROPPED_DEV,
    DROPPED_NOT_SUCCESS,
    candidates_of,
    dataset_content_hash,
    default_target,
)
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks
from flows.approval import LEFT_OUT, Proposal
from flows.round_stages import stale_successes
from human_gate import AutoGate, GateItem, final_decisions
from tests.fakes import RawReply, Reply, ScriptedChatServer, error_reply, json_reply, text_reply

TARGET = default_target()


@pytest.fixture(scope="module")
def episodes(sandbox: MobileSandbox) -> list[Trajectory]:
    """Train and dev tasks, successes and failures."""
    policy = ScriptedPolicy(FaultConfig(rate=0.3))
    tasks = sample_tasks(80, 21, sandbox) + sample_tasks(6, 4, sandbox, split=Split.DEV)
    return [run_episode(t, sandbox, policy, round_id="r") for t in tasks]


def approve_all(trajectories: list[Trajectory]) -> list[Review]:
    """The auto gate's reviews when the curator suggested approving everything."""
    items = [GateItem(t, record(t, ReviewDecision.APPROVE)) for t in trajectories]
    return list(AutoGate().collect("r", items).reviews)


def record(t: Trajectory, suggested: ReviewDecision) -> CurationRecord:
    return CurationRecord(
        trajectory_id=t.id,
        task_id=t.task.id,
        round_id="r",
        kept=True,
        supported=True,
        quality=0.9,
        routing=Routing.AUTO_APPROVE,
        suggested=suggested,
        reason="checked",
    )


def human(t: Trajectory, decision: ReviewDecision) -> Review:
    return Review(
        trajectory_id=t.id, round_id="r", decision=decision, reviewer="ann", automatic=False
    )


def trainable(t: Trajectory) -> bool:
    return t.task.split is Split.TRAIN and t.metadata.outcome is Outcome.SUCCESS


def test_dev_tasks_and_failures_never_enter_a_version_even_if_approved(
    episodes: list[Trajectory],
) -> None:
    state = run_balancer("r", episodes, final_decisions(approve_all(episodes)), TARGET)
    version = state["version"]
    assert version is not None
    by_id = {t.id: t for t in episodes}
    assert all(trainable(by_id[m.trajectory_id]) for m in version.members)
    assert len(version.members) == sum(map(trainable, episodes))
    dropped = state["dropped"]
    assert dropped[DROPPED_DEV] == sum(t.task.split is Split.DEV for t in episodes) >= 6
    assert dropped[DROPPED_NOT_SUCCESS] > 0
    assert version.round_id == "r"
    assert version.parent is None
    policy = episodes[0].metadata.policy
    assert version.policies == (f"{policy.name}@{policy.version}",)
    assert version.human_reviewed == 0
    assert version.achieved == state["result"].achieved


def test_only_final_approvals_and_corrections_are_candidates(
    episodes: list[Trajectory],
) -> None:
    good = [t for t in episodes if trainable(t)]
    corrected, rejected, quarantined, unreviewed = good[0], good[1], good[2], good[3]
    reviews = approve_all([t for t in good if t is not unreviewed])
    reviews += [
        human(corrected, ReviewDecision.CORRECT),
        human(rejected, ReviewDecision.REJECT),
        human(quarantined, ReviewDecision.QUARANTINE),
    ]
    state = run_balancer("r", good, final_decisions(reviews), TARGET, parent="ds-parent")
    version = state["version"]
    assert version is not None
    members = {m.trajectory_id for m in version.members}
    assert corrected.id in members
    assert not members & {rejected.id, quarantined.id, unreviewed.id}
    assert state["dropped"][DROPPED_NOT_APPROVED] == 2
    assert state["dropped"][DROPPED_UNREVIEWED] == 1
    assert version.human_reviewed == state["human_reviewed"] == 1
    assert version.parent == "ds-parent"


def test_the_same_input_gives_the_same_version(episodes: list[Trajectory]) -> None:
    reviews = approve_all(episodes)
    shuffled, reordered = list(episodes), list(reviews)
    random.Random(1).shuffle(shuffled)
    random.Random(2).shuffle(reordered)
    first = balance("r", episodes, reviews, TARGET)
    second = balance("r", shuffled, reordered, TARGET)
    assert first is not None
    assert first == second
    counted = balance("r", episodes, reviews, TARGET, human_reviewed=7)
    assert counted is not None
    assert counted.human_reviewed == 7
    assert counted.id != first.id


def test_no_candidates_freeze_no_version(episodes: list[Trajectory]) -> None:
    rejected = [human(t, ReviewDecision.REJECT) for t in episodes]
    state = run_balancer("r", episodes, final_decisions(approve_all(episodes) + rejected), TARGET)
    assert state["version"] is None
    assert state["dropped"][DROPPED_NOT_APPROVED] == len(episodes)
    assert state["report"] == []
    assert balance("r", [], [], TARGET) is None


def test_the_report_lays_achieved_against_target(episodes: list[Trajectory]) -> None:
    state = run_balancer("r", episodes, final_decisions(approve_all(episodes)), TARGET)
    rows = state["report"]
    assert {(r.dimension, r.value) for r in rows} >= {
        ("capability", "memory"),
        ("outcome", "recovery"),
    }
    for row in rows:
        assert row.achieved == state["result"].achieved[row.dimension][row.value]
    assert state["rationale"] is None
    assert state["errors"] == []


def test_the_graph_runs_select_weigh_report_propose(episodes: list[Trajectory]) -> None:
    graph = build_balancer_graph(TARGET)
    order = [
        next(iter(update))
        for update in graph.stream(
            {"round_id": "r", "parent": None, "pool": candidates_of(episodes), "decisions": {}}
        )
    ]
    assert order == ["select", "weigh", "report", "propose"]


def rationale_state(episodes: list[Trajectory], server: ScriptedChatServer) -> BalancerState:
    llm = OpenAIJsonLLM(make_client(server.base_url, None, 5.0), "scripted-model")
    return run_balancer("r", episodes, final_decisions(approve_all(episodes)), TARGET, llm=llm)


def test_the_llm_writes_the_rationale(episodes: list[Trajectory]) -> None:
    answer = json.dumps({"rationale": "Tool use is down-weighted to meet the even target."})
    with ScriptedChatServer([text_reply(answer)]) as server:
        state = rationale_state(episodes, server)
        (request,) = server.requests
    assert state["rationale"] == "Tool use is down-weighted to meet the even target."
    assert state["errors"] == []
    asked = json.loads(request["messages"][1]["content"])
    assert {"rows", "shortfalls", "dropped", "members", "converged"} <= set(asked)


@pytest.mark.parametrize(
    "reply",
    [
        text_reply("The mix looks fine."),
        text_reply('{"verdict": "fine"}'),
        error_reply(400),
        RawReply(b"<html>gateway</html>", content_type="text/html"),
        json_reply({"choices": "none"}),
    ],
    ids=["not-json", "no-rationale", "endpoint-error", "html-page", "not-a-completion"],
)
def test_a_bad_llm_answer_is_an_error_not_a_crash(episodes: list[Trajectory], reply: Reply) -> None:
    with ScriptedChatServer([reply]) as server:
        state = rationale_state(episodes, server)
    assert state["rationale"] is None
    (error,) = state["errors"]
    assert error.startswith("rationale: ")
    assert state["version"] is not None


NOTE = "Tap Save, not Cancel: the alarm must be kept."


def person(
    t: Trajectory, decision: ReviewDecision, steps: tuple[int, ...] = (), note: str | None = None
) -> Review:
    """A person's review marking ``steps`` erroneous, with a note."""
    return Review(
        trajectory_id=t.id,
        round_id="r",
        decision=decision,
        reviewer="ann",
        automatic=False,
        erroneous_steps=steps,
        note=note,
    )


def long_successes(episodes: list[Trajectory]) -> list[Trajectory]:
    """Trainable episodes with at least three steps (so steps 0-2 can be marked)."""
    good = [t for t in episodes if trainable(t) and len(t.steps) >= 3]
    assert len(good) >= 6
    return good


def test_members_carry_their_final_review(episodes: list[Trajectory]) -> None:
    good = long_successes(episodes)
    corrected, marked, plain, rejected, quarantined, bare = good[:6]
    people = [
        person(corrected, ReviewDecision.CORRECT, (2, 0, 2), NOTE),
        person(marked, ReviewDecision.APPROVE, (1,), "fine apart from step 1"),
        person(rejected, ReviewDecision.REJECT, (0,), "wrong app"),
        person(quarantined, ReviewDecision.QUARANTINE, note="looks unsafe"),
        person(bare, ReviewDecision.CORRECT),
    ]
    # a person's review wins over the automatic one, recorded before or after it
    state = run_balancer(
        "r", good, final_decisions(people[:2] + approve_all(good) + people[2:]), TARGET
    )
    version = state["version"]
    assert version is not None
    members = {m.trajectory_id: m for m in version.members}

    review = {
        t.id: (m.decision, m.human, m.masked_steps, m.correction)
        for t in good
        if (m := members.get(t.id)) is not None
    }
    assert review[corrected.id] == (ReviewDecision.CORRECT, True, (0, 2), NOTE)
    assert review[marked.id] == (ReviewDecision.APPROVE, True, (1,), None)
    assert review[plain.id] == (ReviewDecision.APPROVE, False, (), None)
    assert review[bare.id] == (ReviewDecision.CORRECT, True, (), None)
    assert rejected.id not in members and quarantined.id not in members
    automatic = set(members) - {corrected.id, marked.id, bare.id}
    assert automatic and all(
        review[i] == (ReviewDecision.APPROVE, False, (), None) for i in automatic
    )
    assert len(members) == len(good) - 2
    assert version.human_reviewed == state["human_reviewed"] == 3
    assert version.content_hash == dataset_content_hash(version.members)


def test_masks_and_corrections_are_part_of_the_version(episodes: list[Trajectory]) -> None:
    good = long_successes(episodes)
    target = good[0]

    def version_with(*people: Review) -> DatasetVersion:
        version = balance("r", good, [*approve_all(good), *people], TARGET)
        assert version is not None
        return version

    base = version_with(person(target, ReviewDecision.CORRECT, (0, 2), NOTE))
    variants = {
        "mask": version_with(person(target, ReviewDecision.CORRECT, (1,), NOTE)),
        "no mask": version_with(person(target, ReviewDecision.CORRECT, (), NOTE)),
        "note": version_with(person(target, ReviewDecision.CORRECT, (0, 2), "Another note.")),
        "decision": version_with(person(target, ReviewDecision.APPROVE, (0, 2), NOTE)),
        "automatic": version_with(),
    }
    for name, variant in variants.items():
        assert [(m.trajectory_id, m.weight) for m in variant.members] == [
            (m.trajectory_id, m.weight) for m in base.members
        ], name
        assert variant.content_hash != base.content_hash, name
        assert variant.id != base.id, name
    assert len({v.content_hash for v in variants.values()}) == len(variants)
    # the same marks in another order, or repeated, are the same mask
    same = version_with(person(target, ReviewDecision.CORRECT, (2, 0, 0), NOTE))
    assert same == base


def test_successes_that_todays_verifier_fails_are_left_out_and_counted() -> None:
    """A round made before the collateral-damage check (tests/fixtures): the stored
    successes today's verifier fails never enter a version; the proposal says so."""
    fixture = Path(__file__).parents[1] / "fixtures" / "round-before-collateral.jsonl"
    old = [Trajectory.from_json(line) for line in fixture.read_bytes().splitlines()]
    stale = stale_successes(old)
    stale_ids = {r.trajectory_id for r in stale}
    assert len(stale_ids) >= 3 and all(r.now_fails for r in stale)
    state = run_balancer("r", old, final_decisions(approve_all(old)), TARGET, now_failing=stale_ids)
    version = state["version"]
    assert version is not None
    assert stale_ids.isdisjoint(m.trajectory_id for m in version.members)
    assert state["dropped"][DROPPED_NOW_FAILING] == len(stale_ids)
    shown = Proposal.of(state).markdown()  # type: ignore[union-attr]
    assert f"{len(stale_ids)} {LEFT_OUT[DROPPED_NOW_FAILING]}" in shown
    untouched = run_balancer("r", old, final_decisions(approve_all(old)), TARGET)["version"]
    assert untouched is not None and len(untouched.members) == len(version.members) + len(stale_ids)


def test_the_cap_on_simulated_tools_weighs_them_down_or_removes_an_inherited_one(
    episodes: list[Trajectory],
) -> None:
    good = [t for t in episodes if trainable(t)]
    pool = [replace(c, simulated=i % 2 == 0) for i, c in enumerate(candidates_of(good))]
    capped = TARGET.model_copy(update={"simulated_share": 0.1})
    decisions = final_decisions(approve_all(good))
    version = run_balancer("r", pool, decisions, capped)["version"]
    assert version is not None and version.target.simulated_share == 0.1
    simulated = {c.trajectory_id for c in pool if c.simulated}
    weight = sum(m.weight for m in version.members if m.trajectory_id in simulated)
    assert weight / sum(m.weight for m in version.members) == pytest.approx(0.1, abs=1e-3)

    only_simulated = [c for c in pool if c.simulated]
    inherited = only_simulated[0].trajectory_id
    state = run_balancer(
        "r", only_simulated, decisions, capped, parent="ds-parent", inherited=[inherited]
    )
    assert state["version"] is None  # nothing on real tools to weigh them against
    (removal,) = state["removed"]
    assert removal.trajectory_id == inherited
    assert removal.reason is RemovalReason.SIMULATED_CAP and "0.1" in removal.detail
