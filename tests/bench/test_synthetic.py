"""The synthetic round: deterministic, stored as its figures say, valid records whose ids
match their content, the catalog that writing the objects gives, duplicates the curator
finds, and renamed worlds whose evidence the curator reads as the original's."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pytest

from bench.synthetic import SyntheticRound, synthetic_round
from contract import DropReason, Outcome, Split, TaskSpec, Trajectory
from curation.attribution import attribute_failure
from curation.dedup import find_duplicates
from curation.quality import quality_score
from curation.routing import CuratorConfig, route
from curation.support import check_support
from storage import Catalog

N = 300
ROUND = "round-test"
TIMINGS = ("catalog_path", "pool_s", "generate_s", "write_s", "ingest_s")
RENAMED = re.compile(r"\b([a-z]+)-\d+(\d{4})\b")
"""An id renamed into world ``w``: ``c-<w>0004`` (the sandbox's own have 4 digits at most)."""


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> SyntheticRound:
    return synthetic_round(tmp_path_factory.mktemp("fast") / "catalog.duckdb", ROUND, N, seed=1)


@pytest.fixture(scope="module")
def loaded(made: SyntheticRound) -> list[Trajectory]:
    """Every trajectory, each id recomputed from its content on load."""
    return Catalog.open(made.catalog_path, read_only=True).trajectories.of_round(ROUND)


def _figures(made: SyntheticRound) -> dict[str, Any]:
    figures = dataclasses.asdict(made)
    return {k: v for k, v in figures.items() if k not in TIMINGS}


def _rows(path: Path, table: str) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall()


def test_the_same_seed_makes_the_same_round(
    made: SyntheticRound, loaded: list[Trajectory], tmp_path: Path
) -> None:
    again = synthetic_round(tmp_path / "again.duckdb", ROUND, N, seed=1)
    assert _figures(again) == _figures(made)
    ids = [t.id for t in Catalog.open(again.catalog_path).trajectories.of_round(ROUND)]
    assert ids == [t.id for t in loaded]
    other = synthetic_round(tmp_path / "other.duckdb", ROUND, N, seed=2)
    assert other.trajectories == N
    assert _figures(other) != _figures(made)


def test_the_catalog_holds_what_the_round_reports(
    made: SyntheticRound, loaded: list[Trajectory]
) -> None:
    catalog = Catalog.open(made.catalog_path, read_only=True)
    stats = catalog.stats()
    assert catalog.trajectories.count(ROUND) == len(loaded) == made.trajectories == N
    assert stats["steps"] == made.steps == sum(len(t.steps) for t in loaded)
    assert stats["tasks"] == made.tasks == len({t.task.id for t in loaded})
    assert made.fingerprints == made.tasks == len({t.task.fingerprint for t in loaded})
    assert made.templates == len({t.task.template for t in loaded}) > 10
    assert stats["shards"] == made.shards
    round_info = catalog.rounds.get(ROUND)
    assert round_info is not None and round_info.stage == "collect"
    assert all(t.task.split is Split.TRAIN and t.metadata.round == ROUND for t in loaded)
    for task in catalog.tasks.of_round(ROUND):  # ids recomputed from the specs too
        assert TaskSpec.model_validate_json(task.to_json()) == task
    assert 4.0 < made.steps / made.trajectories < 6.0


def test_tasks_have_several_attempts_and_a_mix_of_outcomes(
    made: SyntheticRound, loaded: list[Trajectory]
) -> None:
    outcomes = Counter(t.metadata.outcome.value for t in loaded)
    assert outcomes == made.outcomes
    assert {Outcome(o) for o in outcomes} == set(Outcome)
    assert outcomes["success"] > outcomes["failure"] > outcomes["backend_error"]
    attempts: dict[str, list[Trajectory]] = {}
    for t in loaded:
        attempts.setdefault(t.task.id, []).append(t)
    sizes = Counter(len(tries) for tries in attempts.values())
    assert set(sizes) == {1, 2, 3, 4}
    for tries in attempts.values():
        assert sorted(t.metadata.attempt for t in tries) == list(range(len(tries)))
        assert {t.metadata.device for t in tries} == {f"sandbox-{i}" for i in range(len(tries))}
    assert sum(len({t.metadata.injected_faults for t in tries}) > 1 for tries in attempts.values())


def test_the_fast_path_writes_the_catalog_the_objects_give(
    made: SyntheticRound, loaded: list[Trajectory], tmp_path: Path
) -> None:
    reference = synthetic_round(tmp_path / "objects.duckdb", ROUND, N, seed=1, objects=True)
    assert _figures(reference) == _figures(made)
    catalog = Catalog.open(reference.catalog_path, read_only=True)
    assert catalog.stats() == Catalog.open(made.catalog_path, read_only=True).stats()
    assert catalog.trajectories.of_round(ROUND) == loaded
    for table in ("tasks", "trajectories", "steps", "verdicts"):
        assert _rows(reference.catalog_path, table) == _rows(made.catalog_path, table), table


def test_the_curator_finds_the_planted_duplicates(
    made: SyntheticRound, loaded: list[Trajectory]
) -> None:
    found = find_duplicates(loaded)
    reasons = Counter(d.reason for d in found.values())
    assert reasons[DropReason.DUPLICATE] == made.exact_duplicates > 0
    assert reasons[DropReason.NEAR_DUPLICATE] >= made.near_duplicates > 0
    by_id = {t.id: t for t in loaded}
    assert all(by_id[tid].task.id == by_id[dup.of].task.id for tid, dup in found.items())


def test_renamed_worlds_keep_the_evidence_consistent(loaded: list[Trajectory]) -> None:
    """Renaming the ids back gives the episode the curator judges the same way: evidence
    and steps were renamed together."""
    renamed = [t for t in loaded if RENAMED.search(t.task.to_json().decode())]
    assert len(renamed) > N // 2
    config = CuratorConfig()
    for t in renamed:
        data = orjson.loads(RENAMED.sub(lambda m: f"{m[1]}-{int(m[2])}", t.to_json().decode()))
        del data["id"], data["task"]["id"]
        original = Trajectory.model_validate(data)
        assert original.id != t.id
        supported, _ = check_support(t)
        assert check_support(original)[0] == supported
        meta = t.metadata
        attribution = attribute_failure(t.steps, t.verdict, meta.termination, meta.outcome)
        assert attribution == attribute_failure(
            original.steps, original.verdict, meta.termination, meta.outcome
        )
        quality = quality_score(t)
        assert quality_score(original) == quality
        assert (
            route(original, supported, quality, config)[:2]
            == route(t, supported, quality, config)[:2]
        )
