"""A real ``python -m serving`` process answering the real ``openai`` client."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletion

from agents.policies.openai_policy import OpenAIPolicy, make_client
from agents.runner import run_episode
from contract import ErrorKind, Termination
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks
from flows.servers import free_port
from serving.client import health, probe
from tests.serving.builders import MAX_NEW_TOKENS, SERVED_ID, SERVED_NAME, RunningServer
from tests.serving.local_http import call, post

pytestmark = pytest.mark.slow

MODEL_ID, NAME = SERVED_ID, SERVED_NAME
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "send_text",
            "description": "Send a text message.",
            "parameters": {
                "type": "object",
                "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
                "required": ["to", "body"],
            },
        },
    }
]
HELLO: list[Any] = [{"role": "user", "content": "Text Ana that I am late."}]


@pytest.fixture(scope="module")
def client(server: RunningServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)


def test_health_says_which_model_is_served(
    server: RunningServer, folders: tuple[Path, Path]
) -> None:
    status, body = call(server.base_url + "/health")
    assert status == 200
    assert body["status"] == "ok"
    assert (body["model_id"], body["name"], body["served_as"]) == (MODEL_ID, NAME, "champion")
    assert body["path"] == str(folders[0].resolve())
    assert isinstance(body["requests"], int)
    assert health(server.base_url) == call(server.base_url + "/health")[1]


def test_the_model_answers_to_its_alias_id_and_name(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == ["champion", MODEL_ID, NAME]


@pytest.mark.parametrize("asked", ["champion", MODEL_ID, NAME])
def test_a_completion_with_tools_is_well_formed(client: openai.OpenAI, asked: str) -> None:
    completion = client.chat.completions.create(
        model=asked, messages=HELLO, tools=TOOLS, temperature=0, max_tokens=8
    )

    assert isinstance(completion, ChatCompletion)
    assert completion.model == MODEL_ID
    assert completion.id.startswith("chatcmpl-")
    assert completion.object == "chat.completion"
    [choice] = completion.choices
    assert choice.finish_reason in {"stop", "length", "tool_calls"}
    assert choice.message.role == "assistant"
    usage = completion.usage
    assert usage is not None
    assert 0 < usage.completion_tokens <= 8
    assert usage.prompt_tokens > 50  # the tool's schema is in the prompt
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_an_episode_through_the_policy_ends_in_actions_or_typed_errors(
    server: RunningServer,
) -> None:
    before = health(server.base_url)
    sandbox = MobileSandbox()
    [task] = sample_tasks(1, 5, sandbox)
    policy = OpenAIPolicy(make_client(server.base_url + "/v1", None, 60), "champion")

    trajectory = run_episode(task, sandbox, policy, max_steps=3)

    assert trajectory.metadata.termination is not Termination.BACKEND_ERROR
    assert trajectory.steps
    for step in trajectory.steps:
        if step.action is None:  # the tiny model's usual garbage: a typed error
            assert step.feedback.error is not None
            assert step.feedback.error.kind in set(ErrorKind) - {ErrorKind.BACKEND_ERROR}
        assert step.input_tokens > 1000  # the sandbox's tools, rendered in the prompt
        assert 0 < step.output_tokens <= MAX_NEW_TOKENS
    after = health(server.base_url)
    assert before is not None and after is not None
    assert after["requests"] == before["requests"] + len(trajectory.steps)


def test_an_unknown_model_is_not_found_with_the_names_it_may_be(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        client.chat.completions.create(model="gpt-9", messages=HELLO)
    error = _error(raised.value)
    assert error["param"] == "model"
    assert error["code"] == "model_not_found"
    for name in ("champion", MODEL_ID, NAME):
        assert name in error["message"]


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"stream": True}, "stream"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tool_choice": {"type": "function", "function": {"name": "send_text"}}}, "tool_choice"),
        ({"n": 2}, "n"),
        ({"temperature": -1}, "temperature"),
        ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role"),
    ],
)
def test_what_the_server_does_not_do_is_a_bad_request_naming_the_field(
    client: openai.OpenAI, fields: dict[str, Any], param: str
) -> None:
    body: dict[str, Any] = {"model": "champion", "messages": HELLO, "tools": TOOLS, **fields}
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(**body)
    error = _error(raised.value)
    assert error["param"] == param
    assert param.split("[", maxsplit=1)[0] in error["message"]
    if param == "tool_choice":
        assert "auto" in error["message"]
        assert "none" in error["message"]


def test_a_conversation_longer_than_the_context_is_a_bad_request(client: openai.OpenAI) -> None:
    long = " ".join(f"word{i}" for i in range(6000))
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(
            model="champion", messages=[{"role": "user", "content": long}]
        )
    error = _error(raised.value)
    assert error["param"] == "messages"
    assert "max_position_embeddings" in error["message"]


@pytest.mark.parametrize(
    ("payload", "param"),
    [
        (b"{not json", None),
        (b'{"model": "champion"}', "messages"),
        (b'{"model": "champion", "messages": []}', "messages"),
        (b'{"model": "champion", "messages": [{"role": "tool", "content": "x"}]}', "messages[0]"),
    ],
)
def test_malformed_bodies_get_an_openai_style_error(
    server: RunningServer, payload: bytes, param: str | None
) -> None:
    status, body = call(server.base_url + "/v1/chat/completions", payload, "POST")
    assert status == 400
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["param"] == param
    assert body["error"]["type"] == "invalid_request_error"


def test_unknown_routes_answer_json(server: RunningServer) -> None:
    status, body = call(server.base_url + "/v2/nothing")
    assert status == 404
    assert body["error"]["message"]
    status, body = call(server.base_url + "/v1/chat/completions")  # GET
    assert status == 405
    assert body["error"]["message"]


def test_probe_returns_the_id_of_the_model_that_answered(server: RunningServer) -> None:
    assert probe(server.base_url) == MODEL_ID
    assert probe(server.base_url, NAME) == MODEL_ID


def test_the_client_sees_no_server_on_a_free_port() -> None:
    assert health(f"http://127.0.0.1:{free_port()}", timeout_s=0.5) is None


def test_load_refuses_a_body_without_a_path(server: RunningServer) -> None:
    status, body = post(server.base_url + "/admin/load", {"model_id": "m", "name": "n"})
    assert status == 400
    assert body["error"]["param"] == "path"


def _error(exc: openai.APIStatusError) -> dict[str, Any]:
    body = exc.body
    assert isinstance(body, dict)
    # the openai client hands over the body's "error" object
    error = body.get("error", body)
    assert isinstance(error, dict)
    return error
