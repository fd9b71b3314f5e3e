"""A candidate against the champion: both on the development set, under one harness.

The promotion gate (``training/promotion.py``) compares two feedback reports; they are
comparable only if both models ran the same development tasks, with the same seeds, under
the same harness: step budget, attempts per task, reply length, context, cost budget.
``Harness.of_model`` reads it from a registered model's training request (the candidate's
decides), and ``report_for`` returns a model's report under it:

- the report registered with the model when it was measured under that very harness on
  the current development set (greedy decoding on the sandbox is deterministic, so
  running it again would only repeat it), unless ``reevaluate``;
- otherwise a new evaluation of the model's folder (source ``evaluation``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from contract import (
    FeedbackReport,
    FeedbackSource,
    InvalidInputError,
    ModelRecord,
    TaskSpec,
    step_budget,
)
from training.base_model import load_base
from training.care import Budget
from training.evaluate import Evaluation, evaluate
from training.greedy_policy import evaluation_processes, greedy_policy
from training.settings import TrainRequest

PRODUCED_BY = "flywheel-deployment"
CHAT_FORMAT = "chatml+tool_call-json"
"""How the served model reads tools and writes calls (``training/chat_model.py``)."""


@dataclass(frozen=True)
class Harness:
    """Everything about an evaluation except the model and the tasks (the development set
    is the catalog's, stored once: its fingerprints are compared separately)."""

    max_steps: int | None
    """One step budget for every task; None: each task's own."""
    samples: int
    max_new_tokens: int
    max_context: int
    token_weight: float
    token_budget: int | None
    """An episode's output tokens; None: ``max_new_tokens`` per step of its budget."""

    @classmethod
    def of_model(cls, record: ModelRecord) -> Harness:
        """The harness ``record`` was evaluated under when it was trained."""
        request = request_of(record)
        return cls(
            max_steps=request.rl.max_steps,
            samples=request.eval_samples,
            max_new_tokens=request.rl.max_new_tokens,
            max_context=request.rl.max_context,
            token_weight=request.rl.token_weight,
            token_budget=request.rl.token_budget,
        )

    def budget_for(self, task: TaskSpec) -> Budget:
        """The cost budget of an episode of ``task``: its steps and their reply tokens."""
        steps = step_budget(task, self.max_steps)
        tokens = self.token_budget or self.max_new_tokens * steps
        return Budget(output_tokens=tokens, tool_calls=steps)

    def to_json(self) -> dict[str, Any]:
        """The harness as the deployment trace records it."""
        return {**asdict(self), "policy": "greedy local model", "chat_format": CHAT_FORMAT}


def request_of(record: ModelRecord) -> TrainRequest:
    """The training request ``record`` was registered with; InvalidInputError naming
    ``model`` for a record the trainer did not register (its hyperparameters do not say
    how it was evaluated)."""
    try:
        return _request_of(record)
    except InvalidInputError as exc:
        raise InvalidInputError(
            "model",
            f"{record.id} was not registered by the trainer, so its evaluation harness is "
            f"unknown ({exc})",
        ) from None


def _request_of(record: ModelRecord) -> TrainRequest:
    return TrainRequest.of(
        {
            **record.hyperparameters,
            "dataset_id": record.dataset_id,
            "base": "tiny",  # the path it started from need not exist any more
            "method": record.method,
        }
    )


def reusable(
    report: FeedbackReport | None, own: Harness, wanted: Harness, tasks: Sequence[TaskSpec]
) -> bool:
    """Whether ``report`` (measured under ``own``) stands for an evaluation under
    ``wanted`` on ``tasks``: the same harness, and exactly those tasks."""
    if report is None or own != wanted:
        return False
    return {t.fingerprint for t in report.tasks} == {t.fingerprint for t in tasks}


def report_for(
    record: ModelRecord,
    registered: FeedbackReport | None,
    harness: Harness,
    tasks: Sequence[TaskSpec],
    *,
    reevaluate: bool = False,
    on_episode: Callable[[int, int], None] | None = None,
) -> tuple[FeedbackReport, bool]:
    """``record``'s report under ``harness`` on ``tasks``, and whether it was reused
    (module docstring). A folder that no longer loads is an ``InvalidInputError`` naming
    the model."""
    if not reevaluate and reusable(registered, Harness.of_model(record), harness, tasks):
        assert registered is not None
        return registered, True
    return evaluate_model_folder(record, harness, tasks, on_episode=on_episode).report, False


def evaluate_model_folder(
    record: ModelRecord,
    harness: Harness,
    tasks: Sequence[TaskSpec],
    *,
    on_episode: Callable[[int, int], None] | None = None,
) -> Evaluation:
    """Greedy episodes of the registered model's weights on ``tasks`` under ``harness``."""
    if not Path(record.path).is_dir():
        raise InvalidInputError("model", f"{record.id}: its folder {record.path} is gone")
    base = load_base(record.path)
    with greedy_policy(
        base,
        record.id,
        max_new_tokens=harness.max_new_tokens,
        max_context=harness.max_context,
        processes=evaluation_processes(base.model, len(tasks) * harness.samples),
        folder=Path(record.path),
    ) as policy:
        return evaluate(
            policy,
            tasks,
            model=record.id,
            produced_by=PRODUCED_BY,
            source=FeedbackSource.EVALUATION,
            samples=harness.samples,
            max_steps=harness.max_steps,
            budget_of=harness.budget_for,
            token_weight=harness.token_weight,
            on_episode=on_episode,
        )


def capability_rows(
    candidate: FeedbackReport, champion: FeedbackReport | None
) -> list[dict[str, Any]]:
    """Per capability (then Overall): the candidate's and the champion's success."""
    scores: Mapping[Any, float] = champion.capability_scores if champion else {}
    capabilities = sorted({*candidate.capability_scores, *scores}, key=lambda c: c.value)
    rows = [
        {
            "capability": c.value,
            "candidate": candidate.capability_scores.get(c),
            "champion": scores.get(c) if champion else None,
        }
        for c in capabilities
    ]
    rows.append(
        {
            "capability": "overall",
            "candidate": candidate.overall,
            "champion": champion.overall if champion else None,
        }
    )
    for part in ("seen", "unseen"):
        ours = candidate.parts.get(part)
        theirs = champion.parts.get(part) if champion else None
        if ours is not None or theirs is not None:
            rows.append(
                {
                    "capability": f"overall, {part} templates",
                    "candidate": ours.overall if ours else None,
                    "champion": theirs.overall if theirs else None,
                }
            )
    return rows
