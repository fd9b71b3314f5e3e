"""A run that continues from a model trains on the rows added since, plus a replay share."""

from __future__ import annotations

import datasets
import pytest

from training.replay import RowMix, chosen_rows, in_content_order, replay_choice


def rows(n: int) -> datasets.Dataset:
    return datasets.Dataset.from_dict({"trajectory_id": [f"traj-{i:03d}" for i in range(n)]})


def replay_rows(
    rows: datasets.Dataset,
    seen: set[str],
    share: float,
    seed: int,
    continued_from: str | None = None,
) -> tuple[datasets.Dataset, RowMix]:
    """The rows ``replay_choice`` picks of ``rows``, and their mix."""
    chosen, mix = replay_choice(rows["trajectory_id"], seen, share, seed, continued_from)
    return chosen_rows(rows, chosen), mix


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
    assert replay_choice(same["trajectory_id"], every, 0.3, seed=0)[0] is None


def conversation_rows(order: list[int], ids: str) -> datasets.Dataset:
    """Six rows of three tasks, listed in ``order`` under trajectory ids ``traj-<c>`` for
    the characters of ``ids``: the same rows as a later run would list them."""
    contents = [(f"task-{i // 2}", f"say {i}", [i % 2 == 0]) for i in range(6)]
    listed = [contents[i] for i in order]
    return datasets.Dataset.from_dict(
        {
            "trajectory_id": [f"traj-{c}" for c in ids],
            "task_id": [task for task, _, _ in listed],
            "messages": [[{"role": "user", "content": text}] for _, text, _ in listed],
            "trained": [trained for _, _, trained in listed],
        }
    )


def test_rows_are_trained_in_an_order_of_their_content_not_of_their_ids() -> None:
    first = conversation_rows([0, 1, 2, 3, 4, 5], "abcdef")
    again = conversation_rows([5, 3, 1, 4, 0, 2], "uvwxyz")  # new ids, listed otherwise
    ordered, reordered = in_content_order(first), in_content_order(again)
    assert list(ordered["messages"]) == list(reordered["messages"])
    assert list(ordered["task_id"]) == sorted(first["task_id"])
    # the rows of contents 0-3 were seen: ids a-d in the first run, y, w, z, v in the other
    chosen, mix = replay_rows(ordered, {f"traj-{c}" for c in "abcd"}, 0.5, seed=1)
    chosen_again, _ = replay_rows(reordered, {f"traj-{c}" for c in "ywzv"}, 0.5, seed=1)
    assert (mix.new, mix.replayed) == (2, 2)
    assert list(chosen["messages"]) == list(chosen_again["messages"])


def test_equal_conversations_are_told_apart_by_their_trained_turns() -> None:
    twins = datasets.Dataset.from_dict(
        {
            "trajectory_id": ["traj-a", "traj-b"],
            "task_id": ["task-0", "task-0"],
            "messages": [[{"role": "user", "content": "hi"}]] * 2,
            "trained": [[True], [False]],
        }
    )
    flipped = twins.select([1, 0])
    assert list(in_content_order(twins)["trained"]) == list(in_content_order(flipped)["trained"])


def weighted_rows() -> datasets.Dataset:
    """Ten rows: four of memory, six of tool use (its primary capability), each
    capability a half of the version's weight."""
    capabilities = [["memory"]] * 4 + [["tool_use", "memory"]] * 6
    weights = [0.125] * 4 + [1 / 12] * 6
    return datasets.Dataset.from_dict(
        {
            "trajectory_id": [f"traj-{i:03d}" for i in range(10)],
            "capabilities": capabilities,
            "weight": weights,
        }
    )


def test_the_chosen_rows_keep_each_capability_s_share_of_the_weight() -> None:
    every = weighted_rows()
    seen = {"traj-000", "traj-004", "traj-005", "traj-006", "traj-007", "traj-008"}
    chosen, mix = replay_rows(every, seen, 0.5, seed=0)
    assert (mix.new, mix.replayed) == (4, 4)
    # Seen are one memory row and five tool-use rows: however the four replayed fall,
    # the chosen rows' own weights lean to one capability; scaled, each holds its half.
    by_capability: dict[str, float] = {}
    for capabilities, weight in zip(chosen["capabilities"], chosen["weight"], strict=True):
        by_capability[capabilities[0]] = by_capability.get(capabilities[0], 0.0) + weight
    assert by_capability == pytest.approx({"memory": 0.5, "tool_use": 0.5})
    assert chosen.column_names == every.column_names
    assert chosen["trajectory_id"] == sorted(chosen["trajectory_id"])
    pairs = zip(chosen["capabilities"], chosen["weight"], strict=True)
    assert len({w for c, w in pairs if c[0] == "memory"}) == 1, "one capability: same ratios"
    assert chosen_rows(every, None)["weight"] == every["weight"], "every row: as they are"


def test_rows_without_weights_are_chosen_as_they_are() -> None:
    unweighted = rows(10)
    chosen, _ = replay_rows(unweighted, {f"traj-{i:03d}" for i in range(6)}, 0.5, seed=0)
    assert chosen.column_names == ["trajectory_id"] and len(chosen) == 8
