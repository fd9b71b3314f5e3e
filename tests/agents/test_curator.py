"""The curator graph: each node on its own, then the graph end to end, with and without
an LLM judge (the scripted chat server stands in for the model)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from agents.curator import (
    CuratorState,
    Drop,
    ask_judge,
    build_curator_graph,
    check_support,
    curate,
    deduplicate,
    judge,
    malformation,
    needs_judge,
    normalize,
    render_for_judge,
    route,
    score,
)
from agents.llm import OpenAIJsonLLM
from agents.policies.openai_policy import make_client
from contract import (
    CurationRecord,
    DropReason,
    Outcome,
    ReviewDecision,
    Routing,
    TaskSpec,
    Trajectory,
    VerifierSpec,
)
from curation.facts import TrajectoryFacts
from curation.routing import CuratorConfig
from envs.sandbox import MobileSandbox
from tests.curation.builders import (
    already_satisfied,
    is_clean_success,
    pick,
    rebuilt,
    redundant_pair,
    uses_sensitive_tool,
    with_outcome,
    with_round,
)
from tests.fakes import RawReply, Reply, ScriptedChatServer, error_reply, json_reply, text_reply

CONFIG = CuratorConfig()
ROUND = "round-7"


@pytest.fixture(scope="module")
def success(faulty_trajectories: list[Trajectory]) -> Trajectory:
    return pick(
        faulty_trajectories,
        lambda t: is_clean_success(t) and not uses_sensitive_tool(t) and len(t.steps) > 1,
    )


@pytest.fixture(scope="module")
def failure(faulty_trajectories: list[Trajectory]) -> Trajectory:
    return pick(faulty_trajectories, lambda t: t.metadata.outcome is Outcome.FAILURE)


@pytest.fixture(scope="module")
def records(faulty_trajectories: list[Trajectory]) -> list[CurationRecord]:
    return curate(faulty_trajectories, ROUND, CONFIG)


def judged(replies: list[Reply], trajectories: list[Trajectory]) -> list[CurationRecord]:
    with ScriptedChatServer(replies) as server:
        llm = OpenAIJsonLLM(make_client(server.base_url, None, timeout_s=5.0), "judge-model")
        return curate(trajectories, ROUND, CONFIG, llm)


def facts(trajectories: list[Trajectory]) -> list[TrajectoryFacts]:
    return [TrajectoryFacts.of(t) for t in trajectories]


@pytest.fixture
def server() -> Iterator[ScriptedChatServer]:
    with ScriptedChatServer() as running:
        yield running


# -- nodes ------------------------------------------------------------------------------


def test_normalize_sorts_tokenizes_and_drops_malformed_and_backend_errors(
    success: Trajectory, failure: Trajectory
) -> None:
    no_steps = rebuilt(success, steps=(), cost=success.cost.model_copy(update={"steps": 0}))
    shuffled = rebuilt(success, steps=tuple(reversed(success.steps)))
    hollow = TaskSpec.model_construct(
        **(dict(success.task) | {"verifier": VerifierSpec.model_construct(checks=())})
    )
    # a spec refuses an empty verifier, so only a record built without validation has one
    empty_verifier = Trajectory.model_construct(
        **(dict(success) | {"id": "traj-0", "task": hollow})
    )
    broken = with_outcome(failure, Outcome.BACKEND_ERROR)
    given = [broken, success, no_steps, failure, shuffled, empty_verifier, success]

    state = normalize({"round_id": ROUND, "trajectories": facts(given)})

    ids = [t.id for t in state["trajectories"]]
    assert ids == sorted({t.id for t in given})
    drops = state["drops"]
    assert drops[no_steps.id] == Drop(DropReason.MALFORMED, "malformed: no steps")
    assert "indices" in drops[shuffled.id].detail
    assert "empty verifier" in drops[empty_verifier.id].detail
    assert drops[broken.id].reason is DropReason.BACKEND_ERROR
    assert set(ids) - set(drops) == {success.id, failure.id}
    assert malformation(success) is None


def test_deduplicate_drops_copies_and_near_copies(
    faulty_trajectories: list[Trajectory], sandbox: MobileSandbox
) -> None:
    clean, redundant = redundant_pair(faulty_trajectories, sandbox)
    copy = with_round(clean, "round-2")
    state = normalize({"round_id": ROUND, "trajectories": facts([clean, redundant, copy])})

    drops = deduplicate(state, CONFIG)["drops"]

    kept = min([clean, copy], key=lambda t: t.id)
    other = copy if kept is clean else clean
    assert drops[other.id].reason is DropReason.DUPLICATE
    assert drops[other.id].duplicate_of == kept.id
    assert drops[redundant.id].reason is DropReason.NEAR_DUPLICATE
    assert drops[redundant.id].duplicate_of in {clean.id, copy.id}
    assert kept.id not in drops


def test_support_and_score_fill_their_fields(
    faulty_trajectories: list[Trajectory],
) -> None:
    state = normalize({"round_id": ROUND, "trajectories": facts(faulty_trajectories)})

    supported = check_support(state)["support"]
    quality = score(state)["quality"]

    for t in faulty_trajectories:
        ok, detail = supported[t.id]
        if t.metadata.outcome is Outcome.SUCCESS:
            assert ok
        else:
            assert detail.startswith("the failure agrees" if ok else "claimed completion")
        assert 0.0 <= quality[t.id] <= 1.0


def test_support_node_sees_a_state_that_was_already_so(sandbox: MobileSandbox) -> None:
    stale = already_satisfied(sandbox)
    state = normalize({"round_id": ROUND, "trajectories": facts([stale])})
    ok, detail = check_support(state)["support"][stale.id]
    assert not ok and "already so" in detail


def test_route_node_builds_one_record_per_trajectory(
    success: Trajectory, failure: Trajectory
) -> None:
    state: CuratorState = {
        "round_id": ROUND,
        "trajectories": facts([failure, success]),
        "drops": {failure.id: Drop(DropReason.NEAR_DUPLICATE, "near", duplicate_of="traj-x")},
        "support": {success.id: (True, "backed"), failure.id: (True, "agrees")},
        "quality": {success.id: 1.0, failure.id: 0.1},
    }
    by_id = {r.trajectory_id: r for r in route(state, CONFIG)["records"]}

    dropped = by_id[failure.id]
    assert not dropped.kept and dropped.drop_reason is DropReason.NEAR_DUPLICATE
    assert dropped.duplicate_of == "traj-x"
    assert (dropped.routing, dropped.suggested) == (Routing.AUTO_REJECT, ReviewDecision.REJECT)
    kept = by_id[success.id]
    assert kept.kept and kept.routing is Routing.AUTO_APPROVE
    assert kept.round_id == ROUND and kept.task_id == success.task.id


def test_the_judge_node_asks_only_what_rules_leave_open(
    server: ScriptedChatServer, success: Trajectory, failure: Trajectory
) -> None:
    llm = OpenAIJsonLLM(make_client(server.base_url, None, timeout_s=5.0), "judge-model")
    state = normalize({"round_id": ROUND, "trajectories": facts([success, failure])})
    state["support"] = check_support(state)["support"]
    state["prompts"] = {t.id: render_for_judge(t) for t in (success, failure)}

    answers = judge(state, llm)["judge"]

    assert set(answers) == {success.id}
    assert judge({**state, "prompts": {}}, llm)["judge"] == {}
    assert needs_judge(success, True) and not needs_judge(failure, True)
    (request,) = server.requests
    prompt = request["messages"][1]["content"]
    assert prompt == render_for_judge(success)
    assert success.task.goal in prompt
    assert "verifier" not in prompt.lower()


def test_the_judge_reads_a_trajectory_alike_live_and_read_back(
    faulty_trajectories: list[Trajectory],
) -> None:
    """The catalog stores results as canonical JSON (keys sorted); the judge's prompt,
    cut to ``RESULT_CHARS`` a step, must not depend on whether the curator got the
    trajectory from a live round or from the catalog."""
    for trajectory in faulty_trajectories:
        stored = Trajectory.from_json(trajectory.to_json())
        assert render_for_judge(stored) == render_for_judge(trajectory)


def test_a_judge_that_answers_garbage_is_recorded_and_curation_goes_on(
    success: Trajectory,
) -> None:
    replies = [RawReply(b"<html>502</html>", content_type="text/html"), json_reply({"x": 1})]
    for reply in replies:
        with ScriptedChatServer([reply]) as server:
            llm = OpenAIJsonLLM(make_client(server.base_url, None, timeout_s=5.0), "judge")
            answer = ask_judge(llm, render_for_judge(success))
        assert isinstance(answer, dict) and "malformed completion" in str(answer["error"])


def test_the_graph_has_the_judge_only_with_an_llm(server: ScriptedChatServer) -> None:
    plain = set(build_curator_graph(CONFIG).get_graph().nodes)
    assert {"normalize", "deduplicate", "check_support", "score", "route"} <= plain
    assert "judge" not in plain
    llm = OpenAIJsonLLM(make_client(server.base_url, None, timeout_s=5.0), "judge-model")
    assert "judge" in set(build_curator_graph(CONFIG, llm).get_graph().nodes)


# -- end to end -------------------------------------------------------------------------


def test_one_record_per_trajectory_in_id_order(
    faulty_trajectories: list[Trajectory], records: list[CurationRecord]
) -> None:
    assert [r.trajectory_id for r in records] == sorted(t.id for t in faulty_trajectories)
    assert all(r.round_id == ROUND for r in records)
    assert records == curate(list(reversed(faulty_trajectories)), ROUND, CONFIG)


def test_a_record_carries_the_attribution_its_episode_stored(
    faulty_trajectories: list[Trajectory], records: list[CurationRecord]
) -> None:
    by_id = {r.trajectory_id: r for r in records}
    failures = [t for t in faulty_trajectories if t.metadata.outcome is Outcome.FAILURE]
    assert failures and all(t.metadata.failure_attribution for t in failures)
    for t in faulty_trajectories:
        assert by_id[t.id].failure_attribution == t.metadata.failure_attribution


def test_no_failed_fault_episode_is_auto_approved(
    faulty_trajectories: list[Trajectory], records: list[CurationRecord]
) -> None:
    by_id = {r.trajectory_id: r for r in records}
    faulty_failures = [
        t
        for t in faulty_trajectories
        if t.metadata.injected_faults and t.metadata.outcome is not Outcome.SUCCESS
    ]
    assert len(faulty_failures) >= 50
    for t in faulty_failures:
        record = by_id[t.id]
        assert record.routing is not Routing.AUTO_APPROVE
        assert record.suggested is ReviewDecision.REJECT
        if record.kept:
            assert record.failure_attribution is not None
            assert record.reason.startswith(f"failed ({record.failure_attribution.value})")


def test_routing_counts_are_plausible(records: list[CurationRecord]) -> None:
    counts = Counter(r.routing for r in records)
    share = {k: v / len(records) for k, v in counts.items()}
    assert 0.15 <= share[Routing.AUTO_APPROVE] <= 0.5, counts
    assert 0.3 <= share[Routing.AUTO_REJECT] <= 0.6, counts
    assert 0.1 <= share[Routing.NEEDS_HUMAN] <= 0.4, counts
    dropped = [r for r in records if not r.kept]
    assert 0 < len(dropped) < len(records) // 10
    assert all(r.routing is Routing.AUTO_REJECT and r.duplicate_of for r in dropped)
    approved = [r for r in records if r.routing is Routing.AUTO_APPROVE]
    assert all(r.supported and r.quality >= CONFIG.approve_quality for r in approved)


def test_a_stale_success_goes_to_a_person(sandbox: MobileSandbox) -> None:
    (record,) = curate([already_satisfied(sandbox)], ROUND, CONFIG)
    assert record.kept and not record.supported
    assert (record.routing, record.suggested) == (Routing.NEEDS_HUMAN, ReviewDecision.QUARANTINE)
    assert record.reason.startswith("conflict: the state was already so")


def test_backend_errors_stay_as_evidence_but_are_rejected(failure: Trajectory) -> None:
    (record,) = curate([with_outcome(failure, Outcome.BACKEND_ERROR)], ROUND, CONFIG)
    assert not record.kept and record.drop_reason is DropReason.BACKEND_ERROR
    assert record.routing is Routing.AUTO_REJECT


# -- with an LLM judge ------------------------------------------------------------------


def test_a_judge_that_disagrees_with_a_verified_success_sends_it_to_a_person(
    success: Trajectory,
) -> None:
    reply = text_reply('{"passed": false, "reason": "the alarm has the wrong label"}')
    (record,) = judged([reply], [success])
    assert success.verdict.passed
    assert (record.routing, record.suggested) == (Routing.NEEDS_HUMAN, ReviewDecision.QUARANTINE)
    assert "conflict" in record.reason and "wrong label" in record.reason
    assert record.judge == {"passed": False, "reason": "the alarm has the wrong label"}


def test_a_judge_that_agrees_leaves_the_approval(success: Trajectory, failure: Trajectory) -> None:
    reply = text_reply('```json\n{"passed": true, "reason": "done as asked"}\n```')
    records = judged([reply], [success, failure])
    by_id = {r.trajectory_id: r for r in records}
    assert by_id[success.id].routing is Routing.AUTO_APPROVE
    assert by_id[success.id].judge == {"passed": True, "reason": "done as asked"}
    assert by_id[failure.id].judge is None


@pytest.mark.parametrize(
    "reply",
    [
        text_reply("I think it went fine."),
        text_reply('["passed"]'),
        text_reply('{"passed": "maybe"}'),
        error_reply(500),
    ],
)
def test_an_unusable_judge_answer_goes_to_a_person_without_a_crash(
    success: Trajectory, reply: Reply
) -> None:
    (record,) = judged([reply], [success])
    assert record.routing is Routing.NEEDS_HUMAN
    assert record.suggested is ReviewDecision.APPROVE
    assert isinstance(record.judge, dict) and "error" in record.judge
    assert "no usable answer" in record.reason
