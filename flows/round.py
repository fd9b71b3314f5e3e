"""``flywheel_round``: plan → construct → collect → curate → gate → propose → approve → freeze.

Thin Prefect orchestration over the agents. Every stage stores what it made in the
catalog before the round moves on, so a round is resumable: rerunning a round id skips
the stages it finished (reading back what they made), collects only the shards whose
Parquet file is missing, and writes nothing twice (ids are content-derived and every
write is idempotent). Collection runs one Prefect task per shard, with at most
``collect_workers`` shards at once; the tag ``flywheel-collect`` lets a Prefect tag
concurrency limit bound collection across concurrent rounds too.

Prefect retries no stage: every dependency is retried once, in its own layer, as
``[retries]`` says (the LLM endpoint by ``agents.completions``, Label Studio by its gate,
a failed backend by the collector, the Prefect API by Prefect's client). A stage that
still fails fails the run, and running the round again resumes it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run
from prefect.utilities.annotations import quote

from agents.trajectory_collector import EpisodeHook
from contract import (
    ROUND_ID,
    DatasetApproval,
    FlywheelError,
    GenerationPlan,
    InvalidInputError,
    MixTarget,
)
from flows import round_stages as stages
from flows.approval import Proposal, request_approval
from flows.curation_stage import curate_round
from flows.devices import require_a_ready_device
from flows.execution import (
    collection_threads,
    partition_spread,
    round_task_runner,
    shares_memory,
)
from flows.gates import build_gate, workplace_of
from flows.planning import next_plan
from flows.progress import CollectionProgress
from flows.round_config import RoundConfig, Share, resolve_config, sandbox_count
from flows.round_stages import RoundSummary
from flows.settings import (
    ApprovalMode,
    DeviceRoute,
    FlywheelSettings,
    GateName,
    PolicyName,
    agent_llm,
    load_settings,
    tool_simulator,
)
from storage import Catalog


@task(name="plan", cache_policy=NO_CACHE)
def plan_task(config: RoundConfig) -> GenerationPlan:
    """The round's plan, and its change table as an artifact (a reason per change)."""
    from prefect.artifacts import create_table_artifact

    changes = config.plan.changes()
    if changes:
        create_table_artifact(
            key="round-plan",
            table=[c.model_dump(mode="json") for c in changes],
            description=f"How the plan ({config.plan.source}) differs from the even mix",
        )
    return config.plan


@task(name="construct", cache_policy=NO_CACHE)
def construct_task(
    home: Path, round_id: str, config: RoundConfig, settings: FlywheelSettings
) -> int:
    """Construct the round's tasks and store them; how many the round has."""
    return stages.construct(
        home,
        round_id,
        config.plan,
        config.seed,
        bfcl_tasks=config.bfcl_tasks,
        simulated_tasks=config.simulated_tasks,
        simulator=tool_simulator(settings),
        max_passes=settings.round.max_construct_passes,
        llm=agent_llm(settings, "task_constructor"),
    )


@task(
    name="collect-shard",
    cache_policy=NO_CACHE,
    tags=["flywheel-collect"],
)
def collect_shard_task(
    home: Path,
    round_id: str,
    shard: str,
    config: RoundConfig,
    settings: FlywheelSettings,
    policy: PolicyName | None = None,
    backend: stages.BackendName = "sandbox",
    on_episode: EpisodeHook | None = None,
) -> int:
    """Collect the shard and write its Parquet file; the number of trajectories in it
    (the records stay in the file: the catalog carries them on)."""
    trajectories = stages.collect_one_shard(
        home, round_id, shard, config, settings, policy, backend, on_episode
    )
    return len({t.id for t in trajectories})


@task(name="ingest", cache_policy=NO_CACHE)
def ingest_task(home: Path, round_id: str, settings: FlywheelSettings) -> int:
    return stages.ingest(home, round_id, stages.shards_root(home, settings))


@task(name="curate", cache_policy=NO_CACHE)
def curate_task(home: Path, round_id: str, settings: FlywheelSettings) -> int:
    """Curate the round's trajectories and store the records; how many were kept."""
    llm = agent_llm(settings, "curator")
    spread = partition_spread(settings)
    root = stages.shards_root(home, settings)
    return curate_round(home, round_id, settings.curation, root, llm, spread).kept


@task(name="gate", cache_policy=NO_CACHE)
def gate_task(
    home: Path, round_id: str, gate_name: str, settings: FlywheelSettings
) -> stages.GateOutcome:
    log = get_run_logger()
    return stages.gate(
        home,
        round_id,
        build_gate(gate_name, settings),
        wait_s=settings.gate.wait_s,
        poll_s=settings.gate.poll_s,
        max_poll_s=settings.gate.max_poll_s,
        log=log.info,
    )


@task(name="propose-dataset", cache_policy=NO_CACHE)
def propose_task(
    home: Path,
    round_id: str,
    carried_in: Sequence[str],
    settings: FlywheelSettings,
    target: MixTarget,
    plan: GenerationPlan | None = None,
) -> Proposal | None:
    """The dataset version the round proposes, from its pool as the catalog holds it."""
    log = get_run_logger()
    pool = stages.round_pool(home, round_id, carried_in)
    for result in pool.stale:
        failing = "; ".join(c.description for c in result.failing())
        log.info("%s passed an older verifier and fails today's: %s", result.trajectory_id, failing)
    llm = agent_llm(settings, "balancer")
    proposal = stages.propose_dataset(
        home,
        round_id,
        pool.trajectory_ids,
        target,
        llm,
        [r.trajectory_id for r in pool.stale],
        plan,
    )
    if proposal is not None:
        from prefect.artifacts import create_markdown_artifact

        create_markdown_artifact(
            key="dataset-proposal",
            markdown=proposal.markdown(),
            description=f"The dataset version {round_id} proposes",
        )
    return proposal


@task(name="freeze-dataset", cache_policy=NO_CACHE)
def decide_task(home: Path, dataset_id: str, approval: DatasetApproval) -> str | None:
    return stages.decide_dataset(home, dataset_id, approval)


@flow(name="flywheel_round", log_prints=True, persist_result=False)
def flywheel_round(
    tasks: int | None = None,
    seed: int | None = None,
    policy: PolicyName | None = None,
    fault_rate: Share | None = None,
    backend_fault_rate: Share | None = None,
    gate_name: GateName | None = None,
    approval: ApprovalMode | None = None,
    round_id: str | None = None,
    teacher_share: Share | None = None,
    devices: DeviceRoute | None = None,
    bfcl_share: Share | None = None,
    simulated_share: Share | None = None,
    correct_failures: bool | None = None,
) -> RoundSummary:
    """One flywheel round: construct, collect, curate, gate, balance, approve, freeze.

    Parameters left unset (None) come from the settings (``flywheel.toml``,
    ``FLYWHEEL_...``); the Prefect UI's form shows these descriptions.

    Args:
        tasks: Tasks to construct. None: from the settings.
        seed: Seed of task construction. None: from the settings.
        policy: Who collects: scripted, openai (the settings' endpoint) or champion (the
            model server's). None: from the settings.
        fault_rate: Scripted policy: share of episodes with an injected fault. None: from
            the settings.
        backend_fault_rate: Share of tool calls the backend fails. None: from the settings.
        gate_name: auto (the curator's suggestions stand) or label-studio (doubtful items
            go to people). None: from the settings.
        approval: auto, or person (the round pauses until someone approves its dataset
            version in this UI). None: from the settings.
        round_id: Resume this round. None: the id derived from the configuration.
        teacher_share: With openai or champion: share of tasks the scripted teacher
            collects. None: from the settings.
        devices: gui (tasks that need the GUI agent run on the device pool) or none.
            None: from the settings.
        bfcl_share: Share of the tasks taken from BFCL's multi-turn tasks (1: a BFCL
            round, 0: the sandbox's alone). None: from the settings.
        simulated_share: Share of the tasks on long-tail tools a chat model simulates
            (the agent LLM's tool_simulator role). None: from the settings.
        correct_failures: With openai or champion: the scripted teacher collects again
            each task the model failed. None: from the settings.
    """
    if round_id is not None:
        ROUND_ID.check("round_id", round_id)
    settings = load_settings()
    if approval is not None:
        settings = settings.model_copy(
            update={"approval": settings.approval.model_copy(update={"mode": approval})}
        )
    n = settings.round.tasks if tasks is None else tasks
    share = settings.round.bfcl_share if bfcl_share is None else bfcl_share
    simulated = settings.round.simulated_share if simulated_share is None else simulated_share
    config = resolve_config(
        settings,
        tasks=tasks,
        seed=seed,
        policy=policy,
        fault_rate=fault_rate,
        backend_fault_rate=backend_fault_rate,
        gate=gate_name,
        plan=next_plan(settings, sandbox_count(n, share, simulated)),
        teacher_share=teacher_share,
        devices=devices,
        bfcl_share=share,
        simulated_share=simulated,
        correct_failures=correct_failures,
    )
    return run_round(settings, config, round_id or config.round_id())


@dataclass(frozen=True)
class RoundRun:
    """What each stage of a round's run is given: the settings, the configuration, the
    round and the flow run. What a stage made is in the catalog, where the next reads it."""

    settings: FlywheelSettings
    config: RoundConfig
    round_id: str
    run_id: str | None


def run_round(settings: FlywheelSettings, config: RoundConfig, round_id: str) -> RoundSummary:
    """The body of ``flywheel_round`` (inside a flow run): the stages of ``ROUND_STAGES``
    the round has not finished, in order (``walk_stages``), then its summary.

    The catalog carries the round's data from stage to stage: a stage's task returns a
    count or ids, never the tasks, trajectories or curation records (the flow's memory
    does not grow with them), and the next stage reads what it needs. A collection shard
    reads its tasks from the task manifest written beside its shard (``shard_jobs``), on
    threads or a Ray cluster.
    """
    log = get_run_logger()
    run_id = str(flow_run.get_id() or "") or None
    with Catalog.open(settings.catalog_path) as catalog:
        info = catalog.rounds.begin(round_id, config.model_dump(mode="json"))
        if RoundConfig.model_validate(info.config) != config:
            raise InvalidInputError(
                "round_id",
                f"{round_id} was started with another configuration; rerun it with the "
                "same arguments or choose a new round id",
            )
        if run_id:
            catalog.rounds.set_flow_run(round_id, run_id)
    run = RoundRun(settings, config, round_id, run_id)
    plan_task(config)
    stages.walk_stages(
        [(name, partial(stage, run)) for name, stage in ROUND_STAGES],
        info.stage,
        mark=partial(_mark, settings, round_id),
        log=log.info,
    )
    with Catalog.open(settings.catalog_path, read_only=True) as catalog:
        carried_in = catalog.reviews.settled_ids(round_id)
    recollected = len(stages.recollection(settings.home, config.plan))
    summary = stages.summarize(settings.home, round_id, run_id, carried_in, recollected=recollected)
    if summary.counts["pending"]:
        where = partial(workplace_of, settings, config.gate, round_id)
        waiting = stages.PeopleWaiting.find(summary.counts["pending"], where)
        summary = summary.model_copy(update={"waiting": waiting})
    publish_summary(summary)
    log.info("round %s done: dataset %s", round_id, summary.dataset_version)
    return summary


def _construct(run: RoundRun) -> None:
    count = construct_task(run.settings.home, run.round_id, run.config, run.settings)
    config = run.config
    get_run_logger().info(
        "%d tasks for a plan of %d sandbox, %d BFCL and %d simulated-tool tasks",
        count,
        config.plan.total,
        config.bfcl_tasks,
        config.simulated_tasks,
    )


def _collect_and_ingest(run: RoundRun) -> None:
    """Collect the round's tasks and the stored tasks its plan collects again, then
    ingest the shards; with ``correct_failures``, then collect again with the scripted
    teacher the tasks the round's policy failed, and ingest those. The catalog must then
    hold what the shards hold."""
    log = get_run_logger()
    settings, round_id = run.settings, run.round_id
    recollected = [t.id for t in stages.recollection(settings.home, run.config.plan)]
    if recollected:
        log.info("%d stored tasks collected again (replays, preservation set)", len(recollected))
    root = stages.shards_root(settings.home, settings)
    jobs = stages.shard_jobs(settings.home, round_id, recollected, run.config, root)
    collected = _collect(settings, round_id, run.config, jobs)
    stored_count = ingest_task(settings.home, round_id, settings)
    corrections = stages.correction_jobs(settings.home, round_id, run.config, root)
    if corrections:
        log.info(
            "%d tasks the %s policy failed: the scripted teacher collects them again",
            sum(job.tasks for job in corrections),
            run.config.policy,
        )
        collected += _collect(settings, round_id, run.config, corrections)
        stored_count = ingest_task(settings.home, round_id, settings)
    if stored_count != collected:
        raise FlywheelError(
            f"{round_id}: the catalog holds {stored_count} trajectories of the round, "
            f"its shards {collected}"
        )
    if run.config.devices == "gui":
        publish_devices(settings, round_id)


def _curate(run: RoundRun) -> None:
    curate_task(run.settings.home, run.round_id, run.settings)


def _gate(run: RoundRun) -> None:
    gate_task(run.settings.home, run.round_id, run.config.gate, run.settings)


def _propose_and_decide(run: RoundRun) -> None:
    """Propose the dataset version, have it approved (or not), and freeze it if so.

    The pause for a person happens here, in the flow itself, not inside a task: Prefect
    pauses flow runs. A decision stored by an earlier run of the round stands.
    """
    log = get_run_logger()
    settings, round_id, config = run.settings, run.round_id, run.config
    home = settings.home
    with Catalog.open(settings.catalog_path, read_only=True) as catalog:
        carried_in = catalog.reviews.settled_ids(round_id)
    proposal = propose_task(home, round_id, carried_in, settings, config.target, config.plan)
    if proposal is None:
        log.info("nothing approved: no dataset version to propose")
        return
    version = proposal.version
    approval = stages.stored_approval(home, version.id)
    if approval is None:
        if settings.approval.mode == "person":
            log.info(
                "dataset version %s waits for a person: approve or reject it with Resume at %s",
                version.id,
                flow_run.ui_url or "the Prefect UI (this flow run)",
            )
        approval = request_approval(
            proposal,
            settings.approval.mode,
            timeout_s=settings.approval.timeout_s,
            poll_s=settings.approval.poll_s,
            flow_run_id=run.run_id,
        )
    decide_task(home, version.id, approval)
    log.info(
        "dataset version %s: %s by %s",
        version.id,
        "approved" if approval.approved else "rejected",
        approval.approver,
    )


ROUND_STAGES: tuple[tuple[str, Callable[[RoundRun], None]], ...] = (
    ("construct", _construct),
    ("collect", _collect_and_ingest),
    ("curate", _curate),
    ("gate", _gate),
    ("balance", _propose_and_decide),
)
"""The round's stages in order, each run as Prefect tasks and marked done once it
finished (the names are ``round_stages.STAGES``, which the catalog records)."""


def _collect(
    settings: FlywheelSettings, round_id: str, config: RoundConfig, jobs: Sequence[stages.ShardJob]
) -> int:
    """The number of trajectories collected (written to the round's shards), by one
    Prefect task per shard (``stages.shard_jobs``), on threads as many at once as
    ``collection_threads`` says. A shard's task reads its tasks from its manifest
    (``shard_jobs``)."""
    log = get_run_logger()
    total = sum(job.tasks for job in jobs)
    teacher = sum(job.tasks for job in jobs if job.by_teacher)
    on_device = sum(job.tasks for job in jobs if job.backend == "device")
    if teacher:
        log.info("%d of %d tasks collected by the scripted teacher", teacher, total)
    if on_device:
        require_a_ready_device(settings)
        log.info("%d of %d tasks run on the device pool", on_device, total)
    threads = collection_threads(settings, any(job.waits for job in jobs))
    runner = round_task_runner(settings, threads)
    here = shares_memory(runner)
    if here:
        log.info("%d shard(s), %d at a time on this machine's threads", len(jobs), threads)
    # Episodes are counted as they end where shards share this process; elsewhere, by shard.
    progress = CollectionProgress(total, log) if here else None
    collected = 0
    with runner:
        futures = [
            runner.submit(
                collect_shard_task,
                {
                    "home": settings.home,
                    "round_id": round_id,
                    "shard": job.name,
                    "config": config,
                    "settings": settings,
                    "policy": job.policy,
                    "backend": job.backend,
                    "on_episode": quote(progress) if progress else None,
                },
            )
            for job in jobs
        ]
        for done, future in enumerate(futures, start=1):
            collected += future.result()
            log.info("collected shard %d/%d (%d episodes)", done, len(futures), collected)
    return collected


def publish_devices(settings: FlywheelSettings, round_id: str) -> None:
    """Per device of the pool: attempts, outcomes, and the evidence kept (from the
    catalog, once the round's shards are in)."""
    from prefect.artifacts import create_table_artifact

    with Catalog.open(settings.catalog_path, read_only=True) as catalog:
        episodes = catalog.trajectories.episode_facts(round_id)
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for episode in episodes:
        if episode.backend == "device":
            seen = counts[episode.device or "none"]
            seen["attempts"] += 1
            seen[episode.outcome] += 1
            seen["artifacts"] += episode.artifacts
    if not counts:
        return
    columns = ("attempts", "success", "failure", "backend_error", "artifacts")
    create_table_artifact(
        key="round-devices",
        table=[
            {"device": name, **{c: seen[c] for c in columns}}
            for name, seen in sorted(counts.items())
        ],
        description=f"Attempts per device in {round_id}: backend errors are kept as "
        "evidence, never trained on; artifacts are screenshots and page sources",
    )


def _mark(settings: FlywheelSettings, round_id: str, stage: str) -> None:
    with Catalog.open(settings.catalog_path) as catalog:
        catalog.rounds.set_stage(round_id, stage)


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
