"""Loading many trajectories by id in one pass (what an export of a dataset does)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import duckdb
import orjson
import pyarrow as pa
import pytest
from pydantic import ValidationError

from contract import Trajectory
from curation.balance import Candidate
from storage import BalanceRow, Catalog, UnknownIdError
from storage.sql import shared_rows
from storage.trajectory_store import COLLATERAL_CHECK_TEXT
from tests.storage.builders import ROUND, write_shards


def test_trajectories_come_back_exact_in_the_order_asked(
    ingested: Catalog, round_trajectories: list[Trajectory]
) -> None:
    wanted = [round_trajectories[5], round_trajectories[0], round_trajectories[5]]

    found = ingested.trajectories.by_ids([t.id for t in wanted])

    assert found == wanted
    assert ingested.trajectories.by_ids([]) == []


def test_an_unknown_id_is_named(ingested: Catalog, round_trajectories: list[Trajectory]) -> None:
    with pytest.raises(UnknownIdError, match="traj-nope"):
        ingested.trajectories.by_ids([round_trajectories[0].id, "traj-nope"])


def test_a_read_only_catalog_loads_them_too(
    ingested: Catalog, round_trajectories: list[Trajectory]
) -> None:
    with Catalog.open(ingested.path, read_only=True) as reader:
        ids = [t.id for t in round_trajectories[:3]]
        assert [t.id for t in reader.trajectories.by_ids(ids)] == ids


def test_unverified_loads_are_the_same_records_and_skip_only_the_id_check(
    ingested: Catalog, round_trajectories: list[Trajectory]
) -> None:
    ids = [t.id for t in round_trajectories]
    assert ingested.trajectories.by_ids(ids, verify_ids=False) == round_trajectories
    drifted = round_trajectories[3]
    with duckdb.connect(str(ingested.path)) as con:
        con.execute(
            "UPDATE steps SET model_output = 'edited by hand' WHERE trajectory_id = ? AND idx = 0",
            [drifted.id],
        )

    with pytest.raises(ValidationError, match="does not match the record's content"):
        ingested.trajectories.by_ids([drifted.id])
    (loaded,) = ingested.trajectories.by_ids([drifted.id], verify_ids=False)
    assert loaded.id == drifted.id
    assert loaded.steps[0].model_output == "edited by hand"


def test_balance_rows_give_what_balancing_reads_of_each_trajectory(
    ingested: Catalog, round_trajectories: list[Trajectory]
) -> None:
    wanted = [round_trajectories[4].id, "traj-unknown", round_trajectories[1].id]

    rows = ingested.trajectories.balance_rows(wanted)

    assert [Candidate.from_row(row) for row in rows] == [
        Candidate.of(round_trajectories[4]),
        Candidate.of(round_trajectories[1]),
    ]
    assert BalanceRow._fields == tuple(f.name for f in dataclasses.fields(Candidate))
    assert [row.trajectory_id for row in rows] == [wanted[0], wanted[2]]
    assert ingested.trajectories.balance_rows([]) == []


def test_trajectory_fingerprints_pair_every_trajectory_of_the_round_with_its_task(
    ingested: Catalog, round_trajectories: list[Trajectory]
) -> None:
    expected = {(t.id, t.task.fingerprint) for t in round_trajectories}

    pairs = ingested.trajectories.fingerprints(ROUND)

    assert sorted(pairs) == sorted(expected)
    assert len(pairs) == len(expected)
    assert ingested.trajectories.fingerprints("round-none") == []


def test_member_tasks_read_each_trajectorys_task_columns_in_order(
    ingested: Catalog, round_trajectories: list[Trajectory]
) -> None:
    wanted = [round_trajectories[2], round_trajectories[0], round_trajectories[2]]

    found = ingested.trajectories.member_tasks([t.id for t in wanted])

    assert found == [
        (t.task.id, t.task.split.value, t.task.fingerprint, t.task.template) for t in wanted
    ]
    with pytest.raises(UnknownIdError, match="traj-nope"):
        ingested.trajectories.member_tasks([round_trajectories[0].id, "traj-nope"])


FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "round-before-collateral.jsonl"


def test_the_trajectories_without_a_collateral_check_are_those_stored_before_it(
    ingested: Catalog, round_trajectories: list[Trajectory], tmp_path: Path
) -> None:
    old = [Trajectory.from_json(line) for line in FIXTURE.read_bytes().splitlines()]
    write_shards(old, tmp_path / "old")
    ingested.trajectories.ingest([tmp_path / "old"])
    new = [t.id for t in round_trajectories[:6]]
    asked = [new[0], old[3].id, *new[1:], old[0].id, old[5].id]

    assert ingested.trajectories.without_collateral_check(asked) == [
        old[3].id,
        old[0].id,
        old[5].id,
    ]
    assert ingested.trajectories.without_collateral_check([]) == []


def test_the_check_is_found_as_text_that_no_string_value_can_contain() -> None:
    """The search for the check's text cannot be fooled by a goal that quotes it."""
    quoting = orjson.dumps({"goal": COLLATERAL_CHECK_TEXT, "note": f"x{COLLATERAL_CHECK_TEXT}"})
    assert COLLATERAL_CHECK_TEXT.encode() not in quoting
    assert COLLATERAL_CHECK_TEXT.encode() in orjson.dumps({"kind": "no_collateral"})


def test_shared_rows_share_equal_values_except_in_distinct_columns() -> None:
    table = pa.table({"id": ["a-1", "a-2", "a-3"], "kind": ["tap", "tap", "type"]})
    rows = shared_rows(table, ["id"])

    assert rows == [tuple(row.values()) for row in table.to_pylist()]
    assert rows[0][1] is rows[1][1]
    assert rows[0][1] is not rows[2][1]
