"""The local chat model as a policy: tool calls parsed from its text, malformed output as
typed errors, and a token trace that is exactly what the model saw and generated."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from agents.policies.chat_format import format_tools, opening_messages, task_view
from agents.runner import run_episode
from contract import ErrorKind, Outcome, TaskSpec, Termination
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import instantiate, template_named
from tests.training.builders import base_for_task
from training.base_model import BaseModel
from training.chat_model import LocalChatModel, TemplateError
from training.tool_call_text import parse_tool_calls

MAX_STEPS = 4


@pytest.fixture(scope="module")
def task() -> TaskSpec:
    return instantiate(template_named("toggle_phone_setting"), 3, MobileSandbox())


@pytest.fixture(scope="module")
def base(task: TaskSpec) -> BaseModel:
    return base_for_task(task, MAX_STEPS)


@dataclass
class ScriptedLocal(LocalChatModel):
    """The real tokenizer and template, with a fake model that says the given texts."""

    texts: list[str] = field(default_factory=list)

    def generate(self, context: list[int], grammar: str | None = None) -> tuple[list[int], bool]:
        end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        assert isinstance(end, int)
        return [*self.encode(self.texts.pop(0)), end], True


def _call(name: str, arguments: object) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def test_tool_calls_are_parsed_and_malformed_blocks_stay_content() -> None:
    text = "Turning it off.\n" + _call("set_setting", {"name": "wifi", "enabled": False})
    content, calls = parse_tool_calls(text, "call_1")
    assert content == "Turning it off."
    assert [(c.id, c.name, json.loads(c.arguments)) for c in calls] == [
        ("call_1_0", "set_setting", {"name": "wifi", "enabled": False})
    ]
    broken = "<tool_call>\n{not json}\n</tool_call>"
    content, calls = parse_tool_calls(broken, "call_2")
    assert calls == () and content == broken
    nameless = '<tool_call>{"arguments": {}}</tool_call>'
    assert parse_tool_calls(nameless, "c") == (nameless, ())
    _, (string_args,) = parse_tool_calls(
        '<tool_call>{"name": "f", "arguments": "x"}</tool_call>', "c"
    )
    assert string_args.arguments == "x"


def test_a_correct_call_solves_the_task_and_the_trace_is_what_the_model_saw(
    base: BaseModel, task: TaskSpec
) -> None:
    (action,) = task.reference_plan
    arguments = dict(action.arguments)  # type: ignore[union-attr]
    policy = ScriptedLocal(
        base.model,
        base.tokenizer,
        name="scripted-tiny",
        texts=["Looking.\n<tool_call>oops</tool_call>", _call("set_setting", arguments)],
    )
    trajectory = run_episode(task, MobileSandbox(), policy, max_steps=MAX_STEPS)
    assert trajectory.metadata.outcome is Outcome.SUCCESS
    assert trajectory.metadata.termination is Termination.VERIFIED
    first, second = trajectory.steps
    assert first.action is None and first.feedback.error is not None
    assert first.feedback.error.kind is ErrorKind.MALFORMED_OUTPUT
    assert second.action is not None and second.feedback.error is None

    (session,) = policy.sessions
    trace = session.trace
    assert trace is not None
    view = task_view(task, MobileSandbox(), MAX_STEPS)
    opening = policy.render(opening_messages(view), format_tools(view), prompt=True)
    assert trace.prompt_ids == policy.encode(opening)
    generated = [t for t, m in zip(trace.completion_ids, trace.model_mask, strict=True) if m]
    assert len(generated) == sum(s.output_tokens for s in trajectory.steps)
    # The malformed block got no tool message, only the nudge; the harness's tokens are
    # the newline the template writes after each end of turn, and the nudge's turn.
    nudge = session.messages[3]
    assert nudge["role"] == "user"
    harness = [t for t, m in zip(trace.completion_ids, trace.model_mask, strict=True) if not m]
    assert base.tokenizer.decode(harness, skip_special_tokens=False) == (
        f"\n<|im_start|>user\n{nudge['content']}<|im_end|>\n<|im_start|>assistant\n\n"
    )
    assert base.tokenizer.decode(generated, skip_special_tokens=False) == (
        "Looking.\n<tool_call>oops</tool_call><|im_end|>"
        + _call("set_setting", arguments)
        + "<|im_end|>"
    )


def test_an_untrained_model_ends_in_typed_errors_not_a_crash(
    base: BaseModel, task: TaskSpec
) -> None:
    policy = LocalChatModel(base.model, base.tokenizer, name="tiny", max_new_tokens=8)
    trajectory = run_episode(task, MobileSandbox(), policy, max_steps=2)
    assert len(trajectory.steps) == 2
    for step in trajectory.steps:
        assert step.feedback.error is not None  # random tokens are no valid call
        assert 1 <= step.output_tokens <= 8
    assert trajectory.metadata.outcome is not Outcome.SUCCESS


def test_a_context_past_its_limit_gives_an_empty_reply_without_generating(
    base: BaseModel, task: TaskSpec
) -> None:
    policy = ScriptedLocal(base.model, base.tokenizer, name="tiny", max_context=100)
    trajectory = run_episode(task, MobileSandbox(), policy, max_steps=1)
    (step,) = trajectory.steps
    assert step.output_tokens == 0
    assert step.feedback.error is not None
    assert step.feedback.error.kind is ErrorKind.MALFORMED_OUTPUT


def test_the_model_s_own_context_bounds_a_larger_max_context(
    base: BaseModel, task: TaskSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = ScriptedLocal(base.model, base.tokenizer, name="tiny", max_context=1_000_000)
    assert policy.context_limit == base.model.config.max_position_embeddings
    monkeypatch.setattr(base.model.config, "max_position_embeddings", 100)
    assert policy.context_limit == 100
    (step,) = run_episode(task, MobileSandbox(), policy, max_steps=1).steps
    assert step.output_tokens == 0, "generated past the model's positions"


def test_a_tokenizer_without_a_chat_template_is_refused(base: BaseModel) -> None:
    tokenizer = base.tokenizer.__class__(tokenizer_object=base.tokenizer.backend_tokenizer)
    with pytest.raises(TemplateError, match="chat template"):
        LocalChatModel(base.model, tokenizer, name="tiny")


@pytest.mark.parametrize("name", ["tiny", "nano"])
def test_a_later_user_turn_extends_the_trace_as_the_harness_s_tokens(
    task: TaskSpec, name: str
) -> None:
    later = "Thanks! Now turn it back on at 9:30 on 2026-03-20."
    (action,) = task.reference_plan
    two_turns = TaskSpec.model_validate({**task.model_dump(exclude={"id"}), "follow_ups": (later,)})
    base = base_for_task(two_turns, MAX_STEPS, name=name, extra=later)
    arguments = dict(action.arguments)  # type: ignore[union-attr]
    policy = ScriptedLocal(
        base.model,
        base.tokenizer,
        name=f"scripted-{name}",
        texts=[
            _call("set_setting", arguments),
            _call("finish", {"answer": "Done."}),
            _call("finish", {"answer": "Bye."}),
        ],
    )
    trajectory = run_episode(two_turns, MobileSandbox(), policy, max_steps=MAX_STEPS)
    assert [s.action.kind for s in trajectory.steps if s.action] == [
        "tool_call",
        "finish",
        "finish",
    ]
    assert trajectory.metadata.termination is Termination.FINISHED
    (session,) = policy.sessions
    assert [m["content"] for m in session.messages if m["role"] == "user"][1:] == [later]
    trace = session.trace
    assert trace is not None
    harness = [t for t, m in zip(trace.completion_ids, trace.model_mask, strict=True) if not m]
    heard = base.tokenizer.decode(harness, skip_special_tokens=False)
    # The later turn is the harness's, never the model's (nano reads its words by reference).
    assert all(word in heard for word in ("Now", "turn", "back", "9:30", "2026-03-20"))
    generated = [t for t, m in zip(trace.completion_ids, trace.model_mask, strict=True) if m]
    assert len(generated) == sum(s.output_tokens for s in trajectory.steps)
