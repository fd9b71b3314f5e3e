"""The base model: the tiny tokenizer and model built locally, the chat template's exact
format and prefix property, and local model directories checked before they load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from contract import InvalidInputError
from tests.training.conversations import CONVERSATION, TOOLS
from training.base_model import (
    CHAT_TEMPLATE,
    MAX_POSITIONS,
    TINY,
    BaseModel,
    corpus_texts,
    device,
    load_base,
    render,
    save_model,
    train_tokenizer,
)


@pytest.fixture(scope="module")
def tiny() -> BaseModel:
    rows = [{"messages": CONVERSATION, "tools": TOOLS}] * 3
    return load_base(TINY, corpus_texts(rows), seed=0)


def test_the_template_writes_the_format_exactly() -> None:
    messages = [CONVERSATION[0], CONVERSATION[1], CONVERSATION[4], CONVERSATION[5]]
    tools = TOOLS[1:]
    expected = (
        "<|im_start|>system\nYou are the planner of a phone assistant.\n\n# Tools\n\n"
        "You may call the functions whose signatures are within <tools></tools>:\n<tools>\n"
        '{"type": "function", "function": {"name": "finish", "parameters": {"type": "object"}}}\n'
        "</tools>\n\nTo call a function, write a JSON object with its name and arguments "
        "within <tool_call></tool_call> tags.<|im_end|>\n"
        "<|im_start|>user\nTell Zoë in Zürich I'm late — 10 minutes.<|im_end|>\n"
        "<|im_start|>assistant\nSending it.\n"
        '<tool_call>\n{"name": "send_text", "arguments": {"to": "p7", "body}\n</tool_call>\n'
        '<tool_call>\n{"name": "finish", "arguments": {}}\n</tool_call><|im_end|>\n'
        '<|im_start|>tool\n{"error": {"kind": "invalid_arguments"}}<|im_end|>\n'
    )
    assert render(messages, tools) == expected
    assert render(messages, tools, add_generation_prompt=True) == (
        expected + "<|im_start|>assistant\n"
    )
    without_tools = render(messages[:2])
    assert without_tools == (
        "<|im_start|>system\nYou are the planner of a phone assistant.<|im_end|>\n"
        "<|im_start|>user\nTell Zoë in Zürich I'm late — 10 minutes.<|im_end|>\n"
    )


def test_the_template_is_prefix_consistent() -> None:
    for k in range(1, len(CONVERSATION)):
        shorter, longer = render(CONVERSATION[:k], TOOLS), render(CONVERSATION[: k + 1], TOOLS)
        assert longer.startswith(shorter), k
        if CONVERSATION[k]["role"] == "assistant":
            prompt = render(CONVERSATION[:k], TOOLS, add_generation_prompt=True)
            body = longer[len(prompt) :]
            assert longer == prompt + body
            assert body.endswith("<|im_end|>\n") and "<|im_start|>" not in body


def test_the_tokenizer_uses_the_template_and_marks_the_assistant_bodies(tiny: BaseModel) -> None:
    tokenizer: Any = tiny.tokenizer  # its chat-template typing wants invariant lists
    text = tokenizer.apply_chat_template(CONVERSATION, tools=TOOLS, tokenize=False)
    assert text == render(CONVERSATION, TOOLS)
    out = tokenizer.apply_chat_template(
        CONVERSATION, tools=TOOLS, return_dict=True, return_assistant_tokens_mask=True
    )
    ids, mask = out["input_ids"], out["assistant_masks"]
    marked = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])
    bodies = []
    for k, message in enumerate(CONVERSATION):
        if message["role"] == "assistant":
            prompt = render(CONVERSATION[:k], TOOLS, add_generation_prompt=True)
            bodies.append(render(CONVERSATION[: k + 1], TOOLS)[len(prompt) :].removesuffix("\n"))
    assert marked == "".join(bodies)


def test_the_tokenizer_round_trips_and_keeps_its_markup_whole(tiny: BaseModel) -> None:
    tokenizer = tiny.tokenizer
    text = render(CONVERSATION, TOOLS)
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids) == text
    assert len(ids) < len(text.encode()) / 2  # merges were learned from the corpus
    for other in ["unseen words: Ærøskøbing, 東京, ∑ 12345", "  two spaces\n\n\ttab", ""]:
        assert tokenizer.decode(tokenizer(other)["input_ids"]) == other
    for token in ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>"):
        assert tokenizer(token)["input_ids"] == [tokenizer.convert_tokens_to_ids(token)]
    assert (tokenizer.eos_token, tokenizer.pad_token) == ("<|im_end|>", "<|endoftext|>")
    call = '<tool_call>\n{"name": "finish"}\n</tool_call><|im_end|>'
    kept = tokenizer.decode(tokenizer(call)["input_ids"], skip_special_tokens=True)
    assert kept == '<tool_call>\n{"name": "finish"}\n</tool_call>'
    assert tokenizer.model_max_length == MAX_POSITIONS
    assert tokenizer.chat_template == CHAT_TEMPLATE


def test_the_vocabulary_is_bounded_by_the_request() -> None:
    corpus = [render(CONVERSATION, TOOLS)] * 20
    small, large = train_tokenizer(corpus, vocab_size=300), train_tokenizer(corpus, 2048)
    assert len(small) <= 300 + 2  # plus the two tool-call tokens
    assert len(large) > len(small)
    with pytest.raises(InvalidInputError) as refused:
        train_tokenizer(corpus, vocab_size=100)
    assert refused.value.field == "vocab_size"


def test_the_tiny_model_fits_its_tokenizer(tiny: BaseModel) -> None:
    config = tiny.model.config
    assert tiny.name == TINY
    assert config.vocab_size == len(tiny.tokenizer)
    assert tiny.model.get_input_embeddings().weight.shape == (len(tiny.tokenizer), 64)
    assert (config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads) == (
        2,
        4,
        2,
    )
    assert config.tie_word_embeddings
    assert config.eos_token_id == tiny.tokenizer.eos_token_id
    assert next(tiny.model.parameters()).device.type == device().type
    ids = torch.tensor([tiny.tokenizer(render(CONVERSATION, TOOLS))["input_ids"]], device=device())
    logits = tiny.model(input_ids=ids).logits
    assert logits.shape == (1, ids.shape[1], len(tiny.tokenizer))


def test_the_seed_decides_the_weights() -> None:
    corpus = [render(CONVERSATION, TOOLS)]
    state = torch.random.get_rng_state()
    one, same, other = (load_base(TINY, corpus, seed=s).model for s in (1, 1, 2))
    assert torch.equal(torch.random.get_rng_state(), state)  # the global stream is untouched
    weights = [m.state_dict()["model.embed_tokens.weight"] for m in (one, same, other)]
    assert torch.equal(weights[0], weights[1])
    assert not torch.equal(weights[0], weights[2])


def test_a_saved_tiny_model_loads_back(tiny: BaseModel, tmp_path: Path) -> None:
    save_model(tiny, tmp_path / "model")
    loaded = load_base(str(tmp_path / "model"))
    assert loaded.name == str(tmp_path / "model")
    assert loaded.tokenizer.chat_template == CHAT_TEMPLATE
    for text in [render(CONVERSATION, TOOLS), "digits 1234567 and   spaces\n\n", "東京 Zoë"]:
        assert loaded.tokenizer(text)["input_ids"] == tiny.tokenizer(text)["input_ids"]
    for a, b in zip(
        tiny.model.state_dict().values(), loaded.model.state_dict().values(), strict=True
    ):
        assert torch.equal(a.cpu(), b.cpu())
    assert (loaded.tokenizer.eos_token, loaded.tokenizer.pad_token) == (
        "<|im_end|>",
        "<|endoftext|>",
    )


def test_a_tokenizer_without_a_template_gets_ours(tiny: BaseModel, tmp_path: Path) -> None:
    folder = tmp_path / "model"
    save_model(tiny, folder)
    (folder / "chat_template.jinja").unlink()
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    assert load_base(str(folder)).tokenizer.chat_template == CHAT_TEMPLATE


def _missing(root: Path) -> Path:
    return root / "nowhere"


def _file(root: Path) -> Path:
    (root / "weights.bin").write_bytes(b"\0")
    return root / "weights.bin"


def _no_config(root: Path) -> Path:
    (root / "tokenizer.json").write_text("{}")
    return root


def _garbage_config(root: Path) -> Path:
    (root / "config.json").write_text("{not json")
    (root / "tokenizer.json").write_text("{}")
    return root


def _unknown_model(root: Path) -> Path:
    (root / "config.json").write_text(json.dumps({"model_type": "no_such_model"}))
    (root / "tokenizer.json").write_text("{}")
    return root


def _no_weights(root: Path) -> Path:
    (root / "config.json").write_text(json.dumps({"model_type": "qwen2", "vocab_size": 300}))
    (root / "tokenizer.json").write_text("{}")
    return root


def _no_tokenizer(root: Path) -> Path:
    (root / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    return root


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (_missing, "no such directory"),
        (_file, "is a file"),
        (_no_config, "no config.json"),
        (_garbage_config, "not valid JSON"),
        (_unknown_model, "does not load"),
        (_no_weights, "does not load"),
        (_no_tokenizer, "no tokenizer files"),
    ],
)
def test_a_path_that_is_not_a_model_is_refused_by_name(
    make: Any, says: str, tmp_path: Path
) -> None:
    path = make(tmp_path)
    with pytest.raises(InvalidInputError) as refused:
        load_base(str(path))
    assert refused.value.field == "base"
    assert str(path) in refused.value.problem and says in refused.value.problem
    assert refused.value.allowed == ("tiny", "nano", "a local model directory")
