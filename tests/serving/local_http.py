"""Plain HTTP to a local server (proxies bypassed), for bodies the ``openai`` client
would not send."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

_LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def call(url: str, body: bytes | None = None, method: str | None = None) -> tuple[int, Any]:
    """``(status, JSON body)`` of one request; ``body`` is sent as JSON."""
    request = urllib.request.Request(
        url, data=body, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with _LOCAL.open(request, timeout=30) as response:
            return int(response.status), json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def post(url: str, payload: object) -> tuple[int, Any]:
    return call(url, json.dumps(payload).encode(), "POST")
