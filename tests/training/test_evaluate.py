"""Development-set evaluation: real sandbox episodes of the scripted reference policy (and
of policies that give up on some tasks) summarized as a feedback report whose numbers can
be checked by hand, stored in a real catalog and read by the next round's plan."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agents.policies.base import Decision, PolicySession, TaskView
from agents.policies.scripted import ScriptedPolicy
from contract import (
    OVERALL_WEIGHTS,
    Action,
    Capability,
    ErrorKind,
    FailureType,
    Feedback,
    FeedbackSource,
    Finish,
    GenerationPlan,
    InvalidInputError,
    Outcome,
    PolicyInfo,
    Split,
    Step,
    TaskSpec,
    Trajectory,
    default_plan,
    parse_feedback_report,
    step_budget,
)
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import instantiate, template_named
from envs.sandbox.templates.development import draw_development_set, part_of
from flows.planning import plan_from_catalog
from storage import Catalog
from training.care import Budget
from training.episode_workers import PolicyWorkers
from training.evaluate import (
    default_budget,
    development_tasks,
    evaluate,
    overall_score,
)

SEED = 3
TOOL, MEMORY = Capability.TOOL_USE, Capability.MEMORY
SKILLS, SUBAGENT = Capability.SKILLS, Capability.SUBAGENT
TEMPLATES = {
    # template: (capabilities, tool calls of its reference plan at SEED)
    "forward_email_to_contact": ((TOOL,), 3),
    "play_song_by_title": ((TOOL,), 2),
    "email_landlord_from_memory": ((MEMORY, TOOL), 2),
    "reorder_usual_groceries": ((MEMORY, TOOL), 4),
    "pharmacy_opening_alarm": ((SUBAGENT, TOOL), 2),
    "pay_with_bank_code": ((SUBAGENT, TOOL), 3),
    "bedtime_routine_skill": ((SKILLS, TOOL), 3),
}
"""Seven development tasks (each template's first held-out draw at SEED): 7 use tools,
2 memory, 2 sub-agents, 1 skills."""


def _held_out(name: str, sandbox: MobileSandbox) -> TaskSpec:
    """The template's first development draw at SEED: a held-out template's first, a
    training template's first held-out parameter draw."""
    for variant in range(1000):
        task = instantiate(template_named(name), SEED, sandbox, variant=variant, split=Split.DEV)
        if task is not None:
            return task
    raise AssertionError(f"{name} has no held-out draw at seed {SEED}")


@pytest.fixture(scope="module")
def dev_tasks() -> list[TaskSpec]:
    sandbox = MobileSandbox()
    tasks = [_held_out(name, sandbox) for name in TEMPLATES]
    for task in tasks:  # what the numbers below are computed from
        assert task.split is Split.DEV
        assert task.capabilities == TEMPLATES[str(task.template)][0]
    return tasks


class GiveUpSession:
    def act(self, history: Sequence[Step]) -> Decision:
        return Decision(action=Finish(answer=""), model_output="finish()")


@dataclass
class GivesUpOn:
    """The reference policy, except that it finishes at once on tasks having one of
    ``capabilities``, and on the attempts numbered in ``attempts`` (0-based, per task)."""

    capabilities: frozenset[Capability] = frozenset()
    attempts: frozenset[int] = frozenset()
    started: dict[str, int] = field(default_factory=dict)

    @property
    def info(self) -> PolicyInfo:
        return PolicyInfo(name="gives-up", version="1")

    def start(self, task: TaskSpec, view: TaskView) -> PolicySession:
        attempt = self.started.get(task.id, 0)
        self.started[task.id] = attempt + 1
        if attempt in self.attempts or self.capabilities & set(task.capabilities):
            return GiveUpSession()
        return ScriptedPolicy().start(task, view)


class DeviceDownFor(MobileSandbox):
    """A sandbox whose device fails every tool call of the tasks of ``templates``."""

    def __init__(self, templates: frozenset[str]) -> None:
        super().__init__()
        self.templates = templates
        self.template: str | None = None

    def reset(self, task: TaskSpec) -> None:
        super().reset(task)
        self.template = task.template

    def execute(self, action: Action) -> Feedback:
        if self.template in self.templates and action.kind == "tool_call":
            return Feedback.failure(ErrorKind.BACKEND_ERROR, "the device is down")
        return super().execute(action)


def test_a_policy_that_always_succeeds_scores_one_everywhere(dev_tasks: list[TaskSpec]) -> None:
    seen: list[tuple[int, int]] = []

    result = evaluate(
        ScriptedPolicy(),
        dev_tasks,
        model="reference",
        samples=2,
        on_episode=lambda done, total: seen.append((done, total)),
    )

    report = result.report
    assert report.capability_scores == dict.fromkeys(Capability, 1.0)
    assert report.overall == 1.0
    assert report.source is FeedbackSource.EVALUATION and report.model == "reference"
    assert report.failure_counts == {}
    assert [s.fingerprint for s in report.tasks] == [t.fingerprint for t in dev_tasks]
    assert all((s.attempts, s.successes, s.failures) == (2, 2, {}) for s in report.tasks)
    # cost e = 0.5 * 0 output tokens + 0.5 * tool calls / the task's own step budget
    calls = [TEMPLATES[str(t.template)][1] for t in dev_tasks]
    budgets = [step_budget(t) for t in dev_tasks]
    costs = [0.5 * c / b for c, b in zip(calls, budgets, strict=True)]
    assert [s.mean_cost for s in report.tasks] == pytest.approx(costs)
    assert report.cost.mean_tool_calls == pytest.approx(sum(calls) / 7)
    assert report.cost.mean_steps == pytest.approx(sum(calls) / 7)  # verified: no finish step
    assert report.cost.mean_output_tokens == 0.0
    assert report.cost.mean_cost == pytest.approx(sum(costs) / 7)
    assert len(result.trajectories) == 14 and result.seconds > 0
    assert seen == [(i, 14) for i in range(1, 15)]
    assert (
        "7 tasks (1 of seen templates, 6 of unseen ones) x 2 samples = 14 episodes" in report.notes
    )
    assert "no backend errors" in report.notes
    assert parse_feedback_report(report.to_json()) == report


def test_failures_on_one_capability_give_its_rates_and_failure_types(
    dev_tasks: list[TaskSpec],
) -> None:
    report = evaluate(GivesUpOn(frozenset({MEMORY})), dev_tasks, model="m").report

    # 2 of the 7 tool-use tasks are the memory tasks the policy gives up on
    assert report.capability_scores == {
        TOOL: pytest.approx(5 / 7),
        MEMORY: 0.0,
        SKILLS: 1.0,
        SUBAGENT: 1.0,
    }
    assert report.overall == pytest.approx(0.5 * 5 / 7 + 0.2 * 0 + 0.2 * 1 + 0.1 * 1)
    failed = {s.fingerprint: s for s in report.tasks if s.successes == 0}
    memory = {t.fingerprint for t in dev_tasks if MEMORY in t.capabilities}
    assert set(failed) == memory
    # finishing at once is a premature termination, costing nothing (no tool call)
    assert all(s.failures == {FailureType.PREMATURE_TERMINATION: 1} for s in failed.values())
    assert all(s.mean_cost == 0.0 for s in failed.values())
    assert report.failure_counts == {FailureType.PREMATURE_TERMINATION: 2}
    assert parse_feedback_report(report.to_json()) == report


def test_each_task_counts_once_in_a_capability_whatever_its_samples(
    dev_tasks: list[TaskSpec],
) -> None:
    # the first of three attempts of every task fails; memory tasks fail all three
    policy = GivesUpOn(frozenset({MEMORY}), attempts=frozenset({0}))
    report = evaluate(policy, dev_tasks, model="m", samples=3).report

    assert {s.attempts for s in report.tasks} == {3}
    rates = {s.fingerprint: s.success_rate for s in report.tasks}
    assert sorted(rates.values()) == pytest.approx([0, 0, *[2 / 3] * 5])
    assert report.capability_scores[TOOL] == pytest.approx((5 * 2 / 3) / 7)
    assert report.capability_scores[SUBAGENT] == pytest.approx(2 / 3)
    assert report.failure_counts == {FailureType.PREMATURE_TERMINATION: 2 * 3 + 5}


def test_unmeasured_capabilities_are_dropped_from_overall_and_named(
    dev_tasks: list[TaskSpec],
) -> None:
    tool_and_memory = [t for t in dev_tasks if set(t.capabilities) <= {TOOL, MEMORY}]
    assert len(tool_and_memory) == 4

    report = evaluate(GivesUpOn(frozenset({MEMORY})), tool_and_memory, model="m").report

    assert report.capability_scores == {TOOL: 0.5, MEMORY: 0.0}
    # renormalized over the measured weights: (0.5 * 0.5 + 0.2 * 0) / (0.5 + 0.2)
    assert report.overall == pytest.approx(0.25 / 0.7)
    assert "not measured: skills, subagent; overall renormalized over tool_use, memory" in (
        report.notes
    )


def test_overall_score_weights() -> None:
    assert sum(OVERALL_WEIGHTS.values()) == pytest.approx(1.0)
    assert overall_score({}) is None
    assert overall_score({TOOL: 0.8, MEMORY: 0.5, SKILLS: 0.25, SUBAGENT: 1.0}) == pytest.approx(
        0.4 + 0.1 + 0.05 + 0.1
    )
    assert overall_score({SUBAGENT: 0.3}) == pytest.approx(0.3)


def test_backend_errors_are_left_out_of_the_rates_and_counted_in_the_notes(
    dev_tasks: list[TaskSpec],
) -> None:
    down = frozenset({"play_song_by_title", "pay_with_bank_code"})
    result = evaluate(
        ScriptedPolicy(),
        dev_tasks,
        model="m",
        samples=2,
        backend_factory=lambda: DeviceDownFor(down),
    )

    errors = [t for t in result.trajectories if t.metadata.outcome is Outcome.BACKEND_ERROR]
    assert {t.task.template for t in errors} == down and len(errors) == 4
    report = result.report
    # the policy failed nowhere: the device did
    assert report.capability_scores == dict.fromkeys(Capability, 1.0)
    assert report.failure_counts == {}
    assert {s.fingerprint for s in report.tasks} == {
        t.fingerprint for t in dev_tasks if t.template not in down
    }
    assert report.cost.mean_tool_calls == pytest.approx((3 + 2 + 4 + 2 + 3) / 5)
    assert "4 of 14 episodes ended in backend errors and are left out" in report.notes


def test_an_evaluation_where_every_episode_hits_a_backend_error_measures_nothing(
    dev_tasks: list[TaskSpec],
) -> None:
    report = evaluate(
        ScriptedPolicy(),
        dev_tasks,
        model="m",
        backend_factory=lambda: MobileSandbox(backend_fault_rate=1.0),
    ).report

    assert (report.capability_scores, report.overall, report.tasks) == ({}, None, ())
    assert report.cost.mean_cost == 0.0
    assert "no capability measured" in report.notes
    assert "7 of 7 episodes ended in backend errors" in report.notes
    assert parse_feedback_report(report.to_json()) == report


def test_the_same_tasks_give_the_same_numbers_every_time(dev_tasks: list[TaskSpec]) -> None:
    policy = GivesUpOn(frozenset({SUBAGENT}))
    budget = Budget(output_tokens=10, tool_calls=4)
    first = evaluate(
        policy, dev_tasks, model="m", budget_of=lambda _: budget, token_weight=0.0
    ).report
    second = evaluate(
        policy, dev_tasks, model="m", budget_of=lambda _: budget, token_weight=0.0
    ).report

    assert first.model_dump(exclude={"id", "created_at"}) == second.model_dump(
        exclude={"id", "created_at"}
    )
    # a tighter budget: the 4-call task is at the cost ceiling
    groceries = next(t for t in dev_tasks if t.template == "reorder_usual_groceries")
    stats = next(s for s in first.tasks if s.fingerprint == groceries.fingerprint)
    assert stats.mean_cost == 1.0
    assert "cost budget: 10 output tokens, 4 tool calls (token weight 0)" in first.notes


def test_the_default_budget_follows_the_step_limit() -> None:
    assert default_budget(15) == Budget(output_tokens=256 * 15, tool_calls=15)


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        pytest.param({"tasks": []}, "tasks", id="no tasks"),
        pytest.param({"samples": 0}, "samples", id="no samples"),
        pytest.param({"max_steps": 0}, "max_steps", id="no steps"),
        pytest.param({"token_weight": 1.5}, "token_weight", id="token weight"),
        pytest.param({"model": ""}, "model", id="no model name"),
    ],
)
def test_bad_arguments_are_refused_naming_them(
    dev_tasks: list[TaskSpec], arguments: dict[str, object], field: str
) -> None:
    call: dict[str, object] = {"tasks": dev_tasks, "model": "m"} | arguments
    with pytest.raises(InvalidInputError) as refused:
        evaluate(ScriptedPolicy(), **call)  # type: ignore[arg-type]
    assert refused.value.field == field


def test_a_task_given_twice_is_refused(dev_tasks: list[TaskSpec]) -> None:
    with pytest.raises(InvalidInputError, match=r"tasks\[7\]: .* appears twice .*tasks\[0\]"):
        evaluate(ScriptedPolicy(), [*dev_tasks, dev_tasks[0]], model="m")


# -- the development set of a catalog, and the next round ---------------------------------


def _catalog(tmp_path: Path) -> Catalog:
    return Catalog.open(tmp_path / "state" / "catalog.duckdb")


def test_a_catalog_without_development_tasks_says_how_to_get_some(tmp_path: Path) -> None:
    catalog = _catalog(tmp_path)
    train = instantiate(template_named("text_contact"), SEED, MobileSandbox())
    assert train.split is Split.TRAIN
    catalog.tasks.add("round-a", [train])

    with pytest.raises(InvalidInputError, match="no development tasks") as refused:
        development_tasks(catalog)
    assert refused.value.field == "catalog"
    assert "split=Split.DEV" in str(refused.value)


def test_the_development_set_is_one_dev_task_per_fingerprint_in_a_stable_order(
    tmp_path: Path, dev_tasks: list[TaskSpec]
) -> None:
    catalog = _catalog(tmp_path)
    train = instantiate(template_named("text_contact"), SEED, MobileSandbox())
    # a copy of a development task that claims to be a training task
    twin = TaskSpec.model_validate(
        dev_tasks[0].model_dump(mode="json", exclude={"id"}) | {"split": "train"}
    )
    assert twin.fingerprint == dev_tasks[0].fingerprint and twin.id != dev_tasks[0].id
    catalog.tasks.add("round-a", [twin, train, *reversed(dev_tasks)])

    found = development_tasks(catalog)

    assert found == sorted(dev_tasks, key=lambda t: t.fingerprint)
    assert development_tasks(catalog) == found


def test_the_next_round_plans_from_the_evaluation(
    tmp_path: Path, dev_tasks: list[TaskSpec]
) -> None:
    path = tmp_path / "state" / "catalog.duckdb"
    with Catalog.open(path) as catalog:
        catalog.tasks.add("round-dev", dev_tasks)
        tasks = development_tasks(catalog)
        mastered = evaluate(ScriptedPolicy(), tasks, model="r1").report
        catalog.feedback.add(mastered)
    even = [q.count for q in default_plan(24).quotas]

    plan = plan_from_catalog(path, 24)

    # every capability at 1.0: nothing to shift
    assert plan.source == f"feedback {mastered.id}"
    assert [q.count for q in plan.quotas] == even

    with Catalog.open(path) as catalog:
        weak = evaluate(GivesUpOn(frozenset({MEMORY})), tasks, model="r2").report
        assert catalog.feedback.add(weak) is True
        assert catalog.feedback.latest() == weak

    plan = plan_from_catalog(path, 24)

    assert plan.source == f"feedback {weak.id}"

    def share(capability: Capability, plan: GenerationPlan) -> int:
        return sum(q.count for q in plan.quotas if q.capability is capability)

    assert share(MEMORY, plan) > share(MEMORY, default_plan(24)) == 6
    assert share(SKILLS, plan) < share(SKILLS, default_plan(24))
    assert plan.quota_total + plan.repair_total == 24
    # development tasks are known to the catalog: never replayed, nor sent to curation
    assert (plan.replays, plan.preserve, plan.recurate) == ((), (), ())


@dataclass
class OnlyImitates:
    """The reference policy on tasks of training templates; gives up on held-out ones."""

    @property
    def info(self) -> PolicyInfo:
        return PolicyInfo(name="imitator", version="1")

    def start(self, task: TaskSpec, view: TaskView) -> PolicySession:
        if part_of(task) == "unseen":
            return GiveUpSession()
        return ScriptedPolicy().start(task, view)


def test_the_seen_and_unseen_parts_are_scored_on_their_own() -> None:
    tasks = list(draw_development_set(12, 2, MobileSandbox()).tasks)
    report = evaluate(OnlyImitates(), tasks, model="m").report
    seen, unseen = report.parts["seen"], report.parts["unseen"]
    assert (seen.tasks, unseen.tasks) == (9, 3)
    assert seen.overall == 1.0 and set(seen.capability_scores.values()) == {1.0}
    assert unseen.overall == 0.0
    assert report.overall is not None and 0.0 < report.overall < 1.0
    assert "12 tasks (9 of seen templates, 3 of unseen ones)" in report.notes
    assert "smaller than the default development set of 120 tasks" in report.notes
    assert parse_feedback_report(report.to_json()) == report


def test_a_report_without_parts_keeps_the_id_it_was_stored_with() -> None:
    example = (
        Path(__file__).parents[2] / "docs" / "examples" / "feedback-report.json"
    ).read_bytes()
    report = parse_feedback_report(example)
    assert report.parts == {}
    assert "parts" not in report.model_dump(mode="json")
    assert parse_feedback_report(report.to_json()).id == report.id


# -- worker processes --------------------------------------------------------------------


def _gives_up_on_subagents_and_second_attempts() -> GivesUpOn:
    """A policy a worker process builds (pickled by name, as a module-level function)."""
    return GivesUpOn(frozenset({SUBAGENT}), attempts=frozenset({1}))


def _device_down_for_groceries() -> DeviceDownFor:
    return DeviceDownFor(frozenset({"reorder_usual_groceries"}))


def _cannot_build() -> GivesUpOn:
    raise RuntimeError("the model folder is gone")


def _episode(trajectory: Trajectory) -> dict[str, Any]:
    """The whole episode but what differs between any two runs (its id, the latency)."""
    return trajectory.model_dump(mode="json", exclude={"id": True, "cost": {"latency_ms"}})


def test_worker_processes_run_the_same_episodes_and_report_the_same_numbers(
    dev_tasks: list[TaskSpec],
) -> None:
    """Two workers, each with its own policy and backend: every sample of a task runs in
    one of them, so a policy that counts a task's attempts (it gives up on the second)
    and a backend that fails one template's calls give what one process gives."""
    arguments: dict[str, Any] = {
        "model": "m",
        "samples": 2,
        "backend_factory": _device_down_for_groceries,
    }
    here = evaluate(_gives_up_on_subagents_and_second_attempts(), dev_tasks, **arguments)
    progress: list[tuple[int, int]] = []
    workers = evaluate(
        PolicyWorkers(_gives_up_on_subagents_and_second_attempts, processes=2),
        dev_tasks,
        on_episode=lambda done, total: progress.append((done, total)),
        **arguments,
    )

    assert [_episode(t) for t in workers.trajectories] == [_episode(t) for t in here.trajectories]
    assert workers.report.model_dump(exclude={"id", "created_at"}) == here.report.model_dump(
        exclude={"id", "created_at"}
    )
    # the numbers this compares are not trivial: failures, backend errors and successes
    assert 0 < here.report.overall < 1  # type: ignore[operator]
    assert "1 of 14 episodes ended in backend errors" in here.report.notes
    # progress after each task, every sample of it done
    assert progress == [(2 * i, 2 * len(dev_tasks)) for i in range(1, len(dev_tasks) + 1)]


def test_a_worker_that_cannot_build_its_policy_fails_the_evaluation_at_once(
    dev_tasks: list[TaskSpec],
) -> None:
    with pytest.raises(BrokenProcessPool):
        evaluate(PolicyWorkers(_cannot_build, processes=2), dev_tasks, model="m")


@pytest.mark.parametrize("processes", [0, -1, True])
def test_workers_need_at_least_one_process(processes: int) -> None:
    with pytest.raises(InvalidInputError) as refused:
        PolicyWorkers(_gives_up_on_subagents_and_second_attempts, processes=processes)
    assert refused.value.field == "processes"
