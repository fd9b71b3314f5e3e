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


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds (user and system, every thread) of the live process ``pid``, from
    ``/proc`` (Linux); 0.0 for a process that has gone or without ``/proc``."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    # after the command: state ppid pgrp session tty tpgid flags minflt cminflt majflt
    # cmajflt utime(11) stime(12)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def session_cpu_seconds(session: int) -> float:
    """CPU seconds of every live process in ``session`` (with their waited-for children),
    from ``/proc`` (Linux); 0.0 where ``/proc`` is missing."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:  # gone meanwhile
            continue
        # after the command: state ppid pgrp session ... utime(12) stime(13) cutime cstime
        if int(fields[3]) == session:
            total += sum(int(v) for v in fields[11:15])
    return total / ticks


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
