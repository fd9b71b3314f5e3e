"""Progress bars in the terminal (rich) for long work: collection, SFT, RL, evaluation.

They are drawn on the console that Prefect's log handler prints to, so the log lines
scroll above the bars instead of through them. A display starts with the first bar and
stops once every bar in it is finished, leaving the finished bars on the screen. On
anything but an interactive terminal (a pipe, a file, CI) nothing is drawn: the log lines
say the same, every tenth of the way. A bar is a convenience: if drawing one fails, the
bars stop for the process with a warning, and the work goes on.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections.abc import Callable

from prefect.logging.handlers import PrefectConsoleHandler
from rich.console import Console
from rich.default_styles import DEFAULT_STYLES
from rich.errors import MissingStyle
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.theme import Theme

Bar = Callable[[float, float], None]
"""Told ``(done, total)`` as the work goes."""

BAR_STYLES = Theme(
    {
        name: style
        for name, style in DEFAULT_STYLES.items()
        if name.startswith(("bar.", "progress."))
    }
)
"""rich's styles for progress bars: Prefect's console theme holds only its log styles."""

_LOG = logging.getLogger(__name__)


def log_console() -> Console:
    """The console Prefect's log handler prints to (a new one on stderr without it)."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, PrefectConsoleHandler):
            return handler.console
    return Console(stderr=True)


class TerminalBars:
    """The bars of one process, from any thread (Prefect runs tasks on threads)."""

    def __init__(self, console: Callable[[], Console] = log_console) -> None:
        self._console = console
        self._progress: Progress | None = None
        self._off = False
        """Not a terminal (decided at the first bar), or drawing failed: no more bars."""
        self._lock = threading.Lock()
        atexit.register(self.stop)

    @property
    def showing(self) -> bool:
        return self._progress is not None

    def bar(self, description: str) -> Bar:
        """A bar for one piece of work, drawn from its first report (again in a later
        display if its own stopped before it finished); a no-op off a terminal."""
        shown: list[tuple[Progress, TaskID]] = []
        """The display the bar is in, and its task there."""

        def report(done: float, total: float) -> None:
            with self._lock:
                try:
                    if shown and shown[0][0] is self._progress:
                        progress, task = shown[0]
                    elif shown and done >= total:
                        return  # finished, and its display is gone: nothing to redraw
                    else:
                        started = self._start()
                        if started is None:
                            return
                        progress, task = started, started.add_task(description, total=total)
                        shown[:] = [(progress, task)]
                    progress.update(task, completed=done, total=total)
                    if all(t.finished for t in progress.tasks):
                        self._stop_locked()
                except Exception as exc:  # a display problem must not stop the work
                    self._off = True
                    self._stop_quietly()
                    _LOG.warning("progress bars are off for this run: %s", exc)

        return report

    def stop(self) -> None:
        """Stop the display, leaving what it shows (also at exit: the cursor comes back)."""
        with self._lock:
            self._stop_quietly()

    def _start(self) -> Progress | None:
        if self._progress is None and not self._off:
            console = self._console()
            if not console.is_terminal:
                self._off = True
                return None
            try:
                console.get_style("bar.back")
            except MissingStyle:
                console.push_theme(BAR_STYLES)
            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=console,
                redirect_stdout=False,  # stdout carries a command's result (``--json``)
            )
            self._progress.start()
        return self._progress

    def _stop_locked(self) -> None:
        if self._progress is not None:
            progress, self._progress = self._progress, None
            progress.stop()

    def _stop_quietly(self) -> None:
        try:
            self._stop_locked()
        except Exception:
            self._progress = None


TERMINAL = TerminalBars()
"""This process's bars."""
