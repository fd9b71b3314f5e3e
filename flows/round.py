"""``flywheel_round``: plan → construct → collect → curate → gate → propose → approve → freeze.

Thin Prefect orchestration over the agents. Every stage stores what it made in the
catalog before the round moves on, so a round is resumable: rerunning a round id skips
the stages it finished (reading back what they made), collects only the shards whose
Parquet file is missing, and writes nothing twice (ids are content-derived and every
write is idempotent). Collection runs one Prefect task per shard, retried on faults, with
at most ``collect_workers`` shards at once; the tag ``flywheel-collect`` lets a Prefect
tag concurrency limit bound collection across concurrent rounds too.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run
from prefect.task_runners import ThreadPoolTaskRunner
from prefect.utilities.annotations import quote
from pydantic import BaseModel, Field

from agents.trajectory_collector import EpisodeHook
from contract import (
    ROUND_ID,
    DatasetApproval,
    DatasetVersion,
    FlywheelError,
    GenerationPlan,
    InvalidInputError,
    MixTarget,
    TaskSpec,
    content_hash,
    default_plan,
)
from envs.appium.backend import needs_gui
from flows import round_stages as stages
from flows.approval import Proposal, request_approval
from flows.curation_stage import curate_round
from flows.devices import require_a_ready_device
from flows.gates import build_gate
from flows.planning import next_plan
from flows.progress import CollectionProgress
from flows.round_stages import STAGES, RoundSummary
from flows.settings import (
    ApprovalMode,
    DeviceRoute,
    FlywheelSettings,
    GateName,
    GuiAgentName,
    PolicyName,
    agent_llm,
    load_settings,
)
from storage import Catalog

Share = Annotated[float, Field(ge=0, le=1)]


class RoundConfig(BaseModel):
    """Everything that decides a round's data; its digest is the default round id."""

    tasks: int = Field(ge=1)
    seed: int = Field(ge=0)
    policy: PolicyName
    model: str | None = Field(description="model name when the policy is an LLM")
    teacher_share: float = Field(
        default=0.0, ge=0, le=1, description="share of tasks the scripted teacher collects"
    )
    devices: DeviceRoute = Field(
        default="none", description="gui: tasks that need the GUI agent run on the device pool"
    )
    gui_agent: GuiAgentName = Field(
        default="scripted", description="who operates devices: scripted, or llm (gui_model)"
    )
    gui_model: str | None = Field(default=None, description="the llm GUI agent's model name")
    fault_rate: float = Field(ge=0, le=1)
    recovery_rate: float = Field(ge=0, le=1)
    backend_fault_rate: float = Field(ge=0, le=1)
    max_steps: int | None = Field(default=None, ge=1)
    max_backend_attempts: int = Field(ge=1)
    gate: GateName
    shard_size: int = Field(ge=1)
    plan: GenerationPlan
    target: MixTarget

    def round_id(self) -> str:
        config = self.model_dump(mode="json")
        if not config["teacher_share"]:  # ids of rounds from before the teacher share stand
            del config["teacher_share"]
        if config["devices"] == "none":  # and those from before the device pool
            del config["devices"]
        if config["gui_agent"] == "scripted":  # and from before the llm GUI agent
            del config["gui_agent"], config["gui_model"]
        return "round-" + content_hash(config, 12)

    def teacher_tasks(self, tasks: Sequence[TaskSpec]) -> set[str]:
        """Ids of the tasks the scripted teacher collects: ``teacher_share`` of them,
        spread evenly over ``tasks`` in id order (none with the scripted policy)."""
        if self.policy == "scripted" or not self.teacher_share:
            return set()
        ordered = sorted(t.id for t in tasks)
        share = self.teacher_share
        return {
            task_id for i, task_id in enumerate(ordered) if int((i + 1) * share) > int(i * share)
        }


def teacher_share_for(share: float, champion_tasks: int | None, tasks: int) -> float:
    """``share``, raised where needed so that the champion collects at most
    ``champion_tasks`` of a round's ``tasks`` (the teacher takes the rest: a weak
    champion's episodes run to the end of their step budget, and cost a turn minutes)."""
    if champion_tasks is None or tasks < 1:
        return share
    wanted = (tasks - min(champion_tasks, tasks)) / tasks
    # a hair above: ``teacher_tasks`` floors ``tasks * share``, which rounding may put below
    return min(1.0, wanted + 1e-9) if wanted > share else share


def resolve_config(
    settings: FlywheelSettings,
    *,
    tasks: int | None = None,
    seed: int | None = None,
    policy: PolicyName | None = None,
    fault_rate: float | None = None,
    backend_fault_rate: float | None = None,
    gate: GateName | None = None,
    plan: GenerationPlan | None = None,
    teacher_share: float | None = None,
    devices: DeviceRoute | None = None,
) -> RoundConfig:
    """Settings, with explicit arguments taking precedence; ``plan`` defaults to the even
    mix of the round's tasks."""
    chosen_policy = policy or settings.round.policy
    n = settings.round.tasks if tasks is None else tasks
    return RoundConfig(
        tasks=n,
        seed=settings.round.seed if seed is None else seed,
        policy=chosen_policy,
        model=_model_of(chosen_policy, settings),
        teacher_share=settings.round.teacher_share if teacher_share is None else teacher_share,
        devices=devices or settings.devices.route,
        gui_agent=settings.devices.gui_agent,
        gui_model=(
            settings.devices.gui_model.model
            if settings.devices.gui_agent == "llm" and settings.devices.gui_model
            else None
        ),
        fault_rate=settings.episode.fault_rate if fault_rate is None else fault_rate,
        recovery_rate=settings.episode.recovery_rate,
        backend_fault_rate=(
            settings.round.backend_fault_rate if backend_fault_rate is None else backend_fault_rate
        ),
        max_steps=settings.episode.max_steps,
        max_backend_attempts=settings.round.max_backend_attempts,
        gate=gate or settings.round.gate,
        shard_size=settings.round.shard_size,
        plan=plan if plan is not None else default_plan(n),
        target=settings.balance.target(),
    )


def _model_of(policy: PolicyName, settings: FlywheelSettings) -> str | None:
    """The model an LLM policy collects with: the endpoint's model name, or the registry id
    of the champion the model server serves now."""
    if policy == "openai":
        return settings.policy.model
    if policy == "champion":
        from flows.policies import served_champion

        return served_champion(settings)
    return None


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


@task(name="construct", cache_policy=NO_CACHE, retries=1)
def construct_task(
    home: Path, round_id: str, config: RoundConfig, settings: FlywheelSettings
) -> list[TaskSpec]:
    return stages.construct(
        home,
        round_id,
        config.plan,
        config.seed,
        max_passes=settings.round.max_construct_passes,
        llm=agent_llm(settings, "task_constructor"),
    )


@task(
    name="collect-shard",
    cache_policy=NO_CACHE,
    retries=2,
    retry_delay_seconds=[1, 5],
    tags=["flywheel-collect"],
)
def collect_shard_task(
    home: Path,
    round_id: str,
    shard: str,
    tasks: Sequence[TaskSpec],
    config: RoundConfig,
    settings: FlywheelSettings,
    policy: PolicyName | None = None,
    backend: stages.BackendName = "sandbox",
    on_episode: EpisodeHook | None = None,
) -> int:
    """Collect the shard and write its Parquet file; the number of trajectories in it
    (the records stay in the file: the catalog carries them on)."""
    trajectories = stages.collect_one_shard(
        home, round_id, shard, tasks, config, settings, policy, backend, on_episode
    )
    return len({t.id for t in trajectories})


@task(name="ingest", cache_policy=NO_CACHE, retries=1)
def ingest_task(home: Path, round_id: str) -> int:
    return stages.ingest(home, round_id)


@task(name="curate", cache_policy=NO_CACHE, retries=1)
def curate_task(home: Path, round_id: str, settings: FlywheelSettings) -> int:
    """Curate the round's trajectories and store the records; how many were kept."""
    llm = agent_llm(settings, "curator")
    return sum(r.kept for r in curate_round(home, round_id, settings.curation, llm))


@task(name="gate", cache_policy=NO_CACHE, retries=1)
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


@task(name="propose-dataset", cache_policy=NO_CACHE, retries=1)
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
        pool.reviews,
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


@task(name="freeze-dataset", cache_policy=NO_CACHE, retries=1)
def decide_task(home: Path, version: DatasetVersion, approval: DatasetApproval) -> str | None:
    return stages.decide_dataset(home, version, approval)


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
) -> dict[str, Any]:
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
    """
    if round_id is not None:
        ROUND_ID.check("round_id", round_id)
    settings = load_settings()
    if approval is not None:
        settings = settings.model_copy(
            update={"approval": settings.approval.model_copy(update={"mode": approval})}
        )
    config = resolve_config(
        settings,
        tasks=tasks,
        seed=seed,
        policy=policy,
        fault_rate=fault_rate,
        backend_fault_rate=backend_fault_rate,
        gate=gate_name,
        plan=next_plan(settings, settings.round.tasks if tasks is None else tasks),
        teacher_share=teacher_share,
        devices=devices,
    )
    summary = run_round(settings, config, round_id or config.round_id())
    return summary.model_dump(mode="json")


def run_round(settings: FlywheelSettings, config: RoundConfig, round_id: str) -> RoundSummary:
    """The body of ``flywheel_round`` (inside a flow run).

    The catalog carries the round's data from stage to stage: a stage's task returns a
    count or ids, never the trajectories or curation records (the flow's memory does not
    grow with them), and the next stage reads what it needs. Each collection shard is
    given its tasks wrapped in ``quote`` (Prefect then does not walk them looking for
    futures). A stage finished by an earlier run is skipped.
    """
    log = get_run_logger()
    home = settings.home
    run_id = str(flow_run.get_id() or "") or None
    with Catalog.open(settings.catalog_path) as catalog:
        info = catalog.begin_round(round_id, config.model_dump(mode="json"))
        if RoundConfig.model_validate(info.config) != config:
            raise InvalidInputError(
                "round_id",
                f"{round_id} was started with another configuration; rerun it with the "
                "same arguments or choose a new round id",
            )
        if run_id:
            catalog.set_flow_run(round_id, run_id)
    done = set(_finished_stages(info.stage))
    log.info("round %s: stages already done: %s", round_id, ", ".join(sorted(done)) or "none")
    stored = StoredRound(settings.catalog_path, round_id)

    plan = plan_task(config)
    if "construct" in done:
        tasks = stored.tasks()
    else:
        tasks = construct_task(home, round_id, config, settings)
        _mark(settings, round_id, "construct")
    log.info("%d tasks for a plan of %d", len(tasks), plan.total)

    recollected = stages.recollection(home, config.plan)
    if recollected:
        log.info("%d stored tasks collected again (replays, preservation set)", len(recollected))
    if "collect" not in done:
        collected = _collect(settings, round_id, config, [*tasks, *recollected])
        stored_count = ingest_task(home, round_id)
        if stored_count != collected:
            raise FlywheelError(
                f"{round_id}: the catalog holds {stored_count} trajectories of the round, "
                f"its shards {collected}"
            )
        if config.devices == "gui":
            publish_devices(settings, round_id)
        _mark(settings, round_id, "collect")
    if "curate" not in done:
        curate_task(home, round_id, settings)
        _mark(settings, round_id, "curate")
    if "gate" in done:
        gated = stored.gate_outcome()
    else:
        gated = gate_task(home, round_id, config.gate, settings)
        _mark(settings, round_id, "gate")
    if "balance" not in done:
        _propose_and_decide(settings, round_id, config, gated, run_id)
        _mark(settings, round_id, "balance")

    summary = stages.summarize(
        home, round_id, run_id, gated.carried_in, recollected=len(recollected)
    )
    publish_summary(summary)
    log.info("round %s done: dataset %s", round_id, summary.dataset_version)
    return summary


def _propose_and_decide(
    settings: FlywheelSettings,
    round_id: str,
    config: RoundConfig,
    gated: stages.GateOutcome,
    run_id: str | None,
) -> None:
    """Propose the dataset version, have it approved (or not), and freeze it if so.

    The pause for a person happens here, in the flow itself, not inside a task: Prefect
    pauses flow runs. A decision stored by an earlier run of the round stands.
    """
    log = get_run_logger()
    home = settings.home
    proposal = propose_task(
        home, round_id, list(gated.carried_in), settings, config.target, config.plan
    )
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
            flow_run_id=run_id,
        )
    decide_task(home, version, approval)
    log.info(
        "dataset version %s: %s by %s",
        version.id,
        "approved" if approval.approved else "rejected",
        approval.approver,
    )


class StoredRound:
    """What finished stages of a round left in the catalog, read when a rerun needs it."""

    def __init__(self, path: Path, round_id: str) -> None:
        self._path = path
        self._round = round_id

    def tasks(self) -> list[TaskSpec]:
        with Catalog.open(self._path, read_only=True) as catalog:
            return catalog.tasks_of_round(self._round)

    def gate_outcome(self) -> stages.GateOutcome:
        with Catalog.open(self._path, read_only=True) as catalog:
            return stages.GateOutcome(tuple(catalog.settled_ids(self._round)))


def _collect(
    settings: FlywheelSettings, round_id: str, config: RoundConfig, tasks: Sequence[TaskSpec]
) -> int:
    """The number of trajectories collected (written to the round's shards), by one
    Prefect task per shard, at most ``collect_workers`` at once; the scripted
    teacher's share of the tasks (``RoundConfig.teacher_tasks``) in shards of its own,
    and with ``devices`` ``gui`` the tasks that need the GUI agent in device shards (a
    shard holds one device at a time)."""
    log = get_run_logger()
    teacher = config.teacher_tasks(tasks)
    on_device = {t.id for t in tasks if config.devices == "gui" and needs_gui(t)}
    groups: dict[tuple[str, PolicyName, stages.BackendName], list[TaskSpec]] = {}
    for t in tasks:
        by_teacher, on_a_device = t.id in teacher, t.id in on_device
        key: tuple[str, PolicyName, stages.BackendName] = (
            _SHARD_PREFIX[by_teacher, on_a_device],
            "scripted" if by_teacher else config.policy,
            "device" if on_a_device else "sandbox",
        )
        groups.setdefault(key, []).append(t)
    shards = [
        (f"{prefix}-{i:05d}", policy, backend, shard)
        for (prefix, policy, backend), group in groups.items()
        for i, shard in enumerate(stages.shards_of(group, config.shard_size))
    ]
    if teacher:
        log.info("%d of %d tasks collected by the scripted teacher", len(teacher), len(tasks))
    if on_device:
        require_a_ready_device(settings)
        log.info("%d of %d tasks run on the device pool", len(on_device), len(tasks))
    runner: ThreadPoolTaskRunner[Any] = ThreadPoolTaskRunner(
        max_workers=settings.round.collect_workers
    )
    progress = CollectionProgress(len(tasks), log)
    collected = 0
    with runner:
        futures = [
            runner.submit(
                collect_shard_task,
                {
                    "home": settings.home,
                    "round_id": round_id,
                    "shard": name,
                    "tasks": quote(shard),
                    "config": config,
                    "settings": settings,
                    "policy": policy,
                    "backend": backend,
                    "on_episode": quote(progress),
                },
            )
            for name, policy, backend, shard in shards
        ]
        for done, future in enumerate(futures, start=1):
            collected += future.result()
            log.info("collected shard %d/%d", done, len(futures))
    return collected


def publish_devices(settings: FlywheelSettings, round_id: str) -> None:
    """Per device of the pool: attempts, outcomes, and the evidence kept (from the
    catalog, once the round's shards are in)."""
    from prefect.artifacts import create_table_artifact

    with Catalog.open(settings.catalog_path, read_only=True) as catalog:
        episodes = catalog.episode_facts(round_id)
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


_SHARD_PREFIX = {
    (False, False): "shard",
    (True, False): "teacher",
    (False, True): "device",
    (True, True): "teacher-device",
}
"""Shard names by (collected by the teacher, run on a device)."""


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
