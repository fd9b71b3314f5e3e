"""Test fakes. There is exactly one: the scripted chat-completions server."""

from tests.fakes.chat_server import (
    ChatReply,
    ErrorReply,
    RawReply,
    Reply,
    ScriptedChatServer,
    error_reply,
    json_reply,
    refusal_reply,
    refusing_url,
    text_reply,
    tool_call_reply,
    tool_calls_reply,
)

__all__ = [
    "ChatReply",
    "ErrorReply",
    "RawReply",
    "Reply",
    "ScriptedChatServer",
    "error_reply",
    "json_reply",
    "refusal_reply",
    "refusing_url",
    "text_reply",
    "tool_call_reply",
    "tool_calls_reply",
]
