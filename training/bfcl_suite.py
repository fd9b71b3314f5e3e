"""The ``bfcl-multi-turn`` evaluation suite: a policy's accuracy per BFCL category, by our
verifier and by BFCL's own checker on the same episodes.

It runs the held-out development split by default (``split_of``: rounds never
train on it); ``all`` runs every task, as the public leaderboard does, which a model
trained on BFCL rounds has partly seen. Each task runs once through our runner on
``BfclBackend``; accuracy is the share of
tasks whose episode passed. BFCL's checker judges the same calls (``turns_of``), so a
served model's figure can be set beside the public leaderboard's method, and any
disagreement between the two is counted (it would be a bug in our backend).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from agents.policies.base import Policy
from agents.runner import run_episode
from contract import InvalidInputError
from envs.bfcl.backend import BfclBackend, task_spec
from envs.bfcl.tasks import CATEGORIES, SPLITS, load_tasks, split_of
from envs.bfcl.verify import bfcl_checker_valid, turns_of


@dataclass(frozen=True)
class CategoryScore:
    category: str
    tasks: int
    passed: int
    """Episodes our verifier passed."""
    bfcl_valid: int
    """Episodes BFCL's checker judged valid."""
    disagreements: tuple[str, ...]
    """Task ids where the two differ."""

    @property
    def accuracy(self) -> float:
        return self.passed / self.tasks if self.tasks else 0.0

    @property
    def bfcl_accuracy(self) -> float:
        return self.bfcl_valid / self.tasks if self.tasks else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "disagreements": list(self.disagreements),
            "accuracy": round(self.accuracy, 4),
            "bfcl_accuracy": round(self.bfcl_accuracy, 4),
        }


def run_suite(
    policy: Policy,
    categories: Sequence[str] = CATEGORIES,
    limit: int | None = None,
    on_episode: Callable[[int, int], None] | None = None,
    split: str = "dev",
) -> list[CategoryScore]:
    """``policy`` on the first ``limit`` tasks (all when None) of ``split`` (``SPLITS``)
    in each category."""
    unknown = [c for c in categories if c not in CATEGORIES]
    if unknown:
        raise InvalidInputError("category", f"{unknown[0]!r} is not run", CATEGORIES)
    if limit is not None and limit < 1:
        raise InvalidInputError("limit", f"{limit} is below 1")
    if split not in SPLITS:
        raise InvalidInputError("split", f"unknown split {split!r}", SPLITS)
    chosen = {
        c: [t for t in load_tasks(c) if split == "all" or split_of(t).value == split][:limit]
        for c in categories
    }
    total, done = sum(len(t) for t in chosen.values()), 0
    backend = BfclBackend()
    scores = []
    for category, tasks in chosen.items():
        passed = valid = 0
        disagreements = []
        for task in tasks:
            trajectory = run_episode(task_spec(task, split_of(task)), backend, policy)
            ours = trajectory.verdict.passed
            theirs = bfcl_checker_valid(task, turns_of(trajectory.steps))
            passed, valid = passed + ours, valid + theirs
            if ours != theirs:
                disagreements.append(task.id)
            done += 1
            if on_episode is not None:
                on_episode(done, total)
        scores.append(CategoryScore(category, len(tasks), passed, valid, tuple(disagreements)))
    return scores
