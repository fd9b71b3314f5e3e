"""A model endpoint that answers anything: ``flywheel episode`` and ``flywheel round``
with the OpenAI policy record typed errors and never crash."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import RawReply, Reply, ScriptedChatServer, json_reply
from tests.flows.commands import FLYWHEEL, command_env

HTML = RawReply(b"<!doctype html><title>502</title><h1>Bad Gateway</h1>", content_type="text/html")
HOSTILE: dict[str, Reply] = {
    "html-page": HTML,
    "not-utf8": RawReply(b"\xff\xfe\x00garbage", content_type="application/octet-stream"),
    "json-array": json_reply([1, 2, 3]),
    "choices-a-string": json_reply({"choices": "none"}),
    "no-message": json_reply({"choices": [{"finish_reason": "stop"}]}),
    "content-a-number": json_reply({"choices": [{"message": {"content": 42}}]}),
    "usage-as-text": json_reply(
        {"choices": [{"message": {"content": "hi"}}], "usage": {"prompt_tokens": "12"}}
    ),
    "huge-body": RawReply(json.dumps({"choices": [], "pad": "x" * 20_000}).encode()),
}
"""Bodies that are no completion: the endpoint failed, the episode is a backend error."""


def _calls(*calls: object) -> Reply:
    return json_reply({"choices": [{"message": {"tool_calls": list(calls)}}]})


MALFORMED_CALLS: dict[str, Reply] = {
    "empty-function": _calls({"id": "a", "type": "function", "function": {}}),
    "arguments-a-list": _calls({"id": "a", "function": {"name": "x", "arguments": []}}),
    "custom-call": _calls({"id": "a", "type": "custom", "custom": {}}),
    "call-a-string": _calls("finish()"),
}
"""Well-formed bodies with a malformed call: the model's fault, the episode goes on."""


def episode(base_url: str, tmp_path: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = command_env(tmp_path, "http://127.0.0.1:9/api", FLYWHEEL_POLICY__BASE_URL=base_url)
    return subprocess.run(
        [FLYWHEEL, "episode", "--n", "1", "--seed", "4", "--policy", "openai", "--json"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env=env | extra,
    )


@pytest.mark.parametrize("name", [*HOSTILE, *MALFORMED_CALLS])
def test_flywheel_episode_turns_any_reply_into_a_typed_step(name: str, tmp_path: Path) -> None:
    reply = HOSTILE.get(name) or MALFORMED_CALLS[name]
    with ScriptedChatServer([reply]) as server:
        result = episode(server.base_url, tmp_path, FLYWHEEL_POLICY__MAX_RESPONSE_BYTES="8192")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    [trajectory] = json.loads(result.stdout)
    first = trajectory["steps"][0]
    assert first["action"] is None
    if name in HOSTILE:
        assert first["feedback"]["error"]["kind"] == "endpoint_error"
        assert "malformed completion" in first["feedback"]["error"]["message"]
        assert trajectory["metadata"]["termination"] == "endpoint_error"
        assert trajectory["metadata"]["outcome"] == "backend_error"  # never trained on
    else:
        assert first["feedback"]["error"]["kind"] == "malformed_output"
        assert trajectory["steps"][1]["action"]["kind"] == "finish"  # the next reply


@pytest.mark.slow
def test_a_round_collected_by_a_hostile_endpoint_completes(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """Every kind of bad reply, again and again, through a whole round: the round ends,
    and what the endpoint broke is kept as backend errors, never as training data."""
    replies: list[Reply] = [*HOSTILE.values(), *MALFORMED_CALLS.values()] * 12
    with ScriptedChatServer(replies) as server:
        env = command_env(
            tmp_path,
            prefect_api_url,
            FLYWHEEL_POLICY__BASE_URL=server.base_url,
            FLYWHEEL_RETRIES__LLM__ATTEMPTS="1",
            FLYWHEEL_POLICY__MAX_RESPONSE_BYTES="8192",
        )
        result = subprocess.run(
            [FLYWHEEL, "round", "--policy", "openai", "--tasks", "24", "--seed", "5", "--json"],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
            env=env,
        )
        served = len(server.requests)
    assert result.returncode == 0, result.stderr[-3000:]
    summary: dict[str, Any] = json.loads(result.stdout)
    counts = summary["counts"]
    assert served >= counts["collected"]  # every episode asked the endpoint
    assert counts["collected"] >= counts["constructed"] > 0
    assert counts["backend_errors"] > 0
    assert "Traceback" not in result.stderr
    assert os.path.isdir(tmp_path / "rounds" / summary["round_id"])
