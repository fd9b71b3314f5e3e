"""Benchmark: a round through Prefect and LangGraph against the same work in plain Python.

Three timings over the same tasks, in one run:

- the round: ``flywheel_round`` against a Prefect server, on a fresh state folder
  (construction, Parquet shards, ingest, catalog, curation, gate, balancing, freezing);
- the plain pipeline: the same node functions called in loops, with no Prefect, no
  LangGraph, no catalog and no Parquet: what orchestration and storage cost on top;
- plain episodes: only the round's episodes, one after another.

Figures, never pass or fail.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agents import curator, task_constructor, trajectory_collector
from agents.policies.base import Policy
from contract import ReviewDecision, TaskSpec, Trajectory
from curation.balance import balance_mix
from curation.routing import CuratorConfig
from envs.sandbox import MobileSandbox
from flows.policies import build_policy
from flows.round import RoundConfig, resolve_config
from flows.round_stages import local_sandbox
from flows.settings import FlywheelSettings, load_settings

HOME_ENV = "FLYWHEEL_HOME"

AIM = 1.5


def run_round_benchmark(tasks: int = 2000, seed: int = 0) -> str:
    """Run all three and return the figures as text."""
    from flows.round import flywheel_round
    from flows.servers import prefect_api, resolve_prefect_api
    from storage import Catalog

    server_home = load_settings().home  # the Prefect server of the usual state folder
    with tempfile.TemporaryDirectory(prefix="flywheel-bench-") as tmp, _home(Path(tmp)):
        settings = load_settings()  # what the flow reads: the same file and environment
        config = resolve_config(settings, tasks=tasks, seed=seed)
        api = resolve_prefect_api(server_home, settings.prefect.port)
        started = time.perf_counter()
        with prefect_api(api):
            summary = flywheel_round(tasks=tasks, seed=seed)
        round_s = time.perf_counter() - started
        with Catalog.open(settings.catalog_path, read_only=True) as catalog:
            round_tasks = catalog.tasks_of_round(summary["round_id"])

    policy = build_policy(config.policy, settings, config.fault_rate, config.recovery_rate)
    plain_s, plain_counts = _timed(lambda: plain_pipeline(config, settings, policy))
    episodes_s, _ = _timed(lambda: collect_plainly(round_tasks, config, policy))
    counts = summary["counts"]
    lines = [
        f"round of {tasks} planned tasks (seed {seed}); {counts['constructed']} constructed, "
        f"{counts['collected']} trajectories, {counts['in_dataset']} in the dataset",
        f"  through Prefect + LangGraph + catalog: {round_s:8.2f} s",
        f"  plain pipeline (no Prefect/LangGraph): {plain_s:8.2f} s "
        f"({plain_counts['trajectories']} trajectories)",
        f"  plain episodes only:                   {episodes_s:8.2f} s",
        f"  ratio round / plain pipeline: {round_s / plain_s:5.2f}x (aim <= {AIM}x)",
        f"  ratio round / plain episodes: {round_s / episodes_s:5.2f}x",
    ]
    return "\n".join(lines)


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


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def collect_plainly(
    tasks: Sequence[TaskSpec], config: RoundConfig, policy: Policy
) -> list[Trajectory]:
    """The collector's node, called in a loop until no backend retry is left."""
    run = trajectory_collector.make_run_episodes(
        lambda attempt: local_sandbox(config.backend_fault_rate, f"sandbox-{attempt}"),
        policy,
        config.max_steps,
        config.max_backend_attempts,
    )
    state = run({"round_id": "plain", "tasks": list(tasks)})
    while state.get("pending"):
        state = run({"round_id": "plain", **state})
    return state.get("trajectories", [])


def plain_pipeline(
    config: RoundConfig, settings: FlywheelSettings, policy: Policy
) -> dict[str, int]:
    """Construct, collect, curate and balance by calling the agents' node functions."""
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
    while True:
        for node in (propose, validate, task_constructor.replan):
            state |= node(state)  # type: ignore[arg-type]
        open_cells = set(task_constructor.shortfall(state["plan"], state["accepted"]))
        open_cells -= state.get("exhausted", frozenset())
        if not open_cells or state["passes"] >= settings.round.max_construct_passes:
            break
    trajectories = collect_plainly(state["accepted"], config, policy)
    cfg = CuratorConfig()
    cur: dict[str, Any] = {"round_id": "plain", "trajectories": trajectories}
    for step in (
        curator.normalize,
        lambda s: curator.deduplicate(s, cfg),
        curator.check_support,
        curator.attribute,
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
    return {"tasks": len(state["accepted"]), "trajectories": len(trajectories)}
