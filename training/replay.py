"""What SFT trains on when it continues from a checkpoint: the new rows and a replay share.

Versions accumulate (``agents/balancer.py``), so a later version holds what the champion
was already trained on. Training again on all of it costs a turn more every round;
training on the new rows alone makes the model forget. A run that continues from a
registered model trains on the rows its version added since that model's version, plus a
random sample of the rows it had seen, sized so that they are ``replay_share`` of the rows
trained (``sft.replay_share``; all of them when there are fewer), their sampling weights
scaled so that each capability keeps its share of the version's weight
(``training.sampling.in_version_mix``). A run from a built base, or from a folder the
registry does not know, trains on every row.

Rows are put in content order first (``in_content_order``): the export lists them by
trajectory id, and a served model's trajectory ids change from run to run with its
latencies, so without it two loops with equal seeds would sample and shuffle the same
rows differently from their second turn on.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import datasets

from contract import content_hash
from training.sampling import in_version_mix


@dataclass(frozen=True)
class RowMix:
    """How many rows a run trains on, by origin."""

    new: int
    replayed: int
    seen: int
    """Rows of the version its starting checkpoint was trained on (replayed or not)."""
    continued_from: str | None = None
    """The dataset version of the starting checkpoint, when it is a registered model."""

    def to_json(self) -> dict[str, Any]:
        return {
            "new": self.new,
            "replayed": self.replayed,
            "seen": self.seen,
            "continued_from": self.continued_from,
        }


def replay_choice(
    ids: Sequence[str],
    seen: Collection[str],
    share: float,
    seed: int,
    continued_from: str | None = None,
) -> tuple[tuple[int, ...] | None, RowMix]:
    """The positions of the rows to train, given their trajectory ``ids`` (an export's
    ``sft`` split in content order): those not in ``seen``, plus a sample of those (drawn
    from ``seed``) making up ``share`` of the result, in their listed order. None, every
    row, when nothing was seen or nothing is new (a seen row counts as replayed). The
    positions travel to the launcher's other processes (``cli.launch.Plan``)."""
    new = [i for i, trajectory in enumerate(ids) if trajectory not in seen]
    old = [i for i, trajectory in enumerate(ids) if trajectory in seen]
    if not new or not old:
        return None, RowMix(
            new=len(new), replayed=len(old), seen=len(old), continued_from=continued_from
        )
    wanted = len(old) if share >= 1 else round(share / (1 - share) * len(new))
    replayed = random.Random(seed).sample(old, min(wanted, len(old)))
    mix = RowMix(new=len(new), replayed=len(replayed), seen=len(old), continued_from=continued_from)
    return tuple(sorted(new + replayed)), mix


def chosen_rows(rows: datasets.Dataset, chosen: tuple[int, ...] | None) -> datasets.Dataset:
    """``rows`` at the positions ``replay_choice`` chose (every row for None), their
    ``weight`` scaled so that each capability keeps its share of all the rows' weight
    (``in_version_mix``)."""
    if chosen is None:
        return rows
    picked = rows.select(chosen)
    if not {"weight", "capabilities"} <= set(rows.column_names):
        return picked
    weights = in_version_mix(rows["capabilities"], rows["weight"], chosen)
    if weights is None:
        return picked
    feature = rows.features["weight"]
    return (
        picked.flatten_indices()
        .remove_columns("weight")
        .add_column("weight", weights, feature=feature)
        .select_columns(rows.column_names)
    )


def in_content_order(rows: datasets.Dataset) -> datasets.Dataset:
    """``rows`` (an export's ``sft`` split) ordered by what they hold: task id, then a
    digest of the conversation and of which turns are trained. Equal rows are
    interchangeable, so the order is a function of the content alone."""
    keys = [
        (task, content_hash([messages, trained]))
        for task, messages, trained in zip(
            rows["task_id"], rows["messages"], rows["trained"], strict=True
        )
    ]
    return rows.select(sorted(range(len(keys)), key=keys.__getitem__))
