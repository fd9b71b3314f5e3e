"""The Prefect deployments ``flywheel serve`` registers and serves (or, with ``--pool``,
registers in a process work pool whose workers run them: ``flows/work_pools.py``).

| deployment | flow | what it is for |
|---|---|---|
| ``flywheel_round/scheduled`` | ``flywheel_round`` | the round on ``[schedule] cron`` |
| ``trainer/train`` | ``trainer`` | training from the UI's form; then ``deployment`` |
| ``deployment/deploy`` | ``deployment`` | a candidate against the champion, served if better |
| ``rollback/rollback`` | ``rollback`` | the previous champion back |
| ``loop/loop`` | ``loop`` | K turns of round → train → deploy |

Every flow's parameters are typed, so the UI shows a form. A finished training run chains
into the deployment flow (``trainer``'s ``deploy`` parameter, on by default here). Each
deployment runs one flow run at a time: they share the catalog and the model server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from flows.settings import FlywheelSettings

if TYPE_CHECKING:
    from prefect.deployments.runner import RunnerDeployment

ROUND, TRAIN, DEPLOY, ROLLBACK, LOOP = "scheduled", "train", "deploy", "rollback", "loop"
TAGS = ["flywheel"]


def flywheel_deployments(
    settings: FlywheelSettings, *, by_module: bool = False
) -> list[RunnerDeployment]:
    """The deployments of the table above, with the schedule from ``settings``.
    ``by_module``: each names its flow by module path (``flows.round.flywheel_round``),
    so a worker on any machine with the package installed runs it (no code is copied)."""
    from prefect.schedules import Cron
    from prefect.types.entrypoint import EntrypointType

    where = EntrypointType.MODULE_PATH if by_module else EntrypointType.FILE_PATH

    from flows.deployment import deployment, rollback
    from flows.loop import loop
    from flows.round import flywheel_round
    from flows.trainer import trainer

    schedule = settings.schedule
    built = [
        flywheel_round.to_deployment(
            name=ROUND,
            schedules=[Cron(schedule.cron, timezone=schedule.timezone, active=schedule.active)],
            description="A flywheel round: plan, construct, collect, curate, gate, balance, "
            "freeze. Unset parameters come from settings.",
            tags=[*TAGS, "round"],
            concurrency_limit=1,
            entrypoint_type=where,
        ),
        trainer.to_deployment(
            name=TRAIN,
            parameters={"deploy": True},
            description="Train on a frozen dataset version (SFT and/or online RL with CARE), "
            "evaluate, register; then the deployment flow on the new model.",
            tags=[*TAGS, "training"],
            concurrency_limit=1,
            entrypoint_type=where,
        ),
        deployment.to_deployment(
            name=DEPLOY,
            description="Evaluate a registered model against the champion on the development "
            "set; promote and serve it if the gate allows.",
            tags=[*TAGS, "deployment"],
            concurrency_limit=1,
            entrypoint_type=where,
        ),
        rollback.to_deployment(
            name=ROLLBACK,
            description="Serve the previous champion again.",
            tags=[*TAGS, "deployment"],
            concurrency_limit=1,
            entrypoint_type=where,
        ),
        loop.to_deployment(
            name=LOOP,
            description="K turns of the flywheel: round, train, deploy, with plots per turn.",
            tags=[*TAGS, "loop"],
            concurrency_limit=1,
            entrypoint_type=where,
        ),
    ]
    return [cast("RunnerDeployment", d) for d in built]  # sync flows build synchronously
