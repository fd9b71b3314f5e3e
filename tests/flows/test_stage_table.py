"""A round walks a table of stages: each runs once, is marked done when it returned, and a
rerun after a crash starts again at the stage that crashed (in-process, no Prefect)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from flows.round import ROUND_STAGES
from flows.round_stages import STAGES, walk_stages


class CrashError(Exception):
    pass


class Recorder:
    """Stages that record their runs, and a catalog-like record of the last stage done."""

    def __init__(self, names: list[str], crash_in: str | None = None) -> None:
        self.names = names
        self.crash_in = crash_in
        self.ran: list[str] = []
        self.finished: str | None = None

    def table(self) -> list[tuple[str, Callable[[], object]]]:
        return [(name, self._stage(name)) for name in self.names]

    def _stage(self, name: str) -> Callable[[], object]:
        def run() -> None:
            index = self.names.index(name)  # the stage before it was marked first
            assert self.finished == (self.names[index - 1] if index else None)
            if name == self.crash_in:
                self.crash_in = None  # crashes once
                raise CrashError(name)
            self.ran.append(name)

        return run

    def mark(self, name: str) -> None:
        self.finished = name


def test_the_round_walks_the_stages_the_catalog_records() -> None:
    assert tuple(name for name, _ in ROUND_STAGES) == STAGES


def test_every_stage_runs_once_in_order_and_is_marked() -> None:
    stages = Recorder(list(STAGES))
    assert walk_stages(stages.table(), None, mark=stages.mark) == list(STAGES)
    assert stages.ran == list(STAGES)
    assert stages.finished == STAGES[-1]


@pytest.mark.parametrize("crash_in", STAGES)
def test_a_rerun_after_a_crash_starts_at_the_stage_that_crashed(crash_in: str) -> None:
    stages = Recorder(list(STAGES), crash_in=crash_in)
    with pytest.raises(CrashError):
        walk_stages(stages.table(), None, mark=stages.mark)
    before = STAGES[: STAGES.index(crash_in)]
    assert stages.ran == list(before)
    assert stages.finished == (before[-1] if before else None)  # the crashed one unmarked

    rerun = walk_stages(stages.table(), stages.finished, mark=stages.mark)

    assert rerun == list(STAGES[STAGES.index(crash_in) :])
    assert stages.ran == list(STAGES)  # nothing twice
    assert stages.finished == STAGES[-1]


def test_a_finished_round_runs_nothing_again() -> None:
    stages = Recorder(list(STAGES))
    assert walk_stages(stages.table(), STAGES[-1], mark=stages.mark) == []
    assert stages.ran == []
