"""The call grammar (``training.call_grammar``): what a ``nano`` model may write, on every
call of scripted episodes and on calls no task accepts, and that generation keeps to it."""

from __future__ import annotations

import re
from typing import Any

import llguidance
import pytest
import torch
from transformers import PreTrainedTokenizerBase

from agents.policies.chat_format import (
    format_tools,
    opening_messages,
    task_view,
)
from agents.policies.scripted import ScriptedPolicy
from agents.runner import run_episode
from contract import ErrorKind, Step, step_budget
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks
from tests.training.conversations import scripted_rows
from training.base_model import NANO, built_model, built_tokenizer, corpus_texts
from training.call_grammar import call_grammar, grammar_mask, grammar_tokenizer
from training.chat_model import LocalChatModel, _stop_ids
from training.chat_templates import COMPACT_TEMPLATE, render
from training.value_refs import with_references

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "send_message",
            "parameters": {
                "type": "object",
                "properties": {
                    "contact_id": {"type": "string"},
                    "text": {"type": "string", "minLength": 1},
                },
                "required": ["contact_id", "text"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "set_alarm",
            "parameters": {
                "type": "object",
                "properties": {
                    "time": {"type": "string", "pattern": "^([01]\\d|2[0-3]):[0-5]\\d$"},
                    "label": {"type": "string"},
                    "days": {
                        "type": "array",
                        "items": {"type": "string", "enum": ["mon", "tue"]},
                        "minItems": 1,
                    },
                    "minutes": {"type": "integer"},
                    "loud": {"type": "boolean"},
                },
                "required": ["time"],
            },
        },
    },
]
SHOWN = {"<v1>": "c-4", "<v2>": "20", "<v3>": "Ana", "<v4>": "07:30", "<v5>": "tue"}


def _call(name: str, arguments: str) -> str:
    return f'<tool_call>{{"name":"{name}","arguments":{arguments}}}</tool_call>'


def _allows(tokenizer: PreTrainedTokenizerBase, grammar: str, text: str) -> bool:
    """Whether ``grammar`` allows ``text`` as a whole reply, token by token."""
    matcher = llguidance.LLMatcher(
        grammar_tokenizer(tokenizer, _stop_ids(tokenizer)),
        llguidance.LLMatcher.grammar_from_lark(grammar),
        log_level=0,
    )
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return all(matcher.consume_token(i) for i in ids) and matcher.is_accepting()


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    """Rows as the export writes them, of faultless scripted episodes of 150 tasks."""
    return scripted_rows(150, 5, ScriptedPolicy())


@pytest.fixture(scope="module")
def tokenizer(rows: list[dict[str, Any]]) -> PreTrainedTokenizerBase:
    return built_tokenizer(NANO, corpus_texts(rows, COMPACT_TEMPLATE, references=True))


@pytest.mark.parametrize(
    "reply",
    [
        _call("send_message", '{"contact_id":"<v1>","text":"Hi <v3>, at <v4>"}'),
        _call("set_alarm", '{"time":"<v4>"}'),
        _call("set_alarm", '{"time":"06:45","label":"<v3>","minutes":<v2>}'),
        _call("set_alarm", '{"minutes":0,"time":"<v4>"}'),
        _call("set_alarm", '{"days":["mon","<v5>"],"loud":true,"time":"<v4>"}'),
        _call("set_alarm", '{"time":"<v4>"}') + _call("set_alarm", '{"time":"08:00"}'),
        _call("send_message", r'{"contact_id":"<v1>","text":"say \"hi\"\n\u00e9\\"}'),
        _call("set_alarm", '{"label":"","time":"<v4>"}'),
    ],
    ids=[
        "references",
        "required only",
        "schema order",
        "zero",
        "sorted",
        "two",
        "JSON's escapes",
        "an empty string where one may be empty",
    ],
)
def test_calls_of_offered_functions_with_values_of_their_types_are_allowed(
    tokenizer: PreTrainedTokenizerBase, reply: str
) -> None:
    assert _allows(tokenizer, call_grammar(TOOLS, SHOWN), reply)


@pytest.mark.parametrize(
    "reply",
    [
        _call("send_money", '{"contact_id":"<v1>","text":"x"}'),
        _call("send_message", '{"contact_id":"<v1>","text":"x","note":"y"}'),
        _call("send_message", '{"contact_id":"<v1>"}'),
        _call("send_message", '{"contact_id":"<v2>","text":"x"}'),
        _call("send_message", '{"contact_id":"4.0","text":"x"}'),
        _call("send_message", '{"contact_id":"<v1>","text":"<v9>"}'),
        _call("set_alarm", '{"time":"<v3>"}'),
        _call("set_alarm", '{"time":"7 pm"}'),
        _call("set_alarm", '{"minutes":"<v3>","time":"<v4>"}'),
        _call("set_alarm", '{"days":["wed"],"time":"<v4>"}'),
        _call("set_alarm", '{"label":"a","time":"<v4>","label":"b"}'),
        'I will set it. <tool_call>{"name":"set_alarm","arguments":{"time":"<v4>"}}</tool_call>',
        '<tool_call>{"name": "set_alarm", "arguments": {"time": "<v4>"}}</tool_call>',
        _call("send_message", '{"contact_id":"<v1>","text":"a\x0cb"}'),
        _call("send_message", '{"contact_id":"<v1>","text":"tab\there"}'),
        _call("send_message", r'{"contact_id":"<v1>","text":"a\qb"}'),
        _call("send_message", r'{"contact_id":"<v1>","text":"a\u00zz"}'),
        _call("set_alarm", '{"minutes":07,"time":"<v4>"}'),
        _call("send_message", '{"contact_id":"<v1>","text":""}'),
        _call("set_alarm", '{"days":[],"time":"<v4>"}'),
    ],
    ids=[
        "a function not offered",
        "a parameter it does not take",
        "a required parameter missing",
        "a number's reference as an id",
        "a number as an id",
        "a reference never shown",
        "a word where a time belongs",
        "a time of another shape",
        "a word's reference as a number",
        "a value outside the enum",
        "a parameter twice",
        "prose before the call",
        "spaces the template never writes",
        "a control character in a string",
        "a tab in a string",
        "an escape JSON lacks",
        "a unicode escape that is not hex",
        "a number with a leading zero",
        "an empty string where one must not be",
        "an empty list where one must not be",
    ],
)
def test_what_no_task_accepts_is_refused(tokenizer: PreTrainedTokenizerBase, reply: str) -> None:
    assert not _allows(tokenizer, call_grammar(TOOLS, SHOWN), reply)


def test_an_id_is_a_reference_once_the_conversation_showed_one(
    tokenizer: PreTrainedTokenizerBase,
) -> None:
    written_out = _call("send_message", '{"contact_id":"c-9","text":"x"}')
    assert _allows(tokenizer, call_grammar(TOOLS, {"<v1>": "Ana"}), written_out)
    assert not _allows(tokenizer, call_grammar(TOOLS, SHOWN), written_out)


def test_every_call_of_scripted_episodes_is_allowed_unless_it_writes_an_unshown_id(
    rows: list[dict[str, Any]], tokenizer: PreTrainedTokenizerBase
) -> None:
    allowed = refused = 0
    for row in rows:
        messages, tools = row["messages"], row["tools"]
        for k, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            before, references = with_references(messages[:k])
            prompt = render(
                before, tools, add_generation_prompt=True, chat_template=COMPACT_TEMPLATE
            )
            whole = render(
                with_references(messages[: k + 1])[0], tools, chat_template=COMPACT_TEMPLATE
            )
            reply = whole[len(prompt) :].removesuffix("<|im_end|>\n")
            if _allows(tokenizer, call_grammar(tools, references.shown()), reply):
                allowed += 1
                continue
            refused += 1
            ids = re.findall(r'"\w+_id":"([^"<]+)"', reply)
            assert ids and not set(ids) & set(references.shown().values()), reply
    assert allowed > 300 and refused <= allowed // 50


def test_generation_keeps_to_the_grammar_where_free_decoding_does_not(
    tokenizer: PreTrainedTokenizerBase,
) -> None:
    torch.manual_seed(0)
    model = built_model(NANO, tokenizer, seed=3)  # untrained: its free text is noise
    sandbox = MobileSandbox()
    task = sample_tasks(1, 9, sandbox)[0]
    view = task_view(task, sandbox, step_budget(task, None))
    messages, tools = opening_messages(view), format_tools(view)
    chat = LocalChatModel(model, tokenizer, NANO, temperature=0.0, max_new_tokens=24)
    context = chat.encode(chat.render(messages, tools, prompt=True))
    grammar = chat.grammar(messages, tools)
    assert grammar is not None

    kept, _ = chat.generate(context, grammar)
    free, _ = chat.generate(context)

    names = [t["function"]["name"] for t in tools]
    kept_text = chat.reply_text(messages, kept)
    call = re.match(r'<tool_call>\{"name":"(\w+)","arguments":\{', kept_text)
    assert call is not None and call.group(1) in names, kept_text
    assert not chat.reply_text(messages, free).startswith("<tool_call>")
    unconstrained = LocalChatModel(model, tokenizer, NANO, temperature=0.0, constrained=False)
    assert unconstrained.grammar(messages, tools) is None


def test_an_untrained_nano_model_acts_within_the_grammar_and_not_without_it(
    tokenizer: PreTrainedTokenizerBase,
) -> None:
    model = built_model(NANO, tokenizer, seed=5)
    sandbox = MobileSandbox()
    steps: dict[bool, list[Step]] = {}
    for constrained in (True, False):
        policy = LocalChatModel(
            model, tokenizer, NANO, temperature=1.0, max_new_tokens=48, constrained=constrained
        )
        torch.manual_seed(1)
        steps[constrained] = [
            step
            for task in sample_tasks(4, 13, sandbox)
            for step in run_episode(task, sandbox, policy, max_steps=4).steps
        ]
    acted = {key: sum(s.action is not None for s in value) for key, value in steps.items()}
    assert acted[True] > acted[False]
    # a constrained reply is a call unless it ran out of tokens inside a value (an
    # untrained model's strings rarely close: that is its sampling, not the grammar)
    cut = [s for s in steps[True] if s.action is None]
    assert all(s.output_tokens == 48 for s in cut), [s.model_output for s in cut]
    kinds = {s.feedback.error.kind for s in steps[True] if s.feedback.error is not None}
    assert not kinds & {ErrorKind.UNKNOWN_TOOL, ErrorKind.INVALID_ARGUMENTS}, kinds


def test_a_grammar_that_does_not_compile_leaves_the_reply_free(
    tokenizer: PreTrainedTokenizerBase, caplog: pytest.LogCaptureFixture
) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "odd",
                "parameters": {
                    "type": "object",
                    "properties": {"code": {"type": "string", "pattern": "^[a-z$"}},
                },
            },
        }
    ]
    grammar = call_grammar(tools, {})
    assert grammar_mask(tokenizer, _stop_ids(tokenizer), grammar, 0) is None
    assert "does not compile" in caplog.text
    assert grammar_mask(tokenizer, _stop_ids(tokenizer), call_grammar(TOOLS, {}), 0) is not None
