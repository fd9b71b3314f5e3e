"""The round benchmark's CPU accounting: a server's CPU is read from every process of
its session, children included."""

from __future__ import annotations

import subprocess
import sys
import time

from bench.machine import session_cpu_seconds

BURN = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"


def test_a_sessions_cpu_counts_its_processes_and_their_children() -> None:
    code = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {BURN!r}])\n"
        f"exec({BURN!r})\n"
        "time.sleep(30)\n"
    )
    leader = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        seen = 0.0
        while time.monotonic() < deadline and seen < 0.55:
            time.sleep(0.1)
            seen = session_cpu_seconds(leader.pid)
        assert seen >= 0.55  # the leader's 0.3 s and its child's 0.3 s
        assert session_cpu_seconds(leader.pid + 10**7) == 0.0  # no such session
    finally:
        leader.kill()
        leader.wait()
