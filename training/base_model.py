"""The base model a training run starts from: ``tiny``, built here, or a local directory.

``tiny`` needs no download: a byte-level BPE tokenizer trained on the export's own rendered
conversations and a two-layer ``Qwen2ForCausalLM`` with random weights. It learns nothing
useful, but it runs the whole trainer flow (SFT, rollouts, RL) on a CPU in seconds.

Any other name is a local directory holding a Hugging Face causal LM; it is checked and
loaded with ``local_files_only`` (nothing is fetched from a hub). A tokenizer without a chat
template gets ``CHAT_TEMPLATE``.

``CHAT_TEMPLATE`` is ChatML with Qwen2.5-style tool calls. It is *prefix-consistent*: the
rendering of a conversation's first messages is a prefix of the rendering of more of them,
and the generation prompt plus an assistant turn's body is exactly that turn's rendering.
SFT computes its loss masks from this (``training.sft``), and rollouts append tool results
after the tokens a model generated without re-rendering what came before.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
from tokenizers import (
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    trainers,
)
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)
from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX as QWEN2_SPLIT
from transformers.utils import logging as hf_logging
from transformers.utils.chat_template_utils import render_jinja_template

from contract import InvalidInputError
from training.settings import ALLOWED_BASES, TINY, check_base, check_directory, refuse_base

__all__ = ["ALLOWED_BASES", "TINY", "BaseModel", "check_base", "load_base", "save_model"]

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
TOOL_CALL = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
MAX_POSITIONS = 4096
"""The context of the tiny model, and its tokenizer's ``model_max_length``."""
DEFAULT_VOCAB = 2048

CHAT_TEMPLATE = r"""
{%- macro arguments_of(function) -%}
    {%- if function.arguments is string -%}
        {{- function.arguments -}}
    {%- elif function.arguments is defined -%}
        {{- function.arguments | tojson -}}
    {%- else -%}
        {{- '{}' -}}
    {%- endif -%}
{%- endmacro -%}
{%- set system_first = messages | length > 0 and messages[0].role == 'system' -%}
{%- if tools -%}
    {{- '<|im_start|>system\n' -}}
    {%- if system_first and messages[0].content -%}
        {{- messages[0].content + '\n\n' -}}
    {%- endif -%}
    {{- '# Tools\n\nYou may call the functions whose signatures are within '
        + '<tools></tools>:\n<tools>' -}}
    {%- for tool in tools -%}
        {{- '\n' + (tool | tojson) -}}
    {%- endfor -%}
    {{- '\n</tools>\n\nTo call a function, write a JSON object with its name and arguments '
        + 'within <tool_call></tool_call> tags.<|im_end|>\n' -}}
{%- endif -%}
{%- for message in messages -%}
    {%- if loop.first and tools and system_first -%}
    {%- elif message.role == 'assistant' -%}
        {{- '<|im_start|>assistant\n' -}}
        {%- generation -%}
            {%- if message.content -%}
                {{- message.content -}}
            {%- endif -%}
            {%- if message.tool_calls -%}
                {%- for call in message.tool_calls -%}
                    {%- if not loop.first or message.content -%}
                        {{- '\n' -}}
                    {%- endif -%}
                    {%- set function = call.function if call.function is defined else call -%}
                    {{- '<tool_call>\n{"name": ' + (function.name | tojson) + ', "arguments": ' -}}
                    {{- arguments_of(function) -}}
                    {{- '}\n</tool_call>' -}}
                {%- endfor -%}
            {%- endif -%}
            {{- '<|im_end|>' -}}
        {%- endgeneration -%}
        {{- '\n' -}}
    {%- else -%}
        {{- '<|im_start|>' + message.role + '\n' -}}
        {%- if message.content -%}
            {{- message.content -}}
        {%- endif -%}
        {{- '<|im_end|>\n' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant\n' -}}
{%- endif -%}
""".strip()
"""ChatML with Qwen2.5-style tool calls (``<tool_call>`` JSON blocks in the assistant turn,
the functions as JSON lines in the system turn, one ``tool`` turn per result). Tool-call
arguments are JSON objects, written with ``tojson``, or text, written as it is (a model's
malformed arguments stay what it wrote). The assistant body, ``<|im_end|>`` included, is a
``{% generation %}`` block, for ``return_assistant_tokens_mask``."""

_SAMPLE: list[dict[str, Any]] = [
    {"role": "system", "content": "You are the planner of a phone assistant."},
    {"role": "user", "content": "Text Ana that I am late."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_0",
                "type": "function",
                "function": {"name": "send_text", "arguments": {"to": "Ana", "body": "Late!"}},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_0", "content": '{"result": "sent"}'},
    {"role": "assistant", "content": "Done."},
]
"""A conversation always in the tokenizer's corpus: the template's own markup gets tokens
even when the corpus is empty."""


@dataclass(frozen=True)
class BaseModel:
    """A causal LM and its tokenizer (which has a chat template)."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    name: str
    """``tiny``, or the directory it was loaded from."""


def device() -> torch.device:
    """The GPU when there is one, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def render(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    *,
    add_generation_prompt: bool = False,
    chat_template: str = CHAT_TEMPLATE,
) -> str:
    """``messages`` (and ``tools``) rendered with ``chat_template`` as text, without a
    tokenizer. Keys whose value is None are dropped first, as ``apply_chat_template`` does."""
    rendered, _ = cast(
        tuple[list[str], object],  # annotated as str, returns the texts and the indices
        render_jinja_template(
            conversations=[[{k: v for k, v in m.items() if v is not None} for m in messages]],
            tools=[dict(tool) for tool in tools] if tools else None,
            chat_template=chat_template,
            add_generation_prompt=add_generation_prompt,
        ),
    )
    return rendered[0]


def corpus_texts(rows: Iterable[Mapping[str, Any]]) -> Iterator[str]:
    """The rendered conversation of each export row (``messages`` and ``tools``), the text
    a tokenizer for these conversations is trained on."""
    for row in rows:
        yield render(row["messages"], row.get("tools") or None)


def train_tokenizer(
    texts: Iterable[str], vocab_size: int = DEFAULT_VOCAB
) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on ``texts`` (and a sample conversation), with
    Qwen2's normalization and pre-tokenization and ``CHAT_TEMPLATE``. ``<|endoftext|>``
    pads, ``<|im_end|>`` ends a turn and is the end of sequence; ``<tool_call>`` and
    ``</tool_call>`` are single tokens but not special, so decoding with
    ``skip_special_tokens`` keeps them. Text in NFC form (what most text is) round-trips."""
    specials = [ENDOFTEXT, IM_START, IM_END]
    floor = len(pre_tokenizers.ByteLevel.alphabet()) + len(specials)
    if not floor <= vocab_size <= 1_000_000:
        raise InvalidInputError(
            "vocab_size", f"{vocab_size} is out of range", [f"{floor} to 1000000"]
        )
    core = Tokenizer(models.BPE())
    # Qwen2's pipeline, which ``AutoTokenizer`` rebuilds for a ``qwen2`` model directory
    # whatever its tokenizer.json says: the same one here keeps a saved model's tokens.
    core.normalizer = normalizers.NFC()
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(_with_sample(texts), trainer=trainer)
    core.add_tokens(
        [AddedToken(t, special=False, normalized=False) for t in (TOOL_CALL, TOOL_CALL_END)]
    )
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=core,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        extra_special_tokens=[IM_START],
        model_max_length=MAX_POSITIONS,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def _with_sample(texts: Iterable[str]) -> Iterator[str]:
    yield render(_SAMPLE, [{"type": "function", "function": {"name": "send_text"}}])
    yield from texts


def tiny_config(
    vocab_size: int,
    *,
    hidden_size: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate_size: int = 128,
    pad_token_id: int | None = None,
    eos_token_id: int | None = None,
) -> Qwen2Config:
    """The configuration of the tiny model: a Qwen2 of two layers, embeddings tied."""
    return Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        intermediate_size=intermediate_size,
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=True,
        pad_token_id=pad_token_id,
        eos_token_id=eos_token_id,
        bos_token_id=None,
    )


def tiny_model(tokenizer: PreTrainedTokenizerBase, *, seed: int = 0) -> Qwen2ForCausalLM:
    """A tiny Qwen2 with random weights (from ``seed``, without touching the global random
    state) for ``tokenizer``'s vocabulary."""
    config = tiny_config(
        len(tokenizer), pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def load_base(base: str, corpus: Iterable[str] | None = None, *, seed: int = 0) -> BaseModel:
    """The base model named ``base``, on ``device()``: ``tiny`` (a tokenizer trained on
    ``corpus``, and a tiny model from ``seed``), or a local directory holding a Hugging Face
    causal LM and its tokenizer. Anything else, or a directory that does not load, is an
    ``InvalidInputError`` naming ``base``."""
    tokenizer: PreTrainedTokenizerBase
    if base == TINY:
        tokenizer = train_tokenizer(corpus or ())
        model: PreTrainedModel = tiny_model(tokenizer, seed=seed)
    else:
        model, tokenizer = _load_directory(Path(base))
    model.to(device())  # type: ignore[arg-type]  # transformers types `to` through a wrapper
    return BaseModel(model=model, tokenizer=tokenizer, name=base)


def _load_directory(path: Path) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    check_directory(path)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    except Exception as exc:  # any failure to load is the directory's fault, named as such
        raise refuse_base(path, f"does not load as a causal LM ({_first_line(exc)})") from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as exc:
        raise refuse_base(path, f"its tokenizer does not load ({_first_line(exc)})") from None
    if not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = CHAT_TEMPLATE
    return cast(PreTrainedModel, model), cast(PreTrainedTokenizerBase, tokenizer)


def _first_line(exc: Exception) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def save_model(base: BaseModel, path: Path) -> None:
    """Write the model and its tokenizer (chat template included) to ``path``, a directory
    ``load_base`` loads back."""
    path.mkdir(parents=True, exist_ok=True)
    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # no shard-writing bar
    try:
        base.model.save_pretrained(path)
    finally:
        if shown:
            hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]
    base.tokenizer.save_pretrained(path)
