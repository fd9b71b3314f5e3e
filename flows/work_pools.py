"""Deployments run by Prefect workers, on this machine or others.

``flywheel serve --pool NAME`` registers the flywheel's deployments in the process work
pool ``NAME`` (created when missing), naming each flow by its module path;
``flywheel worker --pool NAME`` polls that pool and runs each flow run in a subprocess.
Start one worker per machine: a machine runs the flows with its own installed package
and reads and writes the state folder it is given (an absolute ``FLYWHEEL_HOME``; the
catalog is one DuckDB file, so workers of one flywheel share one folder).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from contract import InvalidInputError
from flows.deployments import flywheel_deployments
from flows.settings import CONFIG_ENV, HOME_ENV, FlywheelSettings, config_path

POOL_TYPE = "process"


def ensure_pool(name: str) -> bool:
    """The process work pool ``name``, created when missing; whether it was created. A
    pool of that name of another type is refused, naming it."""
    from prefect import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            pool = client.read_work_pool(name)
        except ObjectNotFound:
            client.create_work_pool(WorkPoolCreate(name=name, type=POOL_TYPE))
            return True
    if pool.type != POOL_TYPE:
        raise InvalidInputError(
            "execution.work_pool",
            f"the work pool {name!r} is a {pool.type!r} pool; the flywheel's workers need "
            f"a {POOL_TYPE!r} pool: name another",
        )
    return False


def register(settings: FlywheelSettings, pool: str) -> list[str]:
    """The flywheel's deployments registered in ``pool``; their ``flow/name``s."""
    ensure_pool(pool)
    names = []
    for deployment in flywheel_deployments(settings, by_module=True):
        deployment.apply(work_pool_name=pool)
        names.append(f"{deployment.flow_name}/{deployment.name}")
    return names


def work(settings: FlywheelSettings, pool: str, limit: int | None) -> None:
    """Poll ``pool`` and run its flow runs as subprocesses (at most ``limit`` at once)
    until interrupted. The subprocesses find this machine's state folder and settings
    file by absolute path, whatever folder Prefect starts them in."""
    from prefect.workers.process import ProcessWorker

    os.environ[HOME_ENV] = str(Path(settings.home).resolve())
    config = config_path()
    if config is not None:
        os.environ[CONFIG_ENV] = str(config.resolve())
    ensure_pool(pool)

    async def run() -> None:
        async with ProcessWorker(work_pool_name=pool, limit=limit) as worker:
            await worker.start()

    asyncio.run(run())
