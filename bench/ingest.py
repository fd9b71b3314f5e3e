"""Catalog ingest throughput: steps/s from Parquet shards into a fresh DuckDB catalog.

Generation (scripted episodes) and shard writing are timed apart: they are the
collectors' work, not the ingest's. Each ingest runs in a new catalog; the best of
``repeat`` runs is reported with the median, since other processes share the cores, and
the CPU time of the best run (the process's, DuckDB's threads included).
"""

from __future__ import annotations

import gc
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from agents.policies.scripted import FaultConfig, ScriptedPolicy
from agents.runner import run_episode
from bench.report import BenchReport, json_ready, machine
from contract import TaskSpec, Trajectory
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks
from storage import Catalog, IngestReport, write_trajectory_shard

TARGET_STEPS_PER_S = 50_000
SHARD_SIZE = 250
ROUND = "round-bench"


def _per_second(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


def _write_shards(trajectories: Sequence[Trajectory], folder: Path) -> list[Path]:
    paths = []
    for start in range(0, len(trajectories), SHARD_SIZE):
        path = folder / f"shard-{start // SHARD_SIZE:05d}.parquet"
        write_trajectory_shard(trajectories[start : start + SHARD_SIZE], path, shard=path.stem)
        paths.append(path)
    return paths


def _timed_ingest(
    path: Path, shards: Sequence[Path], tasks: Sequence[TaskSpec] | None
) -> tuple[IngestReport, tuple[float, float]]:
    """Ingest into a new catalog, timed (wall and CPU seconds); with ``tasks``, register
    them first, as the task-constructor stage of a round does (untimed)."""
    catalog = Catalog.open(path)
    if tasks is not None:
        catalog.tasks.add(ROUND, tasks)
    gc.collect()  # the garbage of setting up is not the ingest's
    start, cpu = time.perf_counter(), time.process_time()
    report = catalog.trajectories.ingest(shards)
    return report, (time.perf_counter() - start, time.process_time() - cpu)


def _line(label: str, steps: int, runs: list[tuple[float, float]]) -> str:
    wall, cpu = min(runs)
    best = _per_second(steps, wall)
    return (
        f"  {label:27s}{best:12,.0f} steps/s  best of {len(runs)} "
        f"({wall:.3f} s, CPU {cpu:.3f} s; median {statistics.median(w for w, _ in runs):.3f} s)"
        f"  aim {TARGET_STEPS_PER_S:,}: {best / TARGET_STEPS_PER_S:.2f}x"
    )


def run_ingest_benchmark(trajectories: int = 3000, seed: int = 0, repeat: int = 5) -> BenchReport:
    """Generate ``trajectories`` scripted episodes, shard them, ingest them ``repeat``
    times into new catalogs; a printable report."""
    sandbox = MobileSandbox()
    tasks = sample_tasks(trajectories, seed, sandbox)
    policy = ScriptedPolicy(FaultConfig(rate=0.3))
    start = time.perf_counter()
    records = [run_episode(task, sandbox, policy, round_id=ROUND) for task in tasks]
    generate_s = time.perf_counter() - start
    steps = sum(len(t.steps) for t in records)

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        start = time.perf_counter()
        shards = _write_shards(records, folder / "shards")
        write_s = time.perf_counter() - start

        in_round = [
            _timed_ingest(folder / f"r{i}" / "c.duckdb", shards, tasks) for i in range(repeat)
        ]
        cold = [_timed_ingest(folder / f"c{i}" / "c.duckdb", shards, None) for i in range(repeat)]
        catalog = Catalog.open(folder / "r0" / "c.duckdb")
        start = time.perf_counter()
        again = catalog.trajectories.ingest(shards)
        again_s = time.perf_counter() - start

    report = in_round[0][0]
    if (report.trajectories, report.steps) != (len(records), steps) or again.trajectories:
        raise RuntimeError(f"ingest lost or repeated rows: {report}, then {again}")
    lines = [
        f"ingest benchmark: {len(records):,} trajectories, {steps:,} steps "
        f"(seed {seed}), {len(shards)} shards of {SHARD_SIZE}; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores",
        f"  generate (scripted)        {generate_s:12.2f} s  (not ingest: the collectors' work)",
        f"  write shards               {write_s:12.2f} s  "
        f"({_per_second(steps, write_s):,.0f} steps/s)",
        _line("ingest, tasks registered", steps, [s for _, s in in_round]),
        _line("ingest, tasks from shards", steps, [s for _, s in cold]),
        f"  ingest again (all skipped) {again_s:12.3f} s",
        "  ('tasks registered': the round's tasks are already in the catalog, as after the "
        "construct stage)",
    ]
    figures = {
        "trajectories": len(records),
        "steps": steps,
        "seed": seed,
        "shards": len(shards),
        "shard_size": SHARD_SIZE,
        "generate_s": generate_s,
        "write_shards": {"wall_s": write_s, "steps_per_s": _per_second(steps, write_s)},
        "ingest_tasks_registered": _figures(steps, [s for _, s in in_round]),
        "ingest_tasks_from_shards": _figures(steps, [s for _, s in cold]),
        "ingest_again_s": again_s,
        "aim_steps_per_s": TARGET_STEPS_PER_S,
        "machine": machine(),
    }
    return BenchReport(json_ready(figures), "\n".join(lines))


def _figures(steps: int, runs: list[tuple[float, float]]) -> dict[str, object]:
    """The best of ``runs`` (wall, CPU) in steps per second, and every run's seconds."""
    wall, cpu = min(runs)
    return {
        "steps_per_s": _per_second(steps, wall),
        "wall_s": wall,
        "cpu_s": cpu,
        "median_wall_s": statistics.median(w for w, _ in runs),
        "runs": [{"wall_s": w, "cpu_s": c} for w, c in runs],
    }
