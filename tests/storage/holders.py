"""Another process that holds a DuckDB file's lock for a while, as a second round would."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def catalog_held(path: Path, release_after_s: float) -> Iterator[subprocess.Popen[str]]:
    """A process that opens ``path`` and lets go after ``release_after_s``; yields once
    it holds the lock, and is gone when the block ends."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys, time; con = duckdb.connect(sys.argv[1]); print('held', "
            "flush=True); time.sleep(float(sys.argv[2])); con.close(); time.sleep(60)",
            str(path),
            str(release_after_s),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        yield holder
    finally:
        holder.kill()
        holder.wait()
