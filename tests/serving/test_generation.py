"""The pure part of serving: completions from fixed generated texts, request checks, and
one turn of a real tiny model loaded in this process."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from contract import InvalidInputError
from serving.generation import (
    ChatRequest,
    Generated,
    LoadedModel,
    ProbeError,
    check_request,
    completion_body,
    generate,
    load_folder,
    probe_model,
    respond,
)

FINISH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "finish",
        "description": "Declare the task complete.",
        "parameters": {"type": "object", "properties": {"answer": {"type": "string"}}},
    },
}


def request(**fields: Any) -> ChatRequest:
    body: dict[str, Any] = {
        "model": "champion",
        "messages": [{"role": "user", "content": "Text Ana that I am late."}],
        "tools": [FINISH_TOOL],
        "temperature": 0,
    }
    return ChatRequest.model_validate({**body, **fields})


def said(text: str, *, stopped: bool = True) -> Generated:
    return Generated(text=text, stopped=stopped, prompt_tokens=40, completion_tokens=7)


# -- completions from a fixed text ---------------------------------------------------------


def test_a_valid_tool_call_becomes_tool_calls() -> None:
    text = 'Sending.\n<tool_call>\n{"name": "send_text", "arguments": {"to": "Ana"}}\n</tool_call>'
    body = completion_body(said(text), model_id="model-abc", suffix="s1", created=7)

    assert body["id"] == "chatcmpl-s1"
    assert body["object"] == "chat.completion"
    assert (body["model"], body["created"]) == ("model-abc", 7)
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["role"] == "assistant"
    assert message["content"] == "Sending."
    [call] = message["tool_calls"]
    assert call["id"] == "call_s1_0"
    assert call["type"] == "function"
    assert call["function"]["name"] == "send_text"
    assert json.loads(call["function"]["arguments"]) == {"to": "Ana"}
    assert body["usage"] == {"prompt_tokens": 40, "completion_tokens": 7, "total_tokens": 47}


def test_invalid_json_in_a_tool_call_stays_plain_content() -> None:
    text = '<tool_call>\n{"name": "send_text", "arguments": {"to": \n</tool_call>'
    body = completion_body(said(text), model_id="model-abc")

    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert choice["message"]["content"] == text.strip()
    assert "tool_calls" not in choice["message"]
    assert body["id"].startswith("chatcmpl-")


def test_a_reply_cut_by_the_token_budget_ends_with_length() -> None:
    body = completion_body(said("I will", stopped=False), model_id="m")
    assert body["choices"][0]["finish_reason"] == "length"


def test_an_empty_reply_has_no_content() -> None:
    body = completion_body(said(""), model_id="m")
    assert body["choices"][0]["message"]["content"] is None
    assert body["choices"][0]["finish_reason"] == "stop"


def test_tool_choice_none_leaves_tool_calls_unparsed() -> None:
    text = '<tool_call>\n{"name": "finish", "arguments": {}}\n</tool_call>'
    body = completion_body(said(text), model_id="m", parse_tools=False)
    assert body["choices"][0]["message"]["content"] == text
    assert body["choices"][0]["finish_reason"] == "stop"


# -- requests --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "field", "allowed"),
    [
        ({"stream": True}, "stream", ("false",)),
        ({"n": 2}, "n", (1,)),
        ({"tool_choice": "required"}, "tool_choice", ("auto", "none")),
        (
            {"tool_choice": {"type": "function", "function": {"name": "finish"}}},
            "tool_choice",
            ("auto", "none"),
        ),
    ],
)
def test_what_the_server_does_not_do_is_refused_by_field(
    fields: dict[str, Any], field: str, allowed: tuple[object, ...]
) -> None:
    with pytest.raises(InvalidInputError) as raised:
        check_request(request(**fields))
    assert raised.value.field == field
    assert raised.value.allowed == allowed


@pytest.mark.parametrize("fields", [{}, {"tool_choice": "auto"}, {"tool_choice": "none"}, {"n": 1}])
def test_supported_requests_pass(fields: dict[str, Any]) -> None:
    check_request(request(**fields))


def test_messages_reach_the_template_as_the_export_writes_them() -> None:
    call = {"id": "c0", "type": "function", "function": {"name": "finish", "arguments": "{}"}}
    messages = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}],
        },
        {"role": "assistant", "content": None, "tool_calls": [call], "refusal": None},
        {"role": "tool", "tool_call_id": "c0", "content": '{"result": "ok"}'},
    ]
    wire = request(messages=messages, user="someone").wire_messages()

    assert wire[0] == {"role": "user", "content": "one\ntwo"}
    assert wire[1]["tool_calls"][0]["function"]["arguments"] == {}  # JSON text → object
    assert wire[2] == messages[2]


def test_a_tool_message_without_its_call_id_is_refused() -> None:
    with pytest.raises(ValueError, match="tool_call_id"):
        request(messages=[{"role": "tool", "content": "x"}])


# -- a real tiny model -----------------------------------------------------------------


@pytest.fixture(scope="module")
def loaded(folders: tuple[Path, Path]) -> LoadedModel:
    return load_folder(folders[0], "model-gen", "tiny-gen")


def test_a_folder_that_is_not_a_model_is_refused_by_path(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match=r"config\.json") as raised:
        load_folder(tmp_path, "model-x", "x")
    assert raised.value.field == "path"


def test_an_empty_model_id_is_refused(folders: tuple[Path, Path]) -> None:
    with pytest.raises(InvalidInputError) as raised:
        load_folder(folders[0], " ", "x")
    assert raised.value.field == "model_id"


def test_a_loaded_model_passes_the_probe(loaded: LoadedModel) -> None:
    probe_model(loaded)
    assert loaded.context_limit == 4096
    assert loaded.path.is_absolute()


def test_a_folder_whose_template_fails_does_not_pass_the_probe(unprobeable: Path) -> None:
    with pytest.raises(ProbeError, match="probe turn failed"):
        probe_model(load_folder(unprobeable, "model-broken", "broken"))


def test_greedy_replies_repeat_and_stay_within_the_budget(loaded: LoadedModel) -> None:
    first = generate(loaded, request(max_tokens=5), max_new_tokens=16)
    again = generate(loaded, request(max_tokens=5), max_new_tokens=16)
    capped = generate(loaded, request(max_completion_tokens=500), max_new_tokens=6)

    assert first == again
    assert 1 <= first.completion_tokens <= 5
    assert first.prompt_tokens > 10
    assert capped.completion_tokens <= 6


def test_a_seed_makes_sampling_repeat(loaded: LoadedModel) -> None:
    replies = [
        generate(loaded, request(temperature=1.0, seed=3), max_new_tokens=8) for _ in range(2)
    ]
    assert replies[0] == replies[1]


def test_a_conversation_longer_than_the_context_is_refused_by_messages(
    loaded: LoadedModel,
) -> None:
    short = replace(loaded, context_limit=20)
    with pytest.raises(InvalidInputError, match="max_position_embeddings") as raised:
        generate(short, request(), max_new_tokens=4)
    assert raised.value.field == "messages"


def test_respond_names_the_model_that_answered(loaded: LoadedModel) -> None:
    body = respond(loaded, request(), max_new_tokens=4)
    assert body["model"] == "model-gen"
    assert body["usage"]["completion_tokens"] <= 4
    assert body["choices"][0]["finish_reason"] in {"stop", "length", "tool_calls"}
