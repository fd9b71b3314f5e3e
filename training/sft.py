"""Supervised fine-tuning on an export's ``sft`` split: masked cross-entropy over the
assistant turns the export marks ``trained``.

Loss masks are character spans of the rendered conversation, one per trained assistant
turn; a token is supervised when it starts inside one. The conversation is rendered and
tokenized once (tokenizing the turns separately gives other tokens than the whole
wherever a tokenizer merges across a turn boundary). The spans come from the template's
``{% generation %}`` blocks when it has one per assistant message, as the templates built
here do (one rendering; the blocks of the turns not trained are left out), and otherwise
from prefix rendering, which works for any chat template: assistant message ``k`` is the
text between the rendering of ``messages[:k]`` with a generation prompt and the rendering
of ``messages[:k + 1]`` (less the whitespace written after the turn), at the cost of two
renderings per turn. A template that is not prefix-consistent (one that rewrites earlier
turns as the conversation grows) is refused: its masks would be wrong.

Feedback stays in context: a masked turn and the tool error after it are still input, and
the recovery turn after them is supervised. Rows are tokenized here and handed to TRL's
``SFTTrainer`` as ``input_ids`` and ``assistant_masks``, from which it builds its labels.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, cast

import datasets
import torch
from torch.nn.functional import cross_entropy
from torch.utils.data import WeightedRandomSampler
from transformers import (
    PreTrainedTokenizerBase,
    PrinterCallback,
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)
from transformers.utils.chat_template_utils import render_jinja_template
from trl.trainer.sft_config import SFTConfig
from trl.trainer.sft_trainer import SFTTrainer

from contract import InvalidInputError
from training.base_model import BaseModel
from training.export import quiet_datasets
from training.sampling import checked_weights
from training.settings import Schedule, SftSettings
from training.value_refs import shown_messages
from training.value_swap import swapped_passes

LogSink = Callable[[dict[str, Any]], None]
GENERATION_BLOCK = re.compile(r"\{%-?\s*generation\s*-?%\}")


# -- tokenizing ---------------------------------------------------------------------------


def _render(
    tokenizer: PreTrainedTokenizerBase,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    add_generation_prompt: bool = False,
) -> str:
    """``messages`` (already as the model reads them: ``shown_messages``) rendered as
    text with ``tokenizer``'s chat template."""
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
    for k, (message, flag) in enumerate(zip(messages, trained, strict=True)):
        if flag and message.get("role") != "assistant":
            raise InvalidInputError(
                f"trained[{k}]",
                f"a {message.get('role')!r} message is never trained",
                ["assistant"],
            )
    messages = shown_messages(tokenizer, messages)
    marked = _generation_spans(tokenizer, messages, tools)
    if marked is not None:
        text, blocks = marked
        pairs = zip(messages, trained, strict=True)
        turns = [flag for message, flag in pairs if message["role"] == "assistant"]
        return text, [span for span, flag in zip(blocks, turns, strict=True) if flag]
    text = _render(tokenizer, messages, tools)
    spans = []
    for k, flag in enumerate(trained):
        if not flag:
            continue
        prompt = _render(tokenizer, messages[:k], tools, add_generation_prompt=True)
        turn = _render(tokenizer, messages[: k + 1], tools)
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


def _generation_spans(
    tokenizer: PreTrainedTokenizerBase,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
) -> tuple[str, list[tuple[int, int]]] | None:
    """The rendered conversation and the span of each assistant message's
    ``{% generation %}`` block, from one rendering; None when the template has no such
    blocks or not exactly one per assistant message."""
    template = getattr(tokenizer, "chat_template", None)
    if not isinstance(template, str) or not GENERATION_BLOCK.search(template):
        return None
    rendered, blocks = cast(
        tuple[list[str], list[list[tuple[int, int]]]],  # annotated as str
        render_jinja_template(
            conversations=[[{k: v for k, v in m.items() if v is not None} for m in messages]],
            tools=[dict(t) for t in tools] if tools else None,
            chat_template=template,
            return_assistant_tokens_mask=True,
            **cast(dict[str, Any], tokenizer.special_tokens_map),
        ),
    )
    assistants = sum(1 for m in messages if m.get("role") == "assistant")
    if len(blocks[0]) != assistants:
        return None
    return rendered[0], [(start, end) for start, end in blocks[0]]


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
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
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
    weights: list[float] | None = None
    """The kept rows' sampling weights (an export's ``weight``); None when a row has none."""

    @property
    def trained_tokens(self) -> int:
        return sum(sum(mask) for mask in self.assistant_masks)

    def dataset(self) -> datasets.Dataset:
        return datasets.Dataset.from_dict(
            {"input_ids": self.input_ids, "assistant_masks": self.assistant_masks}
        )


def tokenize_rows(
    tokenizer: PreTrainedTokenizerBase,
    rows: Iterable[Mapping[str, Any]],
    max_length: int,
) -> Tokenized:
    """Every row of an export's ``sft`` split (``messages``, ``tools``, ``trained``)
    tokenized with its mask; rows without a supervised token are dropped and counted.
    The kept rows' ``weight`` is kept beside them when every row has one."""
    input_ids, masks, weights, dropped = [], [], [], 0
    for row in rows:
        ids, mask = tokenize_conversation(
            tokenizer, row["messages"], row.get("tools"), row["trained"], max_length
        )
        if any(mask):
            input_ids.append(ids)
            masks.append(mask)
            weights.append(row.get("weight"))
        else:
            dropped += 1
    kept = [float(w) for w in weights if w is not None]
    return Tokenized(input_ids, masks, dropped, kept if len(kept) == len(weights) else None)


def sampling_weights(tokenized: Tokenized, weighted: bool) -> list[float] | None:
    """The weights batches draw the rows by: the rows' own when ``weighted`` and every row
    has one (``checked_weights`` refuses bad ones, naming ``weight``), else None (every
    row equally often)."""
    weights = tokenized.weights
    if not weighted or weights is None:
        return None
    return checked_weights(weights, "row")


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
    weighted: bool = False
    """Whether batches drew the rows by their sampling weights (``sft.weighted``)."""

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
            "weighted": self.weighted,
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


class SupervisedPositionsTrainer(SFTTrainer):
    """TRL's ``SFTTrainer`` with the loss computed on a CPU by the plain LM head over the
    supervised positions only. TRL's fused head, which scores the same positions in
    tiles so that a GPU never holds a large vocabulary's logits, costs more than the whole
    model on a CPU (measured on nano: its backward alone took a third of a step). A GPU
    and a run of several processes keep TRL's path: under DDP the forward must go through
    the wrapped model and the loss be scaled for the ranks' token count, as TRL does.

    With ``row_weights``, batches draw rows in proportion to them, with replacement, as
    many per epoch as there are rows (``torch``'s ``WeightedRandomSampler``, seeded by the
    run's seed, so that every process of a launched run draws the same sequence and
    Accelerate shards it)."""

    def __init__(
        self, *args: Any, row_weights: Sequence[float] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.row_weights = row_weights

    def _get_train_sampler(self, train_dataset: Any = None) -> Any:
        if self.row_weights is None:
            return super()._get_train_sampler(train_dataset)
        return WeightedRandomSampler(
            list(self.row_weights),
            num_samples=len(self.row_weights),
            replacement=True,
            generator=torch.Generator().manual_seed(self.args.seed),
        )

    def compute_loss(
        self,
        model: Any,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: Any = None,
    ) -> Any:
        if torch.cuda.is_available() or return_outputs or self.accelerator.num_processes > 1:
            return super().compute_loss(  # type: ignore[no-untyped-call]
                model, inputs, return_outputs, num_items_in_batch
            )
        labels = inputs["labels"][:, 1:]
        keep = labels != -100
        unwrapped = self.accelerator.unwrap_model(model)
        backbone = getattr(unwrapped, unwrapped.base_model_prefix)
        hidden = backbone(
            input_ids=inputs["input_ids"],
            attention_mask=inputs.get("attention_mask"),
            use_cache=False,
        ).last_hidden_state[:, :-1]
        logits = unwrapped.get_output_embeddings()(hidden[keep])
        count = keep.sum() if num_items_in_batch is None else num_items_in_batch
        loss = cross_entropy(logits.float(), labels[keep], reduction="sum")
        loss = loss / torch.as_tensor(count).clamp(min=1)
        if model.training:
            self._total_train_tokens += int(inputs["attention_mask"].sum())
            self._metrics["train"]["num_tokens"] = [self._total_train_tokens]
        return loss


def sft_config(
    settings: SftSettings, out_dir: Path, passes: int = 1, rows: int | None = None
) -> SFTConfig:
    """TRL's configuration for ``settings`` over a dataset of ``rows`` rows that holds
    ``passes`` passes over the version's rows (``swap_passes``), for as many steps as
    ``step_count`` says: the rows come tokenized (no packing), batches are drawn at
    random, nothing is saved or reported, the CPU is used when there is no GPU (in
    float32: bfloat16 only on a GPU that has it).

    Batches are random rather than grouped by length: rows of one template have similar
    lengths, so grouped batches each hold one template, and a small model chases the
    template of the moment (measured on nano, 4 epochs of a 962-row version: the right
    function first on 0 of 90 development tasks grouped, 87 of 90 random)."""
    cuda = torch.cuda.is_available()
    return SFTConfig(
        output_dir=str(out_dir),
        max_steps=step_count(settings, rows, passes) or -1,
        num_train_epochs=settings.epochs / passes if settings.epochs is not None else 1.0,
        learning_rate=settings.learning_rate,
        warmup_steps=settings.warmup,
        lr_scheduler_type=(
            "constant_with_warmup" if settings.schedule is Schedule.CONSTANT else "linear"
        ),
        per_device_train_batch_size=settings.batch_size,
        max_length=settings.max_length,
        seed=settings.seed,
        data_seed=settings.seed,
        logging_steps=settings.logging_steps,
        packing=False,
        train_sampling_strategy="random",
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
    rows: datasets.Dataset | Sequence[Mapping[str, Any]],
    settings: SftSettings,
    out_dir: Path,
    on_log: LogSink | None = None,
) -> SftResult:
    """Train ``base.model`` in place on ``rows`` (an export's ``sft`` split) with TRL's
    ``SFTTrainer``, the loss over the trained assistant turns only. ``on_log`` receives
    each log point (``step``, ``loss``, ``learning_rate``, ``tokens``, ``max_steps`` and
    the trainer's other metrics). ``out_dir`` is the trainer's working folder; no
    checkpoint is written (``save_model`` writes the result). Rows without a trained token
    are dropped and counted; none left is an ``InvalidInputError``. With
    ``settings.swap_share``, every pass trains on the rows with that share of them swapped
    anew (``training.value_swap``). With ``settings.weighted`` (the default), batches draw
    the rows by their ``weight``: the balancer's mix, not the rows' raw one (measured on
    a loop's second version: 60% of the rows are tool use, 7% sub-agents; by weight, a
    quarter each)."""
    passes = swap_passes(settings, len(rows))
    if settings.swap_share > 0:
        rows = list(swapped_passes(list(rows), passes, settings.swap_share, settings.seed))
    tokenized = tokenize_rows(base.tokenizer, rows, settings.max_length)
    if not tokenized.input_ids:
        raise InvalidInputError(
            "rows",
            f"none of the {len(rows)} rows has a trained assistant token within the first "
            f"{settings.max_length} tokens",
        )
    recorder = _Recorder(on_log)
    with quiet_datasets():
        trainer = sft_trainer(base, tokenized, settings, out_dir, passes, [recorder])
        started = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - started
    base.model.train(False)
    return SftResult(
        curve=tuple(recorder.curve),
        steps=trainer.state.global_step,
        rows_used=len(tokenized.input_ids) // passes,
        rows_dropped=tokenized.dropped // passes,
        trained_tokens=tokenized.trained_tokens // passes,
        tokens_seen=recorder.tokens,
        seconds=seconds,
        tokens_per_second=recorder.tokens / seconds if seconds > 0 else 0.0,
        epochs=round(float(trainer.state.epoch or 0.0) * passes, 3),
        weighted=trainer.row_weights is not None,
    )


def sft_trainer(
    base: BaseModel,
    tokenized: Tokenized,
    settings: SftSettings,
    out_dir: Path,
    passes: int = 1,
    callbacks: Sequence[TrainerCallback] = (),
) -> SupervisedPositionsTrainer:
    """The trainer ``run_sft`` trains with: ``tokenized`` rows (``passes`` passes over the
    version's), drawn by their weights when ``settings.weighted`` (``sampling_weights``)."""
    trainer = SupervisedPositionsTrainer(
        model=base.model,
        args=sft_config(settings, out_dir, passes, len(tokenized.input_ids)),
        train_dataset=tokenized.dataset(),
        processing_class=base.tokenizer,
        callbacks=list(callbacks),
        row_weights=sampling_weights(tokenized, settings.weighted),
    )
    trainer.remove_callback(PrinterCallback)  # what disable_tqdm puts in the bar's place
    return trainer


def step_count(settings: SftSettings, rows: int | None, passes: int = 1) -> int | None:
    """The optimizer steps a run makes, when they are fixed before it starts:
    ``max_steps`` without epochs; with epochs, ``step_cap`` when the epochs would take
    more over a dataset of ``rows`` rows (``passes`` passes over the version's rows, each
    an epoch); else None (the trainer counts the epochs' steps itself)."""
    if settings.epochs is None:
        return settings.max_steps
    if settings.step_cap is None or rows is None:
        return None
    per_epoch = math.ceil(rows / settings.batch_size)
    wanted = math.ceil(settings.epochs / passes * per_epoch)
    return settings.step_cap if wanted > settings.step_cap else None


def swap_passes(settings: SftSettings, rows: int) -> int:
    """How many passes over ``rows`` rows a run with ``settings`` trains on: with value
    swapping, every pass swaps anew, so the dataset holds as many passes as the run makes
    (its epochs, or as many as ``max_steps`` batches need); without, one."""
    if settings.swap_share == 0 or rows == 0:
        return 1
    if settings.epochs is not None:
        return max(1, math.ceil(settings.epochs))
    return max(1, math.ceil(settings.max_steps * settings.batch_size / rows))
