"""The base model a training run starts from: one built here (``tiny``, ``nano``) or a
local directory.

A built base needs no download: a byte-level BPE tokenizer trained on the export's own
conversations, rendered with the base's chat template, and a causal LM with random
weights from a configuration (``RECIPES``):

- ``tiny``: a two-layer ``Qwen2ForCausalLM`` of width 64 with ``CHAT_TEMPLATE`` (the
  functions as JSON schemas). It learns nothing useful, but it runs the whole trainer
  flow (SFT, rollouts, RL) on a CPU in seconds: the fast tests use it.
- ``nano``: a four-layer ``LlamaForCausalLM`` of width 192 (2.6M parameters, full
  multi-head attention) whose last layer starts as a copier (``copy_init``), with
  ``COMPACT_TEMPLATE`` (one line of names per function: rows about six times shorter)
  and a tokenizer whose pieces never glue a space or a quote to a word, keep a
  snake_case name whole and split an entity id at its dash (``ENTITY_SPLIT``), so a
  value the plan copies from the goal or a tool result is the same tokens where it is
  copied. What it learns in how many minutes on two CPU cores is measured, not promised
  (README, "The nano base"). A Llama configuration, not a Qwen2 one: ``AutoTokenizer``
  rebuilds Qwen2's own pre-tokenization for a ``qwen2`` model directory whatever its
  tokenizer.json says, and loads a ``llama`` one as saved.

Any other name is a local directory holding a Hugging Face causal LM; it is checked and
loaded with ``local_files_only`` (nothing is fetched from a hub) and keeps its own chat
template (with the full schemas); a tokenizer without one gets ``CHAT_TEMPLATE``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
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
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)
from transformers.models.llama import LlamaConfig, LlamaForCausalLM
from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX as QWEN2_SPLIT
from transformers.utils import logging as hf_logging

from contract import InvalidInputError
from training.chat_templates import CHAT_TEMPLATE, COMPACT_TEMPLATE, render
from training.settings import (
    ALLOWED_BASES,
    BUILT_FROM,
    NANO,
    TINY,
    check_base,
    check_directory,
    refuse_base,
)
from training.value_refs import REFERENCE_TOKENS, with_references

__all__ = [
    "ALLOWED_BASES",
    "CHAT_TEMPLATE",
    "COMPACT_TEMPLATE",
    "NANO",
    "RECIPES",
    "TINY",
    "BaseModel",
    "check_base",
    "load_base",
    "render",
    "save_model",
]

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
TOOL_CALL = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
MAX_POSITIONS = 4096
"""The context of the built models, and their tokenizers' ``model_max_length``."""
DEFAULT_VOCAB = 2048
ENTITY_SPLIT = r"\p{N}+|\p{L}+(?:_\p{L}+)*|[^\s\p{L}\p{N}]+|\s+"
"""Pre-tokenization of ``nano``: a run of digits, a word (or a snake_case name such as
``log_workout``: one piece, so a function or argument name is one choice, not a spelling
to assemble), a run of punctuation and a run of whitespace are pieces of their own. A
word never carries the space or quote before it, so a value has the same tokens in the
goal (``Log 75 minutes of swimming``) as in the arguments that copy it
(``{"minutes":75,"type":"swimming"}``): copying is the identity on token ids, which a
small model learns far sooner than a mapping from one spelling to another. An entity id
is its prefix, a hyphen and its number (``fl``, ``-``, ``45``), so copying one is
copying a number, the same skill for every kind of id and every number, whether BPE
made the id frequent or it was never seen."""


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


def corpus_texts(
    rows: Iterable[Mapping[str, Any]],
    chat_template: str = CHAT_TEMPLATE,
    *,
    references: bool = False,
) -> Iterator[str]:
    """The conversation of each export row (``messages`` and ``tools``) rendered with
    ``chat_template`` (its values by reference with ``references``:
    ``training.value_refs``): the text a tokenizer for these conversations is trained on."""
    for row in rows:
        messages = with_references(row["messages"])[0] if references else row["messages"]
        yield render(messages, row.get("tools") or None, chat_template=chat_template)


def train_tokenizer(
    texts: Iterable[str],
    vocab_size: int = DEFAULT_VOCAB,
    *,
    split: str = QWEN2_SPLIT,
    chat_template: str = CHAT_TEMPLATE,
    references: bool = False,
) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on ``texts`` (and a sample conversation), with
    NFC normalization, pre-tokenization by ``split`` (Qwen2's by default) and
    ``chat_template``. ``<|endoftext|>``
    pads, ``<|im_end|>`` ends a turn and is the end of sequence; ``<tool_call>`` and
    ``</tool_call>`` are single tokens but not special, so decoding with
    ``skip_special_tokens`` keeps them, and so are the reference tokens of
    ``training.value_refs`` with ``references``. Text in NFC form (what most text is)
    round-trips."""
    specials = [ENDOFTEXT, IM_START, IM_END]
    floor = len(pre_tokenizers.ByteLevel.alphabet()) + len(specials)
    if not floor <= vocab_size <= 1_000_000:
        raise InvalidInputError(
            "vocab_size", f"{vocab_size} is out of range", [f"{floor} to 1000000"]
        )
    core = Tokenizer(models.BPE())
    core.normalizer = normalizers.NFC()
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(split), behavior="isolated"),
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
    core.train_from_iterator(_with_sample(texts, chat_template), trainer=trainer)
    added = (TOOL_CALL, TOOL_CALL_END, *(REFERENCE_TOKENS if references else ()))
    core.add_tokens([AddedToken(t, special=False, normalized=False) for t in added])
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=core,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        extra_special_tokens=[IM_START],
        model_max_length=MAX_POSITIONS,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = chat_template
    return tokenizer


def _with_sample(texts: Iterable[str], chat_template: str) -> Iterator[str]:
    tools = [{"type": "function", "function": {"name": "send_text"}}]
    yield render(_SAMPLE, tools, chat_template=chat_template)
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


def nano_config(
    vocab_size: int, *, pad_token_id: int | None = None, eos_token_id: int | None = None
) -> LlamaConfig:
    """The configuration of the nano model: a Llama of four layers, width 192, six heads
    with a key and a value each (no sharing: ``copy_init`` needs the last layer's values
    as wide as the model), embeddings tied."""
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=192,
        num_hidden_layers=4,
        num_attention_heads=6,
        num_key_value_heads=6,
        intermediate_size=512,
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=True,
        pad_token_id=pad_token_id,
        eos_token_id=eos_token_id,
        bos_token_id=None,
    )


def copy_init(model: PreTrainedModel) -> None:
    """Start the last layer's attention as a copier: its value and output projections are
    the identity, so whatever position a head attends to is written, as it is, into the
    stream the (tied) output embedding reads, and the token there gets the logit.

    Copying a value from the goal or a tool result is what every new parameter draw needs,
    and a model from scratch learns it late: a head has to find the position and carry
    its token at once, and neither helps the loss before the other works. With the carry
    built in, the first gradient already rewards attending to the right position (on a
    synthetic copy task, 600 steps: 59 of 60 exact with it, 1 of 60 without; README,
    "The nano base"). Training may change both projections like any other weight."""
    attention = model.get_decoder().layers[-1].self_attn  # type: ignore[no-untyped-call]
    with torch.no_grad():
        for projection in (attention.v_proj, attention.o_proj):
            projection.weight.copy_(torch.eye(*projection.weight.shape))


@dataclass(frozen=True)
class Recipe:
    """How a base built here is made: its tokenizer's pre-tokenization, vocabulary and
    chat template, and its model's configuration and class."""

    split: str
    vocab_size: int
    chat_template: str
    config: Callable[..., PretrainedConfig]
    """``(vocab_size, *, pad_token_id, eos_token_id)`` to the model's configuration."""
    model_class: type[PreTrainedModel]
    initialize: Callable[[PreTrainedModel], None] | None = None
    """Changes the random weights of a new model (``copy_init``)."""
    references: bool = False
    """Whether it reads and writes values by reference (``training.value_refs``)."""


RECIPES: dict[str, Recipe] = {
    TINY: Recipe(QWEN2_SPLIT, DEFAULT_VOCAB, CHAT_TEMPLATE, tiny_config, Qwen2ForCausalLM),
    NANO: Recipe(
        ENTITY_SPLIT,
        4096,
        COMPACT_TEMPLATE,
        nano_config,
        LlamaForCausalLM,
        copy_init,
        references=True,
    ),
}
"""The bases built here, by name."""


def built_tokenizer(name: str, corpus: Iterable[str]) -> PreTrainedTokenizerFast:
    """The tokenizer of the built base ``name``, trained on ``corpus`` (conversations
    rendered as its recipe says: ``corpus_texts(rows, recipe.chat_template,
    references=recipe.references)``)."""
    recipe = RECIPES[name]
    return train_tokenizer(
        corpus,
        recipe.vocab_size,
        split=recipe.split,
        chat_template=recipe.chat_template,
        references=recipe.references,
    )


def built_model(name: str, tokenizer: PreTrainedTokenizerBase, *, seed: int = 0) -> PreTrainedModel:
    """The built base ``name`` with random weights (from ``seed``, without touching the
    global random state) for ``tokenizer``'s vocabulary."""
    recipe = RECIPES[name]
    config = recipe.config(
        len(tokenizer), pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id
    )
    setattr(config, BUILT_FROM, name)  # saved in config.json: what it descends from
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = recipe.model_class(config)
        if recipe.initialize is not None:
            recipe.initialize(model)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def tiny_model(tokenizer: PreTrainedTokenizerBase, *, seed: int = 0) -> Qwen2ForCausalLM:
    """A tiny Qwen2 with random weights from ``seed`` for ``tokenizer``'s vocabulary."""
    model = built_model(TINY, tokenizer, seed=seed)
    assert isinstance(model, Qwen2ForCausalLM)
    return model


def load_base(base: str, corpus: Iterable[str] | None = None, *, seed: int = 0) -> BaseModel:
    """The base model named ``base``, on ``device()``: a built one (``RECIPES``: a
    tokenizer trained on ``corpus``, rendered with its chat template, and a model from
    ``seed``), or a local directory holding a Hugging Face causal LM and its tokenizer.
    Anything else, or a directory that does not load, is an ``InvalidInputError`` naming
    ``base``."""
    tokenizer: PreTrainedTokenizerBase
    if base in RECIPES:
        tokenizer = built_tokenizer(base, corpus or ())
        model: PreTrainedModel = built_model(base, tokenizer, seed=seed)
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
