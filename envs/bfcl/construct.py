"""A round's tasks from BFCL: its held-out development split, and the training tasks a
round takes.

BFCL's tasks are a fixed pool, so a round does not invent them: it takes the training
tasks no other round has taken (by fingerprint), in an order its seed shuffles, and
accepts each whose reference plan (the ground truth) passes its own verifier on a fresh
world, as the sandbox's constructor does with its templates. One task in
``DEV_EVERY`` of each category (by its number in BFCL's ids) is held out as the
development split (``split_of``) and never taken by a round: ``miss_param``'s held-out
tasks test clarification (our ``clarify``).
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass

from contract import RejectedTask, Split, TaskSpec
from envs.bfcl.backend import BfclBackend, task_spec
from envs.bfcl.tasks import CATEGORIES, load_tasks, split_of
from envs.verification import references_passing


def bfcl_specs(split: Split, categories: Sequence[str] = CATEGORIES) -> Iterator[TaskSpec]:
    """The task specs of ``split`` in ``categories``, in BFCL's order."""
    for category in categories:
        for task in load_tasks(category):
            if split_of(task) is split:
                yield task_spec(task, split)


@dataclass(frozen=True)
class BfclConstruction:
    accepted: list[TaskSpec]
    rejected: list[RejectedTask]
    available: int
    """Training tasks no other round had taken, before this round took any."""


def construct_bfcl(
    round_id: str, count: int, seed: int, known_fingerprints: Collection[str]
) -> BfclConstruction:
    """Up to ``count`` training tasks whose fingerprints are not in ``known_fingerprints``
    (the other rounds' tasks), in the order ``seed`` shuffles them; a task whose reference
    plan fails its verifier is rejected with the reason (none is expected: it would be a
    bug in our backend). The same arguments take the same tasks, so a rerun after a crash
    stores nothing twice."""
    fresh = [t for t in bfcl_specs(Split.TRAIN) if t.fingerprint not in known_fingerprints]
    random.Random(seed).shuffle(fresh)
    accepted, rejected = references_passing(round_id, fresh, BfclBackend(), count)
    return BfclConstruction(accepted, rejected, len(fresh))
