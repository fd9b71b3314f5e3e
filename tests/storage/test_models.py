"""The model registry: checkpoints registered once with their lineage, read back equal,
the latest found, and records with a lineage the catalog cannot vouch for refused with
nothing stored."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from contract import (
    ApprovalDecision,
    DatasetApproval,
    DatasetVersion,
    FeedbackReport,
    InvalidInputError,
    ModelRecord,
    Split,
    TrainingMethod,
    Trajectory,
    invalid_input,
    parse_feedback_report,
)
from storage import Catalog, UnknownIdError
from storage import models as models_module
from tests.storage.builders import make_version

EXAMPLE_REPORT = Path(__file__).resolve().parents[2] / "docs" / "examples" / "feedback-report.json"
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def frozen(ingested: Catalog, round_trajectories: list[Trajectory]) -> DatasetVersion:
    """A frozen dataset version of train trajectories in ``ingested``."""
    train = [t for t in round_trajectories if t.task.split is Split.TRAIN]
    version = make_version(train[:6])
    assert ingested.datasets.freeze(version)
    return version


def _model(dataset_id: str, **changes: Any) -> ModelRecord:
    fields: dict[str, Any] = {
        "name": "mobile-planner-r1",
        "dataset_id": dataset_id,
        "base": "tiny",
        "method": TrainingMethod.SFT,
        "hyperparameters": {"learning_rate": 2e-5, "epochs": 2, "lora": None},
        "metrics": {"train_loss": 0.41, "dev_overall": 0.62, "dev_tool_use": 0.75},
        "path": "/state/models/r1",
        "created_at": T0,
    }
    return ModelRecord(**(fields | changes))


def _report() -> FeedbackReport:
    return parse_feedback_report(EXAMPLE_REPORT.read_bytes())


def test_a_model_is_registered_once_and_comes_back_equal(
    ingested: Catalog, frozen: DatasetVersion
) -> None:
    report = _report()
    ingested.feedback.add(report)
    model = _model(frozen.id, feedback_id=report.id, flow_run_id="run-1")

    assert model.id.startswith("model-")
    assert ingested.models.register(model) is True
    # the same content again, even read back from JSON, is the same model
    assert ingested.models.register(ModelRecord.from_json(model.to_json())) is False

    assert ingested.stats()["models"] == 1
    stored = ingested.models.get(model.id)
    assert stored == model
    assert stored.created_at == T0 and stored.hyperparameters["lora"] is None
    assert ingested.models.every() == [model]
    assert ingested.models.latest() == model


def test_an_rl_run_continues_from_its_sft_parent(ingested: Catalog, frozen: DatasetVersion) -> None:
    sft = _model(frozen.id)
    rl = _model(
        frozen.id,
        name="mobile-planner-r1-rl",
        base="/state/models/r1",
        parent=sft.id,
        method=TrainingMethod.RL,
        path="/state/models/r1-rl",
        created_at=T0 + timedelta(hours=2),
    )
    ingested.models.register(sft)
    ingested.models.register(rl)

    assert [m.id for m in ingested.models.every()] == [sft.id, rl.id]
    latest = ingested.models.latest()
    assert latest is not None and latest.parent == sft.id
    assert ingested.models.get(latest.parent).method is TrainingMethod.SFT


def test_the_latest_model_is_the_last_created_then_the_last_registered(
    ingested: Catalog, frozen: DatasetVersion
) -> None:
    assert ingested.models.latest() is None
    assert ingested.models.every() == []
    newer = _model(frozen.id, path="/m/newer", created_at=T0 + timedelta(days=1))
    older = _model(frozen.id, path="/m/older", created_at=T0)
    # the same instant written in another time zone sorts as that instant
    middle = _model(frozen.id, path="/m/middle", created_at="2026-12-01T14:00:00+02:00")
    for model in (newer, older, middle):
        ingested.models.register(model)

    assert ingested.models.latest() == newer
    assert [m.path for m in ingested.models.every()] == ["/m/older", "/m/middle", "/m/newer"]

    twin = _model(frozen.id, path="/m/twin", created_at=newer.created_at)
    ingested.models.register(twin)
    assert ingested.models.latest() == twin
    ingested.models.register(newer)  # registered before: changes nothing
    assert ingested.models.latest() == twin


def _rejected(catalog: Catalog, version: DatasetVersion) -> str:
    """Propose ``version`` and reject it: it is in the catalog, but never frozen."""
    catalog.datasets.decide(
        version,
        DatasetApproval(
            dataset_id=version.id,
            round_id=version.round_id,
            content_hash=version.content_hash,
            target=version.target,
            decision=ApprovalDecision.REJECT,
            approver="ana",
            automatic=False,
            decided_at=T0,
        ),
    )
    assert catalog.datasets.approval(version.id) is not None
    return version.id


@pytest.mark.parametrize(
    ("field", "changes"),
    [
        pytest.param("dataset_id", lambda c, v, t: {"dataset_id": "ds-nothing"}, id="no dataset"),
        pytest.param(
            "dataset_id",
            lambda c, v, t: {"dataset_id": _rejected(c, make_version(t[6:9]))},
            id="rejected, never frozen",
        ),
        pytest.param(
            "parent",
            lambda c, v, t: {"parent": _model(v.id, name="unregistered").id},
            id="unregistered parent",
        ),
        pytest.param(
            "feedback_id", lambda c, v, t: {"feedback_id": _report().id}, id="report not stored"
        ),
    ],
)
def test_a_model_whose_lineage_is_unknown_is_refused_and_nothing_is_stored(
    ingested: Catalog,
    frozen: DatasetVersion,
    round_trajectories: list[Trajectory],
    field: str,
    changes: Any,
) -> None:
    train = [t for t in round_trajectories if t.task.split is Split.TRAIN]
    record = _model(**({"dataset_id": frozen.id} | changes(ingested, frozen, train)))
    before = ingested.stats()

    with pytest.raises(InvalidInputError) as refused:
        ingested.models.register(record)

    assert refused.value.field == field
    assert "in the catalog" in str(refused.value)
    assert ingested.stats() == before
    with pytest.raises(UnknownIdError):
        ingested.models.get(record.id)


def test_a_refusal_lists_the_ids_the_catalog_has(ingested: Catalog, frozen: DatasetVersion) -> None:
    with pytest.raises(InvalidInputError, match=f"most recent: {frozen.id}"):
        ingested.models.register(_model("ds-nothing"))
    with pytest.raises(InvalidInputError, match=r"parent: .*\(the catalog has none yet\)"):
        ingested.models.register(_model(frozen.id, parent="model-nothing"))


def test_an_unknown_id_lists_the_recent_ones(ingested: Catalog, frozen: DatasetVersion) -> None:
    with pytest.raises(UnknownIdError, match="the catalog has no model yet"):
        ingested.models.get("model-nothing")
    model = _model(frozen.id)
    ingested.models.register(model)
    with pytest.raises(
        UnknownIdError, match=f"unknown model id 'model-nothing'; most recent: {model.id}"
    ):
        ingested.models.get("model-nothing")


def test_a_failure_while_registering_leaves_nothing_behind(
    ingested: Catalog, frozen: DatasetVersion, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Registration is one transaction: a failure after the row was written undoes it."""
    register = models_module.register

    def fail_after(*args: Any) -> bool:
        register(*args)
        raise RuntimeError("disk full, say")

    monkeypatch.setattr(models_module, "register", fail_after)
    with pytest.raises(RuntimeError, match="disk full"):
        ingested.models.register(_model(frozen.id))
    assert ingested.stats()["models"] == 0
    monkeypatch.undo()
    assert ingested.models.register(_model(frozen.id)) is True


def test_a_model_and_its_report_are_stored_together_or_not_at_all(
    ingested: Catalog, frozen: DatasetVersion
) -> None:
    report = _report()
    orphan = _model(frozen.id, parent="model-nothing", feedback_id=report.id)
    with pytest.raises(InvalidInputError) as refused:
        ingested.models.register(orphan, report)
    assert refused.value.field == "parent"
    with pytest.raises(UnknownIdError):
        ingested.feedback.get(report.id)  # the report's rows were rolled back with it

    model = _model(frozen.id, feedback_id=report.id)
    assert ingested.models.register(model, report) is True
    assert ingested.feedback.get(report.id) == report
    assert ingested.models.get(model.id) == model


def test_a_read_only_catalog_refuses_a_registration(
    ingested: Catalog, frozen: DatasetVersion
) -> None:
    with (
        Catalog.open(ingested.path, read_only=True) as reader,
        pytest.raises(Exception, match="read-only"),
    ):
        reader.models.register(_model(frozen.id))


def test_the_id_is_derived_from_the_content() -> None:
    a = _model("ds-a")
    assert a.id == _model("ds-a").id
    # another checkpoint of the same run is another model
    assert a.id != _model("ds-a", path="/state/models/r1-step-200").id
    assert a.id != _model("ds-a", created_at=T0 + timedelta(seconds=1)).id
    with pytest.raises(ValueError, match="does not match the record's content"):
        ModelRecord.model_validate(a.model_dump(mode="json") | {"id": "model-forged"})


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        pytest.param({"method": "dpo"}, "method", id="unknown method"),
        pytest.param({"dataset_id": "round-a"}, "dataset_id", id="not a dataset id"),
        pytest.param({"parent": "ds-x"}, "parent", id="parent not a model id"),
        pytest.param({"feedback_id": "x"}, "feedback_id", id="not a report id"),
        pytest.param({"metrics": {"loss": float("nan")}}, "metrics.loss", id="NaN metric"),
        pytest.param({"created_at": "2026-12-01T09:00:00"}, "created_at", id="naive time"),
        pytest.param({"name": ""}, "name", id="empty name"),
        pytest.param({"hyperparameters": {"seed": {1, 2}}}, "hyperparameters.seed", id="not JSON"),
        pytest.param({"epochs": 2}, "epochs", id="unknown field"),
    ],
)
def test_a_malformed_model_record_is_refused_naming_the_field(
    changes: dict[str, Any], field: str
) -> None:
    data = _model("ds-a").model_dump(mode="json", exclude={"id"}) | changes
    with pytest.raises(ValidationError) as refused:
        ModelRecord.model_validate(data)
    assert invalid_input(refused.value).field.startswith(field)
