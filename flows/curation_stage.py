"""The curate stage at any size: the round's trajectories in fingerprint partitions
(``curation.partitions``), each loaded from the catalog, curated and let go: spread over
a cluster by ``spread`` when one is given (``flows.execution``: Ray), else in worker
processes when there are several partitions and cores.

Workers only read the catalog; the records come back to the stage, which stores them
all in one transaction, so an interrupted stage leaves nothing half-stored and a rerun
computes the same records.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from agents.curator import curate_facts, render_for_judge
from agents.llm import JsonLLM
from contract import CurationRecord
from curation.facts import facts_from_columns
from curation.partitions import fingerprint_partitions
from curation.routing import CuratorConfig
from flows.settings import CurationSettings, catalog_path
from storage import Catalog
from storage.bulk import gc_paused

PartitionJob = tuple[Path, str, Sequence[str], CuratorConfig]
"""``curate_partition``'s arguments: the catalog, the round, the partition's ids, the
thresholds (what a worker elsewhere needs; it reads the catalog itself)."""
Spread = Callable[[Sequence[PartitionJob]], Iterable[list[CurationRecord]]]
"""Curates each job somewhere, and gives back each one's records."""
MAX_AUTO_WORKERS = 8
PROMPT_BATCH = 2_000
"""Records loaded at a time to render what an LLM judge is shown."""


def curator_config(settings: CurationSettings) -> CuratorConfig:
    """The curator's thresholds from the ``[curation]`` settings."""
    return CuratorConfig(
        approve_quality=settings.approve_quality,
        reject_quality=settings.reject_quality,
        near_duplicate_threshold=settings.near_duplicate_threshold,
        audit_rate=settings.audit_rate,
    )


def curate_round(
    home: Path,
    round_id: str,
    settings: CurationSettings,
    llm: JsonLLM | None = None,
    spread: Spread | None = None,
) -> list[CurationRecord]:
    """Curate every trajectory the catalog holds for ``round_id``, store the records,
    and return them sorted by trajectory id (what curating all at once gives). With an
    LLM judge every partition is curated here (its client stays in this process)."""
    path = catalog_path(home)
    with Catalog.open(path, read_only=True) as catalog:
        pairs = catalog.trajectories.fingerprints(round_id)
    partitions = fingerprint_partitions(pairs, settings.partition_size)
    config = curator_config(settings)
    workers = worker_count(settings.workers, len(partitions), judged=llm is not None)
    records: list[CurationRecord] = []
    if spread is not None and llm is None:
        for chunk in spread([(path, round_id, ids, config) for ids in partitions]):
            records += chunk
    elif workers <= 1:
        for ids in partitions:
            records += curate_partition(path, round_id, ids, config, llm)
    else:
        # spawn, not fork: the flow's process runs threads (Prefect's) that a fork copies
        # mid-flight
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(workers, mp_context=context) as pool:
            chunks = pool.map(
                curate_partition,
                [path] * len(partitions),
                [round_id] * len(partitions),
                partitions,
                [config] * len(partitions),
            )
            for chunk in chunks:
                records += chunk
    records.sort(key=lambda r: r.trajectory_id)
    with Catalog.open(path) as catalog:
        catalog.reviews.add_curations(records)
    return records


def curate_partition(
    path: Path,
    round_id: str,
    trajectory_ids: Sequence[str],
    config: CuratorConfig,
    llm: JsonLLM | None = None,
) -> list[CurationRecord]:
    """Curate one partition from the catalog's columns (``curation.facts``: no record is
    rebuilt), with the cycle collector paused (the partition's objects live until it is
    done; the collector walking them again and again tripled the curator's time). With
    an LLM judge the records are loaded too, ``PROMPT_BATCH`` at a time (ids unverified:
    the catalog wrote them), and only what the judge is shown of each is kept."""
    with gc_paused():
        with Catalog.open(path, read_only=True) as catalog:
            facts = facts_from_columns(catalog.trajectories.curation_columns(trajectory_ids))
            prompts: dict[str, str] = {}
            for start in range(0, len(trajectory_ids) if llm is not None else 0, PROMPT_BATCH):
                batch = trajectory_ids[start : start + PROMPT_BATCH]
                loaded = catalog.trajectories.by_ids(batch, verify_ids=False)
                prompts.update((t.id, render_for_judge(t)) for t in loaded)
        return curate_facts(facts, round_id, config, llm, prompts)


def worker_count(setting: int, partitions: int, *, judged: bool) -> int:
    """Processes to curate with: ``setting`` (0: one per core, at most
    ``MAX_AUTO_WORKERS``), never more than there are partitions; one when an LLM judges
    (its calls wait on the network, not on a core, and its client stays in this process)."""
    if judged:
        return 1
    wanted = setting or min(os.cpu_count() or 1, MAX_AUTO_WORKERS)
    return max(1, min(wanted, partitions))
