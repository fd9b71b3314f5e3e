"""The task-constructor graph and its nodes, on the real sandbox."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from agents.llm import OpenAIJsonLLM
from agents.policies.openai_policy import make_client
from agents.task_constructor import (
    ConstructorState,
    Proposal,
    cell_of,
    construct_tasks,
    goal_problem,
    make_validate,
    reword,
)
from contract import (
    Capability,
    Difficulty,
    GenerationPlan,
    Quota,
    RejectionReason,
    Split,
    TaskSource,
    TaskSpec,
    default_plan,
)
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import replay_reference, sample_tasks
from tests.fakes.chat_server import ScriptedChatServer, text_reply


def test_fills_every_quota_of_the_default_plan(sandbox: MobileSandbox) -> None:
    plan = default_plan(30)
    tasks, _, _ = construct_tasks("round-t", plan, 5, sandbox)
    assert len(tasks) == 30
    assert Counter(cell_of(t) for t in tasks) == Counter(
        {(q.capability, q.difficulty): q.count for q in plan.quotas}
    )
    assert len({t.fingerprint for t in tasks}) == 30
    assert all(t.split is Split.TRAIN for t in tasks)
    assert all(replay_reference(t, sandbox).passed for t in tasks)


def test_is_deterministic_for_a_seed(sandbox: MobileSandbox) -> None:
    first, _, _ = construct_tasks("round-t", default_plan(12), 9, sandbox)
    second, _, _ = construct_tasks("round-t", default_plan(12), 9, sandbox)
    assert [t.id for t in first] == [t.id for t in second]


def test_known_fingerprints_are_duplicates_and_quotas_still_fill(sandbox: MobileSandbox) -> None:
    first, _, _ = construct_tasks("round-a", default_plan(24), 3, sandbox)
    known = frozenset(t.fingerprint for t in first)
    again, rejected, _ = construct_tasks(
        "round-b", default_plan(24), 3, sandbox, known_fingerprints=known
    )
    assert len(again) == 24
    assert not known & {t.fingerprint for t in again}
    reasons = Counter(r.reason for r in rejected)
    assert reasons[RejectionReason.DUPLICATE] >= 20
    assert all(r.round_id == "round-b" for r in rejected)


def test_development_tasks_are_rejected_never_accepted(sandbox: MobileSandbox) -> None:
    tasks, rejected, _ = construct_tasks("round-d", default_plan(240), 1, sandbox)
    assert all(t.split is Split.TRAIN for t in tasks)
    dev = [r for r in rejected if r.reason is RejectionReason.DEVELOPMENT_TASK]
    assert dev, "one parameter draw in ten is held out: some proposals must hit it"
    assert not {r.fingerprint for r in dev} & {t.fingerprint for t in tasks}


def test_dev_fingerprints_from_the_catalog_are_refused(sandbox: MobileSandbox) -> None:
    tasks, _, _ = construct_tasks("round-x", default_plan(12), 4, sandbox)
    dev = frozenset(t.fingerprint for t in tasks)
    again, rejected, _ = construct_tasks(
        "round-y", default_plan(12), 4, sandbox, dev_fingerprints=dev
    )
    assert not dev & {t.fingerprint for t in again}
    assert sum(r.reason is RejectionReason.DEVELOPMENT_TASK for r in rejected) >= 10


def _state(proposals: list[Proposal], cell_count: int = 5) -> ConstructorState:
    cells = {p.cell for p in proposals}
    plan = GenerationPlan(
        quotas=tuple(Quota(capability=c, difficulty=d, count=cell_count) for c, d in cells)
    )
    return {"round_id": "round-v", "seed": 0, "plan": plan, "proposals": proposals}


def _proposal(task: TaskSpec) -> Proposal:
    return Proposal(cell_of(task), task.template or "", task)


def test_validate_rejects_each_kind_of_bad_proposal(sandbox: MobileSandbox) -> None:
    good, other = sample_tasks(2, 21, sandbox, split=Split.TRAIN)
    broken = TaskSpec.model_validate(
        good.model_dump(exclude={"id"}) | {"reference_plan": [{"kind": "finish", "answer": "ok"}]}
    )
    placeholder = TaskSpec.model_validate(
        other.model_dump(exclude={"id"}) | {"goal": "Send {name} the note", "params": {"x": 1}}
    )
    twin = TaskSpec.model_validate(good.model_dump(exclude={"id"}) | {"fingerprint": "fp-twin"})
    invalid = Proposal((Capability.MEMORY, Difficulty.EASY), "t", None, "no task")
    update = make_validate(sandbox, 0.9)(
        _state(
            [_proposal(good), _proposal(broken), _proposal(placeholder), _proposal(twin), invalid]
        )
    )
    assert [t.id for t in update["accepted"]] == [good.id]
    reasons = {(r.fingerprint, r.reason) for r in update["rejected"]}
    assert reasons == {
        (good.fingerprint, RejectionReason.DUPLICATE),  # "broken" shares good's fingerprint
        (placeholder.fingerprint, RejectionReason.MALFORMED_GOAL),
        ("fp-twin", RejectionReason.NEAR_DUPLICATE),
        (None, RejectionReason.INVALID),
    }


def test_validate_checks_the_reference_plan(sandbox: MobileSandbox) -> None:
    task = sample_tasks(1, 33, sandbox, split=Split.TRAIN)[0]
    broken = TaskSpec.model_validate(
        task.model_dump(exclude={"id"}) | {"reference_plan": [{"kind": "finish", "answer": "ok"}]}
    )
    update = make_validate(sandbox, 0.9)(_state([_proposal(broken)]))
    assert update["accepted"] == []
    [rejection] = update["rejected"]
    assert rejection.reason is RejectionReason.REFERENCE_FAILS
    assert "reference plan misses" in rejection.detail


@pytest.mark.parametrize(
    ("goal", "problem"),
    [
        ("Do it", "fewer than 3 words"),
        ("call {name} now please", "placeholder"),
        ("set an alarm now", "capital"),
    ],
)
def test_goal_problems(goal: str, problem: str) -> None:
    found = goal_problem(goal)
    assert found is not None and problem in found


def test_goal_problem_accepts_a_plain_request() -> None:
    assert goal_problem("Set an alarm for 07:30 called Gym.") is None


def test_llm_rewording_keeps_literals_or_is_rejected(sandbox: MobileSandbox) -> None:
    task = next(t for t in sample_tasks(40, 8, sandbox) if any(c.isdigit() for c in t.goal))
    kept = "Please, " + task.goal[0].lower() + task.goal[1:]
    replies = [
        text_reply(json.dumps({"goal": kept})),
        text_reply(json.dumps({"goal": "Do the usual thing for me"})),
        text_reply("not json at all"),
    ]
    with ScriptedChatServer(replies) as server:
        llm = OpenAIJsonLLM(make_client(server.base_url, None, 5.0), "fake-llm")
        good = reword(_proposal(task), llm)
        lost = reword(_proposal(task), llm)
        malformed = reword(_proposal(task), llm)
    assert good.task is not None and good.task.goal == kept
    assert good.task.source is TaskSource.LLM and good.task.fingerprint == task.fingerprint
    assert lost.task is None and lost.problem is not None and "lost" in lost.problem
    assert malformed.task is None and malformed.problem is not None
    assert "did not answer with JSON" in malformed.problem
