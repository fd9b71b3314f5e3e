"""The completion boundary: whatever an endpoint returns is a ``Completion`` or a
``CompletionFailure``, through the real ``openai`` client, never an exception."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agents.completions import (
    Completion,
    CompletionFailure,
    parse_completion,
    request_completion,
)
from agents.policies.openai_policy import make_client
from contract import ErrorKind
from tests.fakes import RawReply, ScriptedChatServer, json_reply, tool_call_reply

PARAMS: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def body(message: dict[str, Any], **extra: Any) -> bytes:
    completion = {"choices": [{"message": message, "finish_reason": "stop"}], **extra}
    return json.dumps(completion).encode()


def failure(raw: bytes) -> CompletionFailure:
    parsed = parse_completion(raw)
    assert isinstance(parsed, CompletionFailure), parsed
    assert parsed.kind is ErrorKind.BACKEND_ERROR
    assert not parsed.transient
    return parsed


def completion(raw: bytes) -> Completion:
    parsed = parse_completion(raw)
    assert isinstance(parsed, Completion), parsed
    return parsed


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        (b"<html><body>502 Bad Gateway</body></html>", "not JSON"),
        (b"", "not JSON"),
        (b'{"choices": [', "not JSON"),
        (b"[1, 2]", "not an object"),
        (b'"choices"', "not an object"),
        (b'{"choices": "abc"}', "choices"),
        (b'{"choices": []}', "no choices"),
        (b"{}", "choices: is required"),
        (b'{"choices": [{}]}', "choices[0].message: is required"),
        (b'{"choices": [{"message": "text"}]}', "choices[0].message"),
        (b'{"choices": [{"message": {"content": 7}}]}', "choices[0].message.content"),
        (b'{"choices": [{"message": {"tool_calls": {}}}]}', "choices[0].message.tool_calls"),
        (b'{"choices": [{"message": {}, "finish_reason": 3}]}', "choices[0].finish_reason"),
        (b'{"choices": [{"message": {}}], "usage": {"prompt_tokens": "12"}}', "usage."),
        (
            b'{"choices": [{"message": {}}], '
            b'"usage": {"prompt_tokens": true, "completion_tokens": 1}}',
            "usage.prompt_tokens",
        ),
        (
            b'{"choices": [{"message": {}}], '
            b'"usage": {"prompt_tokens": -1, "completion_tokens": 1}}',
            "usage.prompt_tokens",
        ),
        (b'{"choices": [{"message": {}}], "model": 5}', "model"),
        (b'{"choices": [{"message": {"content": "\\ud800"}}]}', "not JSON"),
    ],
)
def test_a_body_that_is_no_completion_is_a_failure_naming_the_field(raw: bytes, named: str) -> None:
    assert named in failure(raw).message


@pytest.mark.parametrize(
    ("call", "named"),
    [
        ({"id": "c1", "type": "function", "function": {}}, "tool_calls[0].function.name"),
        ({"id": "c1", "type": "function"}, "tool_calls[0].function: is required"),
        ({"id": "c1", "function": {"name": ""}}, "tool_calls[0].function.name"),
        ({"id": "c1", "function": {"name": 7}}, "tool_calls[0].function.name"),
        ({"id": "c1", "function": {"name": "f", "arguments": 3}}, "function.arguments"),
        ({"id": "c1", "function": {"name": "f", "arguments": [1]}}, "function.arguments"),
        ({"id": 9, "function": {"name": "f"}}, "tool_calls[0].id"),
        ({"id": "c1", "type": "custom", "custom": {"name": "f"}}, "is not a function call"),
        ("send_message()", "tool_calls[0]: must be an object"),
        (None, "tool_calls[0]: must be an object"),
    ],
)
def test_a_malformed_tool_call_is_the_model_s_and_yields_no_call(call: Any, named: str) -> None:
    good = {"id": "c2", "type": "function", "function": {"name": "finish", "arguments": "{}"}}
    reply = completion(body({"content": "ok", "tool_calls": [call, good]})).reply

    assert reply.calls == ()
    assert len(reply.malformed) == 1
    assert named in reply.malformed[0]
    # what the conversation and the trajectory show: the text, then a line per bad call
    assert reply.content is not None
    assert reply.content.startswith("ok\n[malformed tool_call] tool_calls[0]")


def test_a_well_formed_reply_is_read_whatever_extras_it_carries() -> None:
    raw = body(
        {
            "content": None,
            "tool_calls": [
                {"type": "function", "function": {"name": "f", "arguments": {"a": 1}}},
                {"id": "x", "function": {"name": "g"}, "index": 1, "extra": [1]},
            ],
            "audio": None,
        },
        usage={"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
        model="served",
        system_fingerprint={"any": "thing"},
    )
    parsed = completion(raw)

    assert parsed.model == "served"
    assert parsed.usage is not None and parsed.usage.total_tokens == 7
    reply = parsed.reply
    assert reply.malformed == ()
    assert [(c.id, c.name, c.arguments) for c in reply.calls] == [
        ("call_0", "f", '{"a":1}'),  # a missing id is made up; an object argument is JSON
        ("x", "g", ""),
    ]
    assert (reply.input_tokens, reply.output_tokens) == (5, 2)


@pytest.fixture
def served() -> Any:
    def serve(*replies: Any, timeout_s: float = 5.0) -> Completion | CompletionFailure:
        with ScriptedChatServer(list(replies)) as server:
            client = make_client(server.base_url, "sk-secret-0123456789", timeout_s)
            return request_completion(client, PARAMS, max_bytes=64_000)

    return serve


def test_an_html_page_with_status_200_is_a_failure_not_a_crash(served: Any) -> None:
    page = RawReply(b"<!doctype html><h1>Sign in to the proxy</h1>", content_type="text/html")
    result = served(page)
    assert isinstance(result, CompletionFailure)
    assert "not JSON" in result.message and "Sign in" in result.message


def test_a_body_over_the_limit_is_refused_while_reading(served: Any) -> None:
    huge = json.dumps({"choices": [{"message": {"content": "x" * 200_000}}]}).encode()
    result = served(RawReply(huge))
    assert isinstance(result, CompletionFailure)
    assert "larger than 64000 bytes" in result.message
    assert not result.transient


@pytest.mark.parametrize("status", [200, 400, 500, 503])
def test_no_body_is_read_past_the_client_s_limit_not_even_an_error_s(status: int) -> None:
    """The ``openai`` client reads an error's body whole: the client built by
    ``make_client`` stops any body as it arrives, and says so."""
    huge = json.dumps({"error": {"message": "x" * 3_000_000}}).encode()
    with ScriptedChatServer([RawReply(huge, status=status)]) as server:
        client = make_client(server.base_url, None, 5.0, max_response_bytes=100_000)
        result = request_completion(client, PARAMS)
    assert isinstance(result, CompletionFailure)
    assert "larger than 100000 bytes" in result.message
    assert not result.transient


def test_a_body_that_trickles_past_the_timeout_is_a_timeout(served: Any) -> None:
    slow = RawReply(json.dumps({"choices": []}).encode() * 20, trickle_s=0.05)
    result = served(slow, timeout_s=0.5)
    assert isinstance(result, CompletionFailure)
    assert result.kind is ErrorKind.TIMEOUT and result.transient


def test_a_closed_port_is_a_transient_failure_without_the_key() -> None:
    client = make_client("http://127.0.0.1:9/v1", "sk-secret-0123456789", 1.0)
    result = request_completion(client, PARAMS)
    assert isinstance(result, CompletionFailure)
    assert result.transient
    assert "APIConnectionError" in result.message


def test_an_http_error_is_a_failure_that_masks_the_key(served: Any) -> None:
    result = served(json_reply({"error": {"message": "bad key sk-secret-0123456789"}}, 401))
    assert isinstance(result, CompletionFailure)
    assert not result.transient
    assert "sk-secret" not in result.message and "***" in result.message


def test_json_served_as_text_plain_is_still_read(served: Any) -> None:
    raw = body({"content": "hello"})
    result = served(RawReply(raw, content_type="text/plain"))
    assert isinstance(result, Completion) and result.reply.content == "hello"


def test_a_scripted_reply_reads_as_the_policy_needs_it(served: Any) -> None:
    result = served(tool_call_reply("finish", '{"answer": "Done."}'))
    assert isinstance(result, Completion)
    (call,) = result.reply.calls
    assert (call.name, call.arguments) == ("finish", '{"answer": "Done."}')
    assert result.usage is not None and result.usage.prompt_tokens == 12
