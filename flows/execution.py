"""Where a round's collection shards, curation partitions and export chunks run: threads
and worker processes of this machine, or a Ray cluster.

``[execution] runner`` picks the Prefect task runner: Prefect's ``ThreadPoolTaskRunner``
(``collect_workers`` shards at once), or prefect-ray's ``RayTaskRunner`` on the cluster
at ``[execution] address`` (each shard a Ray task; the cluster's CPUs bound how many run
at once). A shard's task gets plain values (its name, the round's config and settings),
reads its tasks from its manifest and writes its Parquet file at the shards' root, so the
dataset a round makes does not depend on the runner. On Ray the curate stage's
partitions and an export's chunks are tasks of the cluster too; they read the catalog
file and write their output as files (partitions beside the round's shards, chunks in
the export's staging folder), so its workers must see the state folder at the same path.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from prefect import Task, task
from prefect.cache_policies import NO_CACHE
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

from flows.curation_stage import PartitionJob, PartitionResult, Spread, curate_to_file
from flows.settings import FlywheelSettings

if TYPE_CHECKING:  # the export (and the datasets library) loads only where one runs
    from training.export import ChunkJob, ChunkResult, ChunkSpread

R = TypeVar("R")


def round_task_runner(settings: FlywheelSettings, threads: int | None = None) -> TaskRunner[Any]:
    """The task runner a round's collection shards (and, on Ray, curation partitions)
    are submitted to; on this machine ``threads`` at once (None: ``collect_workers``)."""
    execution = settings.execution
    if execution.runner == "ray":
        from prefect_ray import RayTaskRunner

        # The driver's log lines stay the flow's: a worker's go to the Prefect API.
        runner: TaskRunner[Any] = RayTaskRunner(
            address=execution.address, init_kwargs={"log_to_driver": False}
        )
        return runner
    return ThreadPoolTaskRunner(max_workers=threads or settings.round.collect_workers)


def collection_threads(settings: FlywheelSettings, waiting: bool) -> int:
    """Shards collected at once on this machine's threads: ``collect_workers`` when some
    shard's episodes wait (on a model server, a device, a simulator), else one. Shards of
    pure-Python episodes share one interpreter lock, so a second thread adds no speed and
    costs CPU handing the lock back and forth: collecting 2,000 scripted sandbox tasks
    took 6.2 s of CPU on two threads against 5.7 s on one (mean of 4 rounds each, run in
    the order two, one, one, two, twice)."""
    return settings.round.collect_workers if waiting else 1


def shares_memory(runner: TaskRunner[Any]) -> bool:
    """Whether tasks run in this process (and may report to objects of the flow)."""
    return isinstance(runner, ThreadPoolTaskRunner)


@task(name="curate-partition", cache_policy=NO_CACHE)
def curate_partition_task(job: PartitionJob) -> PartitionResult:
    """One fingerprint partition curated where the runner put it: it reads the catalog
    and writes its records where ``job`` says."""
    return curate_to_file(job)


def partition_spread(settings: FlywheelSettings) -> Spread | None:
    """How the curate stage spreads its partitions: as tasks of the Ray cluster with
    ``runner = "ray"``; else None (the stage's own worker processes)."""
    if settings.execution.runner != "ray":
        return None

    def spread(jobs: Sequence[PartitionJob]) -> Iterator[PartitionResult]:
        return each_run(settings, curate_partition_task, [{"job": job} for job in jobs])

    return spread


@task(name="export-chunk", cache_policy=NO_CACHE)
def export_chunk_task(job: ChunkJob, start: int, stop: int) -> ChunkResult:
    """One chunk of an export's rows built where the runner put it: members
    ``[start, stop)`` read from the catalog, rows written to the export's staging folder."""
    from training.export import build_chunk

    return build_chunk(job, start, stop)


def export_spread(settings: FlywheelSettings) -> ChunkSpread | None:
    """How an export spreads its chunks: as tasks of the Ray cluster with ``runner =
    "ray"``; else None (the export's own worker processes)."""
    if settings.execution.runner != "ray":
        return None

    def spread(job: ChunkJob, ranges: Sequence[tuple[int, int]]) -> Generator[ChunkResult]:
        parameters = [{"job": job, "start": start, "stop": stop} for start, stop in ranges]
        return each_run(settings, export_chunk_task, parameters)

    return spread


def each_run(
    settings: FlywheelSettings, work: Task[..., R], parameters: Sequence[dict[str, Any]]
) -> Generator[R]:
    """A run of ``work`` per entry of ``parameters``, all submitted to the round's task
    runner at once (the cluster bounds how many run); their results, in that order."""
    with round_task_runner(settings) as runner:
        futures = [runner.submit(work, p) for p in parameters]
        for future in futures:
            yield future.result()
