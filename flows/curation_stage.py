"""The curate stage at any size: the round's trajectories in fingerprint partitions
(``curation.partitions``), each loaded from the catalog, curated, written to a file of
its own and let go: spread over a cluster by ``spread`` when one is given
(``flows.execution``: Ray), else in worker processes when there are several partitions
and cores.

A partition's job carries ids and locations, never records: it reads the catalog and
writes its records as a Parquet file of curation rows beside the round's shards (a
folder or an object-storage URL; ``storage.curation_files``), and gives back its
counts. Once every partition is curated (the workers read the catalog until then), the
stage stores the files, one partition per transaction, parsing no record. An
interrupted stage is run again whole: it computes the same records, and storing them
again changes nothing.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
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
from storage.curation_columns import EVERYWHERE, RowSpans
from storage.curation_files import CURATION_FILE_SUFFIX, write_curation_file
from storage.locations import Location, join


@dataclass(frozen=True)
class PartitionJob:
    """What curating one partition needs wherever it runs: the catalog (read only),
    the round, the partition's trajectory ids, the thresholds, where its records go, and
    where its rows lie in the catalog's tables."""

    catalog: Path
    round_id: str
    trajectory_ids: Sequence[str]
    config: CuratorConfig
    records_at: Location
    spans: RowSpans = EVERYWHERE
    """Where the partition's rows lie in the catalog's tables (``curation_spans``)."""


@dataclass(frozen=True)
class PartitionResult:
    """A curated partition: where its records are, how many, how many kept."""

    records_at: Location
    curated: int
    kept: int


@dataclass(frozen=True)
class CurationCounts:
    """What the curate stage stored: records, and those kept (the gate's items)."""

    curated: int
    kept: int


Spread = Callable[[Sequence[PartitionJob]], Iterable[PartitionResult]]
"""Curates each job somewhere, and gives back each one's result."""
MAX_AUTO_WORKERS = 8
TRAJECTORIES_PER_WORKER = 20_000
"""Trajectories a worker process must have to be started by default: one costs about
0.3 GB and 2 s to start (its imports), and curates 20,000 trajectories in about 4 s
of CPU, so a smaller round is curated here (a 20,000-task round in two workers took
0.7 GB more than in this process)."""
PROMPT_BATCH = 2_000
"""Records loaded at a time to render what an LLM judge is shown."""


def curator_config(settings: CurationSettings) -> CuratorConfig:
    """The curator's thresholds from the ``[curation]`` settings."""
    return CuratorConfig(
        approve_quality=settings.approve_quality,
        reject_quality=settings.reject_quality,
        near_duplicate_threshold=settings.near_duplicate_threshold,
        audit_rate=settings.audit_rate,
        simulated_confidence=settings.simulated_confidence,
    )


def partition_path(root: Location, round_id: str, index: int) -> Location:
    """Where the records of a round's partition ``index`` are written, inside ``root``
    (the shards' root)."""
    return join(root, round_id, "curations", f"partition-{index:05d}{CURATION_FILE_SUFFIX}")


def curate_round(
    home: Path,
    round_id: str,
    settings: CurationSettings,
    root: Location,
    llm: JsonLLM | None = None,
    spread: Spread | None = None,
) -> CurationCounts:
    """Curate every trajectory the catalog holds for ``round_id`` and store the records
    (the partitions' files go below ``root``). With an LLM judge every partition is
    curated here (its client stays in this process)."""
    path = catalog_path(home)
    with Catalog.open(path, read_only=True) as catalog:
        partitions = fingerprint_partitions(
            catalog.trajectories.fingerprints(round_id), settings.partition_size
        )
        spans = (
            catalog.trajectories.curation_spans(partitions)
            if len(partitions) > 1
            else [EVERYWHERE] * len(partitions)
        )
    config = curator_config(settings)
    jobs = [
        PartitionJob(path, round_id, ids, config, partition_path(root, round_id, index), span)
        for index, (ids, span) in enumerate(zip(partitions, spans, strict=True))
    ]
    workers = worker_count(
        settings.workers,
        len(jobs),
        judged=llm is not None,
        trajectories=sum(len(job.trajectory_ids) for job in jobs),
    )
    results: list[PartitionResult]
    if spread is not None and llm is None:
        results = list(spread(jobs))
    elif workers <= 1:
        results = [curate_to_file(job, llm) for job in jobs]
    else:
        # spawn, not fork: the flow's process runs threads (Prefect's) that a fork copies
        # mid-flight
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(workers, mp_context=context) as pool:
            results = list(pool.map(curate_to_file, jobs))
    with Catalog.open(path) as catalog:
        for result in results:
            catalog.reviews.add_curation_file(result.records_at)
    return CurationCounts(
        curated=sum(r.curated for r in results), kept=sum(r.kept for r in results)
    )


def curate_to_file(job: PartitionJob, llm: JsonLLM | None = None) -> PartitionResult:
    """Curate ``job``'s partition and write its records where the job says."""
    records = curate_partition(
        job.catalog, job.round_id, job.trajectory_ids, job.config, llm, job.spans
    )
    write_curation_file(records, job.records_at)
    return PartitionResult(job.records_at, len(records), sum(r.kept for r in records))


def curate_partition(
    path: Path,
    round_id: str,
    trajectory_ids: Sequence[str],
    config: CuratorConfig,
    llm: JsonLLM | None = None,
    spans: RowSpans = EVERYWHERE,
) -> list[CurationRecord]:
    """Curate one partition from the catalog's columns (``curation.facts``: no record is
    rebuilt), with the cycle collector paused (the partition's objects live until it is
    done; the collector walking them again and again tripled the curator's time). With
    an LLM judge the records are loaded too, ``PROMPT_BATCH`` at a time (ids unverified:
    the catalog wrote them), and only what the judge is shown of each is kept."""
    with gc_paused():
        with Catalog.open(path, read_only=True) as catalog:
            columns = catalog.trajectories.curation_columns(trajectory_ids, spans)
            facts = facts_from_columns(columns)
            del columns
            prompts: dict[str, str] = {}
            for start in range(0, len(trajectory_ids) if llm is not None else 0, PROMPT_BATCH):
                batch = trajectory_ids[start : start + PROMPT_BATCH]
                loaded = catalog.trajectories.by_ids(batch, verify_ids=False)
                prompts.update((t.id, render_for_judge(t)) for t in loaded)
        return curate_facts(facts, round_id, config, llm, prompts)


def worker_count(setting: int, partitions: int, *, judged: bool, trajectories: int) -> int:
    """Processes to curate with: ``setting``, or by default (0) one per core (at most
    ``MAX_AUTO_WORKERS``) and per ``TRAJECTORIES_PER_WORKER`` of the round; never more
    than there are partitions; one when an LLM judges (its calls wait on the network,
    not on a core, and its client stays in this process)."""
    if judged:
        return 1
    wanted = setting or min(
        os.cpu_count() or 1, MAX_AUTO_WORKERS, trajectories // TRAJECTORIES_PER_WORKER
    )
    return max(1, min(wanted, partitions))
