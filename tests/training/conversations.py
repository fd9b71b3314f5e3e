"""A conversation and its tools that exercise a chat template: shared by the base tests."""

from __future__ import annotations

from typing import Any

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
