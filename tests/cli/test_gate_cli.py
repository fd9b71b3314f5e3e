"""``flywheel gate``: which round it reads when none is named."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cli.gate import newest_gated
from contract import InvalidInputError
from storage import RoundInfo

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def _round(name: str, gate: str, minutes: int) -> RoundInfo:
    return RoundInfo(
        id=name,
        status="done",
        stage="freeze",
        config={"gate": gate},
        flow_run_id=None,
        dataset_id=None,
        counts={},
        started_at=T0 + timedelta(minutes=minutes),
        finished_at=None,
    )


def test_the_default_round_is_the_newest_one_people_gate() -> None:
    people = _round("round-people", "label-studio", 1)
    older_people = _round("round-older", "label-studio", 0)
    automatic = _round("round-auto", "auto", 5)  # newer, but nothing waits for people there
    assert newest_gated([older_people, automatic, people]) is people
    assert newest_gated([automatic, _round("round-auto-0", "auto", 0)]) is automatic
    with pytest.raises(InvalidInputError, match="no round yet"):
        newest_gated([])
