"""The stages of a round as plain functions over the catalog (Prefect wraps them).

Each stage opens the catalog only for as long as it reads or writes, so the DuckDB file
is never held while episodes run, and each stage is idempotent: rerunning it after a
crash writes nothing twice.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel

from agents.curator import curate as run_curator
from agents.task_constructor import construct_tasks, what_it_asks
from agents.trajectory_collector import collect_shard
from contract import (
    Capability,
    GenerationPlan,
    MixTarget,
    Outcome,
    ReviewDecision,
    Split,
    TaskSpec,
    Trajectory,
)
from curation.routing import CuratorConfig
from envs.backend import Backend
from envs.sandbox import MobileSandbox
from flows.policies import build_policy
from flows.settings import CurationSettings, FlywheelSettings, catalog_path
from human_gate import GateItem, final_decisions, make_gate
from storage import Catalog
from storage.shards import shard_complete, write_trajectory_shard

if TYPE_CHECKING:
    from flows.round import RoundConfig

STAGES = ("construct", "collect", "curate", "gate", "balance")
APPROVED = frozenset({ReviewDecision.APPROVE, ReviewDecision.CORRECT})


def shard_path(home: Path, round_id: str, shard: str) -> Path:
    return home / "rounds" / round_id / "shards" / f"{shard}.parquet"


def construct(
    home: Path, round_id: str, plan: GenerationPlan, seed: int, *, max_passes: int
) -> int:
    """Fill the plan with validated tasks and store them; returns the round's task count."""
    with Catalog.open(catalog_path(home)) as catalog:
        mine = {t.fingerprint for t in catalog.tasks_of_round(round_id)}
        known = frozenset(catalog.fingerprints() - mine)
        dev = frozenset(catalog.fingerprints(Split.DEV))
        goals = [what_it_asks(t) for t in catalog.tasks_except_round(round_id)]
        construct_tasks(
            round_id,
            plan,
            seed,
            MobileSandbox(),
            store=catalog,
            known_fingerprints=known,
            dev_fingerprints=dev,
            known_goals=goals,
            max_passes=max_passes,
        )
        return len(catalog.tasks_of_round(round_id))


def collect_one_shard(
    home: Path,
    round_id: str,
    shard: str,
    tasks: Sequence[TaskSpec],
    config: RoundConfig,
    settings: FlywheelSettings,
) -> Path:
    """Run one shard and write its Parquet file; a shard already on disk is not rerun."""
    path = shard_path(home, round_id, shard)
    if shard_complete(path):
        return path
    policy = build_policy(config.policy, settings, config.fault_rate, config.recovery_rate)
    devices: dict[int, Backend] = {}

    def lease(attempt: int) -> Backend:
        if attempt not in devices:
            devices[attempt] = MobileSandbox(
                backend_fault_rate=config.backend_fault_rate, device=f"sandbox-{attempt}"
            )
        return devices[attempt]

    path.parent.mkdir(parents=True, exist_ok=True)
    collect_shard(
        round_id,
        tasks,
        lease,
        policy,
        shard_path=path,
        writer=lambda trajectories, p: write_trajectory_shard(trajectories, p, shard=shard),
        max_steps=config.max_steps,
        max_attempts=config.max_backend_attempts,
    )
    return path


def ingest(home: Path, round_id: str, shards: Sequence[Path]) -> int:
    """Ingest the shards in one transaction; returns the round's trajectory count."""
    with Catalog.open(catalog_path(home)) as catalog:
        catalog.ingest_shards(shards)
        return catalog.count_trajectories(round_id)


def curate(home: Path, round_id: str, settings: CurationSettings) -> int:
    """Curate every trajectory of the round; returns how many were kept."""
    with Catalog.open(catalog_path(home), read_only=True) as catalog:
        trajectories = catalog.trajectories_of_round(round_id)
    config = CuratorConfig(
        approve_quality=settings.approve_quality,
        reject_quality=settings.reject_quality,
        near_duplicate_threshold=settings.near_duplicate_threshold,
        audit_rate=settings.audit_rate,
    )
    records = run_curator(trajectories, round_id, config)
    with Catalog.open(catalog_path(home)) as catalog:
        catalog.add_curations(records)
    return sum(r.kept for r in records)


def gate(home: Path, round_id: str, gate_name: str) -> int:
    """Send kept trajectories through the human gate; returns reviews recorded."""
    human_gate = make_gate(gate_name)
    with Catalog.open(catalog_path(home), read_only=True) as catalog:
        by_id = {t.id: t for t in catalog.trajectories_of_round(round_id)}
        items = [
            GateItem(trajectory=by_id[c.trajectory_id], curation=c)
            for c in catalog.curations_of_round(round_id)
            if c.kept
        ]
    human_gate.submit(round_id, items)
    result = human_gate.collect(round_id, items)
    with Catalog.open(catalog_path(home)) as catalog:
        catalog.add_reviews(result.reviews)
    return len(result.reviews)


def balance_and_freeze(home: Path, round_id: str, target: MixTarget) -> str | None:
    """Weigh the approved successes towards the target mix and freeze the version."""
    from agents.balancer import balance

    with Catalog.open(catalog_path(home), read_only=True) as catalog:
        trajectories = catalog.trajectories_of_round(round_id)
        reviews = catalog.reviews_of_round(round_id)
        parent = _parent(catalog, round_id)
    decisions = final_decisions(reviews)
    human = sum(1 for t in trajectories if t.id in decisions and not decisions[t.id].automatic)
    version = balance(
        round_id=round_id,
        parent=parent,
        trajectories=trajectories,
        reviews=reviews,
        target=target,
        human_reviewed=human,
    )
    if version is None:
        return None
    with Catalog.open(catalog_path(home)) as catalog:
        catalog.freeze_dataset(version)
    return version.id


def _parent(catalog: Catalog, round_id: str) -> str | None:
    """The newest dataset version of another round: this round's version builds on it."""
    for summary in sorted(catalog.list_datasets(), key=lambda d: d.created_at, reverse=True):
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


class RoundSummary(BaseModel):
    round_id: str
    flow_run_id: str | None
    dataset_version: str | None
    counts: dict[str, int]
    capabilities: list[CapabilityRow]

    def markdown(self) -> str:
        lines = [f"# Round `{self.round_id}`", ""]
        lines.append(f"Dataset version: `{self.dataset_version or 'none (nothing approved)'}`")
        lines += ["", "| stage | count |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in self.counts.items()]
        lines += ["", "| capability | tasks | trajectories | successes | approved | in dataset |"]
        lines.append("|---|---|---|---|---|---|")
        lines += [
            f"| {r.capability} | {r.tasks} | {r.trajectories} | {r.successes} | {r.approved} "
            f"| {r.in_dataset} |"
            for r in self.capabilities
        ]
        return "\n".join(lines)


def summarize(home: Path, round_id: str, flow_run_id: str | None) -> RoundSummary:
    """Counts per stage and per capability; marks the round done in the catalog."""
    with Catalog.open(catalog_path(home)) as catalog:
        tasks = catalog.tasks_of_round(round_id)
        rejections = catalog.rejections_of_round(round_id)
        trajectories = catalog.trajectories_of_round(round_id)
        curations = catalog.curations_of_round(round_id)
        decisions = final_decisions(catalog.reviews_of_round(round_id))
        round_info = catalog.get_round(round_id)
        dataset_id = _dataset_of(catalog, round_id)
        members = (
            {m.trajectory_id for m in catalog.get_dataset(dataset_id).members}
            if dataset_id
            else set()
        )
        approved = {t for t, r in decisions.items() if r.decision in APPROVED}
        counts = {
            "constructed": len(tasks),
            "rejected_tasks": len(rejections),
            "collected": len(trajectories),
            "backend_errors": sum(
                t.metadata.outcome is Outcome.BACKEND_ERROR for t in trajectories
            ),
            "curated": sum(c.kept for c in curations),
            "approved": len(approved),
            "rejected": sum(r.decision not in APPROVED for r in decisions.values()),
            "in_dataset": len(members),
        }
        rows = _capability_rows(tasks, trajectories, approved, members)
        run_id = flow_run_id or (round_info.flow_run_id if round_info else None)
        catalog.finish_round(round_id, dataset_id=dataset_id, counts=counts, flow_run_id=run_id)
    return RoundSummary(
        round_id=round_id,
        flow_run_id=run_id,
        dataset_version=dataset_id,
        counts=counts,
        capabilities=rows,
    )


def _dataset_of(catalog: Catalog, round_id: str) -> str | None:
    for summary in catalog.list_datasets():
        if summary.round_id == round_id:
            return summary.id
    return None


def _capability_rows(
    tasks: Sequence[TaskSpec],
    runs: Sequence[Trajectory],
    approved: set[str],
    members: set[str],
) -> list[CapabilityRow]:
    task_count = Counter(c for t in tasks for c in t.capabilities)
    rows = []
    for capability in Capability:
        mine = [t for t in runs if capability in t.task.capabilities]
        rows.append(
            CapabilityRow(
                capability=capability.value,
                tasks=task_count[capability],
                trajectories=len(mine),
                successes=sum(t.metadata.outcome is Outcome.SUCCESS for t in mine),
                approved=sum(t.id in approved for t in mine),
                in_dataset=sum(t.id in members for t in mine),
            )
        )
    return rows
