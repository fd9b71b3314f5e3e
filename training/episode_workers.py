"""Evaluation episodes spread over worker processes, each holding its own policy.

A policy that does little work per call (a small local model decodes a token in a few
milliseconds) cannot keep a second intra-op thread busy: on the nano base two torch
threads evaluate only 1.1-1.2x faster than one. Single-threaded processes, one a core,
evaluate nearly that many times faster instead. Each worker builds its policy and its
backend once (``PolicyWorkers.build``, pickled to it, so a module-level function and
its arguments) and runs whole tasks, every sample of a task in one worker, in the order
one process runs them; the episodes come back in task order, so ``evaluate`` reports
them as it reports one process's.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass

from agents.policies.base import Policy
from agents.runner import run_episode
from contract import InvalidInputError, TaskSpec, Trajectory
from envs.backend import Backend


@dataclass(frozen=True)
class PolicyWorkers:
    """A policy as ``processes`` worker processes each build it (``build()``)."""

    build: Callable[[], Policy]
    processes: int

    def __post_init__(self) -> None:
        if isinstance(self.processes, bool) or self.processes < 1:
            raise InvalidInputError("processes", f"{self.processes!r} must be an integer >= 1")


def run_in_workers(
    workers: PolicyWorkers,
    tasks: Sequence[TaskSpec],
    *,
    samples: int,
    max_steps: int | None,
    backend_factory: Callable[[], Backend],
    on_episode: Callable[[int, int], None] | None = None,
) -> list[Trajectory]:
    """Every sample of every task, run by ``workers`` (spawned processes, so no thread
    state is inherited), in task order. ``on_episode(done, total)`` is called as each
    task's samples come back. A worker that dies stops the run: the pending tasks are
    cancelled and the error is raised."""
    total = len(tasks) * samples
    episodes: list[list[Trajectory]] = [[] for _ in tasks]
    pool = ProcessPoolExecutor(
        min(workers.processes, len(tasks)),
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_start_worker,
        initargs=(workers.build, backend_factory),
    )
    try:
        pending: dict[Future[list[Trajectory]], int] = {
            pool.submit(_run_task, task, samples, max_steps): i for i, task in enumerate(tasks)
        }
        done = 0
        for future in as_completed(pending):
            episodes[pending[future]] = future.result()
            done += samples
            if on_episode is not None:
                on_episode(done, total)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return [trajectory for task_episodes in episodes for trajectory in task_episodes]


class _Worker:
    """This worker process's policy and backend, built once by the pool's initializer."""

    policy: Policy
    backend: Backend


def _start_worker(build: Callable[[], Policy], backend_factory: Callable[[], Backend]) -> None:
    _Worker.policy = build()
    _Worker.backend = backend_factory()


def _run_task(task: TaskSpec, samples: int, max_steps: int | None) -> list[Trajectory]:
    return [
        run_episode(task, _Worker.backend, _Worker.policy, max_steps=max_steps, attempt=sample)
        for sample in range(samples)
    ]
