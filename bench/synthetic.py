"""Synthetic rounds: a catalog holding what a large round's collect and ingest stages
leave, for benchmarks of curation, balancing and export.

**Pool.** ``POOL_TASKS`` tasks drawn by ``sample_tasks`` under the task constructor's
rules (train split, one task per fingerprint), each collected ``MAX_ATTEMPTS`` times: real
scripted episodes (fault rate 0.3, recovery 0.5) on a sandbox failing 2% of tool calls
(the round defaults), attempt ``k`` on device ``sandbox-k`` with a fault draw of its own
(the scripted policy draws from the task id; here from the id and the attempt). A round's
collector only retries after a backend fault; here every task may have several attempts.

**Tasks.** A synthetic task is a pool task in a renamed world. Every entity id (``c-4``,
``ev-12``: the prefixes the sandbox's worlds use) in the task and its episodes is renamed,
``c-4`` to ``c-<w>0004`` for the task's world number ``w``, and the world gets a new seed.
Ids are opaque labels, so the task, its steps and the verifier's evidence (matched ids,
state changes) stay consistent: support, attribution, quality and routing are those of
the pool episode. The parameters name entities, so the fingerprint is new: one
fingerprint per task, as the constructor guarantees within a round. A pool task whose
parameters name no entity (brightness, a timer, ...) has no new task to become: it is
used once, as itself, so those templates all but vanish, as they would from a real round
this large. Pool tasks are drawn with weight ``len(reference_plan) ** LENGTH_BIAS`` (the
even mix averages 3.1 steps an episode); a task has 1 to 4 attempts
(``ATTEMPT_WEIGHTS``): its pool task's first episodes.

**Shape** at 200,000 trajectories (seed 0): 1,017,795 steps (5.1 a trajectory), 93,213
tasks and as many fingerprints, 47 templates (79% of trajectories hard, 20% medium);
78% succeed, 14% fail, 8% end in a backend error. Duplicates are what collection yields:
attempts that drew no fault repeat the same actions (27.5% exact duplicates: same task,
same actions), a recovered redundant or looping call collapses to the shingles of a clean
attempt (2.7% near duplicates, Jaccard similarity 1); :class:`SyntheticRound` counts both.
On 2,000 trajectories, the curator routes these as it routes real episodes of the same
templates and attempts (auto-approve / auto-reject / a person: 1.1 / 51.6 / 47.2% against
1.3 / 52.1 / 46.6%).

**Storage.** Shards of about ``SHARD_TRAJECTORIES`` trajectories (whole tasks, rows in
(task id, attempt) order, as the collector writes them), then one ingest. Rows are the
pool's rows (``storage.rows``) renamed, ids are hashed from canonical JSON assembled from
the renamed pieces: building 200,000 ``Trajectory`` objects would take minutes. A task
used as itself must hash to its real ids, which checks the assembly on every run.
``objects=True`` builds the objects instead and writes them with
``write_trajectory_shard`` after ``TaskStore.add``; the tests check both give the same
catalog (the fast path lets ingest add the tasks from the shards: the same rows). About
90 s and 1.1 GB peak memory for 200,000 on 2 cores. Everything follows from ``seed``.
"""

from __future__ import annotations

import gc
import hashlib
import random
import re
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from agents.policies.base import PolicySession, TaskView
from agents.policies.scripted import FaultConfig, ScriptedPolicy
from agents.runner import run_episode
from contract import (
    PolicyInfo,
    Split,
    TaskSpec,
    Trajectory,
    content_hash,
    task_fingerprint,
)
from curation.dedup import action_shingles, action_tokens
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.base import TaskTemplate
from envs.sandbox.templates.catalog import sample_tasks, split_of, template_named
from storage import Catalog, write_trajectory_shard
from storage.files import write_atomically
from storage.rows import SHARD_SCHEMA, TASK_SCHEMA, json_text, step_rows, trajectory_row
from storage.shards import _META_KEY, SHARD_FORMAT

DEFAULT_TRAJECTORIES = 200_000
POOL_TASKS = 2000
SAMPLE_CHUNK = 50
"""Pool tasks drawn at a time, then collected while the sandbox caches their worlds."""
MAX_ATTEMPTS = 4
ATTEMPT_WEIGHTS = (35, 30, 20, 15)
"""Relative frequency of tasks with 1, 2, 3 and 4 attempts (2.15 on average)."""
LENGTH_BIAS = 2.0
FAULT_RATE = 0.3
BACKEND_FAULT_RATE = 0.02
MAX_STEPS = 15
SHARD_TRAJECTORIES = 2000
ID_DIGITS = 4
"""A renamed id is the world number followed by the old number in this many digits."""

_SEP = "\x00"
_STEP_TEXTS = ("action", "feedback", "model_output", "observation", "target")
"""The step row columns that may name entities."""


@dataclass(frozen=True)
class SyntheticRound:
    """What :func:`synthetic_round` stored, and how long it took."""

    catalog_path: Path
    round_id: str
    seed: int
    trajectories: int
    steps: int
    tasks: int
    fingerprints: int
    templates: int
    exact_duplicates: int
    """Trajectories with the fingerprint, outcome and actions of an earlier one."""
    near_duplicates: int
    """Others whose collapsed action shingles equal an earlier one's (same fingerprint
    and outcome): the curator flags at least these."""
    outcomes: Mapping[str, int]
    shards: int
    pool_episodes: int
    generate_s: float
    """Collecting the pool's episodes and deriving the synthetic rows."""
    pool_s: float
    """The pool's part of ``generate_s``."""
    write_s: float
    ingest_s: float


# -- the pool ---------------------------------------------------------------------------


class _Reseeded:
    """The scripted policy with a fault draw of its own per attempt."""

    def __init__(self, policy: ScriptedPolicy, attempt: int) -> None:
        self._policy = policy
        self._attempt = attempt

    @property
    def info(self) -> PolicyInfo:
        return self._policy.info

    def start(self, task: TaskSpec, view: TaskView) -> PolicySession:
        # The scripted policy seeds its fault draw with the task id and reads nothing
        # else of it but the reference plan: an unvalidated copy carries the attempt.
        tagged = task.model_copy(update={"id": f"{task.id}:attempt-{self._attempt}"})
        return self._policy.start(tagged, view)


def _id_pattern(sandbox: MobileSandbox) -> re.Pattern[str]:
    """Entity ids as the sandbox's worlds name them (``c-4``, ``ev-12``, ...)."""
    prefixes = set()
    for rows in sandbox.build_world(0).values():
        for row_id in rows:
            found = re.fullmatch(r"([a-z]+)-\d+", row_id)
            if found:
                prefixes.add(found.group(1))
    alternatives = "|".join(sorted(prefixes, key=lambda p: (-len(p), p)))
    return re.compile(rf"\b((?:{alternatives})-\d+)\b")


@dataclass(frozen=True)
class _Cut:
    """A text cut at its entity ids: ``literals`` and ``ids`` alternate."""

    literals: tuple[str, ...]
    ids: tuple[str, ...]

    @classmethod
    def of(cls, text: str, pattern: re.Pattern[str]) -> _Cut:
        parts = pattern.split(text)
        return cls(tuple(parts[0::2]), tuple(parts[1::2]))

    def keys_an_id(self) -> bool:
        """Whether an id is a JSON object key."""
        pairs = zip(self.literals, self.literals[1:], strict=False)
        return any(before.endswith('"') and after.startswith('":') for before, after in pairs)

    def fill(self, names: Mapping[str, str]) -> str:
        if not self.ids:
            return self.literals[0]
        out = [self.literals[0]]
        for ident, literal in zip(self.ids, self.literals[1:], strict=True):
            out += (names.get(ident, ident), literal)
        return "".join(out)


@dataclass(frozen=True)
class _Episode:
    """One pool episode as rows, with the parts that name entities cut out."""

    metadata: dict[str, Any]
    cost: str
    row: dict[str, Any]
    steps: list[dict[str, Any]]
    texts: _Cut
    """``_SEP``-joined: the steps' and the verdict's JSON, the verdict checks column, then
    ``_STEP_TEXTS`` and the action token of every step."""
    renamable: bool
    """No entity id where renaming does not reach (metadata, cost, other columns)."""


@dataclass(frozen=True)
class _PoolTask:
    """A pool task, its spec cut at its entity ids, and its episodes."""

    task: TaskSpec
    text: _Cut
    """The spec's JSON without id, fingerprint and split."""
    episodes: tuple[_Episode, ...]
    ids: tuple[str, ...]
    """Every entity id its spec and episodes name, sorted."""
    renamable: bool
    """Its parameters name an entity: renaming makes a new task."""


def _episode(trajectory: Trajectory, pattern: re.Pattern[str]) -> _Episode:
    dump = trajectory.model_dump(mode="json")
    row = trajectory_row(trajectory, None)
    steps = step_rows(trajectory)
    texts = [json_text(dump["steps"]), json_text(dump["verdict"]), row["checks"]]
    for step, token in zip(steps, action_tokens(trajectory.steps), strict=True):
        texts += [step[name] or "" for name in _STEP_TEXTS]
        texts.append(token)
    if any(_SEP in text for text in texts):
        raise ValueError(f"episode {trajectory.id} holds the separator {_SEP!r}")
    fixed = [str({k: v for k, v in row.items() if k not in ("id", "task_id", "checks")})]
    fixed += [str({k: v for k, v in step.items() if k not in _STEP_TEXTS}) for step in steps]
    return _Episode(
        metadata=dump["metadata"],
        cost=json_text(dump["cost"]),
        row=row,
        steps=steps,
        texts=_Cut.of(_SEP.join(texts), pattern),
        renamable=not any(pattern.search(text) for text in fixed),
    )


def _pool_task(
    task: TaskSpec, trajectories: Sequence[Trajectory], pattern: re.Pattern[str]
) -> _PoolTask:
    spec = task.model_dump(mode="json", exclude={"id", "fingerprint", "split"})
    text = _Cut.of(json_text(spec), pattern)
    episodes = tuple(_episode(t, pattern) for t in trajectories)
    cuts = (text, *(e.texts for e in episodes))
    ids = sorted({i for cut in cuts for i in cut.ids})
    return _PoolTask(
        task=task,
        text=text,
        episodes=episodes,
        ids=tuple(ids),
        renamable=bool(pattern.search(json_text(spec["params"])))
        and all(e.renamable for e in episodes)
        # an id as an object key could change the canonical key order once renamed
        and not any(cut.keys_an_id() for cut in cuts)
        and all(len(i.rsplit("-", 1)[1]) <= ID_DIGITS for i in ids),
    )


def _collect_pool(
    n_tasks: int, seed: int, round_id: str, pattern: re.Pattern[str]
) -> list[_PoolTask]:
    """``n_tasks`` train tasks (one per fingerprint), each collected ``MAX_ATTEMPTS`` times."""
    sandbox = MobileSandbox(backend_fault_rate=BACKEND_FAULT_RATE)
    policy = ScriptedPolicy(FaultConfig(rate=FAULT_RATE))
    attempts = [_Reseeded(policy, k) for k in range(MAX_ATTEMPTS)]
    seen: set[str] = set()
    pool: list[_PoolTask] = []
    chunk = 0
    while len(pool) < n_tasks:
        size = min(SAMPLE_CHUNK, n_tasks - len(pool))
        for task in sample_tasks(size, seed * 1_000_003 + chunk, sandbox, split=Split.TRAIN):
            if task.fingerprint in seen:
                continue
            seen.add(task.fingerprint)
            episodes = []
            for k, attempt in enumerate(attempts):
                # one sandbox keeps the chunk's worlds cached; the device names the
                # attempt's instance, as the collector's leases do
                sandbox.device = f"sandbox-{k}"
                episodes.append(
                    run_episode(
                        task, sandbox, attempt, max_steps=MAX_STEPS, round_id=round_id, attempt=k
                    )
                )
            pool.append(_pool_task(task, episodes, pattern))
        chunk += 1
    return pool


# -- synthetic tasks --------------------------------------------------------------------

_TRAJECTORY_KEYS = sorted(set(Trajectory.model_fields) - {"id"})
"""The keys of a trajectory's canonical JSON, in order (its id is not hashed)."""
_STEP_WIDTH = len(_STEP_TEXTS) + 1
_TEMPLATES: dict[str, TaskTemplate] = {}


@dataclass(frozen=True)
class _Task:
    """One synthetic task: its ``tasks`` row and its trajectories' shard rows."""

    row: dict[str, Any]
    trajectories: list[dict[str, Any]]
    canonical: list[str]
    """Each trajectory's canonical JSON without its id (what the objects path builds)."""
    exact_duplicates: int
    near_duplicates: int


def _renamed(ident: str, world: int) -> str:
    """``c-4`` in world 12: ``c-120004`` (one-to-one within a world, new across worlds)."""
    prefix, number = ident.rsplit("-", 1)
    return f"{prefix}-{world}{int(number):0{ID_DIGITS}d}"


def _digest(text: str) -> str:
    """``content_hash`` of data whose canonical JSON is ``text``."""
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _spec(pool: _PoolTask, names: Mapping[str, str], seed: int | None) -> dict[str, Any]:
    """The spec as JSON data, renamed and reseeded, with its fingerprint, split and id."""
    spec: dict[str, Any] = orjson.loads(pool.text.fill(names))
    if seed is not None:
        spec["initial_conditions"]["seed"] = seed
    template = spec["template"]
    if template not in _TEMPLATES:
        _TEMPLATES[template] = template_named(template)
    spec["fingerprint"] = task_fingerprint(template, spec["params"], spec["goal"])
    spec["split"] = split_of(_TEMPLATES[template], spec["fingerprint"]).value
    spec["id"] = f"{TaskSpec.id_prefix}-{content_hash(spec)}"
    return spec


def _task(pool: _PoolTask, spec: dict[str, Any], names: Mapping[str, str], attempts: int) -> _Task:
    """The rows of ``spec``'s first ``attempts`` episodes, renamed by ``names``."""
    spec_text = json_text(spec)
    rows: list[dict[str, Any]] = []
    canonical: list[str] = []
    seen: set[tuple[str | None, ...]] = set()
    shingled: set[tuple[str, frozenset[str]]] = set()
    duplicates = near_duplicates = 0
    for episode in pool.episodes[:attempts]:
        parts = episode.texts.fill(names).split(_SEP)
        metadata = json_text(episode.metadata | {"seed": spec["initial_conditions"]["seed"]})
        pieces = {
            "cost": episode.cost,
            "metadata": metadata,
            "steps": parts[0],
            "task": spec_text,
            "verdict": parts[1],
        }
        text = "{" + ",".join(f'"{key}":{pieces[key]}' for key in _TRAJECTORY_KEYS) + "}"
        steps = []
        tokens = []
        for i, step in enumerate(episode.steps):
            values = parts[3 + i * _STEP_WIDTH : 3 + (i + 1) * _STEP_WIDTH]
            renamed = {
                name: value
                for name, value in zip(_STEP_TEXTS, values, strict=False)
                if step[name] is not None
            }
            steps.append(step | renamed)
            tokens.append(values[-1])
        row = episode.row | {
            "id": f"{Trajectory.id_prefix}-{_digest(text)}",
            "task_id": spec["id"],
            "seed": spec["initial_conditions"]["seed"],
            "metadata": metadata,
            "checks": parts[2],
            "steps": steps,
        }
        if not names and row["id"] != episode.row["id"]:
            raise RuntimeError(
                "the canonical JSON assembled here no longer hashes to the contract's id "
                f"({row['id']} != {episode.row['id']}): update bench.synthetic"
            )
        rows.append(row)
        canonical.append(text)
        # as curation.dedup: exact by actions, near by collapsed action shingles
        key = (row["outcome"], *(step["action"] for step in steps))
        shingles = (row["outcome"], frozenset(action_shingles(tokens)))
        if key in seen:
            duplicates += 1
        elif shingles in shingled:
            near_duplicates += 1
        seen.add(key)
        shingled.add(shingles)
    task_row = {name: spec[name] for name in TASK_SCHEMA.names if name in spec}
    task_row |= {"round_id": pool.episodes[0].row["round_id"], "spec": spec_text}
    return _Task(task_row, rows, canonical, duplicates, near_duplicates)


def _tasks(pool: Sequence[_PoolTask], trajectories: int, seed: int) -> Iterator[_Task]:
    """Synthetic tasks until they hold ``trajectories`` trajectories."""
    rng = random.Random(f"synthetic-round:{seed}")
    cum_weights = list(accumulate(len(p.task.reference_plan) ** LENGTH_BIAS for p in pool))
    sizes = range(1, MAX_ATTEMPTS + 1)
    renamable = any(p.renamable for p in pool)
    used: set[int] = set()
    world = 0
    left = trajectories
    while left > 0:
        [index] = rng.choices(range(len(pool)), cum_weights=cum_weights)
        [attempts] = rng.choices(sizes, weights=ATTEMPT_WEIGHTS)
        source = pool[index]
        if source.renamable:
            world_seed = rng.randrange(2**31)
            while True:  # the constructor refuses development fingerprints
                world += 1
                names = {i: _renamed(i, world) for i in source.ids}
                spec = _spec(source, names, world_seed)
                if spec["split"] == Split.TRAIN.value:
                    break
        elif index not in used:
            used.add(index)
            names = {}
            spec = _spec(source, names, None)
        elif renamable or len(used) < len(pool):
            continue
        else:
            raise ValueError(f"a pool of {len(pool)} unrenamable tasks holds too few trajectories")
        attempts = min(attempts, left)
        left -= attempts
        yield _task(source, spec, names, attempts)


def _batches(tasks: Iterator[_Task], size: int) -> Iterator[list[_Task]]:
    """Tasks in shards of about ``size`` trajectories (whole tasks)."""
    batch: list[_Task] = []
    count = 0
    for task in tasks:
        batch.append(task)
        count += len(task.trajectories)
        if count >= size:
            yield batch
            batch, count = [], 0
    if batch:
        yield batch


# -- shards and the catalog -------------------------------------------------------------


def _write_rows(tasks: Sequence[_Task], path: Path, shard: str, round_id: str) -> None:
    """The shard ``write_trajectory_shard`` writes for these tasks, from their rows."""
    rows = []
    for task in sorted(tasks, key=lambda t: str(t.row["id"])):
        for i, row in enumerate(task.trajectories):
            rows.append(row | {"shard": shard, "task": task.row if i == 0 else None})
    meta = {
        "format": SHARD_FORMAT,
        "shard": shard,
        "trajectories": len(rows),
        "steps": sum(len(row["steps"]) for row in rows),
        "tasks": len(tasks),
        "round_id": round_id,
    }
    schema = SHARD_SCHEMA.with_metadata({_META_KEY: orjson.dumps(meta)})
    table = pa.Table.from_pylist(rows, schema=schema)
    write_atomically(path, lambda sink: pq.write_table(table, sink, compression="zstd"))


def _write_objects(tasks: Sequence[_Task], path: Path, shard: str) -> list[TaskSpec]:
    """Build the tasks' specs and trajectories (their ids computed by the contract) and
    write them with ``write_trajectory_shard``; the specs."""
    specs = []
    trajectories = []
    for task in sorted(tasks, key=lambda t: str(t.row["id"])):
        spec = TaskSpec.model_validate_json(task.row["spec"])
        specs.append(spec)
        for text in task.canonical:
            trajectories.append(Trajectory.model_validate(orjson.loads(text) | {"task": spec}))
    write_trajectory_shard(trajectories, path, shard=shard)
    return specs


@dataclass
class _Written:
    """The shards written, what they hold and how long it took."""

    paths: list[Path] = field(default_factory=list)
    specs: list[TaskSpec] = field(default_factory=list)
    """The tasks' specs (objects path only)."""
    tasks: int = 0
    steps: int = 0
    exact_duplicates: int = 0
    near_duplicates: int = 0
    fingerprints: set[str] = field(default_factory=set)
    templates: set[str] = field(default_factory=set)
    outcomes: Counter[str] = field(default_factory=Counter)
    generate_s: float = 0.0
    write_s: float = 0.0

    def count(self, batch: Sequence[_Task]) -> None:
        self.tasks += len(batch)
        for task in batch:
            self.fingerprints.add(task.row["fingerprint"])
            self.templates.add(task.row["template"])
            self.exact_duplicates += task.exact_duplicates
            self.near_duplicates += task.near_duplicates
            for row in task.trajectories:
                self.steps += len(row["steps"])
                self.outcomes[row["outcome"]] += 1


def _write_shards(
    pool: Sequence[_PoolTask],
    trajectories: int,
    seed: int,
    round_id: str,
    folder: Path,
    objects: bool,
) -> _Written:
    """Derive the tasks and write them shard by shard."""
    written = _Written()
    batches = _batches(_tasks(pool, trajectories, seed), SHARD_TRAJECTORIES)
    while True:
        start = time.perf_counter()
        batch = next(batches, None)
        written.generate_s += time.perf_counter() - start
        if batch is None:
            return written
        start = time.perf_counter()
        shard = f"shard-{len(written.paths):05d}"
        path = folder / f"{shard}.parquet"
        if objects:
            written.specs += _write_objects(batch, path, shard)
        else:
            _write_rows(batch, path, shard, round_id)
        written.paths.append(path)
        written.write_s += time.perf_counter() - start
        written.count(batch)


def default_pool_tasks(trajectories: int) -> int:
    """``POOL_TASKS``, fewer for small rounds (about ten trajectories per pool task)."""
    return min(POOL_TASKS, max(50, trajectories // 10))


def synthetic_round(
    catalog_path: Path,
    round_id: str = "round-bench",
    trajectories: int = DEFAULT_TRAJECTORIES,
    seed: int = 0,
    workdir: Path | None = None,
    *,
    pool_tasks: int | None = None,
    objects: bool = False,
) -> SyntheticRound:
    """Create a catalog at ``catalog_path`` holding round ``round_id`` as its collect
    stage leaves it: ``trajectories`` trajectories, ingested (see the module docstring).

    Shards are written to ``workdir`` (default: a temporary folder, removed afterwards).
    ``pool_tasks`` defaults to :func:`default_pool_tasks`. ``objects``: build the
    ``Trajectory`` objects and write them with ``write_trajectory_shard`` (slow: the
    reference the fast path is tested against).
    """
    if trajectories < 1:
        raise ValueError(f"trajectories must be >= 1, got {trajectories}")
    catalog_path = Path(catalog_path)
    if catalog_path.exists():
        raise FileExistsError(f"{catalog_path} exists: a synthetic round needs a new catalog")
    start = time.perf_counter()
    pattern = _id_pattern(MobileSandbox())
    pool = _collect_pool(pool_tasks or default_pool_tasks(trajectories), seed, round_id, pattern)
    pool_s = time.perf_counter() - start
    folder = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="synthetic-"))
    freeze = gc.get_freeze_count() == 0  # the pool lives throughout: don't rescan it
    if freeze:
        gc.freeze()
    try:
        written = _write_shards(pool, trajectories, seed, round_id, folder, objects)
        catalog = Catalog.open(catalog_path)
        catalog.rounds.begin(round_id, {"max_steps": MAX_STEPS})
        if objects:
            catalog.tasks.add(round_id, written.specs)
        start = time.perf_counter()
        report = catalog.trajectories.ingest(written.paths)
        ingest_s = time.perf_counter() - start
        catalog.rounds.set_stage(round_id, "collect")
    finally:
        if freeze:
            gc.unfreeze()
        if workdir is None:
            shutil.rmtree(folder, ignore_errors=True)
    if (report.trajectories, report.steps) != (trajectories, written.steps):
        raise RuntimeError(f"ingest stored {report}: expected {trajectories} trajectories")
    return SyntheticRound(
        catalog_path=catalog_path,
        round_id=round_id,
        seed=seed,
        trajectories=trajectories,
        steps=written.steps,
        tasks=written.tasks,
        fingerprints=len(written.fingerprints),
        templates=len(written.templates),
        exact_duplicates=written.exact_duplicates,
        near_duplicates=written.near_duplicates,
        outcomes=dict(written.outcomes),
        shards=len(written.paths),
        pool_episodes=sum(len(p.episodes) for p in pool),
        generate_s=pool_s + written.generate_s,
        pool_s=pool_s,
        write_s=written.write_s,
        ingest_s=ingest_s,
    )
