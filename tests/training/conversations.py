"""A conversation and its tools that exercise a chat template, and rows of scripted
episodes as the export writes them: shared by the base and reference tests."""

from __future__ import annotations

from typing import Any

from agents.policies.chat_format import (
    format_tools,
    task_view,
    template_messages,
    trajectory_conversation,
)
from agents.policies.scripted import ScriptedPolicy
from agents.runner import run_episode
from contract import step_budget
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "send_text",
            "description": "Send a text message.",
            "parameters": {
                "type": "object",
                "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
                "required": ["to", "body"],
            },
        },
    },
    {"type": "function", "function": {"name": "finish", "parameters": {"type": "object"}}},
]


def _call(call_id: str, name: str, arguments: object) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "You are the planner of a phone assistant."},
    {"role": "user", "content": "Tell Zoë in Zürich I'm late — 10 minutes."},
    {"role": "assistant", "content": None, "tool_calls": [_call("c0", "lookup", {"q": "Zoë"})]},
    {"role": "tool", "tool_call_id": "c0", "content": '{"result": [{"id": "p7"}]}'},
    {
        "role": "assistant",
        "content": "Sending it.",
        "tool_calls": [_call("c1", "send_text", '{"to": "p7", "body'), _call("c2", "finish", {})],
    },
    {"role": "tool", "tool_call_id": "c1", "content": '{"error": {"kind": "invalid_arguments"}}'},
    {"role": "tool", "tool_call_id": "c2", "content": "not executed"},
    {"role": "user", "content": "Your last reply contained no function call."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [_call("c3", "send_text", {"to": "p7", "body": "Late, 10 min 🙏"})],
    },
    {"role": "tool", "tool_call_id": "c3", "content": '{"result": "sent"}'},
    {"role": "assistant", "content": "Done: Zoë knows."},
]
"""Tool calls with object and text arguments, two calls in one turn, a tool error, a
nudge, non-ASCII text."""


def scripted_rows(count: int, seed: int, policy: ScriptedPolicy) -> list[dict[str, Any]]:
    """Rows (``messages``, ``tools``) as the export writes them, of ``policy``'s episodes
    of ``count`` sampled tasks of every template kind."""
    sandbox = MobileSandbox()
    rows = []
    for task in sample_tasks(count, seed, sandbox):
        trajectory = run_episode(task, sandbox, policy)
        view = task_view(task, sandbox, step_budget(task, None))
        messages = template_messages(trajectory_conversation(trajectory, view).messages)
        rows.append({"messages": messages, "tools": format_tools(view)})
    return rows
