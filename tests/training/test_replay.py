"""A run that continues from a model trains on the rows added since, plus a replay share."""

from __future__ import annotations

import datasets
import pytest

from training.replay import replay_rows


def rows(n: int) -> datasets.Dataset:
    return datasets.Dataset.from_dict({"trajectory_id": [f"traj-{i:03d}" for i in range(n)]})


def test_the_new_rows_and_a_replay_share_of_the_seen_ones() -> None:
    seen = {f"traj-{i:03d}" for i in range(70)}
    chosen, mix = replay_rows(rows(100), seen, 0.25, seed=3, continued_from="ds-a")
    ids = chosen["trajectory_id"]
    assert (mix.new, mix.replayed, mix.seen, mix.continued_from) == (30, 10, 70, "ds-a")
    assert {f"traj-{i:03d}" for i in range(70, 100)} <= set(ids)
    assert len(set(ids) & seen) == 10 and len(ids) == 40
    assert ids == sorted(ids)  # the export's order is kept
    again, _ = replay_rows(rows(100), seen, 0.25, seed=3)
    other, _ = replay_rows(rows(100), seen, 0.25, seed=4)
    assert again["trajectory_id"] == ids and other["trajectory_id"] != ids


@pytest.mark.parametrize(("share", "replayed"), [(0.0, 0), (0.5, 30), (0.9, 70), (1.0, 70)])
def test_the_share_is_bounded_by_what_was_seen(share: float, replayed: int) -> None:
    seen = {f"traj-{i:03d}" for i in range(70)}
    chosen, mix = replay_rows(rows(100), seen, share, seed=0)
    assert mix.replayed == replayed and len(chosen) == 30 + replayed


def test_with_nothing_seen_or_nothing_new_every_row_is_trained() -> None:
    fresh, mix = replay_rows(rows(20), set(), 0.3, seed=0)
    assert len(fresh) == 20 and (mix.new, mix.replayed) == (20, 0)
    every = {f"traj-{i:03d}" for i in range(20)}
    same, mix = replay_rows(rows(20), every, 0.3, seed=0, continued_from="ds-a")
    assert len(same) == 20 and (mix.new, mix.replayed, mix.continued_from) == (0, 20, "ds-a")
