"""Progress reports: a line at every tenth of the way (or when time passes) with the
outcomes so far, and the artifact told of every episode, from any thread."""

from __future__ import annotations

import threading

from contract import Outcome, Trajectory
from flows.progress import CollectionProgress, Milestones


class _Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, message: str, *args: object) -> None:
        self.lines.append(message % args)


def test_collection_progress_says_each_tenth_and_counts_outcomes(
    faulty_trajectories: list[Trajectory],
) -> None:
    episodes = faulty_trajectories[:40]
    log, told = _Log(), []
    progress = CollectionProgress(
        len(episodes), log, every_s=1e9, artifact=lambda done, total: told.append((done, total))
    )

    def tell(part: list[Trajectory]) -> None:
        for trajectory in part:
            progress(trajectory)

    threads = [
        threading.Thread(target=tell, args=(part,)) for part in (episodes[0::2], episodes[1::2])
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert progress.episodes == 40
    assert sorted(done for done, _ in told) == list(range(1, 41)) and {t for _, t in told} == {40}
    assert len(log.lines) == 10, log.lines  # one a tenth of the way
    assert log.lines[-1].startswith("collected 40 of 40 tasks (40 episodes: ")
    successes = sum(t.metadata.outcome is Outcome.SUCCESS for t in episodes)
    assert f"{successes} success" in log.lines[-1]


def test_collection_progress_speaks_up_when_time_passes(
    faulty_trajectories: list[Trajectory],
) -> None:
    log = _Log()
    progress = CollectionProgress(1000, log, every_s=0.0, artifact=lambda done, total: None)
    for trajectory in faulty_trajectories[:3]:
        progress(trajectory)
    assert [line.split(" (")[0] for line in log.lines] == [
        "collected 1 of 1000 tasks",
        "collected 2 of 1000 tasks",
        "collected 3 of 1000 tasks",
    ]


def test_collection_progress_counts_tasks_so_retries_never_pass_the_total(
    faulty_trajectories: list[Trajectory],
) -> None:
    """A task's retry or a replay's second attempt is another episode of the same task."""
    first, second = faulty_trajectories[:2]
    again = first.model_copy(update={"id": "traj-retry"})
    log, told = _Log(), []
    progress = CollectionProgress(
        2, log, every_s=0.0, artifact=lambda done, total: told.append((done, total))
    )
    for trajectory in (first, again, second):
        progress(trajectory)

    assert progress.episodes == 3
    assert told == [(1, 2), (1, 2), (2, 2)]
    assert log.lines[-1].startswith("collected 2 of 2 tasks (3 episodes: ")


def test_milestones_are_said_each_tenth_once() -> None:
    log = _Log()
    said = Milestones(log, "development episodes done", every_s=1e9)
    for done in range(1, 121):
        said(done, 120)
    assert log.lines == [f"development episodes done: {12 * k} of 120" for k in range(1, 11)]
