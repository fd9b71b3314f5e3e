"""BFCL's multi-turn verification, as our verdict records.

After each user turn that has ground-truth calls, two checks (BFCL's
``multi_turn_checker``):

- ``bfcl_state``: every involved instance's public state equals the ground truth's,
  after the model's calls of every turn so far and the ground truth's likewise; the
  evidence names each differing attribute with both values;
- ``bfcl_results``: each result of the turn's ground-truth calls appears among the
  results of the model's calls so far (as a multiset, in any order); the evidence lists
  the missing ones.

A turn with ground-truth calls and no call of the model's fails both. A turn without
ground-truth calls (one to be answered by asking, or before a held-back function
arrives) has no check, but its calls still run. An episode whose turns are fewer or more
than the task's fails every check (BFCL's "force-terminated"). Passed is BFCL's valid:
every check met.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from pydantic import JsonValue

from contract import TURN_ENDING_KINDS, CheckResult, Step, ToolCall, Verdict
from envs.bfcl.tasks import BfclCall, BfclTask, task_by_id
from envs.bfcl.world import BfclWorld, state_differences

_CHECKS = itertools.count()


def verify_episode(task: BfclTask, turns: Sequence[Sequence[BfclCall]]) -> Verdict:
    """The verdict of an episode whose model made ``turns[i]`` calls in user turn i."""
    checked = [i for i, calls in enumerate(task.ground_truth) if calls]
    if len(turns) != len(task.ground_truth):
        reason = f"{len(turns)} turns answered, the task has {len(task.ground_truth)}"
        return Verdict.from_checks(
            tuple(c for i in checked for c in _unmet_turn(i, {"turns": reason}))
        )
    model, truth = BfclWorld(task), BfclWorld(task)
    results: list[str] = []
    checks: list[CheckResult] = []
    for index, (calls, expected) in enumerate(zip(turns, task.ground_truth, strict=True)):
        results += [model.call(call) for call in calls]
        expected_results = [truth.call(call) for call in expected]
        if not expected:
            continue
        if not calls:
            checks += _unmet_turn(index, {"empty_turn": True})
            continue
        differences = state_differences(model.instances, truth.instances)
        missing = _missing(expected_results, results)
        checks += [
            CheckResult(
                kind="bfcl_state",
                description=f"turn {index + 1}: the state equals the ground truth's",
                met=not differences,
                evidence=_json(differences) if differences else None,
            ),
            CheckResult(
                kind="bfcl_results",
                description=f"turn {index + 1}: the ground truth's results were produced",
                met=not missing,
                evidence=_json({"missing": missing}) if missing else None,
            ),
        ]
    return Verdict.from_checks(tuple(checks))


def _unmet_turn(index: int, evidence: dict[str, Any]) -> list[CheckResult]:
    return [
        CheckResult(
            kind=kind, description=f"turn {index + 1}: {what}", met=False, evidence=_json(evidence)
        )
        for kind, what in (
            ("bfcl_state", "the state equals the ground truth's"),
            ("bfcl_results", "the ground truth's results were produced"),
        )
    ]


def _missing(expected: Sequence[str], produced: Sequence[str]) -> list[str]:
    left = Counter(produced)
    missing = []
    for result in expected:
        if left[result] > 0:
            left[result] -= 1
        else:
            missing.append(result)
    return missing


def _json(value: Any) -> JsonValue:
    """``value`` as JSON data (sets, objects and the like by ``str``)."""
    return json.loads(json.dumps(value, default=str))  # type: ignore[no-any-return]


def bfcl_checker_valid(task: BfclTask, turns: Sequence[Sequence[BfclCall]]) -> bool:
    """BFCL's own verdict on the same calls (``bfcl_eval``'s ``multi_turn_checker``, each
    call its own step), the oracle ours is compared with. As BFCL's ``eval_runner`` does,
    a different number of turns is invalid before the checker runs ("force-terminated")."""
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    if len(turns) != len(task.ground_truth):
        return False
    entry = {
        "id": task.id,
        "initial_config": task.initial_config,
        "involved_classes": list(task.classes),
    }
    result = multi_turn_checker(
        [[[call.as_bfcl_text()] for call in turn] for turn in turns],
        [[call.as_bfcl_text() for call in turn] for turn in task.ground_truth],
        entry,
        f"multi_turn_{task.category}",
        f"flywheel_{next(_CHECKS)}",  # BFCL keeps instances by this name and the task id
    )
    return bool(result["valid"])


def turns_of(steps: Sequence[Step]) -> list[list[BfclCall]]:
    """The calls of an episode's user turns: its tool calls (those that failed too, as
    BFCL runs every call a model makes), split at each finish or clarify."""
    turns: list[list[BfclCall]] = [[]]
    for step in steps:
        action = step.action
        if isinstance(action, ToolCall):
            turns[-1].append(BfclCall(action.tool, action.arguments))
        elif action is not None and action.kind in TURN_ENDING_KINDS:
            turns.append([])
    if len(turns) > 1 and not turns[-1]:
        turns.pop()
    return turns


def check_steps(task_id: str, steps: Sequence[Step]) -> tuple[bool, JsonValue, float]:
    """Whether the episode's steps pass BFCL's check of ``task_id``, the failed turn
    checks as evidence, and the share of turn checks met (partial credit)."""
    verdict = verify_episode(task_by_id(task_id), turns_of(steps))
    failed = [{"check": c.description, "evidence": c.evidence} for c in verdict.checks if not c.met]
    return verdict.passed, _json(failed) if failed else None, verdict.progress
