"""Ingesting shards: counts, idempotence, bounded transactions, exact trajectories back."""

from __future__ import annotations

from pathlib import Path

import pytest

from contract import Trajectory
from storage import Catalog, CatalogError, IngestReport, UnknownIdError, ingest
from storage.catalog import TABLES
from storage.shards import shard_info
from tests.storage.builders import ROUND, write_shards


def _expected_rows(trajectories: list[Trajectory], shards: int) -> dict[str, int]:
    return {
        "trajectories": len(trajectories),
        "verdicts": len(trajectories),
        "steps": sum(len(t.steps) for t in trajectories),
        "tasks": len({t.task.id for t in trajectories}),
        "shards": shards,
    }


def test_ingest_reports_what_it_added(
    catalog: Catalog, shard_folder: Path, round_trajectories: list[Trajectory]
) -> None:
    shards = sorted(shard_folder.iterdir())
    report = catalog.trajectories.ingest(shards)

    steps = sum(len(t.steps) for t in round_trajectories)
    assert report == IngestReport(
        files=len(shards), trajectories=len(round_trajectories), steps=steps, skipped_files=0
    )
    stats = catalog.stats()
    assert {k: stats[k] for k in ("trajectories", "verdicts", "steps", "tasks", "shards")} == (
        _expected_rows(round_trajectories, len(shards))
    )


def test_ingesting_again_adds_nothing(
    catalog: Catalog, shard_folder: Path, round_trajectories: list[Trajectory]
) -> None:
    first = catalog.trajectories.ingest([shard_folder])
    stats = catalog.stats()

    again = catalog.trajectories.ingest([shard_folder, *shard_folder.iterdir()])

    assert again == IngestReport(files=0, trajectories=0, steps=0, skipped_files=first.files)
    assert catalog.stats() == stats


def test_trajectories_already_stored_are_skipped_in_a_new_shard(
    catalog: Catalog, tmp_path: Path, round_trajectories: list[Trajectory]
) -> None:
    first = write_shards(round_trajectories[:30], tmp_path / "a")
    catalog.trajectories.ingest(first)
    # A collector retried: a new shard repeats 30 trajectories and adds the rest,
    # and a second new shard repeats some of those.
    second = write_shards(round_trajectories, tmp_path / "b", size=len(round_trajectories))
    third = write_shards(round_trajectories[40:], tmp_path / "c")

    report = catalog.trajectories.ingest([*second, *third])

    rest = round_trajectories[30:]
    assert report == IngestReport(
        files=2,
        trajectories=len(rest),
        steps=sum(len(t.steps) for t in rest),
        skipped_files=0,
    )
    stats = catalog.stats()
    expected = _expected_rows(round_trajectories, len(first) + 2)
    assert {k: stats[k] for k in expected} == expected


def test_trajectories_come_back_equal(
    ingested: Catalog, round_trajectories: list[Trajectory]
) -> None:
    by_id = sorted(round_trajectories, key=lambda t: t.id)
    assert ingested.trajectories.of_round(ROUND) == by_id
    assert ingested.trajectories.count(ROUND) == len(round_trajectories)
    screened = round_trajectories[-1]
    assert ingested.trajectories.get(screened.id) == screened
    assert ingested.trajectories.of_round("round-none") == []
    assert ingested.trajectories.count("round-none") == 0


def test_embedded_tasks_keep_the_round_that_constructed_them(
    catalog: Catalog, shard_folder: Path, round_trajectories: list[Trajectory]
) -> None:
    early = round_trajectories[0].task
    catalog.tasks.add("round-0", [early])
    catalog.trajectories.ingest([shard_folder])

    assert catalog.tasks.of_round("round-0") == [early]
    tasks = {t.task.id: t.task for t in round_trajectories if t.task.id != early.id}
    assert catalog.tasks.of_round(ROUND) == [tasks[k] for k in sorted(tasks)]
    assert catalog.tasks.ids_except_round(ROUND) == [early.id]


def test_a_failure_half_way_leaves_the_catalog_as_it_was(
    catalog: Catalog, shard_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(*args: object) -> int:
        raise RuntimeError("disk vanished while writing steps")

    monkeypatch.setattr(ingest, "_insert_steps", fail)
    with pytest.raises(RuntimeError, match="disk vanished"):
        catalog.trajectories.ingest([shard_folder])
    assert catalog.stats() == dict.fromkeys(TABLES, 0)

    monkeypatch.undo()
    assert catalog.trajectories.ingest([shard_folder]).trajectories > 0


def test_ingest_refuses_a_file_that_is_not_a_complete_shard(
    catalog: Catalog, shard_folder: Path
) -> None:
    half = shard_folder / ".shard-00009.parquet.tmp-1-00000000"
    half.write_bytes(b"PAR1")
    assert catalog.trajectories.ingest([shard_folder]).files == len(
        list(shard_folder.glob("*.parquet"))
    )
    with pytest.raises(CatalogError, match="not a complete trajectory shard"):
        catalog.trajectories.ingest([half])
    with pytest.raises(CatalogError, match="not a complete trajectory shard"):
        catalog.trajectories.ingest([shard_folder / "missing.parquet"])
    assert catalog.trajectories.ingest([]) == IngestReport(0, 0, 0, 0)


def test_an_unknown_trajectory_names_recent_ones(
    ingested: Catalog, round_trajectories: list[Trajectory]
) -> None:
    with pytest.raises(UnknownIdError) as unknown:
        ingested.trajectories.get("traj-nope")
    assert unknown.value.kind == "trajectory"
    assert len(unknown.value.recent) == 5
    assert set(unknown.value.recent) <= {t.id for t in round_trajectories}
    assert str(unknown.value).startswith("unknown trajectory id 'traj-nope'; most recent: traj-")


def test_a_read_only_catalog_reads_but_refuses_writes(
    ingested: Catalog, shard_folder: Path
) -> None:
    reader = Catalog.open(ingested.path, read_only=True)
    assert reader.trajectories.count(ROUND) == ingested.trajectories.count(ROUND)
    with pytest.raises(CatalogError, match="opened read-only"):
        reader.trajectories.ingest([shard_folder])
    reader.close()
    with pytest.raises(CatalogError, match="is closed"):
        reader.stats()


def test_shards_are_ingested_in_bounded_transactions_and_a_failure_keeps_the_ones_before(
    catalog: Catalog,
    shard_folder: Path,
    round_trajectories: list[Trajectory],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shards = sorted(shard_folder.iterdir())
    sizes = [shard_info(s).trajectories for s in shards]
    monkeypatch.setattr(ingest, "TRANSACTION_TRAJECTORIES", sizes[0])
    transactions = list(ingest.transactions(ingest.resolve_shards(shards), sizes[0]))
    assert [len(group) for group in transactions] == [1] * len(shards)
    written = 0

    def fail_second(con: object, source: object) -> int:
        nonlocal written
        written += 1
        if written == 2:
            raise RuntimeError("disk vanished in the second transaction")
        return original(con, source)  # type: ignore[arg-type]

    original = ingest._insert_steps
    monkeypatch.setattr(ingest, "_insert_steps", fail_second)
    with pytest.raises(RuntimeError, match="second transaction"):
        catalog.trajectories.ingest(shards)
    assert catalog.stats()["shards"] == 1
    assert catalog.stats()["trajectories"] == sizes[0]

    monkeypatch.setattr(ingest, "_insert_steps", original)
    report = catalog.trajectories.ingest(shards)

    assert (report.files, report.skipped_files) == (len(shards) - 1, 1)
    stats = catalog.stats()
    assert {k: stats[k] for k in ("trajectories", "verdicts", "steps", "tasks", "shards")} == (
        _expected_rows(round_trajectories, len(shards))
    )


def test_transactions_take_whole_shards_up_to_the_limit(shard_folder: Path) -> None:
    shards = ingest.resolve_shards(sorted(shard_folder.iterdir()))
    sizes = [info.trajectories for info in shards.values()]

    groups = list(ingest.transactions(shards, sizes[0] + sizes[1]))
    everything = list(ingest.transactions(shards, sum(sizes)))
    tiny = list(ingest.transactions(shards, 1))

    assert list(groups[0]) == list(shards)[:2]
    assert [key for g in groups for key in g] == list(shards)
    assert everything == [shards]
    assert [len(g) for g in tiny] == [1] * len(shards)
