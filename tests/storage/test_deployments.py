"""Deployment records: every decision stored with its trace and read back equal, its alias
effect applied in the same transaction (a promotion promotes, a rollback restores, anything
else changes no alias), and a record that would lie about the registry refused with
nothing written."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import duckdb
import pytest
from pydantic import ValidationError

from contract import (
    AliasChange,
    DatasetVersion,
    DeploymentDecision,
    DeploymentRecord,
    InvalidInputError,
    ModelAlias,
    ModelRecord,
    Split,
    TrainingMethod,
    Trajectory,
    invalid_input,
)
from storage import SCHEMA_VERSION, Catalog, CatalogError
from storage import deployments as deployments_module
from storage import models as models_module
from storage.migrations import migrate, schema_version
from tests.storage.builders import make_version

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
CHAMPION, CANDIDATE, PREVIOUS = ModelAlias.CHAMPION, ModelAlias.CANDIDATE, ModelAlias.PREVIOUS
PROMOTED, REFUSED = DeploymentDecision.PROMOTED, DeploymentDecision.REFUSED
ROLLED_BACK = DeploymentDecision.ROLLED_BACK
HARNESS: dict[str, Any] = {
    "max_steps": 15,
    "samples": 2,
    "max_new_tokens": 256,
    "chat_format": "qwen",
    "dev_tasks": 40,
    "backend": {"kind": "sandbox", "seed": 7},
    "stop": ["</tool_call>"],
    "greedy": True,
    "system_prompt": None,
}


@pytest.fixture
def three(ingested: Catalog, round_trajectories: list[Trajectory]) -> list[ModelRecord]:
    """Three registered checkpoints (r1, r2, r3) of one frozen dataset version."""
    train = [t for t in round_trajectories if t.task.split is Split.TRAIN]
    version: DatasetVersion = make_version(train[:6])
    ingested.datasets.freeze(version)
    found = []
    for n in (1, 2, 3):
        model = _model(version.id, n)
        assert ingested.models.register(model)
        found.append(model)
    return found


def _model(dataset_id: str, n: int) -> ModelRecord:
    return ModelRecord(
        name=f"mobile-planner-r{n}",
        dataset_id=dataset_id,
        base="tiny",
        method=TrainingMethod.SFT,
        path=f"/state/models/r{n}",
        created_at=T0 + timedelta(days=n),
    )


def _at(hours: int) -> datetime:
    return T0 + timedelta(days=10, hours=hours)


def _deployment(
    decision: DeploymentDecision,
    candidate: ModelRecord | None,
    champion: ModelRecord | None,
    *,
    hours: int = 0,
    **changes: Any,
) -> DeploymentRecord:
    """A deployment of ``candidate`` against ``champion``: served as its decision says."""
    candidate_id = candidate.id if candidate is not None else None
    champion_id = champion.id if champion is not None else None
    served = candidate_id if decision in (PROMOTED, ROLLED_BACK) else champion_id
    fields: dict[str, Any] = {
        "decision": decision,
        "candidate_id": candidate_id,
        "champion_id": champion_id,
        "served_id": served,
        "reasons": (f"{decision.value}: overall +0.04", "no capability dropped more than 0.05"),
        "overall_gain": 0.04,
        "rule": {"min_overall_gain": 0.0, "max_capability_drop": 0.05},
        "harness": HARNESS,
        "endpoint": "http://127.0.0.1:8000/v1" if served is not None else None,
        "flow_run_id": "flow-run-1",
        "created_at": _at(hours),
    }
    return DeploymentRecord(**(fields | changes))


def _ids(catalog: Catalog) -> dict[str, str]:
    return {alias.value: model.id for alias, model in catalog.models.aliases().items()}


def _state(catalog: Catalog) -> tuple[dict[str, str], list[AliasChange], list[DeploymentRecord]]:
    return _ids(catalog), catalog.models.alias_history(), catalog.models.deployments()


def test_a_deployment_is_stored_once_and_comes_back_equal(
    ingested: Catalog, three: list[ModelRecord]
) -> None:
    r1, *_ = three
    record = _deployment(
        DeploymentDecision.FAILED,
        r1,
        None,
        reasons=("health check: 503 after 60 s",),
        candidate_report_id="fb-candidate",
        approver="ana",
    )
    assert record.id.startswith("dep-")
    assert ingested.models.latest_deployment() is None and ingested.models.deployments() == []

    assert ingested.models.record_deployment(record) == ()
    # the same content again, even read back from JSON, is the same deployment
    assert ingested.models.record_deployment(DeploymentRecord.from_json(record.to_json())) == ()

    assert ingested.stats()["deployments"] == 1
    stored = ingested.models.deployment(record.id)
    assert stored == record
    assert stored.harness == HARNESS and stored.created_at == _at(0)
    assert (
        ingested.models.deployments() == [record] and ingested.models.latest_deployment() == record
    )
    assert ingested.models.aliases() == {}


def test_a_promotion_record_promotes_its_candidate_and_names_itself_in_the_history(
    ingested: Catalog, three: list[ModelRecord]
) -> None:
    r1, r2, _ = three
    first = _deployment(PROMOTED, r1, None, hours=1, reasons=("first deployment",))
    assert ingested.models.record_deployment(first) == (
        AliasChange(
            alias=CHAMPION,
            model_id=r1.id,
            changed_at=_at(1),
            reason="first deployment",
            deployment_id=first.id,
        ),
    )

    ingested.models.set_alias(CANDIDATE, r2.id, reason="proposed", at=_at(2))
    second = _deployment(PROMOTED, r2, r1, hours=3)
    changes = ingested.models.record_deployment(second)
    assert [(c.alias, c.model_id) for c in changes] == [
        (PREVIOUS, r1.id),
        (CHAMPION, r2.id),
        (CANDIDATE, None),  # the candidate was promoted: cleared
    ]
    assert {(c.deployment_id, c.reason, c.changed_at) for c in changes} == {
        (second.id, second.reasons[0], _at(3))
    }
    assert ingested.models.aliases() == {CHAMPION: r2, PREVIOUS: r1}
    assert ingested.models.alias_history()[-3:] == list(changes)
    assert [c.deployment_id for c in ingested.models.alias_history(CHAMPION)] == [
        first.id,
        second.id,
    ]
    assert ingested.models.deployments() == [second, first]

    # the same record again changes nothing, though its champion is no longer the champion
    before = _state(ingested)
    assert ingested.models.record_deployment(second) == ()
    assert ingested.models.record_deployment(first) == ()
    assert _state(ingested) == before


@pytest.mark.parametrize(
    "decision",
    [DeploymentDecision.REFUSED, DeploymentDecision.REJECTED, DeploymentDecision.FAILED],
)
def test_a_deployment_that_keeps_the_champion_changes_no_alias(
    ingested: Catalog, three: list[ModelRecord], decision: DeploymentDecision
) -> None:
    r1, r2, r3 = three
    ingested.models.record_deployment(_deployment(PROMOTED, r1, None, hours=1))
    ingested.models.record_deployment(_deployment(PROMOTED, r2, r1, hours=2))
    ingested.models.set_alias(CANDIDATE, r3.id, reason="proposed", at=_at(3))
    aliases, history = _ids(ingested), ingested.models.alias_history()

    record = _deployment(decision, r3, r2, hours=4, overall_gain=-0.12)
    assert ingested.models.record_deployment(record) == ()

    assert (_ids(ingested), ingested.models.alias_history()) == (aliases, history)
    assert ingested.models.latest_deployment() == record
    assert record.served_id == r2.id


def test_a_rollback_record_restores_the_previous_champion(
    ingested: Catalog, three: list[ModelRecord]
) -> None:
    r1, r2, r3 = three
    for hours, (candidate, champion) in enumerate(((r1, None), (r2, r1), (r3, r2))):
        ingested.models.record_deployment(_deployment(PROMOTED, candidate, champion, hours=hours))
    assert _ids(ingested) == {"champion": r3.id, "previous": r2.id}

    back = _deployment(ROLLED_BACK, r2, r3, hours=5, reasons=("r3 regressed",), rule={})
    changes = ingested.models.record_deployment(back)

    assert changes == (
        AliasChange(
            alias=CHAMPION,
            model_id=r2.id,
            changed_at=_at(5),
            reason="r3 regressed",
            deployment_id=back.id,
        ),
        AliasChange(
            alias=PREVIOUS,
            model_id=r1.id,
            changed_at=_at(5),
            reason="r3 regressed",
            deployment_id=back.id,
        ),
    )
    assert ingested.models.aliases() == {CHAMPION: r2, PREVIOUS: r1}
    assert ingested.models.latest_deployment() == back


def test_a_rollback_record_that_names_another_model_than_previous_is_refused(
    ingested: Catalog, three: list[ModelRecord]
) -> None:
    r1, r2, r3 = three
    ingested.models.record_deployment(_deployment(PROMOTED, r1, None, hours=1))
    ingested.models.record_deployment(_deployment(PROMOTED, r2, r1, hours=2))
    before = _state(ingested)

    with pytest.raises(InvalidInputError) as refused:
        ingested.models.record_deployment(_deployment(ROLLED_BACK, r3, r2, hours=3))
    assert refused.value.field == "candidate_id"
    assert f"restores the previous champion {r1.id!r}" in str(refused.value)
    assert _state(ingested) == before

    # with no previous champion at all, the rollback itself refuses
    ingested.models.record_deployment(_deployment(ROLLED_BACK, r1, r2, hours=4))
    before = _state(ingested)
    with pytest.raises(InvalidInputError) as refused:
        ingested.models.record_deployment(_deployment(ROLLED_BACK, r2, r1, hours=5))
    assert refused.value.field == "previous"
    assert _state(ingested) == before


def test_a_deployment_decided_against_a_stale_champion_is_refused(
    ingested: Catalog, three: list[ModelRecord]
) -> None:
    """Two deployments read the same champion; the second to record is refused."""
    r1, r2, r3 = three
    ingested.models.record_deployment(_deployment(PROMOTED, r1, None, hours=1))
    ours = _deployment(PROMOTED, r3, r1, hours=3)
    ingested.models.record_deployment(_deployment(PROMOTED, r2, r1, hours=2))  # came first
    before = _state(ingested)

    for stale in (ours, _deployment(REFUSED, r3, None, hours=4)):
        with pytest.raises(InvalidInputError) as refused:
            ingested.models.record_deployment(stale)
        assert refused.value.field == "champion_id"
        assert "the champion changed since" in str(refused.value)
        assert repr(r2.id) in str(refused.value)
    assert _state(ingested) == before


@pytest.mark.parametrize("field", ["candidate_id", "champion_id"])
def test_an_unregistered_model_is_refused_by_name(
    ingested: Catalog, three: list[ModelRecord], field: str
) -> None:
    r1, r2, _ = three
    ingested.models.record_deployment(_deployment(PROMOTED, r1, None, hours=1))
    before = _state(ingested)
    ghost = _model("ds-nothing", 9)
    candidate, champion = (ghost, r1) if field == "candidate_id" else (r2, ghost)

    with pytest.raises(InvalidInputError) as refused:
        ingested.models.record_deployment(_deployment(PROMOTED, candidate, champion, hours=2))

    assert refused.value.field == field
    assert f"{ghost.id!r} is not a registered model in the catalog" in str(refused.value)
    assert _state(ingested) == before


@pytest.mark.parametrize(
    ("decision", "candidate", "champion"),
    [
        pytest.param(PROMOTED, 2, 1, id="promotion"),
        pytest.param(ROLLED_BACK, 0, 1, id="rollback"),
    ],
)
def test_a_failure_half_way_leaves_no_record_and_no_alias_change(
    ingested: Catalog,
    three: list[ModelRecord],
    monkeypatch: pytest.MonkeyPatch,
    decision: DeploymentDecision,
    candidate: int,
    champion: int,
) -> None:
    """The record and its alias changes are one transaction: a failure after the record
    and the first alias were written undoes both."""
    r1, r2, r3 = three
    ingested.models.record_deployment(_deployment(PROMOTED, r1, None, hours=1))
    ingested.models.record_deployment(_deployment(PROMOTED, r2, r1, hours=2))
    ingested.models.set_alias(CANDIDATE, r3.id, reason="proposed", at=_at(3))
    before = _state(ingested)
    record = _deployment(decision, three[candidate], three[champion], hours=4)
    inserted: list[str] = []
    insert, write = deployments_module.insert, models_module.write_alias

    def spy_insert(*args: Any) -> None:
        insert(*args)
        inserted.append(args[1].id)

    def fail_after(*args: Any) -> None:
        write(*args)
        raise RuntimeError("disk full, say")

    monkeypatch.setattr(deployments_module, "insert", spy_insert)
    monkeypatch.setattr(models_module, "write_alias", fail_after)
    with pytest.raises(RuntimeError, match="disk full"):
        ingested.models.record_deployment(record)
    assert inserted == [record.id]  # the record was written before the failure
    assert _state(ingested) == before
    with pytest.raises(InvalidInputError):
        ingested.models.deployment(record.id)

    monkeypatch.undo()
    assert len(ingested.models.record_deployment(record)) >= 2
    assert ingested.models.latest_deployment() == record


def test_deployments_are_listed_newest_first(ingested: Catalog, three: list[ModelRecord]) -> None:
    r1, r2, r3 = three
    later = _deployment(REFUSED, r2, None, hours=5)
    earlier = _deployment(REFUSED, r3, None, hours=1)
    # the same instant written in another time zone sorts as that instant
    middle = _deployment(
        REFUSED, r1, None, created_at=_at(3).astimezone(timezone(timedelta(hours=2)))
    )
    for record in (later, earlier, middle):
        ingested.models.record_deployment(record)

    assert ingested.models.deployments() == [later, middle, earlier]
    assert ingested.models.deployments(limit=2) == [later, middle]
    assert ingested.models.deployments(limit=0) == []
    assert ingested.models.latest_deployment() == later

    twin = _deployment(REFUSED, r1, None, hours=5, reasons=("recorded last",))
    ingested.models.record_deployment(twin)
    assert ingested.models.latest_deployment() == twin
    with pytest.raises(InvalidInputError) as refused:
        ingested.models.deployments(limit=-1)
    assert refused.value.field == "limit"


def test_an_unknown_deployment_is_refused_naming_the_recent_ones(
    ingested: Catalog, three: list[ModelRecord]
) -> None:
    with pytest.raises(InvalidInputError, match=r"^deployment_id: .*the catalog has none yet"):
        ingested.models.deployment("dep-nothing")
    record = _deployment(REFUSED, three[0], None)
    ingested.models.record_deployment(record)
    with pytest.raises(InvalidInputError) as refused:
        ingested.models.deployment("dep-nothing")
    assert refused.value.field == "deployment_id"
    assert f"most recent: {record.id}" in str(refused.value)


def test_a_read_only_catalog_refuses_a_deployment_but_reads_them(
    ingested: Catalog, three: list[ModelRecord]
) -> None:
    record = _deployment(PROMOTED, three[0], None)
    ingested.models.record_deployment(record)
    with Catalog.open(ingested.path, read_only=True) as reader:
        with pytest.raises(CatalogError, match="read-only"):
            reader.models.record_deployment(_deployment(PROMOTED, three[1], three[0]))
        assert reader.models.deployments() == [record]
        assert reader.models.deployment(record.id) == record
        assert reader.models.aliases() == {CHAMPION: three[0]}


def test_the_id_is_derived_from_the_content() -> None:
    a = _deployment(REFUSED, None, None)
    assert a.id == _deployment(REFUSED, None, None).id
    # the same decision at another time is another deployment
    assert a.id != _deployment(REFUSED, None, None, hours=1).id
    assert a.id != _deployment(REFUSED, None, None, harness=HARNESS | {"samples": 4}).id
    with pytest.raises(ValueError, match="does not match the record's content"):
        DeploymentRecord.model_validate(a.model_dump(mode="json") | {"id": "dep-forged"})


M1, M2 = "model-1", "model-2"


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        pytest.param({"decision": "shipped"}, "decision", id="unknown decision"),
        pytest.param({"candidate_id": "ds-x"}, "candidate_id", id="candidate not a model id"),
        pytest.param({"champion_id": "x"}, "champion_id", id="champion not a model id"),
        pytest.param({"served_id": "x"}, "served_id", id="served not a model id"),
        pytest.param({"reasons": []}, "reasons", id="no reason"),
        pytest.param({"reasons": ["gain", " "]}, "reasons[1]", id="blank reason"),
        pytest.param({"candidate_report_id": "x"}, "candidate_report_id", id="not a report"),
        pytest.param({"champion_report_id": "x"}, "champion_report_id", id="not a report 2"),
        pytest.param({"overall_gain": float("nan")}, "overall_gain", id="NaN gain"),
        pytest.param({"rule": {"min_overall_gain": float("inf")}}, "rule.min", id="inf rule"),
        pytest.param({"harness": {"seed": {1, 2}}}, "harness.seed", id="harness not JSON"),
        pytest.param({"endpoint": ""}, "endpoint", id="empty endpoint"),
        pytest.param({"created_at": "2026-12-01T09:00:00"}, "created_at", id="naive time"),
        pytest.param({"gate": "strict"}, "gate", id="unknown field"),
        pytest.param(
            {"candidate_id": None, "served_id": None}, "candidate_id", id="promoted nothing"
        ),
        pytest.param({"served_id": M1}, "served_id", id="promoted but serves the champion"),
        pytest.param(
            {"decision": "rolled_back", "served_id": M1}, "served_id", id="rolled back not served"
        ),
        pytest.param({"decision": "refused"}, "served_id", id="refused but serves the candidate"),
        pytest.param({"decision": "rejected", "served_id": None}, "served_id", id="rejected"),
        pytest.param({"decision": "failed", "served_id": M2}, "served_id", id="failed"),
    ],
)
def test_a_malformed_deployment_record_is_refused_naming_the_field(
    changes: dict[str, Any], field: str
) -> None:
    data: dict[str, Any] = {
        "decision": "promoted",
        "candidate_id": M2,
        "champion_id": M1,
        "served_id": M2,
        "reasons": ["gain"],
        "created_at": T0.isoformat(),
    } | changes
    with pytest.raises(ValidationError) as refused:
        DeploymentRecord.model_validate(data)
    assert invalid_input(refused.value).field.startswith(field)


def test_a_version_6_catalog_is_upgraded_and_records_deployments(tmp_path: Path) -> None:
    """A catalog with models and a champion from before deployments were recorded."""
    path = tmp_path / "catalog.duckdb"
    r1, r2 = _model("ds-old", 1), _model("ds-old", 2)
    with duckdb.connect(str(path)) as con:
        migrate(con, 0, target=6)
        for model in (r1, r2):
            con.execute(
                "INSERT INTO models (id, name, dataset_id, base, method, path, created_at, "
                "registered_at, record) VALUES (?, ?, ?, ?, ?, ?, now(), now(), ?)",
                [
                    model.id,
                    model.name,
                    model.dataset_id,
                    model.base,
                    model.method.value,
                    model.path,
                    model.to_json().decode(),
                ],
            )
        con.execute("INSERT INTO model_aliases VALUES ('champion', ?, now())", [r1.id])
        con.execute(
            "INSERT INTO model_alias_history VALUES (1, 'champion', ?, now(), 'old', NULL, 'set')",
            [r1.id],
        )
        assert schema_version(con) == 6

    with Catalog.open(path) as catalog:
        assert catalog.stats()["deployments"] == 0
        assert catalog.models.aliases() == {CHAMPION: r1}
        assert [c.reason for c in catalog.models.alias_history()] == ["old"]
        promoted = _deployment(PROMOTED, r2, r1)
        catalog.models.record_deployment(promoted)
        assert catalog.models.aliases() == {CHAMPION: r2, PREVIOUS: r1}
        assert catalog.models.deployments() == [promoted]

    with duckdb.connect(str(path)) as con:
        assert schema_version(con) == SCHEMA_VERSION == 10
        with pytest.raises(duckdb.ConstraintException, match="CHECK"):
            con.execute(
                "INSERT INTO deployments (id, decision, created_at, recorded_at, record) "
                "VALUES ('dep-x', 'shipped', now(), now(), '{}')"
            )
