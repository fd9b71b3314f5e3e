"""Noticing that the Prefect API went away while a flow runs in this process.

Prefect's engine retries its calls to a dead server and can wait in them for a long
time (a round whose server was killed was still waiting five minutes later). A flow run
of the flywheel loses nothing when its process stops (every stage resumes), so the
right answer to a server that stays away is to stop and say how to resume.
``watch_api`` checks the API's health in a thread and calls ``on_dead`` once it has not
answered for ``dead_after_s``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from flows.servers.managed import http_ok

OnDead = Callable[[str], None]
"""Called once, from the watching thread, with a message for a person."""


@contextmanager
def watch_api(
    api: str, dead_after_s: float, on_dead: OnDead, *, every_s: float | None = None
) -> Iterator[None]:
    """While the block runs, ask ``api``'s ``/health`` every ``every_s`` (by default a
    fifth of ``dead_after_s``, at most 5 s); once no answer came for ``dead_after_s``,
    call ``on_dead`` with a message that names the API and how long it was silent."""
    interval = every_s if every_s is not None else min(5.0, dead_after_s / 5)
    health = api.rstrip("/") + "/health"
    stop = threading.Event()

    def watch() -> None:
        answered = time.monotonic()
        while not stop.wait(interval):
            if http_ok(health, timeout_s=min(2.0, interval)):
                answered = time.monotonic()
                continue
            silent = time.monotonic() - answered
            if silent >= dead_after_s:
                on_dead(f"the Prefect API at {api} has not answered for {silent:.0f} s")
                return

    thread = threading.Thread(target=watch, name="prefect-api-watch", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
