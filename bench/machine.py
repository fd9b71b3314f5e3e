"""What the benchmarks share: the cores they may use, CPU time, torch's threads, a work
folder."""

from __future__ import annotations

import os
import resource
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from contract import InvalidInputError


def cores() -> int:
    """The cores this process may use."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def cpu_seconds() -> float:
    """CPU seconds of this process and of its children that were waited for (a worker
    pool's once it has shut down)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@contextmanager
def torch_threads(wanted: int | None) -> Iterator[int]:
    """torch's intra-op threads set to ``wanted`` (default: ``cores()``), then restored
    (torch imported here: the benchmarks without a model do not pay for it)."""
    import torch

    before = torch.get_num_threads()
    threads = wanted if wanted is not None else cores()
    if threads < 1:
        raise InvalidInputError("threads", f"{threads} is below 1")
    torch.set_num_threads(threads)
    try:
        yield threads
    finally:
        torch.set_num_threads(before)


@contextmanager
def work_folder(path: Path | None, prefix: str) -> Iterator[Path]:
    """``path`` (created, kept), else a temporary folder removed afterwards."""
    if path is not None:
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
