"""Progress that people can see: a Prefect progress artifact, a bar in the terminal
(``flows.progress_bars``), and log lines that say how far long work has come
(collection, SFT, RL, evaluation), so a terminal is never silent for minutes.

All are safe to call from the worker threads a flow's task runner uses.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, cast
from uuid import UUID

from prefect.artifacts import create_progress_artifact, update_progress_artifact

from contract import Trajectory
from flows.progress_bars import TERMINAL, Bar

LOG_EVERY_S = 15.0
"""A progress line at most this often (and at every tenth of the way)."""
UPDATE_EVERY_S = 1.0
"""A progress artifact's value is sent at most this often (its first and its last value
always): each is a call to the Prefect API, a hundred of them cost a round 0.4 s of CPU."""


class ProgressArtifact:
    """A progress artifact, updated at most once per whole percent and per
    ``every_s``, and its terminal bar (``bar``; by default one of this process's terminal
    bars), told of every step."""

    def __init__(
        self,
        key: str,
        description: str,
        bar: Bar | None = None,
        *,
        every_s: float = UPDATE_EVERY_S,
    ) -> None:
        self._id: UUID | None = None
        self._shown = -1
        self._every_s = every_s
        self._sent_at = 0.0
        self._key = key
        self._description = description
        self._bar = bar if bar is not None else TERMINAL.bar(description)
        self._lock = threading.Lock()

    def __call__(self, done: float, total: float) -> None:
        self._bar(done, total)
        percent = min(100, int(100 * done / total)) if total else 100
        with self._lock:
            now = time.monotonic()
            if percent == self._shown:
                return
            if self._id is not None and percent < 100 and now - self._sent_at < self._every_s:
                return
            self._shown, self._sent_at = percent, now
            if self._id is None:
                self._id = cast(
                    "UUID",
                    create_progress_artifact(percent, key=self._key, description=self._description),
                )
            else:
                update_progress_artifact(self._id, percent)


class CollectionProgress:
    """Tasks with an episode out of a round's tasks, from every shard's thread: the
    ``round-collection`` progress artifact, and a log line every ``LOG_EVERY_S`` seconds
    or tenth of the way with the episodes and their outcomes so far. A task can have
    several episodes (a retry after a backend fault, a replay's attempts), so progress
    counts tasks: it ends at the round's tasks, and the episodes are said beside it."""

    def __init__(
        self,
        tasks: int,
        log: Any,
        *,
        every_s: float = LOG_EVERY_S,
        artifact: Callable[[float, float], None] | None = None,
    ) -> None:
        self.tasks = tasks
        self._log = log
        self._every_s = every_s
        self._artifact = artifact or ProgressArtifact("round-collection", "tasks collected")
        self._lock = threading.Lock()
        self._outcomes: Counter[str] = Counter()
        self._tasks_seen: set[str] = set()
        self._said_at = time.monotonic()
        self._said_tenth = 0

    @property
    def episodes(self) -> int:
        return self._outcomes.total()

    def __call__(self, trajectory: Trajectory) -> None:
        with self._lock:
            self._outcomes[trajectory.metadata.outcome.value] += 1
            self._tasks_seen.add(trajectory.task.id)
            done, episodes = len(self._tasks_seen), self._outcomes.total()
            tenth = 10 * done // self.tasks if self.tasks else 10
            now = time.monotonic()
            say = tenth > self._said_tenth or now - self._said_at >= self._every_s
            if say:
                self._said_at, self._said_tenth = now, max(tenth, self._said_tenth)
                outcomes = ", ".join(f"{n} {k}" for k, n in sorted(self._outcomes.items()))
        self._artifact(done, self.tasks)
        if say:
            self._log.info(
                "collected %d of %d tasks (%d episodes: %s)", done, self.tasks, episodes, outcomes
            )


class Milestones:
    """A log line at every tenth of the way, or when ``every_s`` seconds passed since the
    last: for work that reports ``(done, total)`` (evaluation episodes)."""

    def __init__(self, log: Any, what: str, *, every_s: float = LOG_EVERY_S) -> None:
        self._log = log
        self._what = what
        self._every_s = every_s
        self._said_at = time.monotonic()
        self._said_tenth = 0
        self._lock = threading.Lock()

    def __call__(self, done: float, total: float) -> None:
        tenth = int(10 * done // total) if total else 10
        with self._lock:
            now = time.monotonic()
            if tenth <= self._said_tenth and now - self._said_at < self._every_s:
                return
            self._said_at, self._said_tenth = now, max(tenth, self._said_tenth)
        self._log.info("%s: %d of %d", self._what, done, total)
