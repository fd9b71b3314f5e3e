"""The stages of a round as plain functions over the catalog (Prefect wraps them).

Each stage opens the catalog only for as long as it reads or writes, so the DuckDB file
is never held while episodes run, and each stage is idempotent: rerunning it after a
crash writes nothing twice.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal

from more_itertools import chunked
from pydantic import BaseModel

from agents.balancer import run_balancer
from agents.llm import JsonLLM
from agents.task_constructor import (
    GoalsInCatalog,
    construct_tasks,
    goal_sketch,
    resolve_recollection,
    what_it_asks,
)
from agents.trajectory_collector import EpisodeHook, collect_shard
from contract import (
    Capability,
    CollateralCheck,
    CurationRecord,
    DatasetApproval,
    GenerationPlan,
    InvalidInputError,
    KeptSuggestion,
    MixTarget,
    Review,
    Routing,
    Split,
    TaskSpec,
    Trajectory,
    moment,
)
from curation.balance import Candidate
from curation.dedup import MinHasher, word_shingles
from envs import simulated_catalog
from envs.appium.backend import ShardDevices, needs_gui
from envs.backend import Backend
from envs.bfcl.backend import BACKEND as BFCL
from envs.bfcl.backend import BfclBackend
from envs.bfcl.construct import construct_bfcl
from envs.sandbox import MobileSandbox
from envs.sandbox.reverify import Reverification, reverify
from envs.simulated import BACKEND as SIMULATED
from envs.simulated import SimulatedBackend, Simulator
from envs.verification import references_passing
from flows.approval import Proposal
from flows.gates import sync_until
from flows.policies import build_policy
from flows.round_config import RoundConfig
from flows.settings import (
    DeviceRoute,
    FlywheelSettings,
    PolicyName,
    catalog_path,
    tool_simulator,
)
from human_gate import GateItem, GateUnavailableError, HumanGate, Workplace
from human_gate.auto import review_of_curation
from storage import Catalog, ReviewStore, TaskStore
from storage.bulk import gc_paused
from storage.locations import Location, join, parent_of
from storage.round_facts import CapabilityTally
from storage.shards import (
    list_shards,
    read_trajectory_shard,
    shard_complete,
    write_trajectory_shard,
)
from storage.task_manifests import MANIFEST_SUFFIX, read_task_manifest, write_manifest_texts

STAGES = ("construct", "collect", "curate", "gate", "balance")
BackendName = Literal["sandbox", "device", "bfcl", "simulated"]
GATE_BATCH = 20_000
"""Kept items whose suggestions the gate stage reads at a time (``KeptSuggestion``: a few
hundred bytes each). Per batch one query and one write: at 2,000 a batch, the 63 batches
of a 200,000-trajectory round spent 2.3 s opening the catalog and 2.3 s in the queries
(each sorts the round's rows anew); at 20,000, 0.6 s in 7 queries."""
PEOPLE_BATCH = 2_000
"""Items the gate stage sends to people, with their records, at a time."""
SPEC_BATCH = 2_000
"""Task specs a stage reads from the catalog at once (``construct``, ``shard_jobs``)."""


def walk_stages(
    table: Sequence[tuple[str, Callable[[], object]]],
    finished: str | None,
    *,
    mark: Callable[[str], None],
    log: Callable[[str], None] = lambda _: None,
) -> list[str]:
    """Run the stages of ``table`` that come after ``finished`` (the last stage an
    earlier run marked done; None: none was), in order, marking each done once it
    returned: a stage that raises is not marked, and a rerun starts again there. Returns
    the names of the stages run."""
    names = [name for name, _ in table]
    start = names.index(finished) + 1 if finished in names else 0
    log(f"stages already done: {', '.join(names[:start]) or 'none'}")
    for name, stage in table[start:]:
        stage()
        mark(name)
    return names[start:]


def shard_path(root: Location, round_id: str, shard: str) -> Location:
    """Where a shard of a round lives: always inside ``root`` (``shards_root``)."""
    return join(root, round_id, "shards", f"{shard}.parquet")


def manifest_path(root: Location, round_id: str, shard: str) -> Location:
    """Where the task manifest of a shard lives: beside the round's shards."""
    return join(root, round_id, "tasks", f"{shard}{MANIFEST_SUFFIX}")


def shards_root(home: Path, settings: FlywheelSettings) -> Location:
    """Where the rounds' shards are written: ``[storage] shards`` (a URL), else the
    state folder's ``rounds``."""
    return settings.storage.shards or home / "rounds"


def construct(
    home: Path,
    round_id: str,
    plan: GenerationPlan,
    seed: int,
    *,
    max_passes: int,
    llm: JsonLLM | None = None,
    bfcl_tasks: int = 0,
    simulated_tasks: int = 0,
    simulator: Simulator | None = None,
) -> int:
    """Fill the plan with validated tasks, take ``bfcl_tasks`` of BFCL's
    (``construct_bfcl``) and ``simulated_tasks`` on long-tail tools (``simulator``
    answers their reference plans, which must pass), and store them; returns how many
    tasks the round has (the next stage reads them from the catalog). What the
    constructor compares
    with stays in the catalog: the other rounds' fingerprints are read as text, and the
    goals of every stored task (this round's filed batches too) are asked for
    near-duplicates batch by batch (``GoalsInCatalog``), once each stored task's goal
    digest is kept (``keep_goal_digests``)."""
    if simulated_tasks and simulator is None:
        raise _no_simulator()
    with Catalog.open(catalog_path(home)) as catalog:
        keep_goal_digests(catalog.tasks)
        known = frozenset(catalog.tasks.fingerprints_except_round(round_id))
        construct_tasks(
            round_id,
            plan,
            seed,
            MobileSandbox(),
            store=catalog.tasks,
            llm=llm,
            known_fingerprints=known,
            dev_fingerprints=frozenset(catalog.tasks.fingerprints(Split.DEV)),
            known_goals=GoalsInCatalog(catalog.tasks),
            stored_tasks=catalog.tasks.with_fingerprints(plan.recollect_fingerprints),
            max_passes=max_passes,
        )
        if bfcl_tasks:
            taken = construct_bfcl(round_id, bfcl_tasks, seed, known)
            catalog.tasks.add(round_id, taken.accepted)
            catalog.tasks.add_rejections(taken.rejected)
        if simulated_tasks and simulator is not None:
            accepted, rejected = references_passing(
                round_id,
                simulated_catalog.simulated_tasks(simulated_tasks, seed, known),
                SimulatedBackend(simulator, simulated_catalog.TOOLS),
            )
            catalog.tasks.add(round_id, accepted)
            catalog.tasks.add_rejections(rejected)
        return len(catalog.tasks.capabilities_of_round(round_id))


def _no_simulator() -> InvalidInputError:
    return InvalidInputError(
        "simulated_share",
        "tasks on simulated tools need a chat model to simulate them: set [agent_llm] "
        "endpoint with the tool_simulator role",
        ["0 without an agent LLM"],
    )


def keep_goal_digests(tasks: TaskStore) -> int:
    """Keep the sketch of what each stored task asks (``GoalSketch``), for those that have
    none yet (tasks stored before sketches kept shingles, the development set, a batch
    whose construction stopped between storing it and its sketches), reading
    ``SPEC_BATCH`` specs at a time; the number kept. Each task is sketched once, whatever
    the number of rounds after it."""
    hasher = MinHasher()
    kept = 0
    for task_ids in chunked(tasks.without_goal_sketch(), SPEC_BATCH):
        specs = tasks.by_ids(task_ids)
        shingled = [word_shingles(what_it_asks(t)) for t in specs]
        sketches = hasher.sketches(shingled)
        kept += tasks.add_goal_sketches(
            {
                t.id: goal_sketch(sketch, shingles)
                for t, sketch, shingles in zip(specs, sketches, shingled, strict=True)
            }
        )
    return kept


def recollection(home: Path, plan: GenerationPlan) -> list[TaskSpec]:
    """Stored tasks the plan collects again (replays and the preservation set), once
    each; development tasks are refused (``InvalidInputError``)."""
    if not plan.recollect_fingerprints:
        return []
    with Catalog.open(catalog_path(home), read_only=True) as catalog:
        stored = catalog.tasks.with_fingerprints(plan.recollect_fingerprints)
        dev = frozenset(catalog.tasks.fingerprints(Split.DEV))
    return [r.task for r in resolve_recollection(plan, stored, dev)]


@dataclass(frozen=True)
class ShardJob:
    """One collection shard: its name, who collects it on which backend, how many tasks
    (their specs are in its task manifest)."""

    name: str
    policy: PolicyName
    backend: BackendName
    tasks: int
    by_teacher: bool

    @property
    def waits(self) -> bool:
        """Whether its episodes wait on something outside this process (a model server,
        a device, a tool simulator); otherwise they are pure Python: the scripted policy
        on the sandbox or BFCL's tools."""
        return self.policy != "scripted" or self.backend in ("device", "simulated")


TEACHER: PolicyName = "scripted"
"""The policy that collects the teacher's shards (and its recorded name)."""


def shard_prefix(by_teacher: bool, backend: BackendName) -> str:
    """A shard's name before its number: ``shard``, ``device``, ``bfcl`` or
    ``simulated`` by backend, ``teacher`` (``teacher-device``, ...) when the teacher
    collects it."""
    base = _BACKEND_PREFIX[backend]
    if not by_teacher:
        return base
    return "teacher" if backend == "sandbox" else f"teacher-{base}"


def correction_prefix(by_teacher: bool, backend: BackendName) -> str:
    """A correction shard's name before its number: ``correction`` (``correction-device``,
    ...): the teacher collecting again what the round's policy failed. Every correction
    shard is the teacher's, so ``by_teacher`` (``shard_prefix``'s signature) is not read."""
    return "correction" if backend == "sandbox" else f"correction-{_BACKEND_PREFIX[backend]}"


_BACKEND_PREFIX: dict[BackendName, str] = {
    "sandbox": "shard",
    "device": "device",
    "bfcl": "bfcl",
    "simulated": "simulated",
}


def collection_keys(
    tasks: TaskStore, task_ids: Sequence[str], devices: DeviceRoute
) -> list[tuple[int, str, BackendName]]:
    """(world seed, id, where it is collected) of each task, read ``SPEC_BATCH`` at a time
    without parsing a spec, but those of the sandbox's tasks when ``devices`` is ``gui``
    (whether one needs the GUI agent is in its reference plan): BFCL's world for BFCL's
    tasks, the simulator for tasks on simulated tools, a device for a task that needs the
    GUI agent, else the sandbox."""
    keys: list[tuple[int, str, BackendName]] = []
    for batch in chunked(task_ids, SPEC_BATCH):
        placed = tasks.placements(batch)
        on_devices: set[str] = set()
        if devices == "gui":
            local = [p.task_id for p in placed if p.backend == "sandbox"]
            on_devices = {t.id for t in tasks.by_ids(local) if needs_gui(t)}
        for task_id, seed, kind in placed:
            backend: BackendName
            if kind == BFCL:
                backend = "bfcl"
            elif kind == SIMULATED:
                backend = "simulated"
            else:
                backend = "device" if task_id in on_devices else "sandbox"
            keys.append((seed, task_id, backend))
    return keys


def shard_jobs(
    home: Path,
    round_id: str,
    recollected: Sequence[str],
    config: RoundConfig,
    root: Location,
) -> list[ShardJob]:
    """The round's collection shards over its tasks and the stored tasks it collects
    again (``recollected``, by id), each with its task manifest written below ``root``
    (``shards_root``; not for a shard already complete): the scripted teacher's share of
    the tasks (``RoundConfig.teacher_tasks``) in shards of its own, BFCL's tasks in
    shards of their own, and with ``devices`` ``gui`` the tasks that need the GUI agent
    in device shards (a shard holds one device at a time). Tasks are read ``SPEC_BATCH``
    at a time, their seeds and backends to group them (``collection_keys``), then their
    stored specs, unparsed, to write the manifests: the stage holds ids."""
    with Catalog.open(catalog_path(home), read_only=True) as catalog:
        ids = [*catalog.tasks.ids_of_round(round_id), *recollected]
        teacher = config.teacher_tasks(ids)
        placed = [
            (seed, task_id, backend, task_id in teacher)
            for seed, task_id, backend in collection_keys(catalog.tasks, ids, config.devices)
        ]
        return _planned(catalog.tasks, root, round_id, placed, config, shard_prefix)


def correction_jobs(
    home: Path, round_id: str, config: RoundConfig, root: Location
) -> list[ShardJob]:
    """With ``correct_failures``, shards in which the scripted teacher collects again each
    task the round's policy failed (``TrajectoryStore.failed_tasks``: once the round's
    shards are ingested), each with its task manifest; none without it, or when the
    teacher is the round's policy. What the policy failed is read from the catalog, where
    the teacher's episodes never count, so a resumed round finds the same shards."""
    if not config.correct_failures or config.policy == TEACHER:
        return []
    with Catalog.open(catalog_path(home), read_only=True) as catalog:
        failed = catalog.trajectories.failed_tasks(round_id, TEACHER)
        placed = [
            (seed, task_id, backend, True)
            for seed, task_id, backend in collection_keys(catalog.tasks, failed, config.devices)
        ]
        return _planned(catalog.tasks, root, round_id, placed, config, correction_prefix)


def _planned(
    tasks: TaskStore,
    root: Location,
    round_id: str,
    placed: Sequence[tuple[int, str, BackendName, bool]],
    config: RoundConfig,
    prefix: Callable[[bool, BackendName], str],
) -> list[ShardJob]:
    """Shards of ``config.shard_size`` over ``placed`` tasks (world seed, id, backend,
    whether the teacher collects it), grouped by who collects them where and named
    ``prefix``-number, and the manifests of those not complete yet."""
    groups: dict[tuple[bool, BackendName], list[tuple[int, str]]] = {}
    for seed, task_id, backend, by_teacher in placed:
        groups.setdefault((by_teacher, backend), []).append((seed, task_id))
    shards = [
        (f"{prefix(by_teacher, backend)}-{i:05d}", by_teacher, backend, shard)
        for (by_teacher, backend), group in groups.items()
        for i, shard in enumerate(shards_of(group, config.shard_size))
    ]
    batch: list[tuple[str, list[str]]] = []
    for n, (name, _, _, shard) in enumerate(shards, start=1):
        if not shard_complete(shard_path(root, round_id, name)):
            batch.append((name, shard))
        if n == len(shards) or sum(len(s) for _, s in batch) >= SPEC_BATCH:
            _write_manifests(tasks, root, round_id, batch)
            batch = []
    return [
        ShardJob(
            name=name,
            policy=TEACHER if by_teacher else config.policy,
            backend=backend,
            tasks=len(shard),
            by_teacher=by_teacher,
        )
        for name, by_teacher, backend, shard in shards
    ]


def _write_manifests(
    tasks: TaskStore, root: Location, round_id: str, shards: Sequence[tuple[str, list[str]]]
) -> None:
    """The task manifests of ``shards`` (name, task ids), from one read of their stored
    specs, written as stored (never parsed here: the collector checks each)."""
    specs = iter(tasks.spec_texts([task_id for _, shard in shards for task_id in shard]))
    for name, shard in shards:
        write_manifest_texts([next(specs) for _ in shard], manifest_path(root, round_id, name))


def collect_one_shard(
    home: Path,
    round_id: str,
    shard: str,
    config: RoundConfig,
    settings: FlywheelSettings,
    policy_name: str | None = None,
    backend: BackendName = "sandbox",
    on_episode: EpisodeHook | None = None,
) -> list[Trajectory]:
    """Run one shard of the tasks its manifest names (``shard_jobs`` wrote it) with
    ``policy_name`` (default: the round's policy) on ``backend`` and write its Parquet
    file; a shard already on disk is read back, not rerun.
    Returns the shard's trajectories; ``on_episode`` hears of each (read back ones too).

    On ``device`` the shard leases one device of the pool at a time: an attempt whose
    device failed is tried again on another (``[retries] backend``; its attempts are the
    round's ``max_backend_attempts``)."""
    root = shards_root(home, settings)
    path = shard_path(root, round_id, shard)
    if shard_complete(path):
        stored = read_trajectory_shard(path)
        if on_episode is not None:
            for trajectory in stored:
                on_episode(trajectory)
        return stored
    simulate = tool_simulator(settings) if backend == "simulated" else None
    if backend == "simulated" and simulate is None:
        raise _no_simulator()  # a round resumed with settings that lost the simulator
    tasks = read_task_manifest(manifest_path(root, round_id, shard))
    policy = build_policy(
        policy_name or config.policy,
        settings,
        config.fault_rate,
        config.recovery_rate,
        config.model,
    )

    def lease(attempt: int) -> Backend:
        if backend == "bfcl":
            return BfclBackend(f"bfcl-{attempt}")
        if simulate is not None:
            return SimulatedBackend(simulate, simulated_catalog.TOOLS, f"simulated-{attempt}")
        return local_sandbox(config.backend_fault_rate, f"sandbox-{attempt}")

    with contextlib.ExitStack() as stack:
        if backend == "device":
            from flows.devices import device_pool, gui_agent

            devices = stack.enter_context(
                ShardDevices(
                    device_pool(settings),
                    lambda device: local_sandbox(config.backend_fault_rate, device),
                    gui_agent=gui_agent(settings),
                )
            )
            lease = devices.backend
        return collect_shard(
            round_id,
            tasks,
            lease,
            policy,
            shard_path=path,
            writer=lambda trajectories, p: write_trajectory_shard(trajectories, p, shard=shard),
            max_steps=config.max_steps,
            retry=settings.retries.backend.model_copy(
                update={"attempts": config.max_backend_attempts}
            ),
            on_episode=on_episode,
        )


_THREAD = threading.local()


def local_sandbox(fault_rate: float, device: str) -> MobileSandbox:
    """This thread's sandbox named ``device`` (``sandbox-<attempt>``, or the phone whose
    episodes it serves: its simulated faults are seeded by that name, so a retry elsewhere
    meets other faults); kept across shards so that its cache of seeded worlds stays warm
    (a world costs ~3 ms to build, a copy of it ~0.7 ms)."""
    devices: dict[tuple[float, str], MobileSandbox] = _THREAD.__dict__.setdefault("devices", {})
    key = (fault_rate, device)
    if key not in devices:
        devices[key] = MobileSandbox(backend_fault_rate=fault_rate, device=device)
    return devices[key]


def shards_of(keys: Iterable[tuple[int, str]], size: int) -> list[list[str]]:
    """Task ids in shards of ``size``, grouped by world seed (``keys``: (seed, task id))
    so a shard reuses few worlds."""
    ordered = [task_id for _, task_id in sorted(keys)]
    return [ordered[i : i + size] for i in range(0, len(ordered), size)]


def ingest(home: Path, round_id: str, root: Location) -> int:
    """Ingest the round's shards (below ``root``: ``shards_root``), whole shards in
    bounded transactions; returns the round's trajectory count."""
    folder = parent_of(shard_path(root, round_id, "any"))
    with Catalog.open(catalog_path(home)) as catalog:
        catalog.trajectories.ingest(list_shards(folder))
        return catalog.trajectories.count(round_id)


@dataclass(frozen=True)
class GateOutcome:
    """What the gate stage leaves for balancing besides the reviews it stored: the items
    carried over from earlier rounds that were decided during this one (ids)."""

    carried_in: tuple[str, ...]


def gate(
    home: Path,
    round_id: str,
    human_gate: HumanGate,
    *,
    wait_s: float = 0.0,
    poll_s: float = 5.0,
    max_poll_s: float = 60.0,
    log: Callable[[str], None] = lambda _: None,
) -> GateOutcome:
    """Decide the round's kept items: those the curator routed to no person (every item
    when ``human_gate`` asks no people) get its suggestion as an automatic review, as
    every gate gives them (no trajectory is read for them); those routed to a person go
    through ``human_gate``, decisions stored as they come. Then take up items earlier
    rounds carried over, and carry over what is still undecided. Nothing undecided is
    ever approved.

    Kept items' suggestions are read ``GATE_BATCH`` at a time, as columns (no record is
    loaded for an automatic review): a batch's automatic reviews are stored, and its items
    for people read whole, ``PEOPLE_BATCH`` at a time, submitted and collected once
    without waiting; then, if people still have items and ``wait_s`` is above 0, those
    items alone are read again and waited for (up to ``wait_s``): the stage never holds
    more than a batch of suggestions, one of people's items, and the undecided items (the
    gate's submissions are idempotent)."""

    def for_people(kept: KeptSuggestion) -> bool:
        return human_gate.asks_people and kept.routing is Routing.NEEDS_HUMAN

    # One Catalog for the stage: it holds no connection between operations (so none
    # while people are waited for), and each operation does not check the schema again.
    with Catalog.open(catalog_path(home)) as catalog:

        def sync(curations: Sequence[CurationRecord], wait: float) -> tuple[str, ...]:
            ids = [c.trajectory_id for c in curations]
            trajectories = catalog.trajectories.by_ids(ids, verify_ids=False)  # written here
            return sync_until(
                human_gate,
                round_id,
                gate_items(trajectories, curations),
                catalog.reviews.add,
                wait_s=wait,
                poll_s=poll_s,
                max_poll_s=max_poll_s,
                log=log,
            ).pending

        pending: list[str] = []
        for kept in kept_batches(catalog.reviews, round_id):
            with gc_paused():
                automatic = [review_of_curation(round_id, k) for k in kept if not for_people(k)]
            catalog.reviews.add(automatic)
            asked = [k.trajectory_id for k in kept if for_people(k)]
            for ids in chunked(asked, PEOPLE_BATCH):
                pending += sync(catalog.reviews.curations_of(ids), 0.0)
        if pending and wait_s > 0:
            pending = list(sync(catalog.reviews.curations_of(pending), wait_s))
        carried_in = take_up_carried(home, round_id, human_gate, catalog.reviews.add, log)
        catalog.reviews.carry_over(round_id, human_gate.name, pending)
    if pending:
        log(f"{len(pending)} item(s) undecided: carried over to the next round")
        log(PeopleWaiting.find(len(pending), partial(human_gate.workplace, round_id)).text())
    return GateOutcome(tuple(carried_in))


def kept_batches(reviews: ReviewStore, round_id: str) -> Iterator[list[KeptSuggestion]]:
    """The round's kept items' suggestions, ``GATE_BATCH`` at a time, in trajectory id
    order."""
    after: str | None = None
    while True:
        kept = reviews.kept_suggestions(round_id, after=after, limit=GATE_BATCH)
        if not kept:
            return
        yield kept
        after = kept[-1].trajectory_id


def take_up_carried(
    home: Path,
    round_id: str,
    human_gate: HumanGate,
    store: Callable[[Sequence[Review]], object],
    log: Callable[[str], None] = lambda _: None,
) -> list[str]:
    """Ask ``human_gate`` once more about the items earlier rounds carried over to it
    (submitting them again first: an item the gate never received, say because it was
    down, gets there now), store the decisions, and settle the decided items into
    ``round_id``. Returns the settled items' ids (a rerun of the round returns those it
    settled before, too)."""
    with Catalog.open(catalog_path(home), read_only=True) as catalog:
        carried = catalog.reviews.carried_into(round_id, human_gate.name)
    if not carried.trajectories:
        return []
    by_round: dict[str, list[GateItem]] = {}
    for item in gate_items(carried.trajectories, carried.curations):
        by_round.setdefault(carried.from_round[item.trajectory_id], []).append(item)
    decided: list[str] = []
    for earlier, items in sorted(by_round.items()):
        try:
            human_gate.submit(earlier, items)
            result = human_gate.collect(earlier, items)
        except GateUnavailableError as exc:
            log(f"items carried over from {earlier} stay carried: {exc}")
            continue
        store(result.reviews)
        waiting = set(result.pending)
        decided += [i.trajectory_id for i in items if i.trajectory_id not in waiting]
    with Catalog.open(catalog_path(home)) as catalog:
        settled = catalog.reviews.settle_carry_over(round_id, decided)
        taken = catalog.reviews.settled_ids(round_id)
    log(f"{settled} item(s) carried over from earlier rounds were decided")
    return taken


def gate_items(
    trajectories: Sequence[Trajectory], curations: Sequence[CurationRecord]
) -> list[GateItem]:
    """What the gate judges: every kept trajectory with its curation record."""
    by_id = {t.id: t for t in trajectories}
    return [GateItem(trajectory=by_id[c.trajectory_id], curation=c) for c in curations if c.kept]


def propose_dataset(
    home: Path,
    round_id: str,
    trajectory_ids: Sequence[str],
    target: MixTarget,
    llm: JsonLLM | None = None,
    now_failing: Collection[str] = (),
    plan: GenerationPlan | None = None,
) -> Proposal | None:
    """The version to approve, kept in the catalog as proposed and outlined here, or None
    when nothing is approved: the parent version's members and the approved successes
    among ``trajectory_ids``, weighed together towards the target mix from the catalog's
    columns, each with the review that counts for it as the store computes it (no review
    record is read).

    A parent member stays unless its final review (every stored review of it counts, a
    person's over an automatic one) no longer approves it, or today's verifier fails it
    (``now_failing``, and the parent's own stale successes): each removal is recorded in
    the version with its reason. Members of ``plan``'s down-weighted (mastered)
    templates get the plan's factor, except the preservation set."""
    # No cyclic collection while the pool's hundreds of thousands of objects live: the
    # collector walking them again and again took half of balancing 200,000 trajectories.
    with gc_paused():
        with Catalog.open(catalog_path(home), read_only=True) as catalog:
            parent = _parent(catalog, round_id)
            inherited = catalog.datasets.member_ids(parent) if parent else []
            pool = [
                Candidate.from_row(row)
                for row in catalog.trajectories.balance_rows([*trajectory_ids, *inherited])
            ]
            decisions = catalog.reviews.final_reviews([*trajectory_ids, *inherited])
            stale = stale_successes(_older(catalog, inherited))
        state = run_balancer(
            round_id,
            pool,
            decisions,
            target,
            parent=parent,
            llm=llm,
            now_failing=[*now_failing, *(r.trajectory_id for r in stale)],
            inherited=inherited,
            down_weights={w.template: w.weight for w in plan.template_weights} if plan else {},
            preserved={r.fingerprint for r in plan.preserve} if plan else frozenset(),
        )
        version = state["version"]
        if version is not None:
            with Catalog.open(catalog_path(home)) as catalog:
                catalog.datasets.propose(version)
    return Proposal.of(state)


@dataclass(frozen=True)
class RoundPool:
    """What balancing weighs, read from the catalog: the round's trajectories and the
    items carried into it (ids), and those of them that passed an older verifier and fail
    today's."""

    trajectory_ids: list[str]
    stale: list[Reverification]


def round_pool(home: Path, round_id: str, carried_in: Sequence[str]) -> RoundPool:
    """The round's pool for ``propose_dataset``; only the trajectories verified before the
    collateral check existed are loaded as records (to verify them again)."""
    with gc_paused(), Catalog.open(catalog_path(home), read_only=True) as catalog:
        ids = [tid for tid, _ in catalog.trajectories.fingerprints(round_id)]
        ours = set(ids)
        ids += [tid for tid in carried_in if tid not in ours]
        older = _older(catalog, ids)
    return RoundPool(sorted(ids), stale_successes(older))


def _older(catalog: Catalog, trajectory_ids: Sequence[str]) -> list[Trajectory]:
    """Those of ``trajectory_ids`` verified before the collateral check existed."""
    return catalog.trajectories.by_ids(
        catalog.trajectories.without_collateral_check(trajectory_ids)
    )


def _has_collateral_check(task: TaskSpec) -> bool:
    return any(isinstance(check, CollateralCheck) for check in task.verifier.checks)


def stale_successes(trajectories: Iterable[Trajectory]) -> list[Reverification]:
    """Successes verified before today's verifier (their task has no collateral check)
    that today's verifier fails: they stay stored as they are, and no version takes them."""
    sandbox = MobileSandbox()
    older = [
        t
        for t in trajectories
        if t.verdict.passed
        and not any(isinstance(c, CollateralCheck) for c in t.task.verifier.checks)
    ]
    return [r for r in (reverify(t, sandbox) for t in older) if r.now_fails]


def stored_approval(home: Path, dataset_id: str) -> DatasetApproval | None:
    """A decision made on this exact proposal before (a rerun does not ask again)."""
    with Catalog.open(catalog_path(home), read_only=True) as catalog:
        return catalog.datasets.approval(dataset_id)


def decide_dataset(home: Path, dataset_id: str, approval: DatasetApproval) -> str | None:
    """Store the decision on the proposed version ``dataset_id``; freeze the version when
    approved. Its id, or None."""
    with gc_paused(), Catalog.open(catalog_path(home)) as catalog:
        decided = catalog.datasets.decide(catalog.datasets.proposal(dataset_id), approval)
    return dataset_id if decided.approved else None


def _parent(catalog: Catalog, round_id: str) -> str | None:
    """The newest dataset version of another round: this round's version builds on it."""
    for summary in reversed(catalog.datasets.summaries()):
        if summary.round_id != round_id:
            return summary.id
    return None


class CapabilityRow(BaseModel):
    capability: str
    tasks: int
    trajectories: int
    successes: int
    approved: int
    in_dataset: int


class PeopleWaiting(BaseModel):
    """Items a round's gate left to people, and where they decide them."""

    items: int
    workplace: str | None
    """What the place is called (a Label Studio project); None: not found."""
    url: str | None
    """The link that opens it; None: not found."""
    problem: str | None = None
    """Why the place was not found (its server did not answer)."""

    @classmethod
    def of(cls, items: int, where: Workplace | None, problem: str | None = None) -> PeopleWaiting:
        return cls(
            items=items,
            workplace=where.name if where else None,
            url=where.url if where else None,
            problem=problem,
        )

    @classmethod
    def find(cls, items: int, lookup: Callable[[], Workplace | None]) -> PeopleWaiting:
        """``items`` with the place ``lookup`` finds, or why it found none (the gate's
        service did not answer)."""
        try:
            return cls.of(items, lookup())
        except GateUnavailableError as exc:
            return cls.of(items, None, str(exc))

    def text(self) -> str:
        """What a person should read about them, in a sentence or two."""
        if self.url:
            place = f"in {self.workplace}: {self.url}"
        else:
            place = f"in the gate ({self.problem or 'its place was not found'})"
        return (
            f"{self.items} item(s) wait for people {place}. Decide them there, then run "
            "`flywheel gate sync`: what people approve joins the next round's dataset "
            "version, not this round's."
        )


class RoundSummary(BaseModel):
    round_id: str
    flow_run_id: str | None
    dataset_version: str | None
    approval: dict[str, Any] | None = None
    """Who decided on the proposed version, how and when (None: nothing was proposed)."""
    counts: dict[str, int]
    capabilities: list[CapabilityRow]
    waiting: PeopleWaiting | None = None
    """Items the gate left undecided, carried over (None: none)."""

    def markdown(self) -> str:
        lines = [f"# Round `{self.round_id}`", ""]
        lines.append(f"Dataset version: `{self.dataset_version or 'none'}`")
        if self.approval:
            lines.append(
                f"Proposal {self.approval['decision']}d by {self.approval['approver']} "
                f"at {moment(self.approval['decided_at'])}"
            )
        if self.waiting:
            lines += ["", f"**Waiting for people.** {self.waiting.text()}"]
        lines += ["", "| stage | count |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in self.counts.items()]
        lines += ["", "| capability | tasks | trajectories | successes | approved | in dataset |"]
        lines.append("|---|---|---|---|---|---|")
        lines += [
            f"| {r.capability} | {r.tasks} | {r.trajectories} | {r.successes} | {r.approved} "
            f"| {r.in_dataset} |"
            for r in self.capabilities
        ]
        lines += [
            "",
            "A task exercising several capabilities counts in each of their rows: a column "
            "can add up to more than its total.",
        ]
        return "\n".join(lines)


def summarize(
    home: Path,
    round_id: str,
    flow_run_id: str | None,
    carried_in: Sequence[str],
    *,
    recollected: int = 0,
) -> RoundSummary:
    """Counts per stage and per capability, made by the catalog; marks the round done."""
    with Catalog.open(catalog_path(home)) as catalog:
        dataset_id = _dataset_of(catalog, round_id)
        tally = catalog.rounds.tally(round_id, carried_in, dataset_id)
        approval = _approval_of_round(catalog, round_id, dataset_id)
        counts = {
            "constructed": tally.constructed,
            "recollected": recollected,
            "rejected_tasks": tally.rejected_tasks,
            "collected": tally.collected,
            "backend_errors": tally.backend_errors,
            "curated": tally.curated,
            "approved": tally.approved,
            "rejected": tally.rejected,
            "pending": tally.pending,
            "carried_in": len(carried_in),
            "carried_in_approved": tally.carried_in_approved,
            "in_dataset": tally.in_dataset,
        }
        catalog.rounds.finish(
            round_id, dataset_id=dataset_id, counts=counts, flow_run_id=flow_run_id
        )
    nothing = CapabilityTally(0, 0, 0, 0, 0)
    return RoundSummary(
        round_id=round_id,
        flow_run_id=flow_run_id,
        dataset_version=dataset_id,
        approval=approval,
        counts=counts,
        capabilities=[
            CapabilityRow(
                capability=capability.value,
                **tally.capabilities.get(capability.value, nothing)._asdict(),
            )
            for capability in Capability
        ],
    )


def _approval_of_round(
    catalog: Catalog, round_id: str, dataset_id: str | None
) -> dict[str, Any] | None:
    """The decision on the round's proposal: its frozen version's, or a rejection's."""
    approval = catalog.datasets.approval(dataset_id) if dataset_id else None
    if approval is None:
        approval = catalog.datasets.round_approval(round_id)
    if approval is None:
        return None
    return approval.model_dump(
        mode="json", include={"dataset_id", "decision", "approver", "automatic", "decided_at"}
    )


def _dataset_of(catalog: Catalog, round_id: str) -> str | None:
    for summary in catalog.datasets.summaries():
        if summary.round_id == round_id:
            return summary.id
    return None
