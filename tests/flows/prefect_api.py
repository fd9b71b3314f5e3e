"""Plain HTTP calls to the Prefect server, as the UI makes them.

The server answers 503 when its SQLite database is busy (several test workers write to it at
once) and expects the client to try again; Prefect's own client retries 429, 502 and 503 with
backoff, and so do these helpers. Any other error is raised at once.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

RETRIED = frozenset({429, 502, 503})
ATTEMPTS = 8
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1: no proxy


def get(api: str, path: str) -> Any:
    """``GET api/path`` as JSON."""
    return _send(urllib.request.Request(api.rstrip("/") + path))


def post(api: str, path: str, body: dict[str, Any]) -> Any:
    """``POST`` ``body`` as JSON to ``api/path``; the answer as JSON."""
    return _send(
        urllib.request.Request(
            api.rstrip("/") + path,
            data=json.dumps(body).encode(),
            headers={"content-type": "application/json"},
            method="POST",
        )
    )


def _send(request: urllib.request.Request) -> Any:
    for attempt in range(ATTEMPTS):
        try:
            with _DIRECT.open(request, timeout=30) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            if error.code not in RETRIED or attempt == ATTEMPTS - 1:
                raise
            time.sleep(min(0.25 * 2**attempt, 8.0))
    raise AssertionError("unreachable")
