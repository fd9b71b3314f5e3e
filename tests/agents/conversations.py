"""Builders for tests that talk to the scripted chat server: replies that follow a
task's plan or exercise every kind of reply, the OpenAI policy keeping its sessions,
and the check that a conversation answers every tool call."""

from __future__ import annotations

import json
from typing import Any

from agents.policies.base import TaskView
from agents.policies.openai_policy import ChatSession, OpenAIPolicy, make_client
from agents.runner import run_episode
from contract import TaskSpec, ToolCall, Trajectory
from envs.sandbox import MobileSandbox
from tests.fakes import (
    Reply,
    ScriptedChatServer,
    refusal_reply,
    text_reply,
    tool_call_reply,
    tool_calls_reply,
)

MAX_STEPS = 8


def plan_replies(task: TaskSpec) -> list[Reply]:
    """Replies that perform the task's reference plan (the test may read it; the policy
    may not)."""
    replies: list[Reply] = []
    for action in task.reference_plan:
        assert isinstance(action, ToolCall)
        replies.append(tool_call_reply(action.tool, json.dumps(action.arguments)))
    return replies


def assert_valid_conversation(messages: list[dict[str, Any]]) -> None:
    """Every assistant tool call is answered by a tool message before the next turn."""
    owed: set[str] = set()
    for message in messages:
        if message["role"] == "tool":
            assert message["tool_call_id"] in owed
            owed.discard(message["tool_call_id"])
            continue
        assert not owed, f"unanswered tool calls {owed} before a {message['role']} message"
        if message["role"] == "assistant":
            owed = {c["id"] for c in message.get("tool_calls") or ()}
    assert not owed


class CapturingPolicy(OpenAIPolicy):
    """The OpenAI policy, keeping the sessions and views it started."""

    sessions: list[ChatSession]
    views: list[TaskView]

    def start(self, task: TaskSpec, view: TaskView) -> ChatSession:
        session = super().start(task, view)
        self.sessions = [*getattr(self, "sessions", []), session]
        self.views = [*getattr(self, "views", []), view]
        return session


def run_openai(
    task: TaskSpec, replies: list[Reply], **policy_kw: Any
) -> tuple[Trajectory, CapturingPolicy, list[dict[str, Any]]]:
    with ScriptedChatServer(replies) as server:
        client = make_client(server.base_url, None, timeout_s=5.0)
        policy = CapturingPolicy(client, "scripted-model", sleep=lambda s: None, **policy_kw)
        trajectory = run_episode(task, MobileSandbox(), policy, max_steps=MAX_STEPS)
        requests = server.requests
    return trajectory, policy, requests


def messy_replies(task: TaskSpec) -> list[Reply]:
    """Every kind of reply the session handles, then the plan: text without a call, a
    refusal, arguments that are not JSON, an ill-typed harness call, two calls at once
    (the first is executed), an unknown tool, a call with multi-line content."""
    search, send = task.reference_plan
    assert isinstance(search, ToolCall)
    assert isinstance(send, ToolCall)
    return [
        text_reply("I will look them up.\nThen text them."),
        refusal_reply("I can't help with that."),
        tool_call_reply("search_contacts", '{"query": "Yus'),
        tool_call_reply("memory_read", '{"key": 3}'),
        tool_calls_reply(
            (search.tool, json.dumps(search.arguments)), (send.tool, json.dumps(send.arguments))
        ),
        tool_call_reply("teleport", "{}"),
        tool_call_reply(
            send.tool, json.dumps(send.arguments), content="Found them.\nSending (now)."
        ),
    ]
