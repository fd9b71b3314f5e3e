"""Supervised fine-tuning on an export's ``sft`` split: masked cross-entropy over the
assistant turns the export marks ``trained``.

Loss masks come from prefix rendering, which works for any chat template: assistant
message ``k`` is the text between the rendering of ``messages[:k]`` with a generation
prompt and the rendering of ``messages[:k + 1]`` (less the whitespace written after the
turn). The conversation is rendered and tokenized once; a token is supervised when it
starts inside the span of a trained turn. ``{% generation %}`` markers would need the
template's cooperation and mark every assistant turn, erroneous ones included; tokenizing
the turns separately gives other tokens than the whole wherever a tokenizer merges across
a turn boundary. A template that is not prefix-consistent (one that rewrites earlier turns
as the conversation grows) is refused: its masks would be wrong.

Feedback stays in context: a masked turn and the tool error after it are still input, and
the recovery turn after them is supervised. Rows are tokenized here and handed to TRL's
``SFTTrainer`` as ``input_ids`` and ``assistant_masks``, from which it builds its labels.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, cast

import datasets
import torch
from transformers import (
    PreTrainedTokenizerBase,
    PrinterCallback,
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)
from trl.trainer.sft_config import SFTConfig
from trl.trainer.sft_trainer import SFTTrainer

from contract import InvalidInputError
from training.base_model import BaseModel
from training.export import quiet_datasets
from training.settings import SftSettings

LogSink = Callable[[dict[str, Any]], None]


# -- tokenizing ---------------------------------------------------------------------------


def render_chat(
    tokenizer: PreTrainedTokenizerBase,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    *,
    add_generation_prompt: bool = False,
) -> str:
    """``messages`` rendered as text with ``tokenizer``'s chat template."""
    return cast(
        str,
        tokenizer.apply_chat_template(
            [dict(m) for m in messages],
            tools=[dict(t) for t in tools] if tools else None,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
        ),
    )


def supervised_spans(
    tokenizer: PreTrainedTokenizerBase,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    trained: Sequence[bool],
) -> tuple[str, list[tuple[int, int]]]:
    """The rendered conversation and the character spans the loss covers, one per trained
    assistant message: from the end of the generation prompt to the end of the turn,
    less the whitespace the template writes after the turn's end token."""
    if len(trained) != len(messages):
        raise InvalidInputError(
            "trained", f"{len(trained)} flags for {len(messages)} messages: one per message"
        )
    text = render_chat(tokenizer, messages, tools)
    spans = []
    for k, (message, flag) in enumerate(zip(messages, trained, strict=True)):
        if not flag:
            continue
        if message.get("role") != "assistant":
            raise InvalidInputError(
                f"trained[{k}]",
                f"a {message.get('role')!r} message is never trained",
                ["assistant"],
            )
        prompt = render_chat(tokenizer, messages[:k], tools, add_generation_prompt=True)
        turn = render_chat(tokenizer, messages[: k + 1], tools)
        if not turn.startswith(prompt) or not text.startswith(turn):
            raise InvalidInputError(
                "chat_template",
                f"not prefix-consistent at message {k}: rendering a conversation's first messages "
                "(with a generation prompt before an assistant turn) must give a prefix of the "
                "rendering of the whole, or loss masks cannot be computed",
            )
        body = turn[len(prompt) :]
        spans.append((len(prompt), len(prompt) + len(body.rstrip())))
    return text, spans


def tokenize_conversation(
    tokenizer: PreTrainedTokenizerBase,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    trained: Sequence[bool],
    max_length: int | None = None,
) -> tuple[list[int], list[int]]:
    """The conversation's token ids and a mask aligned with them (1: the loss covers the
    token), both cut to ``max_length``. A token is covered when it starts inside a trained
    assistant turn (``supervised_spans``)."""
    text, spans = supervised_spans(tokenizer, messages, tools, trained)
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = cast(list[int], encoded["input_ids"])
    offsets = cast(list[tuple[int, int]], encoded["offset_mapping"])
    mask = [int(_covered(start, end, spans)) for start, end in offsets]
    if max_length is not None:
        ids, mask = ids[:max_length], mask[:max_length]
    return ids, mask


def _covered(start: int, end: int, spans: Sequence[tuple[int, int]]) -> bool:
    return end > start and any(low <= start < high for low, high in spans)


@dataclass(frozen=True)
class Tokenized:
    """Rows as the trainer takes them, and what was left out."""

    input_ids: list[list[int]]
    assistant_masks: list[list[int]]
    dropped: int
    """Rows with no supervised token (none trained, or all past ``max_length``)."""

    @property
    def trained_tokens(self) -> int:
        return sum(sum(mask) for mask in self.assistant_masks)

    def dataset(self) -> datasets.Dataset:
        return datasets.Dataset.from_dict(
            {"input_ids": self.input_ids, "assistant_masks": self.assistant_masks}
        )


def tokenize_rows(
    tokenizer: PreTrainedTokenizerBase, rows: datasets.Dataset, max_length: int
) -> Tokenized:
    """Every row of an export's ``sft`` split (``messages``, ``tools``, ``trained``)
    tokenized with its mask; rows without a supervised token are dropped and counted."""
    input_ids, masks, dropped = [], [], 0
    for row in rows:
        ids, mask = tokenize_conversation(
            tokenizer, row["messages"], row.get("tools"), row["trained"], max_length
        )
        if any(mask):
            input_ids.append(ids)
            masks.append(mask)
        else:
            dropped += 1
    return Tokenized(input_ids, masks, dropped)


# -- training -----------------------------------------------------------------------------


class LossPoint(TypedDict):
    """One point of the loss curve."""

    step: int
    loss: float
    learning_rate: float
    tokens: int
    """Tokens processed since the start of training (padding excluded)."""


@dataclass(frozen=True)
class SftResult:
    """What an SFT run did. The model is trained in place."""

    curve: tuple[LossPoint, ...]
    steps: int
    rows_used: int
    rows_dropped: int
    trained_tokens: int
    """Supervised tokens in the rows used (one pass over them)."""
    tokens_seen: int
    """Tokens the model processed in training, over all steps (padding excluded)."""
    seconds: float
    tokens_per_second: float
    epochs: float = 0.0
    """Passes over the rows used (fractional when the run was bounded by steps)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "curve": [dict(point) for point in self.curve],
            "steps": self.steps,
            "epochs": self.epochs,
            "rows_used": self.rows_used,
            "rows_dropped": self.rows_dropped,
            "trained_tokens": self.trained_tokens,
            "tokens_seen": self.tokens_seen,
            "seconds": self.seconds,
            "tokens_per_second": self.tokens_per_second,
        }


class _Recorder(TrainerCallback):
    """Keeps the loss curve and passes each point (with the planned step count and the
    trainer's other metrics) to ``sink``."""

    def __init__(self, sink: LogSink | None) -> None:
        self.sink = sink
        self.curve: list[LossPoint] = []
        self.tokens = 0

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        if not logs:
            return
        self.tokens = int(logs.get("num_tokens", self.tokens))
        if "loss" not in logs:  # the closing summary: train_loss, runtime
            return
        point = LossPoint(
            step=state.global_step,
            loss=float(logs["loss"]),
            learning_rate=float(logs.get("learning_rate", math.nan)),
            tokens=self.tokens,
        )
        self.curve.append(point)
        if self.sink is not None:
            extra = {k: v for k, v in logs.items() if k not in {"loss", "learning_rate"}}
            self.sink({**extra, **point, "max_steps": state.max_steps})


def sft_config(settings: SftSettings, out_dir: Path) -> SFTConfig:
    """TRL's configuration for ``settings``: the rows come tokenized (no packing), nothing
    is saved or reported, the CPU is used when there is no GPU (in float32: bfloat16 only
    on a GPU that has it)."""
    cuda = torch.cuda.is_available()
    return SFTConfig(
        output_dir=str(out_dir),
        max_steps=-1 if settings.epochs is not None else settings.max_steps,
        num_train_epochs=settings.epochs if settings.epochs is not None else 1.0,
        learning_rate=settings.learning_rate,
        per_device_train_batch_size=settings.batch_size,
        max_length=settings.max_length,
        seed=settings.seed,
        data_seed=settings.seed,
        logging_steps=settings.logging_steps,
        packing=False,
        train_sampling_strategy="group_by_length",  # batches of similar lengths: little padding
        report_to="none",
        save_strategy="no",
        use_cpu=not cuda,
        bf16=cuda and torch.cuda.is_bf16_supported(),
        activation_checkpointing=False,  # transformers 5.24's name; TRL's default is on
        disable_tqdm=True,
        dataloader_num_workers=0,
        ddp_find_unused_parameters=False,  # every parameter gets a gradient
    )


def run_sft(
    base: BaseModel,
    rows: datasets.Dataset,
    settings: SftSettings,
    out_dir: Path,
    on_log: LogSink | None = None,
) -> SftResult:
    """Train ``base.model`` in place on ``rows`` (an export's ``sft`` split) with TRL's
    ``SFTTrainer``, the loss over the trained assistant turns only. ``on_log`` receives
    each log point (``step``, ``loss``, ``learning_rate``, ``tokens``, ``max_steps`` and
    the trainer's other metrics). ``out_dir`` is the trainer's working folder; no
    checkpoint is written (``save_model`` writes the result). Rows without a trained token
    are dropped and counted; none left is an ``InvalidInputError``."""
    tokenized = tokenize_rows(base.tokenizer, rows, settings.max_length)
    if not tokenized.input_ids:
        raise InvalidInputError(
            "rows",
            f"none of the {len(rows)} rows has a trained assistant token within the first "
            f"{settings.max_length} tokens",
        )
    recorder = _Recorder(on_log)
    with quiet_datasets():
        trainer = SFTTrainer(
            model=base.model,
            args=sft_config(settings, out_dir),
            train_dataset=tokenized.dataset(),
            processing_class=base.tokenizer,
            callbacks=[recorder],
        )
        trainer.remove_callback(PrinterCallback)  # what disable_tqdm puts in the bar's place
        started = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - started
    base.model.train(False)
    return SftResult(
        curve=tuple(recorder.curve),
        steps=trainer.state.global_step,
        rows_used=len(tokenized.input_ids),
        rows_dropped=tokenized.dropped,
        trained_tokens=tokenized.trained_tokens,
        tokens_seen=recorder.tokens,
        seconds=seconds,
        tokens_per_second=recorder.tokens / seconds if seconds > 0 else 0.0,
        epochs=round(float(trainer.state.epoch or 0.0), 3),
    )
