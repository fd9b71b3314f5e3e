"""The ``champion`` policy: the model server's endpoint, named by the model it serves."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agents.policies.openai_policy import OpenAIPolicy
from contract import FlywheelError, InvalidInputError
from flows.policies import POLICIES, build_policy, champion_url
from flows.servers import free_port
from flows.settings import FlywheelSettings, ServingSettings

SERVED = {"status": "ok", "model_id": "model-abc", "name": "n", "path": "/x"}


class FakeModelServerHealth(BaseHTTPRequestHandler):
    """A fake of the model server's ``GET /health`` (and nothing else: 404)."""

    def do_GET(self) -> None:
        if self.path != "/health":
            self.send_error(404)
            return
        body = json.dumps(SERVED).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass


@pytest.fixture
def fake_model_server() -> Iterator[int]:
    """The port of a fake model server health endpoint on 127.0.0.1."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeModelServerHealth)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _settings(port: int) -> FlywheelSettings:
    return FlywheelSettings().model_copy(update={"serving": ServingSettings(port=port)})


def test_champion_without_a_model_server_is_refused_naming_round_policy() -> None:
    settings = _settings(free_port())
    with pytest.raises(InvalidInputError) as refused:
        build_policy("champion", settings)
    assert refused.value.field == "round.policy"
    message = str(refused.value)
    assert f"none answers on {champion_url(settings)}" in message
    assert "flywheel deploy" in message and "flywheel server start model" in message
    assert refused.value.allowed == ("scripted", "openai", "champion")


def test_an_unknown_policy_lists_the_allowed_ones() -> None:
    with pytest.raises(InvalidInputError) as refused:
        build_policy("nope", _settings(free_port()))
    assert refused.value.field == "policy"
    allowed = "(allowed: scripted, openai, champion)"
    assert str(refused.value) == f"policy: unknown policy 'nope' {allowed}"
    assert POLICIES == ("scripted", "openai", "champion")


def test_champion_records_the_model_the_server_serves(fake_model_server: int) -> None:
    settings = _settings(fake_model_server)
    assert champion_url(settings) == f"http://127.0.0.1:{fake_model_server}"
    policy = build_policy("champion", settings)
    assert isinstance(policy, OpenAIPolicy)
    assert policy.info.model == "model-abc"
    assert policy.info.name == "openai"
    assert policy.model == "champion"  # it asks for the alias
    assert policy.retry == settings.retries.llm

    expected = build_policy("champion", settings, model="model-abc")
    assert expected.info.model == "model-abc"


def test_champion_refuses_a_server_that_serves_another_model(fake_model_server: int) -> None:
    with pytest.raises(FlywheelError, match="the champion changed during the round") as refused:
        build_policy("champion", _settings(fake_model_server), model="model-other")
    assert "now serves model-abc, not model-other" in str(refused.value)
