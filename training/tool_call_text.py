"""Tool calls written as text (``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``,
the Qwen2.5 / Hermes convention) parsed back into calls, tolerantly and typed.

Small models write the convention loosely. What is forgiven: an opening tag said more
than once, whitespace anywhere, a JSON code fence around the object, text after the
object inside the block (kept as content), and a missing closing tag at the very end of
the reply (generation stopped there). What is not: a block whose first value is not a
JSON object with a string ``name``; it stays in the content verbatim, where the session
reads it as a reply without a usable call (a typed ``malformed_output``).
"""

from __future__ import annotations

import json
import re

from agents.policies.chat_format import RawCall

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
_REPEATED_OPEN = re.compile(r"(?:\s*<tool_call>)*\s*(?:```(?:json)?\s*)?")
_FENCE_END = re.compile(r"\s*(?:```)?\s*")
_DECODER = json.JSONDecoder()


def parse_tool_calls(text: str, id_prefix: str) -> tuple[str | None, tuple[RawCall, ...]]:
    """The content and the well-formed tool calls of a generated reply.

    Calls are numbered ``{id_prefix}_0``, ``_1``, ... in the order written; ``arguments``
    is JSON text (an object, unless the model wrote a string)."""
    calls: list[RawCall] = []
    kept: list[str] = []
    position = 0
    while (start := text.find(OPEN, position)) != -1:
        kept.append(text[position:start])
        parsed = _block(text, start + len(OPEN), f"{id_prefix}_{len(calls)}")
        if parsed is None:
            end = text.find(CLOSE, start)
            position = len(text) if end == -1 else end + len(CLOSE)
            kept.append(text[start:position])
            continue
        call, trailing, position = parsed
        calls.append(call)
        kept.append(trailing)
    kept.append(text[position:])
    content = "".join(kept).strip()
    return content or None, tuple(calls)


def _block(text: str, body: int, call_id: str) -> tuple[RawCall, str, int] | None:
    """The call that starts at ``body``, the text after its object inside the block, and
    where the block ends; None when no call can be read."""
    head = _REPEATED_OPEN.match(text, body)
    begin = head.end() if head else body
    try:
        value, after = _DECODER.raw_decode(text, begin)
    except (json.JSONDecodeError, RecursionError):  # nesting past the parser's depth too
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    fence = _FENCE_END.match(text, after)
    after = fence.end() if fence else after
    end = text.find(CLOSE, after)
    if end == -1:
        trailing, position = text[after:], len(text)
    else:
        trailing, position = text[after:end], end + len(CLOSE)
    if OPEN in trailing:  # the next block began before this one closed
        cut = trailing.index(OPEN)
        trailing, position = trailing[:cut], after + cut
    arguments = value.get("arguments", {})
    encoded = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return RawCall(call_id, value["name"], encoded), trailing, position
