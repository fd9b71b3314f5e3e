"""The curator's facts: read from the catalog's columns, they equal the facts of the
records themselves, and the curate stage decides what the curator decides on records."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from agents.curator import curate
from bench.synthetic import SyntheticRound, synthetic_round
from contract import (
    Clarify,
    ErrorKind,
    Feedback,
    Finish,
    MemoryRead,
    MemorySearch,
    MemoryWrite,
    Outcome,
    Refuse,
    SkillLoad,
    Step,
    SubAgentCall,
    ToolCall,
    Trajectory,
    action_adapter,
    describe_json,
)
from curation.dedup import action_tokens
from curation.facts import TrajectoryFacts, facts_from_columns
from curation.partitions import fingerprint_partitions
from curation.routing import CuratorConfig
from flows.curation_stage import curate_partition
from storage import Catalog, UnknownIdError
from storage.curation_columns import EVERYWHERE
from tests.storage.builders import write_shards

ROUND = "round-facts"
CONFIG = CuratorConfig(audit_rate=0.05)


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> SyntheticRound:
    """2,000 trajectories of every outcome, with exact and near duplicates."""
    path = tmp_path_factory.mktemp("facts") / "catalog.duckdb"
    return synthetic_round(path, ROUND, 2000, seed=3)


def _ids(catalog: Catalog) -> list[str]:
    return [tid for tid, _ in catalog.trajectories.fingerprints(ROUND)]


def test_facts_from_columns_equal_the_facts_of_the_rebuilt_records(made: SyntheticRound) -> None:
    with Catalog.open(made.catalog_path, read_only=True) as catalog:
        ids = _ids(catalog)
        columnar = facts_from_columns(catalog.trajectories.curation_columns(ids))
        records = catalog.trajectories.by_ids(sorted(ids))

    assert [f.id for f in columnar] == sorted(ids)
    assert columnar == [TrajectoryFacts.of(t) for t in records]
    assert {f.outcome for f in columnar} == set(Outcome)
    assert any(f.attribution is not None for f in columnar)


def test_the_curate_stage_decides_as_the_curator_does_on_records(made: SyntheticRound) -> None:
    with Catalog.open(made.catalog_path, read_only=True) as catalog:
        ids = _ids(catalog)
        records = catalog.trajectories.by_ids(ids)

    from_columns = curate_partition(made.catalog_path, ROUND, ids, CONFIG)

    assert from_columns == curate(records, ROUND, CONFIG)
    dropped = [r for r in from_columns if r.duplicate_of is not None]
    assert len(dropped) >= made.exact_duplicates // 2
    assert len({r.routing for r in from_columns}) == 3


def test_facts_of_fresh_episodes_equal_the_facts_the_catalog_gives(
    faulty_trajectories: list[Trajectory], tmp_path: Path
) -> None:
    """Arguments in the model's order in memory, sorted in the catalog: described alike;
    an episode on simulated tools is one in the catalog too."""
    fresh = [*faulty_trajectories[:78], *map(_on_simulated_tools, faulty_trajectories[78:80])]
    path = tmp_path / "catalog.duckdb"
    with Catalog.open(path) as catalog:
        catalog.rounds.begin(ROUND, {})
        catalog.tasks.add(ROUND, [t.task for t in fresh])
        catalog.trajectories.ingest(write_shards(fresh, tmp_path / "shards"))
        stored = facts_from_columns(catalog.trajectories.curation_columns([t.id for t in fresh]))

    by_id = {f.id: f for f in stored}
    assert [by_id[t.id] for t in fresh] == [TrajectoryFacts.of(t) for t in fresh]
    assert [by_id[t.id].simulated for t in fresh] == [False] * 78 + [True] * 2


def _on_simulated_tools(trajectory: Trajectory) -> Trajectory:
    """The same episode, as if a chat model had answered its tools (its own id)."""
    data = trajectory.model_dump(mode="json", exclude={"id"})
    data["metadata"]["simulated"] = True
    return Trajectory.model_validate(data)


def test_a_call_is_described_alike_whatever_the_order_of_its_arguments() -> None:
    ordered = ToolCall(tool="set_alarm", arguments={"label": "Gym", "hour": 7})
    reordered = ToolCall(tool="set_alarm", arguments={"hour": 7, "label": "Gym"})
    steps = [
        Step(index=0, action=action, feedback=Feedback(result="ok"))
        for action in (ordered, reordered)
    ]

    first, second = action_tokens(steps)

    assert first == second == 'set_alarm(hour=7, label="gym")'


@pytest.mark.parametrize(
    "action",
    [
        ToolCall(tool="send_message", arguments={"text": "hi  there", "contact_id": "c-3"}),
        ToolCall(tool="list_alarms"),
        MemoryRead(key="home"),
        MemoryWrite(key="home", value="12 Elm St"),
        MemorySearch(query="address"),
        SkillLoad(name="book-trip"),
        SubAgentCall(agent="gui", instruction="tap OK", arguments={"b": [1, 2], "a": None}),
        Clarify(question="Which Anna?"),
        Refuse(reason="unsafe"),
        Finish(answer="done"),
        Finish(),
    ],
)
def test_describe_json_is_describe_of_the_stored_action(action: object) -> None:
    """The catalog stores canonical JSON; read back, the record describes itself as it
    did live (a tool call's arguments out of sorted order included)."""
    stored = action.to_json()  # type: ignore[attr-defined]
    loaded = action_adapter.validate_json(stored)

    live = action.describe()  # type: ignore[attr-defined]
    assert describe_json(orjson.loads(stored)) == loaded.describe() == live


def test_an_output_that_was_no_action_is_a_token_of_its_error() -> None:
    step = Step(index=0, action=None, feedback=Feedback.failure(ErrorKind.MALFORMED_OUTPUT, "x"))
    assert action_tokens([step]) == [f"<no action: {ErrorKind.MALFORMED_OUTPUT}>"]


def test_columns_of_an_unknown_trajectory_name_it(made: SyntheticRound) -> None:
    with Catalog.open(made.catalog_path, read_only=True) as catalog:
        known = _ids(catalog)[:3]
        with pytest.raises(UnknownIdError, match="traj-nope"):
            catalog.trajectories.curation_columns([*known, "traj-nope"])
        assert catalog.trajectories.curation_columns(known).trajectories.num_rows == 3


def test_a_partition_read_inside_its_spans_equals_a_read_of_every_row(
    made: SyntheticRound,
) -> None:
    with Catalog.open(made.catalog_path, read_only=True) as catalog:
        partitions = fingerprint_partitions(catalog.trajectories.fingerprints(ROUND), 300)
        spans = catalog.trajectories.curation_spans(partitions)
        for ids, span in zip(partitions, spans, strict=True):
            inside = catalog.trajectories.curation_columns(ids, span)
            everywhere = catalog.trajectories.curation_columns(ids)
            assert inside.trajectories.equals(everywhere.trajectories)
            assert inside.steps.equals(everywhere.steps)
    narrowed = [s.trajectories[1] - s.trajectories[0] + 1 for s in spans]
    assert sum(narrowed) < 2 * made.trajectories, "spans of neighbours should barely overlap"
    assert all(s.steps[0] <= s.steps[1] for s in spans)


def test_spans_that_miss_rows_are_not_trusted(made: SyntheticRound) -> None:
    with Catalog.open(made.catalog_path, read_only=True) as catalog:
        first, second, *_ = fingerprint_partitions(catalog.trajectories.fingerprints(ROUND), 300)
        wrong, _ = catalog.trajectories.curation_spans([second, first])
        stale = catalog.trajectories.curation_columns(first, wrong)
        whole = catalog.trajectories.curation_columns(first)
        only_steps = replace(wrong, trajectories=(0, 2**62), tasks=(0, 2**62), verdicts=(0, 2**62))
        missing_steps = catalog.trajectories.curation_columns(first, only_steps)
        assert catalog.trajectories.curation_spans([["traj-nope"]]) == [EVERYWHERE]
        with pytest.raises(UnknownIdError, match="traj-nope"):
            catalog.trajectories.curation_columns([*first[:2], "traj-nope"], wrong)

    assert stale.trajectories.equals(whole.trajectories) and stale.steps.equals(whole.steps)
    assert missing_steps.steps.equals(whole.steps)
