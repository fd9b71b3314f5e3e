"""SFT: loss masks from prefix rendering (exactly the trained turns, for any prefix-consistent
template), TRL's trainer honouring them, a tiny model that learns, and settings refused by
name. The data is built by hand in the export's shape, and from real sandbox episodes."""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import datasets
import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from datasets import Features, Json, List, Value
from transformers import PreTrainedTokenizerBase
from trl.trainer.sft_trainer import SFTTrainer

from agents.policies.chat_format import task_view, template_messages, trajectory_conversation
from agents.policies.scripted import FaultConfig, ScriptedPolicy
from agents.runner import run_episode
from contract import InvalidInputError, Split, step_budget
from curation.attribution import erroneous_steps
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks
from training.base_model import (
    TINY,
    BaseModel,
    corpus_texts,
    device,
    render,
    tiny_model,
    train_tokenizer,
)
from training.settings import RlSettings, SftSettings
from training.sft import (
    SupervisedPositionsTrainer,
    run_sft,
    sft_config,
    sft_trainer,
    step_count,
    swap_passes,
    tokenize_conversation,
    tokenize_rows,
)

FEATURES = Features(
    {"messages": List(Json()), "tools": List(Json()), "trained": List(Value("bool"))}
)
"""The columns of the export's ``sft`` split that SFT reads, with their types."""
SYSTEM = {"role": "system", "content": "You are the planner of a phone assistant."}
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "send_text",
            "parameters": {
                "type": "object",
                "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
            },
        },
    },
    {"type": "function", "function": {"name": "finish", "parameters": {"type": "object"}}},
]


def _call(call_id: str, name: str, arguments: object) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def recovery(i: int, *, finish: bool = True) -> dict[str, Any]:
    """A row: a wrong call (not trained), its tool error, the recovery (trained) and, with
    ``finish``, a trained final call."""
    messages: list[dict[str, Any]] = [
        SYSTEM,
        {"role": "user", "content": f"Tell contact {i} that I am late."},
        {
            "role": "assistant",
            "content": "Texting them.",
            "tool_calls": [_call("c0", "send_text", {"to": f"p{i + 40}", "body": "late"})],
        },
        {
            "role": "tool",
            "tool_call_id": "c0",
            "content": f'{{"error": {{"kind": "not_found", "message": "no contact p{i + 40}"}}}}',
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_call("c1", "send_text", {"to": f"p{i}", "body": "I am late"})],
        },
    ]
    trained = [False, False, False, False, True]
    if finish:
        messages += [
            {"role": "tool", "tool_call_id": "c1", "content": '{"result": "sent"}'},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [_call("c2", "finish", '{"answer": "Told them."}')],
            },
        ]
        trained += [False, True]
    return {"messages": messages, "tools": TOOLS, "trained": trained}


def _body(messages: list[dict[str, Any]], k: int, tools: Any = TOOLS) -> str:
    """Assistant message ``k`` as the template writes it, less the newline after the turn."""
    prompt = render(messages[:k], tools, add_generation_prompt=True)
    return render(messages[: k + 1], tools)[len(prompt) :].removesuffix("\n")


def _dataset(rows: list[dict[str, Any]]) -> datasets.Dataset:
    return datasets.Dataset.from_list(rows, features=FEATURES)


def _masked_text(tokenizer: PreTrainedTokenizerBase, ids: list[int], mask: list[int]) -> str:
    return cast(str, tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m]))


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    """One CPU thread: the tiny model's operations are too small to share, and threads
    that wait on each other on a busy machine made 30 steps take 40 s instead of 3."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    """Seven rows that train, and one whose every turn is masked."""
    everything_masked = recovery(99)
    everything_masked["trained"] = [False] * len(everything_masked["trained"])
    return [recovery(i) for i in range(7)] + [everything_masked]


@pytest.fixture(scope="module")
def tokenizer(rows: list[dict[str, Any]]) -> PreTrainedTokenizerBase:
    return train_tokenizer(corpus_texts(rows))


@pytest.fixture
def base(tokenizer: PreTrainedTokenizerBase) -> BaseModel:
    return _tiny(tokenizer)


def _tiny(tokenizer: PreTrainedTokenizerBase) -> BaseModel:
    """A fresh tiny model for ``tokenizer``, where ``load_base`` puts it."""
    model = tiny_model(tokenizer, seed=0)
    model.to(device())  # type: ignore[arg-type]  # transformers types `to` through a wrapper
    return BaseModel(model=model, tokenizer=tokenizer, name=TINY)


# -- masks -------------------------------------------------------------------------------


def test_the_mask_covers_exactly_the_recovery_turn(tokenizer: PreTrainedTokenizerBase) -> None:
    row = recovery(3, finish=False)
    messages = row["messages"]
    ids, mask = tokenize_conversation(tokenizer, messages, TOOLS, row["trained"])
    assert ids == tokenizer(render(messages, TOOLS), add_special_tokens=False)["input_ids"]
    assert _masked_text(tokenizer, ids, mask) == (
        '<tool_call>\n{"name": "send_text", "arguments": {"to": "p3", "body": "I am late"}}\n'
        "</tool_call><|im_end|>"
    )
    assert _masked_text(tokenizer, ids, mask) == _body(messages, 4)
    covered = [i for i, m in enumerate(mask) if m]
    assert covered == list(range(covered[0], covered[-1] + 1))  # one contiguous turn
    assert covered[-1] == len(ids) - 2  # the last turn, up to its end token; not the newline
    context = cast(str, tokenizer.decode(ids[: covered[0]]))
    assert context.endswith("<|im_start|>assistant\n")
    assert "Texting them." in context and "no contact p43" in context  # feedback stays as input


def test_every_trained_turn_is_covered_and_only_those(tokenizer: PreTrainedTokenizerBase) -> None:
    row = recovery(5)
    ids, mask = tokenize_conversation(tokenizer, row["messages"], TOOLS, row["trained"])
    assert _masked_text(tokenizer, ids, mask) == _body(row["messages"], 4) + _body(
        row["messages"], 6
    )
    flipped = [m["role"] == "assistant" for m in row["messages"]]
    _, every = tokenize_conversation(tokenizer, row["messages"], TOOLS, flipped)
    assert sum(every) > sum(mask)
    _, none = tokenize_conversation(tokenizer, row["messages"], TOOLS, [False] * len(flipped))
    assert not any(none)


def test_the_trainer_loss_is_the_trained_turns_alone(base: BaseModel, tmp_path: Path) -> None:
    """TRL turns the masks into labels, and its loss is the cross-entropy over the recovery
    turn's tokens alone: the erroneous turn before it contributes nothing."""
    row = recovery(3, finish=False)
    tokenized = tokenize_rows(base.tokenizer, _dataset([row]), 1024)
    trainer = SFTTrainer(
        model=base.model,
        args=sft_config(SftSettings(), tmp_path),
        train_dataset=tokenized.dataset(),
        processing_class=base.tokenizer,
    )
    (prepared,) = list(cast(datasets.Dataset, trainer.train_dataset))
    ids, labels = prepared["input_ids"], prepared["labels"]
    assert ids == tokenized.input_ids[0]
    assert labels == [
        t if m else -100 for t, m in zip(ids, tokenized.assistant_masks[0], strict=True)
    ]
    batch = {k: v.to(device()) for k, v in trainer.data_collator([prepared]).items()}
    with torch.no_grad():
        loss = trainer.compute_loss(base.model, batch)  # type: ignore[no-untyped-call]
        logits = base.model(input_ids=batch["input_ids"]).logits[0]
    target = torch.tensor(ids, device=device())

    def cross_entropy(positions: list[int]) -> torch.Tensor:
        before = [p - 1 for p in positions]  # the logits at p - 1 predict token p
        return F.cross_entropy(logits[before], target[positions])

    trained = [i for i, label in enumerate(labels) if label != -100]
    torch.testing.assert_close(loss, cross_entropy(trained))
    every_assistant = tokenize_conversation(
        base.tokenizer, row["messages"], TOOLS, [False, False, True, False, True]
    )[1]
    both = [i for i, m in enumerate(every_assistant) if m]
    assert len(both) > len(trained)
    assert abs(loss.item() - cross_entropy(both).item()) > 1e-3


def test_any_prefix_consistent_template_gets_masks(tokenizer: PreTrainedTokenizerBase) -> None:
    other = _with_template(
        tokenizer,
        "{% for m in messages %}### {{ m.role }}:\n{{ m.content }}\n\n{% endfor %}"
        "{% if add_generation_prompt %}### assistant:\n{% endif %}",
    )
    messages = [
        {"role": "user", "content": "Is it raining?"},
        {"role": "assistant", "content": "Let me check."},
        {"role": "user", "content": "Well?"},
        {"role": "assistant", "content": "Yes, bring an umbrella."},
    ]
    ids, mask = tokenize_conversation(other, messages, None, [False, False, False, True])
    # no end token: the last token starts inside the turn and takes the newlines after it
    assert _masked_text(other, ids, mask) == "Yes, bring an umbrella.\n\n"
    assert other.convert_ids_to_tokens(ids)[-1] == ".\u010a\u010a"  # byte-level newlines
    ids, mask = tokenize_conversation(other, messages, None, [False, True, False, False])
    assert _masked_text(other, ids, mask) == "Let me check.\n\n"


def test_a_template_that_rewrites_earlier_turns_is_refused(
    tokenizer: PreTrainedTokenizerBase,
) -> None:
    summary_last = _with_template(
        tokenizer,
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
        "{% endfor %}turns: {{ messages | length }}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    )
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Bye"},
    ]
    with pytest.raises(InvalidInputError) as refused:
        tokenize_conversation(summary_last, messages, None, [False, True, False])
    assert refused.value.field == "chat_template"
    assert "prefix-consistent at message 1" in refused.value.problem


def _with_template(tokenizer: PreTrainedTokenizerBase, template: str) -> PreTrainedTokenizerBase:
    other = copy.deepcopy(tokenizer)
    other.chat_template = template
    return other


def test_flags_must_match_the_messages_and_mark_assistants_only(
    tokenizer: PreTrainedTokenizerBase,
) -> None:
    row = recovery(1, finish=False)
    with pytest.raises(InvalidInputError) as short:
        tokenize_conversation(tokenizer, row["messages"], TOOLS, [True])
    assert short.value.field == "trained"
    flags = [False, True, False, False, True]  # the user's goal
    with pytest.raises(InvalidInputError) as user:
        tokenize_conversation(tokenizer, row["messages"], TOOLS, flags)
    assert user.value.field == "trained[1]"


def test_truncation_keeps_the_start_and_drops_rows_left_without_a_trained_token(
    tokenizer: PreTrainedTokenizerBase, rows: list[dict[str, Any]]
) -> None:
    row = rows[0]
    full, _ = tokenize_conversation(tokenizer, row["messages"], TOOLS, row["trained"])
    ids, mask = tokenize_conversation(tokenizer, row["messages"], TOOLS, row["trained"], 40)
    assert ids == full[:40] and len(mask) == 40
    kept = tokenize_rows(tokenizer, _dataset(rows), 1024)
    assert (len(kept.input_ids), kept.dropped) == (7, 1)
    assert kept.trained_tokens == sum(sum(m) for m in kept.assistant_masks) > 0
    cut = tokenize_rows(tokenizer, _dataset(rows), 40)  # the system turn alone is longer
    assert (len(cut.input_ids), cut.dropped) == (0, 8)


# -- training ----------------------------------------------------------------------------


def test_sft_lowers_the_loss_and_changes_the_parameters(
    base: BaseModel, rows: list[dict[str, Any]], tmp_path: Path
) -> None:
    before = {name: p.detach().clone() for name, p in base.model.named_parameters()}
    logged: list[dict[str, Any]] = []
    settings = SftSettings(max_steps=30, learning_rate=3e-3, batch_size=4)
    result = run_sft(base, _dataset(rows), settings, tmp_path / "run", on_log=logged.append)

    curve = result.curve
    assert result.steps == 30
    assert [p["step"] for p in curve] == list(range(1, 31))
    assert curve[-1]["loss"] < 0.7 * curve[0]["loss"]
    assert curve[0]["learning_rate"] > curve[-1]["learning_rate"] > 0  # linear decay
    tokens = [p["tokens"] for p in curve]
    assert tokens == sorted(tokens) and tokens[-1] == result.tokens_seen > 0
    assert (result.rows_used, result.rows_dropped) == (7, 1)
    masks = tokenize_rows(base.tokenizer, _dataset(rows), settings.max_length).assistant_masks
    assert result.trained_tokens == sum(sum(m) for m in masks)
    assert result.seconds > 0 and result.tokens_per_second > 0
    moved = [name for name, p in base.model.named_parameters() if not torch.equal(p, before[name])]
    assert moved == list(before)
    assert not base.model.training
    assert [(e["step"], e["loss"], e["max_steps"]) for e in logged] == [
        (p["step"], p["loss"], 30) for p in curve
    ]
    assert not list((tmp_path / "run").rglob("checkpoint-*"))
    assert result.to_json()["curve"][0] == dict(curve[0])


def test_epochs_replace_the_step_count(
    base: BaseModel, rows: list[dict[str, Any]], tmp_path: Path
) -> None:
    settings = SftSettings(epochs=2, batch_size=4, logging_steps=2)
    result = run_sft(base, _dataset(rows), settings, tmp_path)
    assert result.steps == 4  # 7 rows in batches of 4, twice
    assert [p["step"] for p in result.curve] == [2, 4]


def test_a_step_cap_bounds_the_epochs_and_never_adds_steps(
    base: BaseModel, rows: list[dict[str, Any]], tmp_path: Path
) -> None:
    capped = SftSettings(epochs=3, batch_size=4, step_cap=4)
    result = run_sft(base, _dataset(rows), capped, tmp_path / "capped")
    assert result.steps == 4  # 3 epochs of 7 rows in batches of 4 would be 6
    assert result.epochs < 3
    roomy = SftSettings(epochs=2, batch_size=4, step_cap=100)
    assert run_sft(base, _dataset(rows), roomy, tmp_path / "roomy").steps == 4
    assert step_count(capped, 7) == 4 and step_count(roomy, 7) is None
    assert step_count(SftSettings(max_steps=9, step_cap=2), 7) == 9, "the cap is for epochs"
    swapped = SftSettings(epochs=4, batch_size=4, step_cap=6, swap_share=0.5)
    assert step_count(swapped, 4 * 7, passes=4) == 6  # one epoch of 4 passes of 7 rows: 7


def test_swapping_trains_one_freshly_swapped_pass_per_epoch(
    base: BaseModel, rows: list[dict[str, Any]], tmp_path: Path
) -> None:
    settings = SftSettings(epochs=2, batch_size=4, swap_share=1.0, logging_steps=1)
    result = run_sft(base, _dataset(rows), settings, tmp_path)
    assert result.steps == 4  # two passes of 7 rows, in batches of 4
    assert result.epochs == pytest.approx(2.0)
    assert (result.rows_used, result.rows_dropped) == (7, 1), "counted once, not per pass"
    assert swap_passes(settings, len(rows)) == 2
    assert swap_passes(SftSettings(epochs=2.5, swap_share=0.5), 8) == 3
    assert swap_passes(SftSettings(max_steps=10, batch_size=4, swap_share=0.5), 8) == 5
    assert swap_passes(SftSettings(epochs=3), 8) == 1, "without swapping, one pass"


def _weighted(rows: list[dict[str, Any]], weights: list[float]) -> datasets.Dataset:
    """``rows`` as an export gives them, with the balancer's ``weight`` column."""
    features = Features({**FEATURES, "weight": Value("float64")})
    weighted = [{**row, "weight": w} for row, w in zip(rows, weights, strict=True)]
    return datasets.Dataset.from_list(weighted, features=features)


def test_batches_draw_the_rows_by_their_sampling_weight(
    base: BaseModel, rows: list[dict[str, Any]], tmp_path: Path
) -> None:
    # the last row is dropped (nothing trained): its weight goes with it
    tokenized = tokenize_rows(base.tokenizer, _weighted(rows, [0, 0, 0, 1, 0, 0, 0, 5]), 1024)
    assert tokenized.weights == [0, 0, 0, 1, 0, 0, 0]
    weighted = sft_trainer(base, tokenized, SftSettings(max_steps=4, batch_size=4), tmp_path)
    batches = [batch["input_ids"] for batch in weighted.get_train_dataloader()]
    only = torch.tensor(tokenized.input_ids[3])
    assert sum(len(b) for b in batches) == 7, "as many draws per epoch as rows"
    assert all(torch.equal(row.cpu(), only) for batch in batches for row in batch)

    uniform = SftSettings(max_steps=4, batch_size=4, weighted=False)
    plain = sft_trainer(base, tokenized, uniform, tmp_path)
    drawn = {
        tuple(row.tolist()) for batch in plain.get_train_dataloader() for row in batch["input_ids"]
    }
    assert drawn == {tuple(ids) for ids in tokenized.input_ids}, "each row once an epoch"


def test_the_weighted_draws_follow_the_seed(
    base: BaseModel, rows: list[dict[str, Any]], tmp_path: Path
) -> None:
    tokenized = tokenize_rows(base.tokenizer, _weighted(rows, [1.0] * 8), 1024)

    def draws(seed: int) -> list[int]:
        trainer = sft_trainer(base, tokenized, SftSettings(max_steps=1, seed=seed), tmp_path)
        sampler = trainer._get_train_sampler()
        assert sampler is not None
        return list(sampler)

    assert draws(0) == draws(0), "every process of a launched run draws the same rows"
    assert draws(0) != draws(1)


def test_the_run_says_whether_it_drew_by_weight(
    base: BaseModel, rows: list[dict[str, Any]], tmp_path: Path
) -> None:
    settings = SftSettings(max_steps=1, batch_size=4)
    weights = [1.0, 2.0, 1.0, 2.0, 1.0, 2.0, 1.0, 2.0]
    drawn = run_sft(base, _weighted(rows, weights), settings, tmp_path)
    assert drawn.weighted and drawn.to_json()["weighted"] is True
    off = settings.model_copy(update={"weighted": False})
    assert not run_sft(base, _weighted(rows, weights), off, tmp_path).weighted
    assert not run_sft(base, _dataset(rows), settings, tmp_path).weighted, "no weight column"


@pytest.mark.parametrize(
    "weights",
    [[math.nan] + [1.0] * 7, [-1.0] + [1.0] * 7, [0.0] * 8, [math.inf] + [1.0] * 7],
    ids=["nan", "negative", "all-zero", "infinite"],
)
def test_weights_a_sampler_cannot_draw_by_are_refused(
    base: BaseModel, rows: list[dict[str, Any]], tmp_path: Path, weights: list[float]
) -> None:
    before = {name: p.detach().clone() for name, p in base.model.named_parameters()}
    with pytest.raises(InvalidInputError) as refused:
        run_sft(base, _weighted(rows, weights), SftSettings(max_steps=1), tmp_path)
    assert refused.value.field == "weight"
    assert all(torch.equal(p, before[name]) for name, p in base.model.named_parameters())


def test_the_cpu_loss_is_trls_loss(
    base: BaseModel, rows: list[dict[str, Any]], tmp_path: Path
) -> None:
    """The loss computed over the supervised positions alone equals TRL's own."""
    tokenized = tokenize_rows(base.tokenizer, _dataset(rows[:3]), 1024)
    args = sft_config(SftSettings(), tmp_path)
    ours = SupervisedPositionsTrainer(
        model=base.model,
        args=args,
        train_dataset=tokenized.dataset(),
        processing_class=base.tokenizer,
    )
    theirs = SFTTrainer(
        model=base.model,
        args=args,
        train_dataset=tokenized.dataset(),
        processing_class=base.tokenizer,
    )
    prepared = list(cast(datasets.Dataset, ours.train_dataset))
    batch = {k: v.to(device()) for k, v in ours.data_collator(prepared).items()}
    with torch.no_grad():
        mine = ours.compute_loss(base.model, batch)
        trl = theirs.compute_loss(base.model, batch)  # type: ignore[no-untyped-call]
    torch.testing.assert_close(mine, trl)


def test_rows_without_a_trained_token_are_refused(base: BaseModel, tmp_path: Path) -> None:
    row = recovery(2)
    row["trained"] = [False] * len(row["trained"])
    with pytest.raises(InvalidInputError) as refused:
        run_sft(base, _dataset([row]), SftSettings(max_steps=1), tmp_path)
    assert refused.value.field == "rows"


def test_real_episodes_are_masked_turn_by_turn_and_train(tmp_path: Path) -> None:
    """Scripted sandbox episodes with faults, as the export turns them into rows: the
    mask is exactly the trained assistant turns, erroneous ones left out."""
    sandbox = MobileSandbox()
    policy = ScriptedPolicy(FaultConfig(rate=0.7, recovery_rate=1.0))
    rows: list[dict[str, Any]] = []
    for task in sample_tasks(8, 5, sandbox, split=Split.TRAIN):
        trajectory = run_episode(task, sandbox, policy)
        conversation = trajectory_conversation(
            trajectory,
            task_view(task, sandbox, step_budget(task)),
            masked_steps=erroneous_steps(trajectory.steps),
        )
        messages = template_messages(conversation.messages)
        rows.append(
            {"messages": messages, "tools": conversation.tools, "trained": conversation.trained}
        )
    dataset = _dataset(rows)
    assert any(
        m["role"] == "assistant" and not flag
        for row in rows
        for m, flag in zip(row["messages"], row["trained"], strict=True)
    )
    tokenizer = train_tokenizer(corpus_texts(dataset))
    for row in dataset:
        ids, mask = tokenize_conversation(tokenizer, row["messages"], row["tools"], row["trained"])
        trained = [k for k, flag in enumerate(row["trained"]) if flag]
        expected = "".join(_body(row["messages"], k, row["tools"]) for k in trained)
        assert _masked_text(tokenizer, ids, mask) == expected
    base = _tiny(tokenizer)
    settings = SftSettings(max_steps=1, batch_size=2, max_length=8192)  # rows of 3000-5000 tokens
    result = run_sft(base, dataset, settings, tmp_path)
    untrained = sum(not any(row["trained"]) for row in rows)  # every turn was erroneous
    assert untrained < len(rows)
    assert (result.steps, result.rows_used, result.rows_dropped) == (1, 8 - untrained, untrained)


# -- settings ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "field", "allowed"),
    [
        ({"learning_rate": 0}, "sft.learning_rate", "0 < learning_rate <= 1"),
        ({"learning_rate": 2.0}, "sft.learning_rate", "0 < learning_rate <= 1"),
        ({"max_steps": 0}, "sft.max_steps", "1 <= max_steps <= 100000"),
        ({"batch_size": 513}, "sft.batch_size", "1 <= batch_size <= 512"),
        ({"max_length": 16}, "sft.max_length", "32 <= max_length <= 32768"),
        ({"epochs": 0}, "sft.epochs", "null or 0 < epochs <= 1000"),
        ({"seed": -1}, "sft.seed", "0 <= seed <= 4294967295"),
        ({"logging_steps": 0}, "sft.logging_steps", "1 <= logging_steps <= 100000"),
        ({"batch_size": "many"}, "sft.batch_size", "1 <= batch_size <= 512"),
    ],
)
def test_bad_hyperparameters_are_refused_by_name(
    values: dict[str, Any], field: str, allowed: str
) -> None:
    with pytest.raises(InvalidInputError) as refused:
        SftSettings(**values)
    assert refused.value.field == field
    assert refused.value.allowed == (allowed,)
    assert field in str(refused.value) and allowed in str(refused.value)


def test_a_schedule_is_refused_with_the_allowed_ones() -> None:
    with pytest.raises(InvalidInputError) as refused:
        SftSettings.of({"schedule": "cosine"})
    assert refused.value.field == "sft.schedule"
    assert refused.value.allowed == ("linear", "constant")


def test_a_constant_schedule_holds_the_peak_after_the_warmup(
    base: BaseModel, rows: list[dict[str, Any]], tmp_path: Path
) -> None:
    settings = SftSettings(max_steps=8, learning_rate=2e-3, warmup=0.25, schedule="constant")
    rates = [p["learning_rate"] for p in run_sft(base, _dataset(rows), settings, tmp_path).curve]
    assert rates[0] < rates[1] < rates[2], "the warmup's two steps"
    assert rates[2:] == pytest.approx([2e-3] * 6), "then the peak, held"


def test_a_misspelt_setting_is_refused_and_the_defaults_are_valid() -> None:
    with pytest.raises(InvalidInputError) as refused:
        SftSettings.of({"lr": 0.1})  # as a flow or the CLI passes plain values
    assert refused.value.field == "sft.lr"
    with pytest.raises(InvalidInputError) as near:
        SftSettings.of({"max_step": 3})
    assert near.value.field == "sft.max_step"
    assert "did you mean max_steps?" in near.value.problem
    assert near.value.allowed is not None and "max_steps" in near.value.allowed
    with pytest.raises(InvalidInputError) as far:
        RlSettings.of({"zzz": 1})
    assert "did you mean" not in far.value.problem and far.value.field == "rl.zzz"
    settings = SftSettings()
    assert (settings.max_steps, settings.learning_rate, settings.batch_size) == (30, 1e-3, 4)
    assert (settings.max_length, settings.epochs, settings.logging_steps) == (4096, None, 1)
