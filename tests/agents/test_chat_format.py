"""A stored trajectory rebuilt as the conversation its policy had: for the OpenAI policy,
exactly the messages it sent (real client, real sandbox, scripted model); for the scripted
policy, the tool calls the OpenAI policy would have made."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agents.policies.chat_format import (
    NOT_EXECUTED,
    NUDGE,
    REFUSAL_NUDGE,
    RawCall,
    Reply,
    action_call,
    parse_rendered,
    render_feedback,
    task_view,
    template_messages,
    trajectory_conversation,
)
from agents.policies.openai_policy import parse_call
from contract import (
    Action,
    Clarify,
    Finish,
    MemoryRead,
    MemorySearch,
    MemoryWrite,
    Outcome,
    Refuse,
    RetryPolicy,
    SkillLoad,
    SubAgentCall,
    TaskSpec,
    Termination,
    ToolCall,
    Trajectory,
)
from curation.attribution import erroneous_steps
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import instantiate, template_named
from tests.agents.conversations import (
    MAX_STEPS,
    assert_valid_conversation,
    messy_replies,
    plan_replies,
    run_openai,
)
from tests.fakes import (
    error_reply,
)

CORRECTION = "I texted Yusuf that you are running late."


@pytest.fixture(scope="module")
def task() -> TaskSpec:
    return instantiate(template_named("text_contact"), 7, MobileSandbox())


def assert_answered(messages: list[dict[str, Any]]) -> None:
    """Every tool call is answered before the next turn, but those of the final reply:
    the episode ended on it."""
    last = messages[-1]
    assert last["role"] == "assistant"
    assert_valid_conversation([*messages, *_answers(last)])


def _answers(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"role": "tool", "tool_call_id": c["id"], "content": ""}
        for c in message.get("tool_calls") or ()
    ]


def test_an_openai_trajectory_is_exactly_the_conversation_the_policy_sent(
    task: TaskSpec,
) -> None:
    trajectory, policy, requests = run_openai(task, messy_replies(task))
    assert trajectory.metadata.outcome is Outcome.SUCCESS
    assert len(trajectory.steps) == 7
    (session,) = policy.sessions
    (view,) = policy.views
    assert view == task_view(task, MobileSandbox(), MAX_STEPS)

    conversation = trajectory_conversation(trajectory, view)

    assert conversation.messages == session.messages
    assert conversation.tools == requests[0]["tools"]
    for body in requests:  # every request sent a prefix of it
        assert conversation.messages[: len(body["messages"])] == body["messages"]
    assert_answered(conversation.messages)
    roles = [m["role"] for m in conversation.messages]
    assert roles.count("user") == 3  # the goal and two nudges
    assert {"role": "user", "content": NUDGE} in conversation.messages
    assert {"role": "user", "content": REFUSAL_NUDGE} in conversation.messages
    assert [m["content"] for m in conversation.messages if m["role"] == "tool"].count(
        NOT_EXECUTED
    ) == 1


def test_trained_flags_are_the_assistant_turns_outside_the_masked_steps(task: TaskSpec) -> None:
    trajectory, _, _ = run_openai(task, messy_replies(task))
    view = task_view(task, MobileSandbox(), MAX_STEPS)
    masked = erroneous_steps(trajectory.steps)
    assert masked == (0, 1, 2, 3, 5)

    conversation = trajectory_conversation(trajectory, view, masked_steps=masked)

    assistant = [
        (step, flag)
        for message, flag, step in zip(
            conversation.messages, conversation.trained, conversation.steps, strict=True
        )
        if message["role"] == "assistant"
    ]
    assert [step for step, _ in assistant] == list(range(7))
    assert [flag for _, flag in assistant] == [i not in masked for i in range(7)]
    others = [
        flag
        for message, flag in zip(conversation.messages, conversation.trained, strict=True)
        if message["role"] != "assistant"
    ]
    assert not any(others)
    unmasked = trajectory_conversation(trajectory, view)
    assert unmasked.messages == conversation.messages
    assert sum(unmasked.trained) == 7


def test_an_endpoint_failure_adds_no_turn(task: TaskSpec) -> None:
    first = plan_replies(task)[0]
    retry = RetryPolicy(attempts=3, backoff_s=0.0, max_backoff_s=0.0)
    trajectory, policy, _ = run_openai(task, [first, *[error_reply(503)] * 3], retry=retry)
    assert trajectory.metadata.termination is Termination.ENDPOINT_ERROR

    conversation = trajectory_conversation(trajectory, policy.views[0])

    assert conversation.messages == policy.sessions[0].messages
    assert conversation.messages[-1]["role"] == "tool"  # the first call's answer was sent


def test_scripted_actions_become_the_calls_the_openai_policy_would_make(
    faulty_trajectories: list[Trajectory], sandbox: MobileSandbox
) -> None:
    for trajectory in faulty_trajectories:
        view = task_view(trajectory.task, sandbox, MAX_STEPS)
        conversation = trajectory_conversation(trajectory, view)
        assert_answered(conversation.messages)
        assert conversation.messages[1] == {"role": "user", "content": trajectory.task.goal}
        assistant = [m for m in conversation.messages if m["role"] == "assistant"]
        assert len(assistant) == len(trajectory.steps)
        tool_messages = {
            m["tool_call_id"]: m["content"] for m in conversation.messages if m["role"] == "tool"
        }
        subagents = frozenset(s.name for s in view.subagents)
        for step, message in zip(trajectory.steps, assistant, strict=True):
            (call,) = message["tool_calls"]
            raw = RawCall(call["id"], call["function"]["name"], call["function"]["arguments"])
            assert parse_call(raw, subagents) == step.action
            if step is not trajectory.steps[-1]:
                assert tool_messages[call["id"]] == render_feedback(step.feedback)
        assert all(
            flag == (m["role"] == "assistant")
            for m, flag in zip(conversation.messages, conversation.trained, strict=True)
        )


def test_a_stored_trajectory_shows_what_the_live_episode_showed(
    faulty_trajectories: list[Trajectory], sandbox: MobileSandbox
) -> None:
    """The catalog keeps feedback as canonical JSON, every object's keys sorted; a
    training row is rebuilt from it. Its tool messages must be the text the live session
    showed, or a model meets at inference a layout it was never trained on. (A call's
    arguments are the model's own output: the rows write them sorted, and the call
    grammar lets a model write them so.)"""
    unsorted = 0
    for trajectory in faulty_trajectories:
        stored = Trajectory.from_json(trajectory.to_json())
        view = task_view(trajectory.task, sandbox, MAX_STEPS)
        live = template_messages(trajectory_conversation(trajectory, view).messages)
        assert template_messages(trajectory_conversation(stored, view).messages) == live
        unsorted += sum(_out_of_order(step.feedback.result) for step in trajectory.steps)
    assert unsorted > 0, "no tool wrote keys out of sorted order: the test shows nothing"


def _out_of_order(value: Any) -> int:
    """How many objects in ``value`` have their keys out of sorted order."""
    if isinstance(value, dict):
        own = int(list(value) != sorted(value))
        return own + sum(_out_of_order(v) for v in value.values())
    if isinstance(value, list):
        return sum(_out_of_order(v) for v in value)
    return 0


def test_a_correction_replaces_the_final_answer_and_is_trained(
    faulty_trajectories: list[Trajectory], sandbox: MobileSandbox
) -> None:
    finished = next(
        t
        for t in faulty_trajectories
        if t.metadata.termination is Termination.FINISHED and len(t.steps) > 1
    )
    view = task_view(finished.task, sandbox, MAX_STEPS)
    last = len(finished.steps) - 1
    plain = trajectory_conversation(finished, view)
    corrected = trajectory_conversation(finished, view, masked_steps=(last,), correction=CORRECTION)

    assert len(corrected.messages) == len(plain.messages)
    assert corrected.messages[:-1] == plain.messages[:-1]
    final = corrected.messages[-1]
    (call,) = final["tool_calls"]
    assert call["id"] == plain.messages[-1]["tool_calls"][0]["id"]
    assert call["function"]["name"] == "finish"
    assert json.loads(call["function"]["arguments"]) == {"answer": CORRECTION}
    assert corrected.trained[-1]


def test_a_correction_after_a_verified_ending_is_appended(
    faulty_trajectories: list[Trajectory], sandbox: MobileSandbox
) -> None:
    verified = next(
        t for t in faulty_trajectories if t.metadata.termination is Termination.VERIFIED
    )
    view = task_view(verified.task, sandbox, MAX_STEPS)
    plain = trajectory_conversation(verified, view)
    corrected = trajectory_conversation(verified, view, correction=CORRECTION)

    assert corrected.messages[: len(plain.messages)] == plain.messages
    answer, final = corrected.messages[len(plain.messages) :]
    assert answer == {
        "role": "tool",
        "tool_call_id": plain.messages[-1]["tool_calls"][0]["id"],
        "content": render_feedback(verified.steps[-1].feedback),
    }
    assert json.loads(final["tool_calls"][0]["function"]["arguments"]) == {"answer": CORRECTION}
    assert corrected.trained[-2:] == [False, True]
    assert corrected.steps[-1] is None
    assert_answered(corrected.messages)


@pytest.mark.parametrize(
    "reply",
    [
        Reply("Sure.", None, "stop", (), 0, 0),
        Reply("Two\nlines (with parens)\n", None, "tool_calls", (RawCall("c1", "f", "{}"),), 0, 0),
        Reply(None, "Not allowed.\nReally.", "stop", (), 0, 0),
        Reply("Hm.", "No.", "stop", (RawCall("c1", "f", '{"a": "x)"}'),), 0, 0),
        Reply(None, None, "content_filter", (), 0, 0),
        Reply(None, None, "stop", (), 0, 0),
        Reply(
            None,
            None,
            "tool_calls",
            (RawCall("a", "f", '{"q": "(\\n)"}\n'), RawCall("b", "g", '{"x":\n 1}')),
            0,
            0,
        ),
    ],
)
def test_a_rendered_reply_reads_back_as_the_same_message(reply: Reply) -> None:
    parsed = parse_rendered(reply.render())
    assert parsed.assistant_message() == reply.assistant_message()
    assert parsed.calls == reply.calls


@pytest.mark.parametrize(
    "action",
    [
        ToolCall(tool="send_message", arguments={"contact_id": "c-1", "text": "hi"}),
        MemoryRead(key="user.best_friend"),
        MemoryWrite(key="user.city", value="Lisbon"),
        MemorySearch(query="birthday"),
        SkillLoad(name="book_ride"),
        SubAgentCall(agent="gui", instruction="open the bank app", arguments={"app": "bank"}),
        Clarify(question="Which Anna?"),
        Refuse(reason="unsafe"),
        Finish(answer="Done."),
    ],
)
def test_action_call_is_the_inverse_of_parse_call(action: Action) -> None:
    name, arguments = action_call(action)
    assert parse_call(RawCall("c", name, json.dumps(arguments)), frozenset({"gui"})) == action


_DEEP = '{"x": ' + "[" * 5_000 + "]" * 5_000 + "}"
"""Arguments a model wrote nested past any JSON parser's depth: stored as its raw text."""


def test_template_messages_carry_arguments_as_objects() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}},
                {"id": "b", "type": "function", "function": {"name": "g", "arguments": '{"x'}},
                {"id": "c", "type": "function", "function": {"name": "h", "arguments": ""}},
                {"id": "d", "type": "function", "function": {"name": "k", "arguments": _DEEP}},
            ],
        },
    ]
    before = json.dumps(messages)

    shaped = template_messages(messages)

    assert json.dumps(messages) == before  # the input is left as it was
    calls = shaped[1]["tool_calls"]
    assert [c["function"]["arguments"] for c in calls] == [{"x": 1}, '{"x', {}, _DEEP]
    assert shaped[0] is messages[0]
