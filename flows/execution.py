"""Where a round's collection shards run: threads of this process, or a Ray cluster.

``[execution] runner`` picks the Prefect task runner: Prefect's ``ThreadPoolTaskRunner``
(``collect_workers`` shards at once), or prefect-ray's ``RayTaskRunner`` on the cluster
at ``[execution] address`` (each shard a Ray task; the cluster's CPUs bound how many run
at once). A shard's task gets plain values (its task specs, the round's config and
settings) and writes its Parquet file under the state folder, so the dataset a round
makes does not depend on the runner.
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner
from prefect.utilities.annotations import quote

from flows.settings import FlywheelSettings

T = TypeVar("T")


def shard_runner(settings: FlywheelSettings) -> TaskRunner[Any]:
    """The task runner collection shards are submitted to."""
    execution = settings.execution
    if execution.runner == "ray":
        from prefect_ray import RayTaskRunner

        # The driver's log lines stay the flow's: a worker's go to the Prefect API.
        runner: TaskRunner[Any] = RayTaskRunner(
            address=execution.address, init_kwargs={"log_to_driver": False}
        )
        return runner
    return ThreadPoolTaskRunner(max_workers=settings.round.collect_workers)


def passed(runner: TaskRunner[Any], value: T) -> T:
    """``value`` as a task parameter: quoted where the runner unquotes it (Prefect then
    does not walk a shard's task specs looking for futures); prefect-ray 0.6 hands a
    quoted value to the task still quoted, so there it goes as it is."""
    return cast("T", quote(value)) if shares_memory(runner) else value


def shares_memory(runner: TaskRunner[Any]) -> bool:
    """Whether tasks run in this process (and may report to objects of the flow)."""
    return isinstance(runner, ThreadPoolTaskRunner)
