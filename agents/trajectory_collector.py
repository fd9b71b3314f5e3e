"""The trajectory-collector agent: runs one shard of tasks and writes it as a Parquet shard.

A LangGraph ``StateGraph`` of plain nodes: ``run_episodes`` runs every pending task through
the episode runner on a backend leased for the attempt; a task whose backend failed is
tried again on another backend (as ``[retries] backend`` says), and the failed attempt is
kept: it is evidence of the fault and never becomes training data. An episode that ended
because the model's endpoint failed is not run again: the endpoint's own retries are
spent, and another device would ask the same endpoint. ``write_shard`` hands the
shard to the writer (one file, written atomically), so collectors never touch the catalog.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from agents.policies.base import Policy
from agents.runner import run_episode
from contract import RetryPolicy, TaskSpec, Termination, Trajectory
from contract.retry import BACKEND_RETRY
from envs.backend import Backend

BackendLease = Callable[[int], Backend]
"""The backend for an attempt number: a retry goes to another device."""
ShardWriter = Callable[[Sequence[Trajectory], str], object]
"""Writes a shard's trajectories to its location (a local path or a URL, as text)."""
EpisodeHook = Callable[[Trajectory], object]
"""Told of every episode as it ends (progress reports)."""


class CollectorState(TypedDict, total=False):
    round_id: str
    shard_path: str
    tasks: list[TaskSpec]
    pending: list[tuple[TaskSpec, int]]
    """Tasks still to run, with the attempt number they are at."""
    trajectories: list[Trajectory]
    written: bool


class CollectorNode(Protocol):
    """A node: ``State -> partial State``."""

    def __call__(self, state: CollectorState) -> CollectorState: ...


def make_run_episodes(
    lease: BackendLease,
    policy: Policy,
    max_steps: int | None,
    retry: RetryPolicy = BACKEND_RETRY,
    on_episode: EpisodeHook | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> CollectorNode:
    def run_episodes(state: CollectorState) -> CollectorState:
        """Run the pending tasks; those whose backend failed come back for another try."""
        pending = state.get("pending")
        if pending is None:
            pending = [(task, 0) for task in state["tasks"]]
        elif pending:
            sleep(retry.wait_s(pending[0][1]))
        done = list(state.get("trajectories", []))
        again: list[tuple[TaskSpec, int]] = []
        for task, attempt in pending:
            trajectory = run_episode(
                task,
                lease(attempt),
                policy,
                max_steps=max_steps,
                round_id=state["round_id"],
                attempt=attempt,
            )
            done.append(trajectory)
            if on_episode is not None:
                on_episode(trajectory)
            faulted = trajectory.metadata.termination is Termination.BACKEND_ERROR
            if faulted and attempt + 1 < retry.attempts:
                again.append((task, attempt + 1))
        return {"trajectories": done, "pending": again}

    return run_episodes


def make_write_shard(writer: ShardWriter | None) -> CollectorNode:
    def write_shard(state: CollectorState) -> CollectorState:
        """Write the shard's trajectories (tries of one task in attempt order)."""
        if writer is None:
            return {"written": False}
        ordered = sorted(
            state.get("trajectories", []),
            key=lambda t: (t.task.id, t.metadata.attempt),
        )
        writer(ordered, state["shard_path"])
        return {"written": True}

    return write_shard


def build_trajectory_collector_graph(
    lease: BackendLease,
    policy: Policy,
    *,
    writer: ShardWriter | None = None,
    max_steps: int | None = None,
    retry: RetryPolicy = BACKEND_RETRY,
    on_episode: EpisodeHook | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> CompiledStateGraph[CollectorState, None, CollectorState, CollectorState]:
    """The collector for one policy; ``lease`` gives a backend per attempt;
    ``on_episode`` hears of every episode as it ends."""

    def retry_or_write(state: CollectorState) -> str:
        return "run_episodes" if state.get("pending") else "write_shard"

    graph = StateGraph(CollectorState)
    graph.add_node(
        "run_episodes", make_run_episodes(lease, policy, max_steps, retry, on_episode, sleep)
    )
    graph.add_node("write_shard", make_write_shard(writer))
    graph.add_edge(START, "run_episodes")
    graph.add_conditional_edges("run_episodes", retry_or_write, ["run_episodes", "write_shard"])
    graph.add_edge("write_shard", END)
    return graph.compile(name="trajectory-collector")


def collect_shard(
    round_id: str,
    tasks: Sequence[TaskSpec],
    lease: BackendLease,
    policy: Policy,
    *,
    shard_path: Path | str | None = None,
    writer: ShardWriter | None = None,
    max_steps: int | None = None,
    retry: RetryPolicy = BACKEND_RETRY,
    on_episode: EpisodeHook | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Trajectory]:
    """Run the graph over one shard and return its trajectories (failed attempts too)."""
    graph = build_trajectory_collector_graph(
        lease,
        policy,
        writer=writer,
        max_steps=max_steps,
        retry=retry,
        on_episode=on_episode,
        sleep=sleep,
    )
    final = graph.invoke(
        {"round_id": round_id, "tasks": list(tasks), "shard_path": str(shard_path or "")},
        {"recursion_limit": 2 * retry.attempts + 4},
    )
    return sorted(final.get("trajectories", []), key=lambda t: (t.task.id, t.metadata.attempt))
