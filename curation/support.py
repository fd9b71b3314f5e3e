"""Is a trajectory's reported outcome backed by execution evidence?

The verifier says which checks were met; this module asks whether the episode itself
made them true. A state check that was met although no step touched the rows it matched
was satisfied before the episode started: the "success" demonstrates nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from contract import Outcome, Trajectory
from curation.facts import CheckFacts, StepFacts, TrajectoryFacts, facts_of

_CREATING_EXPECTS = frozenset({"exists", "exactly_one"})


def check_support(trajectory: Trajectory | TrajectoryFacts) -> tuple[bool, str]:
    """``(supported, detail)``: whether the outcome agrees with the verdict and the steps.

    - a backend error is never supported (it says nothing about the policy);
    - the outcome must agree with ``verdict.passed``;
    - a failure that ended with ``finish`` is a claimed completion the verifier refutes:
      unsupported, though it is an ordinary failure and no conflict;
    - a success needs, for each met state check expecting ``exists``/``exactly_one``, a
      step that changed a row the check matched (otherwise the state was already so).
    """
    facts = facts_of(trajectory)
    outcome = facts.outcome
    if outcome is Outcome.BACKEND_ERROR:
        return False, "the backend failed: the outcome says nothing about the policy"
    if len(facts.checks) != len(facts.verifier):
        return False, "the verdict does not match the task's verifier"
    unmet = [c for c in facts.checks if not c.met]
    if outcome is Outcome.FAILURE:
        if facts.passed:
            return False, "reported as a failure, but the verifier passed every check"
        if facts.steps and facts.steps[-1].kind == "finish":
            return False, f"claimed completion (finish) that the verifier refutes: {_unmet(unmet)}"
        return True, f"the failure agrees with the verifier: {_unmet(unmet)}"
    if not facts.passed:
        return False, f"reported as a success, but the verifier failed: {_unmet(unmet)}"
    return _success_support(facts)


def _success_support(facts: TrajectoryFacts) -> tuple[bool, str]:
    for spec, result in zip(facts.verifier, facts.checks, strict=True):
        if spec.kind != "state" or spec.expect not in _CREATING_EXPECTS:
            continue
        if not _made_by_episode(str(spec.collection), result, facts.steps):
            return False, (
                f"the state was already so before the episode: {result.description} "
                "held without any step changing a matching row"
            )
    n = len(facts.checks)
    return True, f"the verifier passed {n} check{'s' if n != 1 else ''}, backed by the steps"


def _made_by_episode(collection: str, result: CheckFacts, steps: Sequence[StepFacts]) -> bool:
    """A step created or updated a row the check matched.

    The evidence lists at most a few matched ids; when it is cut short, any change to the
    collection counts.
    """
    evidence = result.evidence if isinstance(result.evidence, dict) else {}
    listed = evidence.get("matched")
    matched = {str(i) for i in listed} if isinstance(listed, list) else set()
    count = evidence.get("count")
    truncated = isinstance(count, int) and count > len(matched)
    for step in steps:
        for op, changed, entity_id in step.changes:
            if changed != collection or op == "deleted":
                continue
            if truncated or entity_id in matched:
                return True
    return False


def _unmet(unmet: Sequence[CheckFacts]) -> str:
    if not unmet:
        return "no check unmet"
    first = unmet[0].description
    more = f" (and {len(unmet) - 1} more)" if len(unmet) > 1 else ""
    return f"{len(unmet)} check{'s' if len(unmet) != 1 else ''} unmet: {first}{more}"
