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


_VECTOR_UNITS = {"avx512f": "AVX-512", "amx_tile": "AMX"}
"""The ``/proc/cpuinfo`` flags that change which kernels torch's CPU backend runs, and so
the last bits of its float sums: a trained model can differ between two hosts."""


def processor(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU a figure was measured on: its model name, family, model and stepping, and
    the wide vector units it offers; ``unknown`` where ``cpuinfo`` cannot be read.

    The name alone is not enough: a virtual machine may report a generic name
    (``Intel(R) Xeon(R) Processor``) on different chips from day to day.
    """
    try:
        first = cpuinfo.read_text().split("\n\n", 1)[0]
    except OSError:
        return "unknown"
    fields = {
        key.strip(): value.strip()
        for key, _, value in (line.partition(":") for line in first.splitlines())
    }
    flags = set(fields.get("flags", "").split())
    units = [name for flag, name in _VECTOR_UNITS.items() if flag in flags]
    identity = ", ".join(
        f"{key.removeprefix('cpu ')} {fields[key]}"
        for key in ("cpu family", "model", "stepping")
        if key in fields
    )
    parts = [fields.get("model name", "unknown"), identity, " ".join(units)]
    return "; ".join(part for part in parts if part)


def torch_processor() -> str:
    """``processor()`` and the vector instructions torch's CPU kernels use here (torch
    imported here: the benchmarks without a model do not pay for it)."""
    import torch

    return f"{processor()}; torch kernels {torch.backends.cpu.get_cpu_capability()}"


def cpu_seconds() -> float:
    """CPU seconds of this process and of its children that were waited for (a worker
    pool's once it has shut down)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


_SESSION, _UTIME, _STIME, _CSTIME = 3, 11, 12, 14
"""Positions in ``/proc/<pid>/stat`` after the command's closing parenthesis (state is 0);
cutime (13) lies between stime and cstime."""


def _stat(path: Path) -> list[str] | None:
    """The fields of a ``/proc/<pid>/stat`` after the command; None for a gone process."""
    try:
        return path.read_text().rpartition(")")[2].split()
    except OSError:
        return None


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds (user and system, every thread) of the live process ``pid``, from
    ``/proc`` (Linux); 0.0 for a process that has gone or without ``/proc``."""
    fields = _stat(Path(f"/proc/{pid}/stat"))
    if fields is None:
        return 0.0
    return (int(fields[_UTIME]) + int(fields[_STIME])) / os.sysconf("SC_CLK_TCK")


def session_cpu_seconds(session: int) -> float:
    """CPU seconds of every live process in ``session`` (with their waited-for children),
    from ``/proc`` (Linux); 0.0 where ``/proc`` is missing."""
    total = 0
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        fields = _stat(entry / "stat") if entry.name.isdigit() else None
        if fields is not None and int(fields[_SESSION]) == session:
            total += sum(int(v) for v in fields[_UTIME : _CSTIME + 1])
    return total / os.sysconf("SC_CLK_TCK")


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
