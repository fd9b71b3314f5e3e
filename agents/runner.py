"""The episode runner: one plain function from a task, a backend and a policy to a
trajectory."""

from __future__ import annotations

from agents.policies.base import Decision, Policy, TaskView
from contract import (
    DEFAULT_MAX_STEPS,
    TERMINAL_KINDS,
    TURN_ENDING_KINDS,
    Cost,
    ErrorKind,
    Feedback,
    Outcome,
    Step,
    TaskSpec,
    Termination,
    Trajectory,
    TrajectoryMetadata,
    Verdict,
    step_budget,
)
from curation.attribution import attribute_failure, planned_targets
from envs.backend import Backend, BackendFaultError, RecordsScreens, ScreenRecord
from envs.backends import arriving_specs, tools_of
from envs.simulated import BACKEND as SIMULATED
from envs.verification import RubricJudge, verify

__all__ = ["DEFAULT_MAX_STEPS", "run_episode"]
_NO_SCREEN = ScreenRecord(observation="")
_ENDS_EPISODE = {
    ErrorKind.BACKEND_ERROR: Termination.BACKEND_ERROR,
    ErrorKind.TIMEOUT: Termination.BACKEND_ERROR,
    ErrorKind.ENDPOINT_ERROR: Termination.ENDPOINT_ERROR,
}
"""Errors after which the episode cannot go on, and how it then ended."""
_FAULTED = frozenset(_ENDS_EPISODE.values())
"""Endings that are no one's fault in the episode: the outcome is a backend error."""
_ENDED_BY = {
    "finish": Termination.FINISHED,
    "clarify": Termination.CLARIFIED,
    "refuse": Termination.REFUSED,
}


def run_episode(
    task: TaskSpec,
    backend: Backend,
    policy: Policy,
    *,
    max_steps: int | None = None,
    round_id: str | None = None,
    judge: RubricJudge | None = None,
    stop_when_verified: bool = True,
    attempt: int = 0,
) -> Trajectory:
    """Run ``task`` until completion is verified or declared, the policy clarifies or
    refuses, the backend fails, or the step budget runs out; then verify with privileged
    evidence. Failed episodes are returned like any other: they are evidence.

    A task of several user turns (``TaskSpec.follow_ups``) goes on after each ``finish``
    or ``clarify`` but the last: the policy then hears the user's next turn
    (``TaskView.follow_up``); a verified state ends it only once the last turn has been
    heard.

    The budget is the task's own (``step_budget``) unless ``max_steps`` overrides it; the
    policy is told it, and the trajectory records it.

    ``attempt`` numbers the collector's tries of one task (a retry after a backend fault).
    A backend that fails itself (``BackendFaultError``: a device that went away) ends the
    episode as a backend error, with the fault as the last step's feedback (a step without
    an action, unless the last step's own feedback was the backend error already)."""

    budget = step_budget(task, max_steps)

    def record(
        steps: list[Step], verdict: Verdict, termination: Termination, retries: int = 0
    ) -> Trajectory:
        return _trajectory(
            task, backend, policy, steps, verdict, termination, round_id, attempt, retries, budget
        )

    try:
        backend.reset(task)
    except BackendFaultError as fault:
        return record(_with_fault([], fault), _fault_verdict(), Termination.BACKEND_ERROR)
    view = TaskView(
        goal=task.goal,
        tools=backend.tool_specs(),
        subagents=backend.subagent_specs(),
        max_steps=budget,
        follow_ups=task.follow_ups,
        arriving=arriving_specs(task.arriving_tools, tools_of(task)) if task.arriving_tools else (),
    )
    session = policy.start(task, view)
    screens = backend if isinstance(backend, RecordsScreens) else None  # once: ~50 us a check
    steps: list[Step] = []
    termination = Termination.BUDGET_EXHAUSTED
    retries = 0
    verdict: Verdict | None = None
    turns_left = len(task.follow_ups)
    try:
        for index in range(budget):
            decision = session.act(steps)
            retries += decision.retries
            if decision.action is None:
                feedback = Feedback(error=decision.error)
            else:
                feedback = backend.execute(decision.action)
            steps.append(_step(index, decision, feedback, screens))
            error = feedback.error
            if error is not None and error.kind in _ENDS_EPISODE:
                termination = _ENDS_EPISODE[error.kind]
                break
            if decision.action is not None and decision.action.kind in TERMINAL_KINDS:
                if decision.action.kind in TURN_ENDING_KINDS and turns_left:
                    turns_left -= 1  # the policy hears the user's next turn
                    continue
                termination = _ENDED_BY[decision.action.kind]
                break
            if stop_when_verified and not turns_left and feedback.state_changes:
                verdict = verify(task.verifier, steps, backend.evidence(), judge)
                if verdict.passed:
                    termination = Termination.VERIFIED
                    break
        if verdict is None or termination is not Termination.VERIFIED:
            verdict = verify(task.verifier, steps, backend.evidence(), judge)
    except BackendFaultError as fault:
        # After a step that already failed in the backend, that step says what failed.
        if termination not in _FAULTED:
            steps = _with_fault(steps, fault)
        return record(steps, _fault_verdict(), Termination.BACKEND_ERROR, retries)
    return record(steps, verdict, termination, retries)


def _step(
    index: int, decision: Decision, feedback: Feedback, screens: RecordsScreens | None
) -> Step:
    """The step of one decision; what a device (``screens``) showed for it is linked to it,
    and the tokens of the sub-agent that operated it count with the planner's."""
    screen = (screens.take_screen_record() if screens is not None else None) or _NO_SCREEN
    return Step(
        index=index,
        observation=screen.observation or None,
        model_output=decision.model_output,
        action=decision.action,
        feedback=feedback,
        input_tokens=decision.input_tokens + screen.input_tokens,
        output_tokens=decision.output_tokens + screen.output_tokens,
        injected_fault=decision.injected_fault,
        artifacts=screen.artifacts,
    )


def _with_fault(steps: list[Step], fault: BackendFaultError) -> list[Step]:
    """The steps and a last one without an action whose feedback says what failed."""
    feedback = Feedback.failure(ErrorKind.BACKEND_ERROR, str(fault))
    return [*steps, Step(index=len(steps), action=None, feedback=feedback)]


def _trajectory(
    task: TaskSpec,
    backend: Backend,
    policy: Policy,
    steps: list[Step],
    verdict: Verdict,
    termination: Termination,
    round_id: str | None,
    attempt: int,
    retries: int,
    budget: int,
) -> Trajectory:
    outcome = _outcome(termination, verdict)
    return Trajectory(
        task=task,
        steps=tuple(steps),
        verdict=verdict,
        cost=_cost(steps),
        metadata=TrajectoryMetadata(
            round=round_id,
            backend=backend.name,
            policy=policy.info,
            capabilities=task.capabilities,
            outcome=outcome,
            termination=termination,
            failure_attribution=attribute_failure(
                steps, verdict, termination, outcome, planned=planned_targets(task)
            ),
            injected_faults=tuple(s.injected_fault for s in steps if s.injected_fault),
            recovered=outcome is Outcome.SUCCESS and any(s.feedback.error for s in steps),
            retries=retries,
            seed=task.initial_conditions.seed,
            attempt=attempt,
            device=backend.device,
            max_steps=budget,
            simulated=backend.name == SIMULATED,
        ),
    )


def _fault_verdict() -> Verdict:
    """The verdict of an attempt whose backend failed: nothing could be verified."""
    return Verdict(passed=False, score=0.0, progress=0.0)


def _outcome(termination: Termination, verdict: Verdict) -> Outcome:
    if termination in _FAULTED:
        return Outcome.BACKEND_ERROR
    return Outcome.SUCCESS if verdict.passed else Outcome.FAILURE


def _cost(steps: list[Step]) -> Cost:
    """Tool calls count every executed non-terminal action (tools, memory, skills,
    sub-agents): each is one call of a tool in the policy's tool list."""
    return Cost(
        steps=len(steps),
        tool_calls=sum(
            1 for s in steps if s.action is not None and s.action.kind not in TERMINAL_KINDS
        ),
        input_tokens=sum(s.input_tokens for s in steps),
        output_tokens=sum(s.output_tokens for s in steps),
        latency_ms=round(sum(s.feedback.latency_ms for s in steps), 3),
        usd=round(sum(s.feedback.cost for s in steps), 6),
    )
