"""Progress bars in the terminal: drawn only on a terminal, on the console the log lines
print to (so they stay readable), from any thread, and gone once every bar is done."""

from __future__ import annotations

import io
import logging
import re
import threading
import uuid
from collections.abc import Iterator
from typing import cast

import pytest
from prefect import flow
from prefect.logging.handlers import PrefectConsoleHandler
from rich.console import Console
from rich.theme import Theme

from flows import progress as progress_module
from flows.progress import ProgressArtifact
from flows.progress_bars import TerminalBars, log_console
from flows.servers import prefect_api

COLOUR = re.compile(r"\x1b\[[0-9;]*m")
CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")


def _terminal() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, width=100, color_system=None), out


def _lines(out: io.StringIO) -> list[str]:
    """What the terminal was sent, without cursor movements, as non-empty lines."""
    text = CONTROL.sub("\n", COLOUR.sub("", out.getvalue()))
    return [line for line in text.splitlines() if line.strip()]


def test_a_bar_shows_the_work_and_the_display_stops_once_it_is_done() -> None:
    console, out = _terminal()
    bars = TerminalBars(lambda: console)
    sft = bars.bar("SFT steps done")

    sft(0, 30)
    assert bars.showing
    for step in range(1, 31):
        sft(step, 30)

    assert not bars.showing
    last = _lines(out)[-1]
    assert "SFT steps done" in last and "30/30" in last


def test_log_lines_printed_while_a_bar_shows_appear_once_above_it() -> None:
    console, out = _terminal()
    bars = TerminalBars(lambda: console)
    collect = bars.bar("tasks collected")
    collect(1, 4)
    console.print("collected shard 1/2 (2 episodes)")
    collect(4, 4)

    text = out.getvalue()
    assert text.count("collected shard 1/2 (2 episodes)") == 1
    assert text.index("collected shard 1/2") < text.rindex("4/4")


def test_off_a_terminal_nothing_is_drawn() -> None:
    out = io.StringIO()
    bars = TerminalBars(lambda: Console(file=out, force_terminal=False))
    evaluation = bars.bar("development episodes done")
    evaluation(1, 2)
    assert not bars.showing
    evaluation(2, 2)
    assert out.getvalue() == ""


def test_bars_told_from_threads_stop_the_display_when_the_last_is_done() -> None:
    console, out = _terminal()
    bars = TerminalBars(lambda: console)
    first, second = bars.bar("shard a"), bars.bar("shard b")
    first(0, 50)
    second(0, 80)

    def run(bar: object, total: int) -> None:
        for done in range(1, total + 1):
            bar(done, total)  # type: ignore[operator]

    one = threading.Thread(target=run, args=(first, 50))
    one.start()
    one.join()
    assert bars.showing, "stopped while a bar was unfinished"
    two = threading.Thread(target=run, args=(second, 80))
    two.start()
    two.join()

    assert not bars.showing
    text = out.getvalue()
    assert "50/50" in text and "80/80" in text


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_bar_whose_display_stopped_is_drawn_again_in_the_next() -> None:
    console, out = _terminal()
    bars = TerminalBars(lambda: console)
    sft, evaluation = bars.bar("SFT steps done"), bars.bar("development episodes done")
    sft(1, 5)
    bars.stop()  # a command's flow runs ended with the bar unfinished
    evaluation(1, 4)
    sft(2, 5)
    assert bars.showing
    sft(5, 5)
    evaluation(4, 4)

    assert not bars.showing
    lines = _lines(out)
    assert any("SFT steps done" in line and "5/5" in line for line in lines)
    assert any("development episodes done" in line and "4/4" in line for line in lines)
    evaluation(4, 4)  # told again once done: no display for it
    assert not bars.showing


@pytest.fixture
def prefect_console() -> Iterator[tuple[Console, io.StringIO]]:
    """The console of a Prefect log handler on the root logger, writing to a terminal."""
    handler = PrefectConsoleHandler(stream=_Tty())
    root = logging.getLogger()
    root.handlers.insert(0, handler)
    try:
        yield handler.console, cast("io.StringIO", handler.stream)
    finally:
        root.removeHandler(handler)


def test_bars_and_log_lines_share_prefect_s_console(
    prefect_console: tuple[Console, io.StringIO],
) -> None:
    """Its theme has only Prefect's log styles: drawing a bar there once failed."""
    console, out = prefect_console
    assert log_console() is console
    bars = TerminalBars()
    rl = bars.bar("RL updates done")
    rl(1, 3)
    logging.getLogger("prefect.test").info("RL update 1/3")
    rl(3, 3)

    assert not bars.showing
    lines = _lines(out)
    assert sum("RL update 1/3" in line for line in lines) == 1
    assert any("RL updates done" in line and "3/3" in line for line in lines)


def test_a_bar_that_cannot_be_drawn_turns_the_bars_off_not_the_work(
    caplog: pytest.LogCaptureFixture,
) -> None:
    console, _ = _terminal()
    bars = TerminalBars(lambda: console)
    first = bars.bar("tasks collected")
    first(1, 2)
    console.push_theme(Theme({}, inherit=False), inherit=False)  # no style left

    first(2, 2)  # the display stops: its last drawing fails
    assert not bars.showing
    assert "progress bars are off" in caplog.text
    bars.bar("SFT steps done")(1, 3)
    assert not bars.showing


def test_a_progress_artifact_tells_its_bar_every_step(prefect_api_url: str) -> None:
    told: list[tuple[float, float]] = []

    @flow
    def steps() -> None:
        progress = ProgressArtifact("test-bar", "steps done", bar=lambda d, t: told.append((d, t)))
        for step in (1, 1, 2, 3):
            progress(step, 3)

    with prefect_api(prefect_api_url):
        steps()

    assert told == [(1, 3), (1, 3), (2, 3), (3, 3)]


def test_a_progress_artifact_is_sent_at_most_once_a_period_but_its_end_always(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent: list[int] = []

    def create(percent: int, **_: object) -> uuid.UUID:
        sent.append(percent)
        return uuid.uuid4()

    monkeypatch.setattr(progress_module, "create_progress_artifact", create)
    monkeypatch.setattr(progress_module, "update_progress_artifact", lambda _, p: sent.append(p))
    progress = ProgressArtifact("test-rate", "steps done", bar=lambda d, t: None, every_s=3600)
    for step in range(1, 51):
        progress(step, 50)
    assert sent == [2, 100]  # the first value, then nothing for an hour but the last
    every = ProgressArtifact("test-rate", "steps done", bar=lambda d, t: None, every_s=0)
    sent.clear()
    for step in (1, 1, 2, 3):
        every(step, 3)
    assert sent == [33, 66, 100]  # each whole percent once
