"""Evaluation on the development set, written as a feedback report for the next round.

``evaluate`` runs a policy ``samples`` times on each task (the same tasks, with the seeds
they carry, every time a model is evaluated) and summarizes the episodes as a
``contract.FeedbackReport`` (``docs/feedback-report.md``):

- **Backend errors are not the policy's failures.** An episode whose outcome is
  ``backend_error`` (the device or the model endpoint failed) is left out of every
  number below; the notes say how many there were. A task whose every attempt was one
  has no ``TaskStats`` and counts for no capability.
- ``tasks``: per fingerprint, the attempts (episodes without a backend error), the
  verified successes, the mean normalized execution cost, and the failed attempts by
  their attributed failure type (``trajectory.metadata.failure_attribution``; a failure
  may stay unattributed). ``failure_counts`` sums them.
- ``capability_scores``: per capability, the mean success rate of the measured tasks
  that have it (each task counts once, whatever its number of attempts; a task with two
  capabilities counts for both). A capability no measured task has is left out.
- ``overall``: MobilePA's ``0.5 tool_use + 0.2 memory + 0.2 skills + 0.1 subagent``.
  When a capability was not measured, its weight is dropped and the others are
  renormalized to sum to 1 (the notes name the capabilities left out); None when none
  was measured.
- ``parts``: the same scores for each labelled part of the development set, ``seen``
  (held-out draws of training templates) and ``unseen`` (held-out templates).
- ``cost``: means over the attempts; the normalized cost is CARE's ``execution_cost``
  against the episode's budget (``budget_of(task)``; by default ``default_budget`` of the
  step budget: ``TOKENS_PER_STEP`` = 256 output tokens and one tool call per step).

Every episode runs under its task's own step budget (``contract.step_budget``) unless
``max_steps`` overrides it for all.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from statistics import fmean

from agents.policies.base import Policy
from agents.runner import run_episode
from contract import (
    DEFAULT_DEV_TASKS,
    FEEDBACK_FORMAT_VERSION,
    OVERALL_WEIGHTS,
    Capability,
    CostStats,
    FailureType,
    FeedbackReport,
    FeedbackSource,
    InvalidInputError,
    MixTarget,
    Outcome,
    PartScores,
    Split,
    TaskSpec,
    TaskStats,
    Trajectory,
    step_budget,
)
from envs.backend import Backend
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.development import (
    PARTS,
    draw_development_set,
    part_of,
)
from storage import Catalog
from training.care import Budget, Rollout, execution_cost
from training.episode_workers import PolicyWorkers, run_in_workers

TOKENS_PER_STEP = 256
"""Output tokens a step may spend before it counts as costly: a tool call with its
arguments and a short thought fits well within it."""


@dataclass(frozen=True)
class Evaluation:
    """An evaluation: the report, every episode (backend errors included), and its
    wall-clock duration in seconds."""

    report: FeedbackReport
    trajectories: tuple[Trajectory, ...]
    seconds: float


def default_budget(max_steps: int) -> Budget:
    """The cost budget of an episode of at most ``max_steps`` steps."""
    return Budget(output_tokens=TOKENS_PER_STEP * max_steps, tool_calls=max_steps)


def overall_score(scores: Mapping[Capability, float]) -> float | None:
    """MobilePA's weighted overall, renormalized over the capabilities in ``scores``;
    None when there are none."""
    weights = {c: w for c, w in OVERALL_WEIGHTS.items() if c in scores}
    if not weights:
        return None
    return sum(w * scores[c] for c, w in weights.items()) / sum(weights.values())


def evaluate(
    policy: Policy | PolicyWorkers,
    tasks: Sequence[TaskSpec],
    *,
    model: str,
    produced_by: str = "flywheel-trainer",
    source: FeedbackSource = FeedbackSource.EVALUATION,
    samples: int = 1,
    max_steps: int | None = None,
    budget_of: Callable[[TaskSpec], Budget] | None = None,
    token_weight: float = 0.5,
    backend_factory: Callable[[], Backend] = MobileSandbox,
    on_episode: Callable[[int, int], None] | None = None,
) -> Evaluation:
    """Run ``policy`` ``samples`` times on each of ``tasks`` (one backend from
    ``backend_factory``, reset for every episode) and report how it fared (module
    docstring). ``PolicyWorkers`` run the tasks in worker processes, each with its own
    policy and backend (``episode_workers``), with the same episodes and report.
    ``on_episode(done, total)`` is called after each episode (after each task's, in
    workers). Refuses
    (InvalidInputError naming the argument) no tasks, two tasks with one fingerprint,
    ``samples`` or ``max_steps`` below 1, a ``token_weight`` outside [0, 1], an empty
    ``model``."""
    _check_arguments(tasks, model, samples, max_steps, token_weight)
    if budget_of is None:

        def budget_of(task: TaskSpec) -> Budget:
            return default_budget(step_budget(task, max_steps))

    budgets = {task.id: budget_of(task) for task in tasks}
    started = time.monotonic()
    if isinstance(policy, PolicyWorkers):
        trajectories = run_in_workers(
            policy,
            tasks,
            samples=samples,
            max_steps=max_steps,
            backend_factory=backend_factory,
            on_episode=on_episode,
        )
    else:
        trajectories = _run_here(policy, tasks, samples, max_steps, backend_factory, on_episode)
    report = _report(
        tasks, trajectories, budgets, token_weight, model, produced_by, source, samples, max_steps
    )
    return Evaluation(report, tuple(trajectories), time.monotonic() - started)


def _run_here(
    policy: Policy,
    tasks: Sequence[TaskSpec],
    samples: int,
    max_steps: int | None,
    backend_factory: Callable[[], Backend],
    on_episode: Callable[[int, int], None] | None,
) -> list[Trajectory]:
    backend = backend_factory()
    total = len(tasks) * samples
    trajectories: list[Trajectory] = []
    for task in tasks:
        for sample in range(samples):
            trajectories.append(
                run_episode(task, backend, policy, max_steps=max_steps, attempt=sample)
            )
            if on_episode is not None:
                on_episode(len(trajectories), total)
    return trajectories


def development_tasks(catalog: Catalog) -> list[TaskSpec]:
    """The catalog's development set: one task per development fingerprint (the stored
    development copy, the smallest id first), ordered by fingerprint. InvalidInputError
    when the catalog has none."""
    fingerprints = catalog.tasks.fingerprints(Split.DEV)
    if not fingerprints:
        raise InvalidInputError(
            "catalog",
            f"{catalog.path} has no development tasks (split 'dev'), so there is nothing to "
            "evaluate on: store a development set first, e.g. catalog.tasks.add(None, "
            "sample_tasks(n, seed, MobileSandbox(), split=Split.DEV)) "
            "(envs.sandbox.templates.catalog); rounds construct only training tasks",
        )
    chosen: dict[str, TaskSpec] = {}
    for task in catalog.tasks.with_fingerprints(fingerprints):  # ordered by id
        held = chosen.get(task.fingerprint)
        if held is None or (task.split is Split.DEV and held.split is not Split.DEV):
            chosen[task.fingerprint] = task
    return [chosen[fp] for fp in sorted(chosen)]


def ensure_development_set(
    catalog: Catalog, size: int, seed: int, target: MixTarget | None = None
) -> list[TaskSpec]:
    """The catalog's development set, storing one first when it has none: ``size``
    development tasks drawn with ``seed``, stratified by capability x difficulty in
    proportion to ``target`` (even when None) in a seen and an unseen part
    (``envs.sandbox.templates.development``), kept from then on, so every model is
    evaluated on the same tasks with the same seeds. Rounds never construct development
    tasks (the constructor refuses their fingerprints), so a training dataset cannot
    hold one."""
    if not catalog.tasks.fingerprints(Split.DEV):
        drawn = draw_development_set(
            size,
            seed,
            MobileSandbox(),
            capability_mix=target.capability if target else None,
            difficulty_mix=target.difficulty if target else None,
        )
        catalog.tasks.add(None, drawn.tasks)
    return development_tasks(catalog)


def _check_arguments(
    tasks: Sequence[TaskSpec],
    model: str,
    samples: int,
    max_steps: int | None,
    token_weight: float,
) -> None:
    if not tasks:
        raise InvalidInputError("tasks", "there is nothing to evaluate: no tasks were given")
    first: dict[str, int] = {}
    for i, task in enumerate(tasks):
        earlier = first.setdefault(task.fingerprint, i)
        if earlier != i:
            raise InvalidInputError(
                f"tasks[{i}]",
                f"fingerprint {task.fingerprint} appears twice (first at tasks[{earlier}]): "
                "use samples for more attempts",
            )
    if not model:
        raise InvalidInputError("model", "must not be empty")
    for name, value in (("samples", samples), ("max_steps", max_steps)):
        if name == "max_steps" and value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidInputError(name, f"{value!r} must be an integer >= 1")
    if not 0.0 <= token_weight <= 1.0:
        raise InvalidInputError("token_weight", f"{token_weight} is outside [0, 1]")


def _report(
    tasks: Sequence[TaskSpec],
    trajectories: Sequence[Trajectory],
    budgets: Mapping[str, Budget],
    token_weight: float,
    model: str,
    produced_by: str,
    source: FeedbackSource,
    samples: int,
    max_steps: int | None,
) -> FeedbackReport:
    by_task: dict[str, list[Trajectory]] = {task.fingerprint: [] for task in tasks}
    backend_errors = 0
    for trajectory in trajectories:
        if trajectory.metadata.outcome is Outcome.BACKEND_ERROR:
            backend_errors += 1
        else:
            by_task[trajectory.task.fingerprint].append(trajectory)
    measured = [t for t in trajectories if t.metadata.outcome is not Outcome.BACKEND_ERROR]
    costs = {t.id: _cost(t, budgets[t.task.id], token_weight) for t in measured}
    stats = [_task_stats(fp, runs, costs) for fp, runs in by_task.items() if runs]
    rates = {s.fingerprint: s.success_rate for s in stats}
    scores = capability_scores(tasks, rates)
    parts = {part: _part_scores([t for t in tasks if part_of(t) == part], rates) for part in PARTS}
    failure_counts: Counter[FailureType] = Counter()
    for s in stats:
        failure_counts.update(s.failures)
    return FeedbackReport(
        format_version=FEEDBACK_FORMAT_VERSION,
        source=source,
        produced_by=produced_by,
        model=model,
        created_at=datetime.now(UTC),
        capability_scores=scores,
        overall=overall_score(scores),
        tasks=tuple(stats),
        failure_counts={f: failure_counts[f] for f in FailureType if failure_counts[f]},
        cost=_cost_stats(measured, costs),
        parts={part: scores for part, scores in parts.items() if scores.tasks},
        notes=_notes(tasks, samples, max_steps, budgets, token_weight, scores, backend_errors),
    )


def capability_scores(
    tasks: Sequence[TaskSpec], rates: Mapping[str, float]
) -> dict[Capability, float]:
    """Per capability, the mean success rate of the measured tasks that have it."""
    by_capability: dict[Capability, list[float]] = {}
    for task in tasks:
        if task.fingerprint in rates:
            for capability in task.capabilities:
                by_capability.setdefault(capability, []).append(rates[task.fingerprint])
    return {c: fmean(by_capability[c]) for c in Capability if c in by_capability}


def _part_scores(tasks: Sequence[TaskSpec], rates: Mapping[str, float]) -> PartScores:
    scores = capability_scores(tasks, rates)
    measured = sum(t.fingerprint in rates for t in tasks)
    return PartScores(tasks=measured, capability_scores=scores, overall=overall_score(scores))


def _cost(trajectory: Trajectory, budget: Budget, token_weight: float) -> float:
    rollout = Rollout(
        success=trajectory.verdict.passed,
        progress=trajectory.verdict.progress,
        output_tokens=trajectory.cost.output_tokens,
        tool_calls=trajectory.cost.tool_calls,
    )
    return execution_cost(rollout, budget, token_weight)


def _task_stats(
    fingerprint: str, runs: Sequence[Trajectory], costs: Mapping[str, float]
) -> TaskStats:
    failures = Counter(
        t.metadata.failure_attribution
        for t in runs
        if t.metadata.outcome is Outcome.FAILURE and t.metadata.failure_attribution is not None
    )
    return TaskStats(
        fingerprint=fingerprint,
        attempts=len(runs),
        successes=sum(t.metadata.outcome is Outcome.SUCCESS for t in runs),
        mean_cost=_share(fmean(costs[t.id] for t in runs)),
        failures={f: failures[f] for f in FailureType if failures[f]},
    )


def _cost_stats(measured: Sequence[Trajectory], costs: Mapping[str, float]) -> CostStats:
    if not measured:
        return CostStats(mean_cost=0.0, mean_steps=0.0, mean_tool_calls=0.0, mean_output_tokens=0.0)
    return CostStats(
        mean_cost=_share(fmean(costs[t.id] for t in measured)),
        mean_steps=fmean(t.cost.steps for t in measured),
        mean_tool_calls=fmean(t.cost.tool_calls for t in measured),
        mean_output_tokens=fmean(t.cost.output_tokens for t in measured),
    )


def _span(values: Sequence[int]) -> str:
    return str(values[0]) if len(values) == 1 else f"{values[0]} to {values[-1]}"


def _share(value: float) -> float:
    """A mean of values in [0, 1], kept there against float rounding."""
    return min(1.0, max(0.0, value))


def _notes(
    tasks: Sequence[TaskSpec],
    samples: int,
    max_steps: int | None,
    budgets: Mapping[str, Budget],
    token_weight: float,
    scores: Mapping[Capability, float],
    backend_errors: int,
) -> str:
    episodes = len(tasks) * samples
    steps = sorted({step_budget(t, max_steps) for t in tasks})
    allowed = (
        f"at most {steps[0]} steps each"
        if len(steps) == 1
        else f"each task's own step budget ({steps[0]} to {steps[-1]} steps)"
    )
    tokens = sorted({b.output_tokens for b in budgets.values()})
    calls = sorted({b.tool_calls for b in budgets.values()})
    counts = {part: sum(part_of(t) == part for t in tasks) for part in PARTS}
    parts = [
        f"development set: {len(tasks)} tasks ({counts['seen']} of seen templates, "
        f"{counts['unseen']} of unseen ones) x {samples} samples = {episodes} episodes, " + allowed,
        f"cost budget: {_span(tokens)} output tokens, {_span(calls)} tool calls "
        f"(token weight {token_weight:g})",
    ]
    if len(tasks) < DEFAULT_DEV_TASKS:
        parts.append(
            f"smaller than the default development set of {DEFAULT_DEV_TASKS} tasks "
            "(set by dev_tasks): one task moves a capability's score by more"
        )
    missing = [c.value for c in Capability if c not in scores]
    if scores and missing:
        parts.append(
            f"not measured: {', '.join(missing)}; overall renormalized over "
            f"{', '.join(c.value for c in Capability if c in scores)}"
        )
    elif not scores:
        parts.append("no capability measured: overall not computed")
    parts.append(
        f"{backend_errors} of {episodes} episodes ended in backend errors and are left out"
        if backend_errors
        else "no backend errors"
    )
    return "; ".join(parts) + "."
