"""The task-constructor graph and its nodes, on the real sandbox."""

from __future__ import annotations

import datetime
import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence

import pytest
from pydantic import JsonValue

from agents import task_constructor
from agents.llm import LLMFailure, OpenAIJsonLLM
from agents.policies.openai_policy import make_client
from agents.task_constructor import (
    ConstructorState,
    Proposal,
    cell_of,
    construct_tasks,
    make_propose,
    make_validate,
    replan,
    reword,
    reword_all,
    what_it_asks,
)
from contract import (
    Capability,
    CostStats,
    Difficulty,
    FailureType,
    FeedbackReport,
    FeedbackSource,
    GenerationPlan,
    InvalidInputError,
    Quota,
    RejectedTask,
    RejectionReason,
    RepairQuota,
    Replay,
    RetryPolicy,
    Split,
    TaskPattern,
    TaskSource,
    TaskSpec,
    TemplateWeight,
    default_plan,
    goal_problem,
)
from curation.dedup import shingle_hashes, word_shingles
from curation.planning import plan_from_feedback
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import (
    Draw,
    build,
    instantiate,
    replay_reference,
    sample_tasks,
    template_named,
)
from envs.sandbox.templates.patterns import grounded_arguments
from storage.stores import GoalSketch
from tests.fakes import (
    RawReply,
    Reply,
    ScriptedChatServer,
    error_reply,
    json_reply,
    refusing_url,
    text_reply,
)


def test_fills_every_quota_of_the_default_plan(sandbox: MobileSandbox) -> None:
    plan = default_plan(30)
    tasks = construct_tasks("round-t", plan, 5, sandbox).tasks
    assert len(tasks) == 30
    assert Counter(cell_of(t) for t in tasks) == Counter(
        {(q.capability, q.difficulty): q.count for q in plan.quotas}
    )
    assert len({t.fingerprint for t in tasks}) == 30
    assert all(t.split is Split.TRAIN for t in tasks)
    assert all(replay_reference(t, sandbox).passed for t in tasks)


def test_is_deterministic_for_a_seed(sandbox: MobileSandbox) -> None:
    first = construct_tasks("round-t", default_plan(12), 9, sandbox).tasks
    second = construct_tasks("round-t", default_plan(12), 9, sandbox).tasks
    assert [t.id for t in first] == [t.id for t in second]


def test_known_fingerprints_are_duplicates_and_quotas_still_fill(sandbox: MobileSandbox) -> None:
    first = construct_tasks("round-a", default_plan(24), 3, sandbox).tasks
    known = frozenset(t.fingerprint for t in first)
    again, rejected, *_ = construct_tasks(
        "round-b", default_plan(24), 3, sandbox, known_fingerprints=known
    )
    assert len(again) == 24
    assert not known & {t.fingerprint for t in again}
    reasons = Counter(r.reason for r in rejected)
    assert reasons[RejectionReason.DUPLICATE] >= 20
    assert all(r.round_id == "round-b" for r in rejected)


def test_development_tasks_are_rejected_never_accepted(sandbox: MobileSandbox) -> None:
    tasks, rejected, *_ = construct_tasks("round-d", default_plan(240), 1, sandbox)
    assert all(t.split is Split.TRAIN for t in tasks)
    dev = [r for r in rejected if r.reason is RejectionReason.DEVELOPMENT_TASK]
    assert dev, "one parameter draw in ten is held out: some proposals must hit it"
    assert not {r.fingerprint for r in dev} & {t.fingerprint for t in tasks}


def test_dev_fingerprints_from_the_catalog_are_refused(sandbox: MobileSandbox) -> None:
    tasks = construct_tasks("round-x", default_plan(12), 4, sandbox).tasks
    dev = frozenset(t.fingerprint for t in tasks)
    again, rejected, *_ = construct_tasks(
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


def test_llm_rewording_keeps_literals_or_says_why_not(sandbox: MobileSandbox) -> None:
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
    assert isinstance(good, Proposal) and good.task is not None and good.task.goal == kept
    assert good.task.source is TaskSource.LLM and good.task.fingerprint == task.fingerprint
    assert isinstance(lost, LLMFailure) and "lost" in lost.reason and not lost.endpoint
    assert isinstance(malformed, LLMFailure) and not malformed.endpoint
    assert "did not answer with JSON" in malformed.reason


def test_an_llm_endpoint_that_fails_is_a_failure_of_the_endpoint(sandbox: MobileSandbox) -> None:
    """A closed port, an HTML page or a body that is no completion: an ``LLMFailure`` of
    the endpoint, never an exception."""
    task = sample_tasks(1, 8, sandbox)[0]
    down = OpenAIJsonLLM(make_client(refusing_url(), None, 1.0), "llm")
    outage = reword(_proposal(task), down)
    assert isinstance(outage, LLMFailure) and outage.endpoint
    assert "APIConnectionError" in outage.reason
    replies = [RawReply(b"<html>busy</html>", content_type="text/html"), json_reply([1])]
    with ScriptedChatServer(replies) as server:
        llm = OpenAIJsonLLM(make_client(server.base_url, None, 5.0), "fake-llm")
        failures = [reword(_proposal(task), llm) for _ in replies]
    for failure in failures:
        assert isinstance(failure, LLMFailure) and failure.endpoint
        assert "malformed completion" in failure.reason


def test_proposals_keep_their_template_wording_when_the_llm_fails(
    sandbox: MobileSandbox,
) -> None:
    """Rewording is optional: a wording that lost a literal keeps the template's goal, and
    after the endpoint failed (its retries spent) the pass asks it nothing more."""
    tasks = [t for t in sample_tasks(40, 8, sandbox) if any(c.isdigit() for c in t.goal)][:4]
    proposals = [_proposal(t) for t in tasks]
    replies: list[Reply] = [
        text_reply(json.dumps({"goal": "Please, " + tasks[0].goal})),
        text_reply(json.dumps({"goal": "Something vague instead"})),
        error_reply(500),
        error_reply(500),
    ]
    retry = RetryPolicy(attempts=2, backoff_s=0.0, max_backoff_s=0.0)
    with ScriptedChatServer(replies) as server:
        llm = OpenAIJsonLLM(make_client(server.base_url, None, 5.0), "fake-llm", retry=retry)
        out, down = reword_all(proposals, llm)
        asked = len(server.requests)
        later, still_down = reword_all(proposals, llm, down)
        asked_later = len(server.requests) - asked
    assert asked == 4  # the two failures of the third proposal end the asking
    assert down is not None and down.endpoint and still_down is down
    assert asked_later == 0, "a later batch of the pass asked an endpoint that was down"
    assert [p.task for p in later] == [p.task for p in proposals]
    assert [p.task.goal if p.task else None for p in out] == [
        "Please, " + tasks[0].goal,
        *(t.goal for t in tasks[1:]),
    ]
    assert [p.task.source if p.task else None for p in out[1:]] == [TaskSource.TEMPLATE] * 3


def test_construction_with_an_unreachable_llm_fills_its_quotas(sandbox: MobileSandbox) -> None:
    """An endpoint that refuses connections costs construction nothing but the wording."""
    down = OpenAIJsonLLM(
        make_client(refusing_url(), None, 1.0),
        "fake-llm",
        retry=RetryPolicy(attempts=2, backoff_s=0.0, max_backoff_s=0.0),
    )
    plan = default_plan(12)
    result = construct_tasks("round-llm-down", plan, 3, sandbox, llm=down)
    assert len(result.tasks) == 12
    assert all(t.source is TaskSource.TEMPLATE for t in result.tasks)


# -- plans built from feedback ------------------------------------------------------------


class SpyStore:
    def __init__(self) -> None:
        self.tasks: list[TaskSpec] = []
        self.rejections: list[RejectedTask] = []
        self.writes: list[int] = []
        self.sketches: dict[str, GoalSketch] = {}

    def add(self, round_id: str | None, tasks: Iterable[TaskSpec]) -> int:
        added = list(tasks)
        self.tasks += added
        self.writes.append(len(added))
        return len(added)

    def add_serialized(self, round_id: str | None, specs: Iterable[bytes]) -> int:
        return self.add(round_id, [TaskSpec.model_validate_json(s) for s in specs])

    def add_rejections(self, rejections: Sequence[RejectedTask]) -> int:
        self.rejections += rejections
        return len(rejections)

    def add_goal_sketches(self, sketches: Mapping[str, GoalSketch]) -> int:
        new = {k: v for k, v in sketches.items() if k not in self.sketches}
        self.sketches.update(new)
        return len(new)


def test_an_endpoint_down_in_one_batch_is_not_asked_again_in_the_pass(
    sandbox: MobileSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asked as often as when a pass is one batch: its tries, once a pass."""
    retry = RetryPolicy(attempts=2, backoff_s=0.0, max_backoff_s=0.0)

    def requests_made(batch: int) -> int:
        monkeypatch.setattr(task_constructor, "PROPOSAL_BATCH", batch)
        with ScriptedChatServer([error_reply(500)] * 200) as server:
            llm = OpenAIJsonLLM(make_client(server.base_url, None, 5.0), "fake-llm", retry=retry)
            result = construct_tasks("round-down", default_plan(12), 3, sandbox, llm=llm)
            assert len(result.tasks) == 12
            assert all(t.source is TaskSource.TEMPLATE for t in result.tasks)
            return len(server.requests)

    whole = requests_made(1000)
    assert whole % retry.attempts == 0 and whole >= retry.attempts
    assert requests_made(3) == whole, "a later batch of a pass asked the endpoint again"


def _watch_node(
    monkeypatch: pytest.MonkeyPatch, maker: str, see: Callable[[ConstructorState], object]
) -> None:
    """Have the node that ``task_constructor.<maker>`` builds show ``see`` each state."""
    real = getattr(task_constructor, maker)

    def make(*args: object) -> task_constructor.ConstructorNode:
        node = real(*args)

        def watched(state: ConstructorState) -> ConstructorState:
            see(state)
            return node(state)  # type: ignore[no-any-return]

        return watched

    monkeypatch.setattr(task_constructor, maker, make)


def test_accepted_tasks_are_stored_a_bounded_batch_to_a_write(
    sandbox: MobileSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(task_constructor, "RECORD_BATCH", 5)
    store = SpyStore()

    construct_tasks("round-batches", default_plan(12), 3, sandbox, store=store)

    assert store.writes[:2] == [5, 5] and max(store.writes) <= 5
    assert sum(store.writes) == len({t.id for t in store.tasks}) == 12


def test_each_batch_is_stored_as_it_is_decided_and_its_specs_let_go(
    sandbox: MobileSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = default_plan(40)
    whole = construct_tasks("round-s", plan, 5, sandbox, max_passes=6)
    monkeypatch.setattr(task_constructor, "PROPOSAL_BATCH", 9)
    store = SpyStore()
    specs_held: list[int] = []

    def see(state: ConstructorState) -> None:
        accepted = state.get("accepted", [])
        specs_held.append(sum(a.spec is not None for a in accepted))
        assert [t.id for t in store.tasks] == [a.id for a in accepted]

    _watch_node(monkeypatch, "make_propose", see)
    stored = construct_tasks("round-s", plan, 5, sandbox, store=store, max_passes=6)

    assert stored.tasks == [] and stored.plan == whole.plan
    assert sorted(store.tasks, key=lambda t: t.id) == whole.tasks
    assert len([n for n in store.writes if n]) > 2, "stored only at the end"
    assert max(store.writes) <= 9
    assert specs_held and not any(specs_held), "a stored task kept its spec"
    assert sorted(r.id for r in store.rejections) == sorted(r.id for r in whole.rejected)
    assert set(store.sketches) == {t.id for t in store.tasks}, "each filed with its goal sketch"
    assert {len(s.digest) for s in store.sketches.values()} == {64}
    for task in store.tasks:
        shingles = store.sketches[task.id].shingles
        assert shingles == shingle_hashes(word_shingles(what_it_asks(task)))


def test_a_pass_builds_its_draws_a_bounded_batch_at_a_time_with_the_same_outcome(
    sandbox: MobileSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = default_plan(60)
    whole = construct_tasks("round-p", plan, 5, sandbox, max_passes=6)
    monkeypatch.setattr(task_constructor, "PROPOSAL_BATCH", 7)
    built_at_once: list[int] = []
    _watch_node(
        monkeypatch, "make_validate", lambda state: built_at_once.append(len(state["proposals"]))
    )
    batched = construct_tasks("round-p", plan, 5, sandbox, max_passes=6)

    assert max(built_at_once) == 7 and len(built_at_once) > 60 // 7
    assert [t.id for t in batched.tasks] == [t.id for t in whole.tasks]
    assert batched.plan == whole.plan

    def reasons(rejected: Sequence[RejectedTask]) -> Counter[tuple[str | None, str]]:
        return Counter((r.fingerprint, r.detail) for r in rejected)

    assert reasons(batched.rejected) == reasons(whole.rejected)


def test_a_draw_repeating_an_earlier_batch_of_its_pass_is_refused_unbuilt(
    sandbox: MobileSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(task_constructor, "PROPOSAL_BATCH", 3)
    propose = make_propose(sandbox, None)
    state: ConstructorState = {"round_id": "r", "seed": 0, "plan": default_plan(12)}
    picks, _ = task_constructor.draw_pass(state)
    first = propose(state)
    assert len(first["proposals"]) == 3 and first["picks"] == picks[3:]
    (built,) = {p.task.fingerprint for p in first["proposals"][:1] if p.task is not None}

    later = propose({**state, **first, "picks": [picks[0]]})

    (repeat,) = later["proposals"]
    assert repeat.task is None and repeat.repeat is not None
    assert repeat.repeat.fingerprint == built
    assert repeat.problem == "a task with this fingerprint was proposed in this pass"
    assert "passes" not in later, "a batch of the same pass started a new one"


def _report(scores: dict[Capability, float], failures: dict[FailureType, int]) -> FeedbackReport:
    return FeedbackReport(
        format_version=1,
        source=FeedbackSource.TRAINER,
        produced_by="test",
        created_at=datetime.datetime(2026, 3, 20, tzinfo=datetime.UTC),
        capability_scores=scores,
        failure_counts=failures,
        cost=CostStats(mean_cost=0.3, mean_steps=4.0, mean_tool_calls=3.0, mean_output_tokens=90),
    )


def test_weak_memory_and_grounding_failures_give_memory_tasks_and_grounded_repairs(
    sandbox: MobileSandbox,
) -> None:
    scores = {
        Capability.TOOL_USE: 0.8,
        Capability.MEMORY: 0.3,
        Capability.SKILLS: 0.75,
        Capability.SUBAGENT: 0.7,
    }
    report = _report(scores, {FailureType.ARGUMENT_GROUNDING: 20})
    plan = plan_from_feedback(report, [], 48)
    [repair] = plan.repairs
    assert (repair.failure_type, repair.count) == (FailureType.ARGUMENT_GROUNDING, 12)
    store = SpyStore()
    built = construct_tasks("round-f", plan, 7, sandbox, store=store)
    assert (built.tasks, built.rejected) == ([], [])  # in the store, not held
    assert len(store.tasks) == 48 == len({t.id for t in store.tasks})
    grounding = set(built.repair_sets[FailureType.ARGUMENT_GROUNDING])
    assert len(grounding) == 12
    repairs = [t for t in store.tasks if t.id in grounding]
    for task in repairs:
        assert task.source is TaskSource.REPAIR
        assert TaskPattern.GROUNDING in template_named(task.template or "").patterns
        assert grounded_arguments(task, sandbox), f"{task.template}: no grounded argument"
        assert replay_reference(task, sandbox).passed
    quota_tasks = [t for t in store.tasks if t.id not in grounding]
    assert Counter(cell_of(t) for t in quota_tasks) == Counter(
        {(q.capability, q.difficulty): q.count for q in plan.quotas if q.count}
    )
    memory = sum(cell_of(t)[0] is Capability.MEMORY for t in quota_tasks)
    assert memory > sum(
        q.count for q in default_plan(36).quotas if q.capability is Capability.MEMORY
    )


def test_replays_and_the_preservation_set_come_back_as_stored_tasks(
    sandbox: MobileSandbox,
) -> None:
    stored = construct_tasks("round-1", default_plan(12), 2, sandbox).tasks
    plan = default_plan(6).model_copy(
        update={
            "replays": (Replay(fingerprint=stored[0].fingerprint, attempts=4, reason="shaky"),),
            "preserve": (Replay(fingerprint=stored[1].fingerprint, attempts=1, reason="kept"),),
        }
    )
    built = construct_tasks(
        "round-2",
        plan,
        2,
        sandbox,
        known_fingerprints=frozenset(t.fingerprint for t in stored),
        stored_tasks=stored,
    )
    assert len(built.tasks) == 6
    assert [(r.task, r.attempts, r.kind, r.reason) for r in built.recollect] == [
        (stored[0], 4, "replay", "shaky"),
        (stored[1], 1, "preserve", "kept"),
    ]
    assert built.plan.replays == plan.replays and built.plan.preserve == plan.preserve


@pytest.mark.parametrize("field", ["replays", "preserve"])
def test_a_development_task_is_never_replayed(sandbox: MobileSandbox, field: str) -> None:
    [dev] = sample_tasks(1, 13, sandbox, split=Split.DEV)
    [train] = sample_tasks(1, 14, sandbox, split=Split.TRAIN)
    for fingerprint, dev_fingerprints in (
        (dev.fingerprint, frozenset[str]()),  # a development task by its split
        (train.fingerprint, frozenset({train.fingerprint})),  # by the catalog's dev set
    ):
        plan = default_plan(4).model_copy(
            update={field: (Replay(fingerprint=fingerprint, attempts=2),)}
        )
        store = SpyStore()
        with pytest.raises(InvalidInputError, match=f"plan.{field}: {fingerprint} is a devel"):
            construct_tasks(
                "round-dev",
                plan,
                1,
                sandbox,
                store=store,
                stored_tasks=[dev, train],
                dev_fingerprints=dev_fingerprints,
            )
        assert store.tasks == [] and store.rejections == []


def test_a_replay_of_an_unknown_task_is_refused(sandbox: MobileSandbox) -> None:
    plan = default_plan(4).model_copy(
        update={"replays": (Replay(fingerprint="fp-nowhere", attempts=2),)}
    )
    with pytest.raises(InvalidInputError, match=r"plan\.replays: fp-nowhere is not a stored task"):
        construct_tasks("round-u", plan, 1, sandbox)


def test_template_weights_steer_which_templates_are_proposed(sandbox: MobileSandbox) -> None:
    cell = (Capability.TOOL_USE, Difficulty.EASY)
    quota = Quota(capability=cell[0], difficulty=cell[1], count=60)
    plain = GenerationPlan(quotas=(quota,))
    weighted = plain.model_copy(
        update={"template_weights": (TemplateWeight(template="text_contact", weight=1e-9),)}
    )
    propose = make_propose(sandbox, None)
    before = propose({"round_id": "r", "seed": 0, "plan": plain})["proposals"]
    after = propose({"round_id": "r", "seed": 0, "plan": weighted})["proposals"]
    assert any(p.template == "text_contact" for p in before)
    assert not any(p.template == "text_contact" for p in after)
    assert len(after) == 60


def test_a_repair_task_must_show_its_pattern(sandbox: MobileSandbox) -> None:
    grounded = instantiate(template_named("text_contact"), 4, sandbox)
    plain = instantiate(template_named("set_labelled_alarm"), 4, sandbox)
    plan = GenerationPlan(
        quotas=(), repairs=(RepairQuota(failure_type=FailureType.ARGUMENT_GROUNDING, count=2),)
    )
    proposals = [
        Proposal(cell_of(t), t.template or "", t, repair=FailureType.ARGUMENT_GROUNDING)
        for t in (grounded, plain)
    ]
    update = make_validate(sandbox, 0.9)(
        {"round_id": "round-r", "seed": 0, "plan": plan, "proposals": proposals}
    )
    assert [t.id for t in update["accepted"]] == [grounded.id]
    assert update["repair_of"] == {grounded.id: FailureType.ARGUMENT_GROUNDING}
    [rejection] = update["rejected"]
    assert (rejection.fingerprint, rejection.reason) == (plain.fingerprint, RejectionReason.INVALID)
    assert "does not show the grounding pattern" in rejection.detail


def test_a_used_up_repair_set_hands_its_quota_to_the_cells() -> None:
    plan = default_plan(12).model_copy(
        update={"repairs": (RepairQuota(failure_type=FailureType.RECOVERY, count=3, reason="r"),)}
    )
    state: ConstructorState = {
        "plan": plan,
        "accepted": [],
        "stalls": {FailureType.RECOVERY: 1},
        "proposed": {FailureType.RECOVERY: 8},
    }
    update = replan(state)
    assert FailureType.RECOVERY in update["exhausted"]
    new = update["plan"]
    [repair] = new.repairs
    assert repair.count == 0 and repair.reason == "r; 3 fewer: its templates are used up"
    assert new.total == plan.total == 15
    gained = [q for q in new.quotas if "from the recovery repair set" in q.reason]
    assert sum(q.count for q in gained) - len(gained) == 3


class EchoLLM:
    """Answers with the goal it was given, politely prefixed."""

    def ask_json(self, system: str, user: str) -> dict[str, JsonValue]:
        return {"goal": "Please: " + user}


def test_a_reworded_repair_task_stays_a_repair_task(sandbox: MobileSandbox) -> None:
    task = instantiate(template_named("text_contact"), 4, sandbox)
    repair = TaskSpec.model_validate(
        task.model_dump(exclude={"id"}) | {"source": TaskSource.REPAIR}
    )
    proposal = Proposal(cell_of(task), "text_contact", repair, repair=FailureType.ROUTING)
    reworded = reword(proposal, EchoLLM())
    assert isinstance(reworded, Proposal) and reworded.task is not None
    assert reworded.task.goal.startswith("Please: ")
    assert reworded.task.source is TaskSource.REPAIR
    assert reworded.repair is FailureType.ROUTING
    plain = reword(Proposal(cell_of(task), "text_contact", task), EchoLLM())
    assert isinstance(plain, Proposal) and plain.task is not None
    assert plain.task.source is TaskSource.LLM


def test_repeated_and_held_out_draws_are_refused_before_their_task_is_built(
    sandbox: MobileSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = construct_tasks("round-a", default_plan(24), 3, sandbox).tasks
    known = frozenset(t.fingerprint for t in first)
    built: list[str] = []

    def counting_build(drawn: Draw, sb: MobileSandbox) -> TaskSpec:
        built.append(drawn.fingerprint)
        return build(drawn, sb)

    monkeypatch.setattr("agents.task_constructor.build", counting_build)
    again, rejected, *_ = construct_tasks(
        "round-b", default_plan(24), 3, sandbox, known_fingerprints=known
    )

    assert len(again) == 24
    assert not known & set(built), "a known draw was built"
    assert len(built) == len(set(built)), "a draw was built twice"
    refused = [r for r in rejected if r.fingerprint not in built]
    assert {r.reason for r in refused} <= {
        RejectionReason.DUPLICATE,
        RejectionReason.DEVELOPMENT_TASK,
    }
    assert sum(r.fingerprint in known for r in refused) >= 20
    assert all(r.goal and r.fingerprint and r.template for r in refused)
