"""A round's id is a digest of its configuration that stays put: ids of rounds already
stored never change when the configuration gains a field (the field's default keeps what
rounds did before), and no rule per field is needed for that."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contract import InvalidInputError
from flows.round_config import RoundConfig, resolve_config
from flows.settings import FlywheelSettings

STORED = json.loads(
    '{"tasks":40,"seed":3,"policy":"scripted","model":null,"teacher_share":0.0,'
    '"devices":"none","gui_agent":"scripted","gui_model":null,"fault_rate":0.3,'
    '"recovery_rate":0.5,"backend_fault_rate":0.02,"max_steps":null,'
    '"max_backend_attempts":3,"gate":"auto","shard_size":200,'
    '"plan":{"quotas":[{"capability":"tool_use","difficulty":"easy","count":4,'
    '"reason":"even mix"},{"capability":"memory","difficulty":"hard","count":3,'
    '"reason":"even mix"}],"source":"default"},'
    '"target":{"capability":{"tool_use":0.5,"memory":0.5},"difficulty":{},"domain":{},'
    '"source":{},"recovery_share":0.2}}'
)
"""A configuration as the catalog stores it (``rounds.config``)."""

# Ids the earlier rule (a branch per field added after the first rounds) gave these
# configurations: rounds stored with them are found again by them.
EARLIER_IDS = [
    ({}, "round-96bb50a6b105"),
    ({"max_steps": 30}, "round-d707b9584321"),
    ({"teacher_share": 0.3, "policy": "openai", "model": "m"}, "round-50c309374c79"),
    ({"devices": "gui"}, "round-976e33dec8dd"),
    ({"gui_agent": "llm", "gui_model": "g"}, "round-ce8bf5501ec8"),
]


def _config(**changes: Any) -> RoundConfig:
    return RoundConfig.model_validate(STORED | changes)


@pytest.mark.parametrize(("changes", "expected"), EARLIER_IDS)
def test_ids_of_stored_rounds_stand(changes: dict[str, Any], expected: str) -> None:
    assert _config(**changes).round_id() == expected


def test_a_field_added_at_its_default_leaves_ids_as_they_were() -> None:
    class Later(RoundConfig):
        retries_per_shard: int = 2

    stored = _config()
    assert Later.model_validate(STORED).round_id() == stored.round_id()
    assert Later.model_validate(STORED | {"retries_per_shard": 3}).round_id() != stored.round_id()


def test_fields_every_round_had_are_always_in_the_id() -> None:
    """``max_steps`` None is a value of its own, not a default left out."""
    assert RoundConfig.model_fields["max_steps"].is_required()
    assert _config(max_steps=None).round_id() != _config(max_steps=30).round_id()
    with pytest.raises(ValueError, match="max_steps"):
        RoundConfig.model_validate({k: v for k, v in STORED.items() if k != "max_steps"})


def test_other_backends_shares_leave_the_sandbox_the_rest_of_the_round(tmp_path: Path) -> None:
    settings = FlywheelSettings(home=tmp_path)
    mixed = resolve_config(settings, tasks=41, bfcl_share=0.25, simulated_share=0.1)
    assert (mixed.bfcl_tasks, mixed.simulated_tasks) == (10, 4)
    assert mixed.plan.total == 41 - 10 - 4
    assert mixed.round_id() != resolve_config(settings, tasks=41).round_id()
    assert resolve_config(settings, tasks=8, bfcl_share=1.0).plan.total == 0
    with pytest.raises(InvalidInputError) as raised:
        resolve_config(settings, tasks=10, bfcl_share=0.6, simulated_share=0.6)
    assert raised.value.field == "simulated_share"
