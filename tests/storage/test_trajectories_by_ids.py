"""Loading many trajectories by id in one pass (what an export of a dataset does)."""

from __future__ import annotations

import pytest

from contract import Trajectory
from storage import Catalog, UnknownIdError


def test_trajectories_come_back_exact_in_the_order_asked(
    ingested: Catalog, round_trajectories: list[Trajectory]
) -> None:
    wanted = [round_trajectories[5], round_trajectories[0], round_trajectories[5]]

    found = ingested.trajectories_by_ids([t.id for t in wanted])

    assert found == wanted
    assert ingested.trajectories_by_ids([]) == []


def test_an_unknown_id_is_named(ingested: Catalog, round_trajectories: list[Trajectory]) -> None:
    with pytest.raises(UnknownIdError, match="traj-nope"):
        ingested.trajectories_by_ids([round_trajectories[0].id, "traj-nope"])


def test_a_read_only_catalog_loads_them_too(
    ingested: Catalog, round_trajectories: list[Trajectory]
) -> None:
    with Catalog.open(ingested.path, read_only=True) as reader:
        ids = [t.id for t in round_trajectories[:3]]
        assert [t.id for t in reader.trajectories_by_ids(ids)] == ids
