"""Curation, balancing and export of a round at scale: wall time and peak memory.

**Data.** ``bench.synthetic.synthetic_round``: by default 200,000 trajectories (about a
million steps) derived from real scripted sandbox episodes, in a real DuckDB catalog as a
round's collect and ingest stages leave it. Building it is set-up, timed apart.

**Work.** The stages a round runs after ingest, with the round's own functions, in a new
process (so set-up's memory is not counted):

1. curate: ``flows.curation_stage.curate_round``: fingerprint partitions, each loaded
   from its spans of the catalog's rows and curated in worker processes (one per core
   and per 20,000 trajectories), records stored;
2. gate: the automatic gate's reviews (each item's suggested decision), stored;
3. balance: ``flows.round_stages.propose_dataset``: candidates read from the catalog's
   columns, weights raked towards the default target mix;
4. freeze: the automatic approval and the frozen version, stored;
5. export: ``training.export.export_dataset`` as Hugging Face ``datasets`` (``hf``),
   then again as Parquet.

**Figures.** Wall time of each stage (``perf_counter``), items per second, and the peak
resident memory of the process and its workers together: the sum of ``VmRSS`` over the
process tree, sampled every 20 ms by a thread. The aim for stages 1-5 (one export
format, ``hf``) is under 60 s and 4 GB on 2 cores. Figures, never pass or fail.
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TypeVar

from bench.machine import cpu_seconds
from bench.report import BenchReport, json_ready, machine
from bench.synthetic import DEFAULT_TRAJECTORIES, SyntheticRound, synthetic_round
from curation.balance import default_target
from flows.approval import Proposal, automatic_approval
from flows.curation_stage import curate_round
from flows.round_stages import decide_dataset, gate, propose_dataset, round_pool
from flows.settings import CurationSettings, catalog_path
from human_gate.auto import AutoGate
from storage import Catalog
from training.export import ExportFormat, ExportReport, export_dataset

FORMATS: tuple[ExportFormat, ...] = ("hf", "parquet")

ROUND = "round-bench"
AIM_S = 60.0
AIM_BYTES = 4 * 2**30
SAMPLE_S = 0.02

T = TypeVar("T")


@dataclass(frozen=True)
class Stage:
    """One timed stage: its wall time, how many items it handled, and the peak memory
    of the process tree while it ran."""

    name: str
    seconds: float
    cpu_seconds: float
    """CPU time of the process and its workers (process pools shut down in the stage)."""
    items: int
    unit: str
    peak_bytes: int


def run_curation_benchmark(trajectories: int = DEFAULT_TRAJECTORIES, seed: int = 0) -> BenchReport:
    """Build the round, run the stages in a new process, and return the figures."""
    with tempfile.TemporaryDirectory(prefix="flywheel-bench-curation-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        data = synthetic_round(catalog_path(home), ROUND, trajectories, seed, Path(tmp) / "work")
        stages = _in_new_process(home, Path(tmp) / "export")
    return report(data, stages)


def _in_new_process(home: Path, out: Path) -> list[Stage]:
    """``run_stages`` in a new (non-daemonic: it starts curation workers) process."""
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_run_and_send, args=(home, out, send))
    child.start()
    send.close()
    try:
        result: list[Stage] | str = receive.recv()
    except EOFError:
        child.join()
        result = f"the benchmark process died (exit code {child.exitcode})"
    child.join()
    if isinstance(result, str):
        raise RuntimeError(result)
    return result


def _run_and_send(home: Path, out: Path, send: Connection) -> None:
    try:
        send.send(run_stages(home, out))
    except Exception:
        send.send(traceback.format_exc())
    finally:
        send.close()


def run_stages(home: Path, out: Path) -> list[Stage]:
    """Curate, gate, balance, freeze and export the round in ``home``, timed."""
    stages: list[Stage] = []
    with _peak_memory() as peak:

        def timed(name: str, unit: str, count: Callable[[T], int], fn: Callable[[], T]) -> T:
            peak.reset()
            started, cpu = time.perf_counter(), cpu_seconds()
            result = fn()
            seconds, cpu = time.perf_counter() - started, cpu_seconds() - cpu
            peak.sample()
            stages.append(Stage(name, seconds, cpu, count(result), unit, peak.value))
            return result

        settings = CurationSettings()
        timed(
            "curate",
            "trajectories",
            lambda counts: counts.curated,
            lambda: curate_round(home, ROUND, settings, home / "rounds"),
        )

        def reviews_stored(_: object) -> int:
            with Catalog.open(catalog_path(home), read_only=True) as catalog:
                return len(catalog.reviews.of_round(ROUND))

        timed("gate (automatic)", "reviews", reviews_stored, lambda: gate(home, ROUND, AutoGate()))
        reviewed = stages[-1].items

        def balance() -> Proposal | None:
            pool = round_pool(home, ROUND, [])
            stale = [r.trajectory_id for r in pool.stale]
            return propose_dataset(home, ROUND, pool.trajectory_ids, default_target(), None, stale)

        proposal = timed("balance", "candidates", lambda _: reviewed, balance)
        if proposal is None:
            raise RuntimeError("nothing was approved: no dataset to freeze and export")
        version = proposal.version
        timed(
            "freeze",
            "members",
            lambda _: version.members,
            lambda: decide_dataset(home, version.id, automatic_approval(version, None)),
        )
        for fmt in FORMATS:

            def export(fmt: ExportFormat = fmt) -> ExportReport:
                with Catalog.open(catalog_path(home), read_only=True) as catalog:
                    return export_dataset(catalog, version.id, out / fmt, fmt)

            timed(f"export ({fmt})", "members", lambda r: r.sft_rows, export)
    return stages


def report(data: SyntheticRound, stages: list[Stage]) -> BenchReport:
    """The figures, and as text."""
    pipeline = [s for s in stages if s.name != "export (parquet)"]
    total = sum(s.seconds for s in pipeline)
    cpu = sum(s.cpu_seconds for s in pipeline)
    peak = max(s.peak_bytes for s in pipeline)
    lines = [
        f"curation benchmark: {data.trajectories:,} trajectories, {data.steps:,} steps, "
        f"{data.tasks:,} tasks (seed {data.seed}); {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f}",
        f"  set-up (untimed): generate {data.generate_s:.1f} s, write shards "
        f"{data.write_s:.1f} s, ingest {data.ingest_s:.1f} s",
    ]
    for s in stages:
        rate = s.items / s.seconds if s.seconds > 0 else float("inf")
        lines.append(
            f"  {s.name:18s}{s.seconds:9.2f} s  CPU {s.cpu_seconds:7.2f} s "
            f"{rate:12,.0f} {s.unit}/s   peak {s.peak_bytes / 2**30:5.2f} GB"
        )
    lines += [
        f"  curate → export (hf): {total:.1f} s (CPU {cpu:.1f} s), peak {peak / 2**30:.2f} GB; "
        f"aim {AIM_S:.0f} s and {AIM_BYTES / 2**30:.0f} GB: "
        f"{total / AIM_S:.2f}x the time, {peak / AIM_BYTES:.2f}x the memory",
        f"  ({data.trajectories / total:,.0f} trajectories/s end to end; "
        "peak = resident memory of the process and its curation workers together)",
    ]
    synthetic = {k: v for k, v in json_ready(data).items() if k != "catalog_path"}
    figures = {
        "round": synthetic,  # its catalog was a temporary folder's
        "stages": stages,
        "curate_to_export_hf": {"wall_s": total, "cpu_s": cpu, "peak_bytes": peak},
        "aim": {"wall_s": AIM_S, "peak_bytes": AIM_BYTES},
        "machine": machine(),
    }
    return BenchReport(json_ready(figures), "\n".join(lines))


class _Peak:
    """The largest process-tree RSS seen since the last ``reset`` (the sampling thread
    and the stages update it under one lock, so a reset is never overwritten by a sample
    taken before it)."""

    def __init__(self) -> None:
        self.value = 0
        self.lock = threading.Lock()

    def reset(self) -> None:
        with self.lock:
            self.value = tree_rss(os.getpid())

    def sample(self) -> None:
        with self.lock:
            self.value = max(self.value, tree_rss(os.getpid()))


@contextmanager
def _peak_memory() -> Iterator[_Peak]:
    peak = _Peak()
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(SAMPLE_S):
            peak.sample()

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        stop.set()
        thread.join()


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and its descendants (Linux ``/proc``); 0 for a process
    that has gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        children = [
            int(child)
            for task in Path(f"/proc/{pid}/task").iterdir()
            for child in (task / "children").read_text().split()
        ]
    except (FileNotFoundError, ProcessLookupError):
        return 0
    rss = next((line for line in status.splitlines() if line.startswith("VmRSS:")), None)
    own = int(rss.split()[1]) * 1024 if rss is not None else 0
    return own + sum(tree_rss(child) for child in children)
