"""The nano base: its compact chat template, its tokenizer that keeps ids and numbers
whole, and a saved nano model that loads back with the same tokens."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import LlamaForCausalLM

from agents.policies.chat_format import format_tools, opening_messages, task_view
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks
from tests.training.conversations import CONVERSATION, TOOLS
from training.base_model import (
    COMPACT_TEMPLATE,
    NANO,
    RECIPES,
    BaseModel,
    corpus_texts,
    load_base,
    render,
    save_model,
)
from training.sft import supervised_spans


@pytest.fixture(scope="module")
def nano() -> BaseModel:
    rows = [{"messages": CONVERSATION, "tools": TOOLS}] * 3
    return load_base(NANO, corpus_texts(rows, COMPACT_TEMPLATE), seed=0)


def test_the_compact_template_lists_one_line_per_function() -> None:
    text = render(CONVERSATION[:2], TOOLS, chat_template=COMPACT_TEMPLATE)
    assert text == (
        "<|im_start|>system\nsend_text(to,body)\nfinish()<|im_end|>\n"
        "<|im_start|>user\nTell Zoë in Zürich I'm late — 10 minutes.<|im_end|>\n"
    )


def test_the_sandbox_tools_compact_to_a_tenth() -> None:
    sandbox = MobileSandbox()
    (task,) = sample_tasks(1, 3, sandbox)
    view = task_view(task, sandbox, 8)
    messages, tools = opening_messages(view), format_tools(view)
    compact = render(messages, tools, chat_template=COMPACT_TEMPLATE)
    full = render(messages, tools)
    assert len(compact) * 10 < len(full)
    lines = compact.split("<|im_end|>")[0].splitlines()
    signatures = [line for line in lines if line.endswith(")") and "(" in line]
    assert len(signatures) == len(tools)
    optional = [line for line in signatures if "?," in line or "?)" in line]
    assert optional, "optional parameters are marked"
    assert not any(" " in line for line in signatures), "names only, no types or prose"


def test_assistant_turns_have_loss_spans_in_the_compact_template(nano: BaseModel) -> None:
    trained = [m["role"] == "assistant" for m in CONVERSATION]
    text, spans = supervised_spans(nano.tokenizer, CONVERSATION, TOOLS, trained)
    bodies = [text[a:b] for a, b in spans]
    # "Zoë" is the user's second word: the call writes its reference (training.value_refs)
    assert "<v1>Tell <v2>Zoë <v3>in <v4>Zürich" in text
    call = '<tool_call>{"name":"lookup","arguments":{"q":"<v2>"}}</tool_call>'
    assert bodies[0] == call + "<|im_end|>"
    assert bodies[-1] == "Done: Zoë knows.<|im_end|>"
    assert len(bodies) == sum(trained)


def test_a_copied_value_is_the_same_tokens_where_it_is_copied() -> None:
    goal = "Log 75 minutes of swimming today, then book fl-45 for ev-3."
    call = '{"name":"book_flight","arguments":{"minutes":75,"type":"swimming","id":"fl-45"}}'
    tokenizer = load_base(NANO, [goal, call] * 30).tokenizer
    pieces = tokenizer.tokenize(call)
    assert {"book_flight", "swimming", "75", "fl", "-", "45"} <= set(pieces), (
        "a snake_case name stays whole; an id splits at its dash, so its number copies alone"
    )
    goal_ids, call_ids = tokenizer(goal)["input_ids"], tokenizer(call)["input_ids"]
    for value in ("75", "swimming", "fl-45"):
        value_ids = tokenizer(value)["input_ids"]
        assert _contains(goal_ids, value_ids) and _contains(call_ids, value_ids), value
    assert tokenizer.decode(call_ids) == call


def _contains(ids: list[int], part: list[int]) -> bool:
    return any(ids[k : k + len(part)] == part for k in range(len(ids) - len(part) + 1))


def test_nano_is_a_llama_of_its_recipe(nano: BaseModel) -> None:
    assert isinstance(nano.model, LlamaForCausalLM)
    config = nano.model.config
    assert (config.num_hidden_layers, config.hidden_size) == (4, 192)
    assert config.num_key_value_heads == config.num_attention_heads, "every head copies"
    assert config.flywheel_base == NANO
    assert config.vocab_size == len(nano.tokenizer)
    assert nano.tokenizer.chat_template == COMPACT_TEMPLATE == RECIPES[NANO].chat_template
    parameters = sum(p.numel() for p in nano.model.parameters())
    assert 1_000_000 < parameters < 4_000_000


def test_a_saved_nano_model_loads_back_with_the_same_tokens(
    nano: BaseModel, tmp_path: Path
) -> None:
    save_model(nano, tmp_path / "model")
    loaded = load_base(str(tmp_path / "model"))
    assert isinstance(loaded.model, LlamaForCausalLM)
    assert loaded.tokenizer.chat_template == COMPACT_TEMPLATE
    for text in [render(CONVERSATION, TOOLS, chat_template=COMPACT_TEMPLATE), "c-12 2026 ev-3"]:
        assert loaded.tokenizer(text)["input_ids"] == nano.tokenizer(text)["input_ids"]
    for a, b in zip(
        nano.model.state_dict().values(), loaded.model.state_dict().values(), strict=True
    ):
        assert torch.equal(a.cpu(), b.cpu())
