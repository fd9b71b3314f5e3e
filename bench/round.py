"""Benchmark: a round through Prefect and LangGraph against the same work in plain Python.

Over the same tasks, ``repeat`` times, the round and the plain pipeline interleaved:

- the round: ``flywheel_round`` against a Prefect server, on a fresh state folder
  (construction, Parquet shards, ingest, catalog, curation, gate, balancing, freezing);
- the plain pipeline: the same node functions called in loops, with no Prefect, no
  LangGraph, no catalog and no Parquet: what orchestration and storage cost on top; its
  construction is timed on its own too;
- once, plain episodes: only the round's episodes, one after another.

Each is measured in wall time and in CPU time: this process's (all its threads), its
waited-for children's, and for the round the Prefect server's (every process of its
session, read from ``/proc``): on a shared machine wall times of the same code swing
by tens of percent from one run to the next, CPU time much less. The ratios are the
median of the per-pair ratios. Figures, never pass or fail.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from agents import curator, task_constructor, trajectory_collector
from agents.policies.base import Policy
from bench.machine import cpu_seconds, session_cpu_seconds
from bench.report import BenchReport, json_ready, machine
from contract import RetryPolicy, ReviewDecision, TaskSpec, Trajectory
from curation.balance import balance_mix
from curation.facts import TrajectoryFacts
from curation.routing import CuratorConfig
from envs.sandbox import MobileSandbox
from flows.policies import build_policy
from flows.round_config import RoundConfig, resolve_config
from flows.round_stages import RoundSummary, local_sandbox
from flows.settings import HOME_ENV, FlywheelSettings, load_settings

AIM = 1.2


@dataclass(frozen=True)
class Timing:
    wall_s: float
    cpu_s: float


def run_round_benchmark(tasks: int = 2000, seed: int = 0, repeat: int = 3) -> BenchReport:
    """Run the round and the plain pipeline ``repeat`` times, interleaved, then the plain
    episodes once; the figures as text."""
    from flows.servers import prefect_api, resolve_prefect_api
    from flows.servers.prefect import prefect_server
    from storage import Catalog

    server_home = load_settings().home  # the Prefect server of the usual state folder
    rounds: list[Timing] = []
    plains: list[Timing] = []
    constructions: list[Timing] = []
    summary: RoundSummary | None = None
    round_tasks: list[TaskSpec] = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="flywheel-bench-") as tmp, _home(Path(tmp)):
            settings = load_settings()  # what the flow reads: the same file and environment
            config = resolve_config(settings, tasks=tasks, seed=seed)
            api = resolve_prefect_api(server_home, settings.prefect.port)
            server = prefect_server(server_home, settings.prefect.port).status().pid
            with prefect_api(api):
                timing, summary = _measured(partial(_round, tasks, seed), server)
            rounds.append(timing)
            with Catalog.open(settings.catalog_path, read_only=True) as catalog:
                round_tasks = catalog.tasks.of_round(summary.round_id)
        policy = build_policy(config.policy, settings, config.fault_rate, config.recovery_rate)
        timing, (plain_counts, construction) = _measured(
            partial(plain_pipeline, config, settings, policy), None
        )
        plains.append(timing)
        constructions.append(construction)
    episodes, _ = _measured(lambda: collect_plainly(round_tasks, config, policy), None)
    assert summary is not None  # repeat >= 1
    counts = summary.counts
    cpu_ratio = statistics.median(r.cpu_s / p.cpu_s for r, p in zip(rounds, plains, strict=True))
    wall_ratio = statistics.median(r.wall_s / p.wall_s for r, p in zip(rounds, plains, strict=True))
    lines = [
        f"round of {tasks} planned tasks (seed {seed}), {repeat} interleaved pairs; "
        f"{counts['constructed']} constructed, {counts['collected']} trajectories, "
        f"{counts['in_dataset']} in the dataset; load average {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} cores",
        f"  {'':42s} {'wall s (each run)':>26s} {'CPU s (each run)':>26s}",
        _row("through Prefect + LangGraph + catalog", rounds),
        _row(f"plain pipeline ({plain_counts['trajectories']} trajectories)", plains),
        _row("  of which construction", constructions),
        _row("plain episodes only", [episodes]),
        f"  ratio round / plain pipeline, median of pairs: CPU {cpu_ratio:.2f}x "
        f"(aim <= {AIM}x), wall {wall_ratio:.2f}x",
        "  (round CPU: this process, its children and the Prefect server's processes)",
    ]
    figures = {
        "tasks": tasks,
        "seed": seed,
        "repeat": repeat,
        "constructed": counts["constructed"],
        "collected": counts["collected"],
        "in_dataset": counts["in_dataset"],
        "round": rounds,
        "plain_pipeline": plains,
        "plain_construction": constructions,
        "plain_episodes": episodes,
        "round_to_plain_cpu_ratio": cpu_ratio,
        "round_to_plain_wall_ratio": wall_ratio,
        "aim_cpu_ratio": AIM,
        "machine": machine(),
    }
    return BenchReport(json_ready(figures), "\n".join(lines))


def _round(tasks: int, seed: int) -> RoundSummary:
    from flows.round import flywheel_round

    summary: RoundSummary = flywheel_round(tasks=tasks, seed=seed)
    return summary


def _row(name: str, timings: Sequence[Timing]) -> str:
    walls = " ".join(f"{t.wall_s:.1f}" for t in timings)
    cpus = " ".join(f"{t.cpu_s:.1f}" for t in timings)
    return f"  {name:42s} {walls:>26s} {cpus:>26s}"


def _measured(fn: Callable[[], Any], server_pid: int | None) -> tuple[Timing, Any]:
    """``fn()``'s wall and CPU seconds (with ``server_pid``'s session's CPU)."""
    cpu = _cpu_seconds(server_pid)
    started = time.perf_counter()
    result = fn()
    wall = time.perf_counter() - started
    return Timing(wall, _cpu_seconds(server_pid) - cpu), result


def _cpu_seconds(server_pid: int | None) -> float:
    """``cpu_seconds()``, and the Prefect server's session's when there is one."""
    server = session_cpu_seconds(server_pid) if server_pid is not None else 0.0
    return cpu_seconds() + server


@contextmanager
def _home(home: Path) -> Iterator[None]:
    """``FLYWHEEL_HOME`` points at ``home`` for the duration (the flow reads settings)."""
    before = os.environ.get(HOME_ENV)
    os.environ[HOME_ENV] = str(home)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(HOME_ENV, None)
        else:
            os.environ[HOME_ENV] = before


def collect_plainly(
    tasks: Sequence[TaskSpec], config: RoundConfig, policy: Policy
) -> list[Trajectory]:
    """The collector's node, called in a loop until no backend retry is left."""
    run = trajectory_collector.make_run_episodes(
        lambda attempt: local_sandbox(config.backend_fault_rate, f"sandbox-{attempt}"),
        policy,
        config.max_steps,
        RetryPolicy(attempts=config.max_backend_attempts, backoff_s=0.0, max_backoff_s=0.0),
    )
    state = run({"round_id": "plain", "tasks": list(tasks)})
    while state.get("pending"):
        state = run({"round_id": "plain", **state})
    return state.get("trajectories", [])


def plain_pipeline(
    config: RoundConfig, settings: FlywheelSettings, policy: Policy
) -> tuple[dict[str, int], Timing]:
    """Construct, collect, curate and balance by calling the agents' node functions; the
    counts, and the construction's own timing."""
    cpu, started = _cpu_seconds(None), time.perf_counter()
    sandbox = MobileSandbox()
    state: dict[str, Any] = {
        "round_id": "plain",
        "seed": config.seed,
        "plan": config.plan,
        "passes": 0,
        "accepted": [],
        "rejected": [],
    }
    propose = task_constructor.make_propose(sandbox, None)
    validate = task_constructor.make_validate(sandbox, task_constructor.GOAL_NEAR_DUPLICATE)
    while True:  # the graph's edges, without a store (the specs stay in ``accepted``)
        for node in (propose, validate):
            state |= node(state)  # type: ignore[arg-type]
        if task_constructor.rest_of_pass(state) == "propose":  # type: ignore[arg-type]
            continue
        state |= task_constructor.replan(state)  # type: ignore[arg-type]
        open_cells = set(task_constructor.shortfall(state["plan"], state["accepted"]))
        open_cells -= state.get("exhausted", frozenset())
        if not open_cells or state["passes"] >= settings.round.max_construct_passes:
            break
    construction = Timing(time.perf_counter() - started, _cpu_seconds(None) - cpu)
    tasks = [accepted.task() for accepted in state["accepted"]]
    trajectories = collect_plainly(tasks, config, policy)
    cfg = CuratorConfig()
    facts = [TrajectoryFacts.of(t) for t in trajectories]
    cur: dict[str, Any] = {"round_id": "plain", "trajectories": facts}
    for step in (
        curator.normalize,
        lambda s: curator.deduplicate(s, cfg),
        curator.check_support,
        curator.score,
        lambda s: curator.route(s, cfg),
    ):
        cur |= step(cur)  # type: ignore[arg-type]
    approved_ids = {
        r.trajectory_id
        for r in cur["records"]
        if r.kept and r.suggested in (ReviewDecision.APPROVE, ReviewDecision.CORRECT)
    }
    balance_mix([t for t in trajectories if t.id in approved_ids], config.target)
    return {"tasks": len(state["accepted"]), "trajectories": len(trajectories)}, construction
