"""Registry aliases: promotions push the champion down to ``previous``, rollbacks pop it
back, every change is kept in order, and a refused or failed change leaves every alias
as it was."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from contract import (
    AliasChange,
    DatasetVersion,
    InvalidInputError,
    ModelAlias,
    ModelRecord,
    Split,
    TrainingMethod,
    Trajectory,
)
from storage import Catalog, CatalogError
from storage import models as models_module
from tests.storage.builders import make_version

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
CHAMPION, CANDIDATE, PREVIOUS = ModelAlias.CHAMPION, ModelAlias.CANDIDATE, ModelAlias.PREVIOUS


@pytest.fixture
def three(ingested: Catalog, round_trajectories: list[Trajectory]) -> list[ModelRecord]:
    """Three registered checkpoints (r1, r2, r3) of one frozen dataset version."""
    train = [t for t in round_trajectories if t.task.split is Split.TRAIN]
    version: DatasetVersion = make_version(train[:6])
    ingested.datasets.freeze(version)
    found = []
    for n in (1, 2, 3):
        model = ModelRecord(
            name=f"mobile-planner-r{n}",
            dataset_id=version.id,
            base="tiny",
            method=TrainingMethod.SFT,
            path=f"/state/models/r{n}",
            created_at=T0 + timedelta(days=n),
        )
        assert ingested.models.register(model)
        found.append(model)
    return found


def _ids(catalog: Catalog) -> dict[str, str]:
    return {alias.value: model.id for alias, model in catalog.models.aliases().items()}


def _state(catalog: Catalog) -> tuple[dict[str, str], list[AliasChange]]:
    return _ids(catalog), catalog.models.alias_history()


def _at(hours: int) -> datetime:
    return T0 + timedelta(days=10, hours=hours)


def test_promoting_in_turn_keeps_the_champion_before_as_previous(
    ingested: Catalog, three: list[ModelRecord]
) -> None:
    r1, r2, r3 = three
    assert ingested.models.aliases() == {} and ingested.models.alias(CHAMPION) is None

    first = ingested.models.promote(
        r1.id, reason="first deployment", deployment_id="dep-1", at=_at(1)
    )
    assert first == (
        AliasChange(
            alias=CHAMPION,
            model_id=r1.id,
            changed_at=_at(1),
            reason="first deployment",
            deployment_id="dep-1",
        ),
    )
    assert ingested.models.aliases() == {CHAMPION: r1}

    ingested.models.promote(r2.id, reason="r2 beats r1", deployment_id="dep-2", at=_at(2))
    assert ingested.models.aliases() == {CHAMPION: r2, PREVIOUS: r1}

    proposed = ingested.models.set_alias("candidate", r3.id, reason="proposed", at=_at(3))
    assert proposed.alias is CANDIDATE and ingested.models.alias("candidate") == r3
    third = ingested.models.promote(r3.id, reason="r3 beats r2", at=_at(4))
    assert [(c.alias, c.model_id) for c in third] == [
        (PREVIOUS, r2.id),
        (CHAMPION, r3.id),
        (CANDIDATE, None),  # the candidate was promoted: cleared
    ]
    assert ingested.models.aliases() == {CHAMPION: r3, PREVIOUS: r2}
    assert ingested.models.alias(CANDIDATE) is None

    # the champion again changes nothing
    before = _state(ingested)
    assert ingested.models.promote(r3.id, reason="again", at=_at(5)) == ()
    assert _state(ingested) == before

    history = ingested.models.alias_history()
    assert [(c.alias.value, c.model_id) for c in history] == [
        ("champion", r1.id),
        ("previous", r1.id),
        ("champion", r2.id),
        ("candidate", r3.id),
        ("previous", r2.id),
        ("champion", r3.id),
        ("candidate", None),
    ]
    assert history[0] == first[0] and history[-3:] == list(third)
    assert [c.model_id for c in ingested.models.alias_history("champion")] == [r1.id, r2.id, r3.id]
    assert [c.reason for c in ingested.models.alias_history(PREVIOUS)] == [
        "r2 beats r1",
        "r3 beats r2",
    ]
    assert [c.deployment_id for c in ingested.models.alias_history(CHAMPION)] == [
        "dep-1",
        "dep-2",
        None,
    ]
    assert [c.changed_at for c in ingested.models.alias_history(CHAMPION)] == [
        _at(1),
        _at(2),
        _at(4),
    ]


def test_rollback_restores_the_previous_champion_then_the_one_before(
    ingested: Catalog, three: list[ModelRecord]
) -> None:
    r1, r2, r3 = three
    for hour, model in enumerate(three):
        ingested.models.promote(model.id, reason=f"deploy {model.name}", at=_at(hour))

    changes = ingested.models.rollback(reason="r3 regressed", at=_at(10))
    assert changes == (
        AliasChange(alias=CHAMPION, model_id=r2.id, changed_at=_at(10), reason="r3 regressed"),
        AliasChange(alias=PREVIOUS, model_id=r1.id, changed_at=_at(10), reason="r3 regressed"),
    )
    assert ingested.models.aliases() == {CHAMPION: r2, PREVIOUS: r1}

    changes = ingested.models.rollback(reason="r2 too", deployment_id="dep-9")
    assert [(c.alias, c.model_id, c.deployment_id) for c in changes] == [
        (CHAMPION, r1.id, "dep-9"),
        (PREVIOUS, None, "dep-9"),  # nothing was champion before r1
    ]
    assert ingested.models.aliases() == {CHAMPION: r1}
    assert ingested.models.alias_history()[-2:] == list(changes)

    # promoting again after rollbacks builds on the restored champion
    ingested.models.promote(r3.id, reason="r3 fixed")
    assert ingested.models.aliases() == {CHAMPION: r3, PREVIOUS: r1}
    ingested.models.rollback(reason="not fixed")
    assert ingested.models.aliases() == {CHAMPION: r1}


def test_rollback_follows_the_promotions_not_the_latest_appearance_of_a_model(
    ingested: Catalog, three: list[ModelRecord]
) -> None:
    """r1, r2, r1 again: rolling back twice ends at the first r1, with nothing before it."""
    r1, r2, _ = three
    for model in (r1, r2, r1):
        ingested.models.promote(model.id, reason="deploy")
    assert ingested.models.aliases() == {CHAMPION: r1, PREVIOUS: r2}

    ingested.models.rollback(reason="back")
    assert ingested.models.aliases() == {CHAMPION: r2, PREVIOUS: r1}
    ingested.models.rollback(reason="back again")
    assert ingested.models.aliases() == {CHAMPION: r1}
    with pytest.raises(InvalidInputError, match="nothing to roll back to"):
        ingested.models.rollback(reason="once more")


def test_rollback_with_nothing_to_roll_back_to_is_refused_and_changes_nothing(
    ingested: Catalog, three: list[ModelRecord]
) -> None:
    with pytest.raises(InvalidInputError) as refused:
        ingested.models.rollback(reason="panic")
    assert refused.value.field == "previous" and "nothing to roll back to" in str(refused.value)
    assert _state(ingested) == ({}, [])

    ingested.models.promote(three[0].id, reason="first")  # a champion, but none before it
    before = _state(ingested)
    with pytest.raises(InvalidInputError, match=r"^previous: nothing to roll back to"):
        ingested.models.rollback(reason="panic")
    assert _state(ingested) == before


def test_an_unregistered_model_is_refused_by_name(
    ingested: Catalog, three: list[ModelRecord]
) -> None:
    ingested.models.promote(three[0].id, reason="first")
    before = _state(ingested)
    newest = three[-1].id
    for refuse in (
        lambda: ingested.models.promote("model-nothing", reason="typo"),
        lambda: ingested.models.set_alias(CANDIDATE, "model-nothing", reason="typo"),
    ):
        with pytest.raises(InvalidInputError) as refused:
            refuse()
        assert refused.value.field == "model_id"
        assert "'model-nothing' is not a registered model" in str(refused.value)
        assert f"most recent: {newest}" in str(refused.value)
    assert _state(ingested) == before


@pytest.mark.parametrize(
    ("call", "field"),
    [
        pytest.param(
            lambda c, m: c.models.set_alias("champ", m, reason="x"), "alias", id="no alias"
        ),
        pytest.param(lambda c, m: c.models.promote(m, reason=" "), "reason", id="blank reason"),
        pytest.param(lambda c, m: c.models.rollback(reason=""), "reason", id="empty reason"),
        pytest.param(
            lambda c, m: c.models.promote(m, reason="x", at=datetime(2026, 12, 1)),
            "changed_at",
            id="naive time",
        ),
        pytest.param(
            lambda c, m: c.models.set_alias(CANDIDATE, m, reason="x", deployment_id=""),
            "deployment_id",
            id="empty deployment",
        ),
    ],
)
def test_a_malformed_change_is_refused_naming_the_field(
    ingested: Catalog, three: list[ModelRecord], call: Any, field: str
) -> None:
    r1, r2, _ = three
    ingested.models.promote(r1.id, reason="first")
    ingested.models.promote(r2.id, reason="second")
    before = _state(ingested)
    with pytest.raises(InvalidInputError) as refused:
        call(ingested, three[2].id)
    assert refused.value.field == field
    assert _state(ingested) == before


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda c, m: c.models.promote(m.id, reason="r3"), id="promote"),
        pytest.param(lambda c, m: c.models.rollback(reason="back"), id="rollback"),
    ],
)
def test_a_failure_half_way_leaves_every_alias_as_it_was(
    ingested: Catalog, three: list[ModelRecord], monkeypatch: pytest.MonkeyPatch, change: Any
) -> None:
    """Promotion and rollback are one transaction: a failure after the first alias was
    written undoes it."""
    r1, r2, r3 = three
    ingested.models.promote(r1.id, reason="first")
    ingested.models.promote(r2.id, reason="second")
    ingested.models.set_alias(CANDIDATE, r3.id, reason="proposed")
    before = _state(ingested)
    write = models_module.write_alias

    def fail_after(*args: Any) -> None:
        write(*args)
        raise RuntimeError("disk full, say")

    monkeypatch.setattr(models_module, "write_alias", fail_after)
    with pytest.raises(RuntimeError, match="disk full"):
        change(ingested, r3)
    assert _state(ingested) == before
    monkeypatch.undo()
    assert len(change(ingested, r3)) >= 2


def test_a_read_only_catalog_refuses_alias_changes_but_reads_them(
    ingested: Catalog, three: list[ModelRecord]
) -> None:
    r1, r2, _ = three
    ingested.models.promote(r1.id, reason="first")
    ingested.models.promote(r2.id, reason="second")
    with Catalog.open(ingested.path, read_only=True) as reader:
        for write in (
            lambda: reader.models.set_alias(CANDIDATE, r1.id, reason="x"),
            lambda: reader.models.promote(r1.id, reason="x"),
            lambda: reader.models.rollback(reason="x"),
        ):
            with pytest.raises(CatalogError, match="read-only"):
                write()
        assert reader.models.aliases() == {CHAMPION: r2, PREVIOUS: r1}
        assert len(reader.models.alias_history()) == 3
    assert _ids(ingested) == {"champion": r2.id, "previous": r1.id}


def test_aliases_and_their_history_survive_reopening_the_catalog(
    ingested: Catalog, three: list[ModelRecord]
) -> None:
    r1, r2, r3 = three
    for model in three:
        ingested.models.promote(model.id, reason=f"deploy {model.name}", deployment_id=model.name)
    ingested.models.set_alias(CANDIDATE, r1.id, reason="retry r1")
    history = ingested.models.alias_history()
    ingested.close()

    with Catalog.open(ingested.path) as reopened:
        assert reopened.models.aliases() == {CHAMPION: r3, CANDIDATE: r1, PREVIOUS: r2}
        assert reopened.models.alias_history() == history
        # the rollback replays the history written before the reopening
        reopened.models.rollback(reason="back")
        assert reopened.models.aliases() == {CHAMPION: r2, CANDIDATE: r1, PREVIOUS: r1}
