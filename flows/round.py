"""``flywheel_round``: plan → construct → collect → curate → gate → balance → freeze.

Thin Prefect orchestration over the agents. Every stage reads and writes the catalog, so
a round is resumable: rerunning a round id skips the stages it finished, collects only
the shards whose Parquet file is missing, and writes nothing twice (ids are content-
derived and every write is idempotent). Collection runs one Prefect task per shard,
retried on faults, with at most ``collect_workers`` shards at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run
from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import BaseModel, Field

from contract import (
    GenerationPlan,
    InvalidInputError,
    MixTarget,
    TaskSpec,
    content_hash,
    default_plan,
)
from flows.round_stages import (
    STAGES,
    RoundSummary,
    balance_and_freeze,
    collect_one_shard,
    construct,
    curate,
    gate,
    ingest,
    summarize,
)
from flows.settings import FlywheelSettings, GateName, PolicyName, load_settings
from storage import Catalog

Share = Annotated[float, Field(ge=0, le=1)]


class RoundConfig(BaseModel):
    """Everything that decides a round's data; its digest is the default round id."""

    tasks: int = Field(ge=1)
    seed: int = Field(ge=0)
    policy: PolicyName
    model: str | None = Field(description="model name when the policy is an LLM")
    fault_rate: float = Field(ge=0, le=1)
    recovery_rate: float = Field(ge=0, le=1)
    backend_fault_rate: float = Field(ge=0, le=1)
    max_steps: int = Field(ge=1)
    max_backend_attempts: int = Field(ge=1)
    gate: GateName
    shard_size: int = Field(ge=1)
    plan: GenerationPlan
    target: MixTarget

    def round_id(self) -> str:
        return "round-" + content_hash(self.model_dump(mode="json"), 12)


def resolve_config(
    settings: FlywheelSettings,
    *,
    tasks: int | None = None,
    seed: int | None = None,
    policy: PolicyName | None = None,
    fault_rate: float | None = None,
    backend_fault_rate: float | None = None,
    gate: GateName | None = None,
) -> RoundConfig:
    """Settings, with explicit arguments taking precedence."""
    chosen_policy = policy or settings.round.policy
    n = settings.round.tasks if tasks is None else tasks
    return RoundConfig(
        tasks=n,
        seed=settings.round.seed if seed is None else seed,
        policy=chosen_policy,
        model=settings.policy.model if chosen_policy == "openai" else None,
        fault_rate=settings.episode.fault_rate if fault_rate is None else fault_rate,
        recovery_rate=settings.episode.recovery_rate,
        backend_fault_rate=(
            settings.round.backend_fault_rate if backend_fault_rate is None else backend_fault_rate
        ),
        max_steps=settings.episode.max_steps,
        max_backend_attempts=settings.round.max_backend_attempts,
        gate=gate or settings.round.gate,
        shard_size=settings.round.shard_size,
        plan=default_plan(n),
        target=settings.balance.target(),
    )


@task(name="plan", cache_policy=NO_CACHE)
def plan_task(config: RoundConfig) -> GenerationPlan:
    return config.plan


@task(name="construct", cache_policy=NO_CACHE, retries=1)
def construct_task(home: Path, round_id: str, config: RoundConfig, passes: int) -> int:
    return construct(home, round_id, config.plan, config.seed, max_passes=passes)


@task(name="collect-shard", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[1, 5])
def collect_shard_task(
    home: Path,
    round_id: str,
    shard: str,
    tasks: Sequence[TaskSpec],
    config: RoundConfig,
    settings: FlywheelSettings,
) -> str:
    return str(collect_one_shard(home, round_id, shard, tasks, config, settings))


@task(name="ingest", cache_policy=NO_CACHE, retries=1)
def ingest_task(home: Path, round_id: str, shards: Sequence[str]) -> int:
    return ingest(home, round_id, [Path(s) for s in shards])


@task(name="curate", cache_policy=NO_CACHE, retries=1)
def curate_task(home: Path, round_id: str, settings: FlywheelSettings) -> int:
    return curate(home, round_id, settings.curation)


@task(name="gate", cache_policy=NO_CACHE, retries=1)
def gate_task(home: Path, round_id: str, gate_name: str) -> int:
    return gate(home, round_id, gate_name)


@task(name="balance-and-freeze", cache_policy=NO_CACHE, retries=1)
def balance_task(home: Path, round_id: str, target: MixTarget) -> str | None:
    return balance_and_freeze(home, round_id, target)


@flow(name="flywheel_round", log_prints=True, persist_result=False)
def flywheel_round(
    tasks: int | None = None,
    seed: int | None = None,
    policy: PolicyName | None = None,
    fault_rate: Share | None = None,
    backend_fault_rate: Share | None = None,
    gate_name: GateName | None = None,
    round_id: str | None = None,
) -> dict[str, Any]:
    """One flywheel round. Unset parameters come from settings; ``round_id`` resumes a
    round (by default the id is derived from the round's configuration)."""
    settings = load_settings()
    config = resolve_config(
        settings,
        tasks=tasks,
        seed=seed,
        policy=policy,
        fault_rate=fault_rate,
        backend_fault_rate=backend_fault_rate,
        gate=gate_name,
    )
    summary = run_round(settings, config, round_id or config.round_id())
    return summary.model_dump(mode="json")


def run_round(settings: FlywheelSettings, config: RoundConfig, round_id: str) -> RoundSummary:
    """The body of ``flywheel_round`` (inside a flow run)."""
    log = get_run_logger()
    home = settings.home
    with Catalog.open(settings.catalog_path) as catalog:
        info = catalog.begin_round(round_id, config.model_dump(mode="json"))
        stored = RoundConfig.model_validate(info.config)
        if stored != config:
            raise InvalidInputError(
                "round_id",
                f"{round_id} was started with another configuration; rerun it "
                "with the same arguments or choose a new round id",
            )
        catalog.set_flow_run(round_id, str(flow_run.get_id() or ""))
        finished = set(_finished_stages(info.stage))
    log.info("round %s: stages already done: %s", round_id, sorted(finished) or "none")

    plan = plan_task(config)
    if "construct" not in finished:
        made = construct_task(home, round_id, config, settings.round.max_construct_passes)
        log.info("constructed %d tasks for a plan of %d", made, plan.total)
        _mark(settings, round_id, "construct")

    if "collect" not in finished:
        shards = _collect(settings, round_id, config)
        ingest_task(home, round_id, shards)
        _mark(settings, round_id, "collect")
    if "curate" not in finished:
        curate_task(home, round_id, settings)
        _mark(settings, round_id, "curate")
    if "gate" not in finished:
        gate_task(home, round_id, config.gate)
        _mark(settings, round_id, "gate")
    if "balance" not in finished:
        balance_task(home, round_id, config.target)
        _mark(settings, round_id, "balance")

    summary = summarize(home, round_id, str(flow_run.get_id() or "") or None)
    publish_summary(summary)
    log.info("round %s done: dataset %s", round_id, summary.dataset_version)
    return summary


def _collect(settings: FlywheelSettings, round_id: str, config: RoundConfig) -> list[str]:
    log = get_run_logger()
    with Catalog.open(settings.catalog_path, read_only=True) as catalog:
        tasks = catalog.tasks_of_round(round_id)
    shards = [tasks[i : i + config.shard_size] for i in range(0, len(tasks), config.shard_size)]
    runner: ThreadPoolTaskRunner[Any] = ThreadPoolTaskRunner(
        max_workers=settings.round.collect_workers
    )
    paths: list[str] = []
    with runner:
        futures = [
            runner.submit(
                collect_shard_task,
                {
                    "home": settings.home,
                    "round_id": round_id,
                    "shard": f"shard-{i:05d}",
                    "tasks": shard,
                    "config": config,
                    "settings": settings,
                },
            )
            for i, shard in enumerate(shards)
        ]
        for done, future in enumerate(futures, start=1):
            paths.append(future.result())
            log.info("collected shard %d/%d", done, len(futures))
    return paths


def _finished_stages(stage: str | None) -> list[str]:
    if stage is None or stage not in STAGES:
        return []
    return list(STAGES[: STAGES.index(stage) + 1])


def _mark(settings: FlywheelSettings, round_id: str, stage: str) -> None:
    with Catalog.open(settings.catalog_path) as catalog:
        catalog.set_stage(round_id, stage)


def publish_summary(summary: RoundSummary) -> None:
    """A table per stage and per capability in the Prefect UI."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    create_table_artifact(
        key="round-stage-counts",
        table=[{"stage": k, "count": v} for k, v in summary.counts.items()],
        description=f"Counts per stage of {summary.round_id}",
    )
    create_table_artifact(
        key="round-capabilities",
        table=[row.model_dump() for row in summary.capabilities],
        description=f"Per capability in {summary.round_id}",
    )
    create_markdown_artifact(
        key="round-summary",
        markdown=summary.markdown(),
        description=f"Summary of {summary.round_id}",
    )
