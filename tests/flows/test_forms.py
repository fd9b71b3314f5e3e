"""The Prefect UI's forms: every parameter of every served flow says what it is, and
where None means "from the settings", it says so."""

from __future__ import annotations

from typing import Any

import pytest
from prefect import Flow
from prefect.utilities.callables import parameter_schema

from flows.deployment import deployment, rollback
from flows.loop import loop
from flows.round import flywheel_round
from flows.trainer import trainer

SERVED: list[Flow[..., Any]] = [flywheel_round, trainer, deployment, rollback, loop]


@pytest.mark.parametrize("served", SERVED, ids=lambda f: f.name)
def test_every_parameter_of_a_served_flow_has_a_description(served: Flow[..., Any]) -> None:
    properties = parameter_schema(served.fn).model_dump()["properties"]
    assert properties
    for name, field in properties.items():
        description = field.get("description") or ""
        assert len(description) >= 10, f"{served.name}.{name} has no description"
        if field.get("default", "") is None and name != "round_id":
            assert "None" in description, f"{served.name}.{name}: what does None mean?"


def test_the_trainer_form_defaults_to_the_newest_dataset_version() -> None:
    properties = parameter_schema(trainer.fn).model_dump()["properties"]
    assert properties["dataset_id"]["default"] == "latest"
    assert "latest" in properties["dataset_id"]["description"]
