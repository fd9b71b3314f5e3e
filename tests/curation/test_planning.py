"""Competence-aware plans from feedback: hand-computed quota arithmetic, task-level
decisions, repair sets, ambiguous cases, the change table, determinism, configuration."""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping, Sequence
from fractions import Fraction

import pytest

from contract import (
    Capability,
    CostStats,
    Difficulty,
    FailureType,
    FeedbackReport,
    FeedbackSource,
    GenerationPlan,
    InvalidInputError,
    Split,
    TaskPattern,
    TaskSpec,
    TaskStats,
    Trajectory,
    default_plan,
)
from curation.planning import (
    Competence,
    Observed,
    PlanningConfig,
    apportion,
    capability_weights,
    competence,
    fingerprint_rank,
    observed_outcomes,
    plan_from_feedback,
)
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import instantiate, template_named

SANDBOX = MobileSandbox()
TOOL, MEMORY, SKILLS, SUBAGENT = Capability
EASY, MEDIUM, HARD = Difficulty
GROUNDING = FailureType.ARGUMENT_GROUNDING
UNKNOWN = "fp-" + "f" * 20
"""A fingerprint no catalog of these tests knows."""


def report(
    scores: Mapping[Capability, float] | None = None,
    tasks: Sequence[TaskStats] = (),
    failures: Mapping[FailureType, int] | None = None,
) -> FeedbackReport:
    return FeedbackReport(
        format_version=1,
        source=FeedbackSource.EVALUATION,
        produced_by="test",
        created_at=datetime.datetime(2026, 3, 20, tzinfo=datetime.UTC),
        capability_scores=dict(scores or {}),
        tasks=tuple(tasks),
        failure_counts=dict(failures or {}),
        cost=CostStats(mean_cost=0.3, mean_steps=4.0, mean_tool_calls=3.0, mean_output_tokens=90),
    )


def stats(
    task: TaskSpec | str,
    successes: int,
    attempts: int = 5,
    failures: Mapping[FailureType, int] | None = None,
) -> TaskStats:
    """A task's statistics; failures are left unattributed unless given."""
    fingerprint = task if isinstance(task, str) else task.fingerprint
    return TaskStats(
        fingerprint=fingerprint,
        attempts=attempts,
        successes=successes,
        mean_cost=0.2,
        failures=dict(failures or {}),
    )


def tasks_of(template: str, n: int, split: Split = Split.TRAIN) -> list[TaskSpec]:
    """``n`` distinct tasks of ``template`` with the given split."""
    found: dict[str, TaskSpec] = {}
    seed = 0
    while len(found) < n:
        task = instantiate(template_named(template), seed, SANDBOX)
        if task.split is split:
            found.setdefault(task.fingerprint, task)
        seed += 1
    return list(found.values())


def counts(plan: GenerationPlan) -> dict[tuple[Capability, Difficulty], int]:
    return {(q.capability, q.difficulty): q.count for q in plan.quotas}


def reasons(plan: GenerationPlan) -> dict[tuple[Capability, Difficulty], str]:
    return {(q.capability, q.difficulty): q.reason for q in plan.quotas}


# -- capability level: hand-computed quotas --------------------------------------------


def test_weak_memory_shifts_quota_to_memory_by_the_documented_rule() -> None:
    # deficits 0.2, 0.7, 0.3, 0.4 (sum 1.6); w = 0.125 + 0.5 * d / 1.6
    #   = 0.1875, 0.34375, 0.21875, 0.25 -> per cell of 120: 7.5, 13.75, 8.75, 10
    # floors 7, 13, 8, 10 (114); the 6 left go to the largest remainders (0.75: memory,
    # then skills, in cell order) -> 7, 14, 9, 10
    scores = {TOOL: 0.8, MEMORY: 0.3, SKILLS: 0.7, SUBAGENT: 0.6}
    weights = capability_weights(scores, PlanningConfig())
    assert [float(weights[c]) for c in Capability] == [0.1875, 0.34375, 0.21875, 0.25]
    plan = plan_from_feedback(report(scores), [], 120)
    expected = {TOOL: 7, MEMORY: 14, SKILLS: 9, SUBAGENT: 10}
    assert counts(plan) == {(c, d): expected[c] for c in Capability for d in Difficulty}
    assert plan.total == 120 and plan.repairs == ()
    assert reasons(plan)[(MEMORY, EASY)] == (
        "memory scored 0.30 < mean 0.60, share 0.25 → 0.34: 10 → 14"
    )
    assert reasons(plan)[(TOOL, HARD)] == (
        "tool_use scored 0.80 > mean 0.60, share 0.25 → 0.19: 10 → 7"
    )
    assert reasons(plan)[(SUBAGENT, EASY)] == (
        "subagent scored 0.60 = mean 0.60, share stays 0.25: 10 → 10"
    )


def test_no_capability_falls_below_the_floor() -> None:
    # deficit_mix 1: all weight to memory's deficit; the floor gives each other 0.1
    config = PlanningConfig(deficit_mix=1.0, min_capability_share=0.1)
    scores = {TOOL: 1.0, MEMORY: 0.0, SKILLS: 1.0, SUBAGENT: 1.0}
    weights = capability_weights(scores, config)
    assert [float(weights[c]) for c in Capability] == [0.1, 0.7, 0.1, 0.1]
    plan = plan_from_feedback(report(scores), [], 120, config)
    expected = {TOOL: 4, MEMORY: 28, SKILLS: 4, SUBAGENT: 4}
    assert counts(plan) == {(c, d): expected[c] for c in Capability for d in Difficulty}
    assert "share 0.25 → 0.10 (the floor)" in reasons(plan)[(SKILLS, MEDIUM)]


def test_a_report_that_changes_nothing_gives_the_default_plan() -> None:
    even = {c: 0.5 for c in Capability}
    for scores in ({}, even, {c: 1.0 for c in Capability}, {MEMORY: 0.4}):
        plan = plan_from_feedback(report(scores), [], 30)
        assert counts(plan) == counts(default_plan(30))
        assert plan.changes() == []


def test_an_unscored_capability_counts_at_the_mean() -> None:
    weights = capability_weights({TOOL: 0.9, MEMORY: 0.3}, PlanningConfig())
    assert float(weights[SKILLS]) == float(weights[SUBAGENT]) == 0.25
    assert weights[MEMORY] > weights[SKILLS] > weights[TOOL]


def test_apportion_uses_largest_remainders_with_ties_to_the_earlier_entry() -> None:
    assert apportion(10, [Fraction(9), Fraction(6), Fraction(3)]) == [5, 3, 2]
    assert apportion(5, [Fraction(1)] * 3) == [2, 2, 1]
    assert apportion(0, [Fraction(1)]) == [0]
    assert apportion(3, [Fraction(0), Fraction(0)]) == [0, 0]


# -- repair sets ---------------------------------------------------------------------------


def test_failure_types_yield_bounded_repair_sets_sized_by_their_counts() -> None:
    # budget floor(0.25 * 40) = 10 < 9 + 6 + 3 eligible failures; routing (2) is under
    # min_failures. 10 split 9:6:3 -> 5, 3.33, 1.67 -> 5, 3, 1 + 1 to the largest
    # remainder (recovery) -> 5, 3, 2. The 30 quota tasks make the even mix of 30.
    failures = {
        FailureType.ROUTING: 2,
        GROUNDING: 9,
        FailureType.STATE_TRACKING: 6,
        FailureType.RECOVERY: 3,
    }
    plan = plan_from_feedback(report(failures=failures), [], 40)
    sizes = {r.failure_type: r.count for r in plan.repairs}
    assert sizes == {GROUNDING: 5, FailureType.STATE_TRACKING: 3, FailureType.RECOVERY: 2}
    assert {r.pattern for r in plan.repairs} == {
        TaskPattern.GROUNDING,
        TaskPattern.STATEFUL,
        TaskPattern.RECOVERY,
    }
    assert counts(plan) == counts(default_plan(30))
    assert plan.total == 40
    grounding = next(r for r in plan.repairs if r.failure_type is GROUNDING)
    assert grounding.reason == (
        "9 of 20 attributed failures are argument_grounding (45%): 5 new grounding tasks "
        "(repair sets: 10 of 40 new tasks, at most 25%)"
    )
    # every quota says the repair sets took their share, with its numbers
    rows = {row.what: row for row in plan.changes()}
    assert (rows["quota tool_use/easy"].before, rows["quota tool_use/easy"].after) == (4, 3)
    assert rows["quota tool_use/easy"].reason == "repair sets take 10 of 40: 4 → 3"
    assert "quota memory/medium" not in rows  # 3 before and after


def test_repair_sets_take_no_more_tasks_than_the_failures_they_answer() -> None:
    plan = plan_from_feedback(report(failures={GROUNDING: 4}), [], 200)
    assert [(r.failure_type, r.count) for r in plan.repairs] == [(GROUNDING, 4)]
    assert plan.quota_total == 196


def test_without_failure_counts_the_tasks_failures_are_summed() -> None:
    memory = tasks_of("usual_takeaway_from_memory", 2)
    per_task = [stats(t, 1, 5, {FailureType.RECOVERY: 4}) for t in memory]
    plan = plan_from_feedback(report(tasks=per_task), memory, 100)
    assert [(r.failure_type, r.count) for r in plan.repairs] == [(FailureType.RECOVERY, 8)]


# -- task level ------------------------------------------------------------------------------


def test_mastered_tasks_are_down_sampled_but_a_preservation_set_is_kept() -> None:
    # memory/easy: 4 rated tasks, 2 mastered -> x (1 - 0.5 * 2/4) = 0.75; memory's quarter
    # of 120 (30) spread 0.75 : 1 : 1 -> 8.18, 10.91, 10.91 -> 8, 11, 11
    easy = tasks_of("wake_up_alarm_from_memory", 4)
    rated = [stats(easy[0], 5), stats(easy[1], 4), stats(easy[2], 2), stats(easy[3], 1)]
    assert [competence(s, PlanningConfig()) for s in rated] == [
        Competence.MASTERED,
        Competence.MASTERED,
        Competence.INCONSISTENT,
        Competence.INCONSISTENT,
    ]
    plan = plan_from_feedback(report(tasks=rated), easy, 120)
    assert counts(plan)[(MEMORY, EASY)] == 8
    assert counts(plan)[(MEMORY, MEDIUM)] == counts(plan)[(MEMORY, HARD)] == 11
    assert all(counts(plan)[(c, d)] == 10 for c in (TOOL, SKILLS, SUBAGENT) for d in Difficulty)
    assert reasons(plan)[(MEMORY, EASY)] == (
        "2 of 4 rated memory/easy tasks mastered (x 0.75 within memory): 10 → 8"
    )
    assert reasons(plan)[(MEMORY, HARD)] == "takes over from mastered memory cells: 10 → 11"
    # the preservation set: ceil(0.2 * 2) = 1 task, the first by fingerprint hash
    mastered = [easy[0].fingerprint, easy[1].fingerprint]
    [kept] = plan.preserve
    assert kept.fingerprint == min(mastered, key=fingerprint_rank)
    assert kept.attempts == 1 and "preservation set" in kept.reason
    # the template is proposed less often, by the same factor
    [weight] = plan.template_weights
    assert (weight.template, weight.weight) == ("wake_up_alarm_from_memory", 0.75)


def test_a_single_mastered_task_is_still_preserved() -> None:
    [task] = tasks_of("text_contact", 1)
    plan = plan_from_feedback(report(tasks=[stats(task, 5)]), [task], 12)
    assert [r.fingerprint for r in plan.preserve] == [task.fingerprint]


def test_the_preservation_set_is_a_share_of_the_mastered_bounded_by_the_round() -> None:
    many = tasks_of("text_contact", 30)
    mastered = [stats(t, 5) for t in many]
    plan = plan_from_feedback(report(tasks=mastered), many, 120)
    # ceil(0.2 * 30) = 6, under the bound floor(0.1 * 120) = 12
    assert len(plan.preserve) == 6
    expected = sorted(sorted((t.fingerprint for t in many), key=fingerprint_rank)[:6])
    assert [r.fingerprint for r in plan.preserve] == expected
    small = plan_from_feedback(report(tasks=mastered), many, 20)
    assert len(small.preserve) == 2  # floor(0.1 * 20)


def test_inconsistent_tasks_are_replayed_with_more_attempts() -> None:
    tasks = tasks_of("reply_to_an_email", 3)
    rated = [stats(tasks[0], 2), stats(tasks[1], 3), stats(tasks[2], 1)]  # 0.4, 0.6, 0.2
    plan = plan_from_feedback(report(tasks=rated), tasks, 120)
    assert {r.fingerprint: r.attempts for r in plan.replays} == {t.fingerprint: 4 for t in tasks}
    assert all("inconsistent" in r.reason for r in plan.replays)
    assert plan.preserve == ()
    # capped at floor(0.25 * 4) = 1: the most uncertain (nearest 0.5; 0.4 and 0.6 tie,
    # the fingerprint hash decides)
    capped = plan_from_feedback(report(tasks=rated), tasks, 4)
    [replay] = capped.replays
    near = sorted([tasks[0].fingerprint, tasks[1].fingerprint], key=fingerprint_rank)[0]
    assert replay.fingerprint == near
    assert "the 1 most uncertain of 3" in replay.reason


def test_unrated_and_never_solved_tasks_are_not_replayed() -> None:
    tasks = tasks_of("ride_to_place", 2)
    rated = [stats(tasks[0], 1, attempts=2), stats(tasks[1], 0, 6, {GROUNDING: 6})]
    few = {FailureType.ROUTING: 1}  # under min_failures: no repair set
    plan = plan_from_feedback(report(tasks=rated, failures=few), tasks, 24)
    assert plan.replays == plan.preserve == ()
    assert plan.recurate == ()
    assert counts(plan) == counts(default_plan(24))


def test_a_development_task_in_the_report_is_never_replayed_or_preserved() -> None:
    dev = tasks_of("email_landlord_from_memory", 2, split=Split.DEV)
    held_out = tasks_of("text_contact", 1, split=Split.DEV)
    known = [*dev, *held_out]
    rated = [stats(dev[0], 2), stats(dev[1], 5), stats(held_out[0], 3)]
    plan = plan_from_feedback(report(tasks=rated), known, 60)
    assert plan.replays == plan.preserve == ()
    assert plan.template_weights == ()
    assert plan.recurate == ()
    assert counts(plan) == counts(default_plan(60))


# -- ambiguous cases -------------------------------------------------------------------------


def test_ambiguous_tasks_go_back_to_curation_not_into_the_plan() -> None:
    tasks = tasks_of("archive_an_email", 3)
    rated = [
        stats(UNKNOWN, 2),  # the catalog does not know it
        stats(tasks[0], 2),  # inconsistent, but our verdicts say 5/5
        stats(tasks[1], 0),  # never solved, and nothing explains why
        stats(tasks[2], 0, failures={GROUNDING: 5}),  # never solved, explained: repair sets
    ]
    observed = {tasks[0].fingerprint: Observed(5, 5)}
    plan = plan_from_feedback(report(tasks=rated), tasks, 24, observed=observed)
    why = {r.fingerprint: r.reason for r in plan.recurate}
    assert set(why) == {UNKNOWN, tasks[0].fingerprint, tasks[1].fingerprint}
    assert why[UNKNOWN] == "the report knows the task, the catalog does not"
    assert "2/5 = 0.40" in why[tasks[0].fingerprint]
    assert "5/5 = 1.00 differ by 0.60 > 0.5" in why[tasks[0].fingerprint]
    assert "no failure type explains why" in why[tasks[1].fingerprint]
    assert plan.replays == plan.preserve == ()
    rows = {row.what for row in plan.changes()}
    assert {f"recurate {fp}" for fp in why} <= rows


def test_agreeing_verdicts_keep_a_task_in_the_plan() -> None:
    [task] = tasks_of("archive_an_email", 1)
    plan = plan_from_feedback(
        report(tasks=[stats(task, 2)]), [task], 24, observed={task.fingerprint: Observed(6, 3)}
    )
    assert [r.fingerprint for r in plan.replays] == [task.fingerprint]


def test_observed_outcomes_count_verified_attempts(faulty_trajectories: list[Trajectory]) -> None:
    observed = observed_outcomes(faulty_trajectories)
    assert sum(o.attempts for o in observed.values()) == len(faulty_trajectories)
    passed = sum(t.verdict.passed for t in faulty_trajectories)
    assert sum(o.successes for o in observed.values()) == passed


# -- the whole plan ----------------------------------------------------------------------------


def _mixed_inputs() -> tuple[FeedbackReport, list[TaskSpec]]:
    easy = tasks_of("wake_up_alarm_from_memory", 3)
    medium = tasks_of("reply_to_an_email", 2)
    known = [*easy, *medium]
    rated = [stats(easy[0], 5), stats(easy[1], 5), stats(easy[2], 2), stats(medium[0], 3)]
    rated.append(stats(UNKNOWN, 1))
    scores = {TOOL: 0.7, MEMORY: 0.31, SKILLS: 0.74, SUBAGENT: 0.73}
    failures = {GROUNDING: 14, FailureType.ROUTING: 1, FailureType.PREMATURE_TERMINATION: 5}
    return report(scores, rated, failures), known


def test_weak_memory_and_grounding_failures_shift_quota_and_add_a_grounding_repair_set() -> None:
    feedback, known = _mixed_inputs()
    plan = plan_from_feedback(feedback, known, 120)
    even = counts(default_plan(120))
    memory = sum(n for (c, _), n in counts(plan).items() if c is MEMORY)
    assert memory > sum(n for (c, _), n in even.items() if c is MEMORY)
    for capability in (TOOL, SKILLS, SUBAGENT):
        assert sum(n for (c, _), n in counts(plan).items() if c is capability) < memory
    repairs = {r.failure_type: r.count for r in plan.repairs}
    assert repairs[GROUNDING] > repairs[FailureType.PREMATURE_TERMINATION] > 0
    assert FailureType.ROUTING not in repairs
    assert plan.total == 120
    assert plan.source == f"feedback {feedback.id}"


def test_the_change_table_lists_every_change_with_a_reason() -> None:
    feedback, known = _mixed_inputs()
    plan = plan_from_feedback(feedback, known, 120)
    rows = plan.changes()
    whats = [row.what for row in rows]
    assert len(whats) == len(set(whats))
    even = counts(default_plan(120))
    changed = {
        f"quota {c.value}/{d.value}" for (c, d), n in counts(plan).items() if n != even[(c, d)]
    }
    assert changed and changed == {w for w in whats if w.startswith("quota ")}
    expected = (
        {f"repair {r.failure_type.value}" for r in plan.repairs}
        | {f"replay {r.fingerprint}" for r in plan.replays}
        | {f"preserve {r.fingerprint}" for r in plan.preserve}
        | {f"template {w.template}" for w in plan.template_weights}
        | {f"recurate {r.fingerprint}" for r in plan.recurate}
    )
    assert expected == {w for w in whats if not w.startswith("quota ")}
    assert plan.repairs and plan.replays and plan.preserve and plan.recurate
    for row in rows:
        assert row.reason
        if row.what.startswith("quota "):
            assert row.reason.endswith(f": {row.before} → {row.after}")
    memory_easy = next(r for r in rows if r.what == "quota memory/easy")
    assert "memory scored 0.31 < mean 0.62" in memory_easy.reason


def test_plans_are_deterministic() -> None:
    feedback, known = _mixed_inputs()
    first = plan_from_feedback(feedback, known, 120)
    assert plan_from_feedback(feedback, list(reversed(known)), 120) == first
    shuffled = feedback.model_copy(update={"tasks": tuple(reversed(feedback.tasks))})
    again = plan_from_feedback(shuffled, known, 120)
    assert again.model_dump(exclude={"source"}) == first.model_dump(exclude={"source"})
    assert first.to_json() == GenerationPlan.from_json(first.to_json()).to_json()


def test_a_negative_total_is_refused() -> None:
    with pytest.raises(InvalidInputError, match=r"^total:"):
        plan_from_feedback(report(), [], -1)


def test_zero_new_tasks_still_replays_and_preserves() -> None:
    feedback, known = _mixed_inputs()
    plan = plan_from_feedback(feedback, known, 0)
    assert plan.total == 0
    assert len(plan.preserve) == 1 and plan.replays


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("p_low", -0.1),
        ("p_high", 1.5),
        ("p_low", 0.9),  # not below p_high 0.8
        ("min_attempts", 0),
        ("min_attempts", 2.5),
        ("deficit_mix", math.nan),
        ("deficit_mix", "half"),
        ("min_capability_share", 0.3),
        ("downsample", 0.95),
        ("preserve_share", 0.0),
        ("max_preserve_share", 2.0),
        ("replay_attempts", 0),
        ("max_replay_share", -1.0),
        ("max_repair_share", 0.6),
        ("min_failures", 0),
        ("max_disagreement", 0.0),
    ],
)
def test_bad_planning_config_is_refused_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(InvalidInputError, match=f"^{field}:"):
        PlanningConfig(**{field: value})  # type: ignore[arg-type]


def test_observed_counts_are_checked() -> None:
    with pytest.raises(InvalidInputError, match=r"^observed:"):
        Observed(2, 3)
