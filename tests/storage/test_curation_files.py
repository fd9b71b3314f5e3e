"""Curated partitions as files: written whole, stored without parsing a record, a
missing or foreign file refused with its location and nothing stored."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from contract import CurationRecord, Trajectory
from storage import Catalog, CatalogError
from storage.curation_files import read_curation_file, write_curation_file
from storage.files import TEMP_MARK
from tests.storage.builders import approved_curation, curations_in


@pytest.fixture
def records(round_trajectories: list[Trajectory]) -> list[CurationRecord]:
    return [approved_curation(t) for t in round_trajectories[:6]]


def test_a_file_gives_back_its_records_and_the_catalog_stores_them(
    catalog: Catalog, tmp_path: Path, records: list[CurationRecord]
) -> None:
    path = tmp_path / "round-a" / "curations" / "partition-00003.parquet"

    write_curation_file(records, path)

    assert curations_in(read_curation_file(path)) == records
    assert not [p for p in path.parent.iterdir() if TEMP_MARK in p.name]
    assert catalog.reviews.add_curation_file(path) == len(records)
    assert catalog.reviews.add_curation_file(path) == 0
    by_id = sorted(records, key=lambda r: r.trajectory_id)
    assert catalog.reviews.curations_of_round(records[0].round_id) == by_id


def test_a_changed_judgement_replaces_the_stored_one(
    catalog: Catalog, tmp_path: Path, records: list[CurationRecord]
) -> None:
    catalog.reviews.add_curations(records)
    changed = records[2].model_copy(update={"quality": 0.1, "reason": "looked again"})
    write_curation_file([records[0], changed], tmp_path / "again.parquet")

    assert catalog.reviews.add_curation_file(tmp_path / "again.parquet") == 1
    stored = catalog.reviews.curations_of_round(records[0].round_id)
    assert changed in stored and records[2] not in stored
    assert len(stored) == len(records)


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        pytest.param(lambda path, records: None, "no curated partition at", id="missing"),
        pytest.param(
            lambda path, records: path.write_bytes(b"not parquet at all"),
            "is not a curated partition",
            id="not parquet",
        ),
        pytest.param(
            lambda path, records: pq.write_table(pa.table({"id": ["t-1"]}), path),
            "its columns are id, not trajectory_id",
            id="other columns",
        ),
        pytest.param(
            lambda path, records: write_curation_file([records[0], records[0]], path),
            "more than once",
            id="repeated trajectory",
        ),
    ],
)
def test_a_file_that_is_not_a_partition_is_refused_and_nothing_is_stored(
    catalog: Catalog,
    tmp_path: Path,
    records: list[CurationRecord],
    make: Callable[[Path, list[CurationRecord]], object],
    problem: str,
) -> None:
    path = tmp_path / "partition-00000.parquet"
    make(path, records)

    with pytest.raises(CatalogError, match=problem) as refused:
        catalog.reviews.add_curation_file(path)

    assert "partition-00000.parquet" in str(refused.value)
    assert catalog.stats()["curations"] == 0
