"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

COMPLETIONS_PATH = "/v1/chat/completions"


@dataclass(frozen=True)
class ChatReply:
    """One assistant message: content and/or tool calls (``(name, raw arguments text)``)."""

    content: str | None = None
    tool_calls: tuple[tuple[str, str], ...] = ()
    refusal: str | None = None
    finish_reason: str | None = None
    usage: tuple[int, int] | None = (12, 3)
    """``(prompt_tokens, completion_tokens)``; None leaves ``usage`` out of the response."""


@dataclass(frozen=True)
class ErrorReply:
    """An HTTP error status with an OpenAI-style error body."""

    status: int
    message: str = "scripted failure"


@dataclass(frozen=True)
class RawReply:
    """Any bytes as the response: an HTML page, JSON of the wrong shape, a huge body.

    ``trickle_s`` > 0 sends the body one byte at a time with that pause between bytes."""

    body: bytes
    status: int = 200
    content_type: str = "application/json"
    trickle_s: float = 0.0


Reply = ChatReply | ErrorReply | RawReply


def tool_call_reply(name: str, arguments: str, content: str | None = None) -> ChatReply:
    return ChatReply(content=content, tool_calls=((name, arguments),))


def tool_calls_reply(*calls: tuple[str, str]) -> ChatReply:
    return ChatReply(tool_calls=tuple(calls))


def text_reply(text: str) -> ChatReply:
    return ChatReply(content=text)


def refusal_reply(text: str, finish_reason: str = "stop") -> ChatReply:
    return ChatReply(refusal=text, finish_reason=finish_reason)


def error_reply(status: int, message: str = "scripted failure") -> ErrorReply:
    return ErrorReply(status=status, message=message)


def json_reply(value: Any, status: int = 200) -> RawReply:
    """``value`` as the whole response body (a completion of any shape, or none)."""
    return RawReply(json.dumps(value).encode(), status=status)


FINISH_REPLY = tool_call_reply("finish", '{"answer": "Done."}')


Responder = Callable[[dict[str, Any]], Reply]
"""Answers a request body once the scripted replies have run out."""


@dataclass
class _Script:
    replies: deque[Reply]
    responder: Responder | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    served: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next(self, body: dict[str, Any]) -> tuple[Reply, int]:
        with self.lock:
            self.requests.append(body)
            self.served += 1
            if self.replies:
                reply = self.replies.popleft()
            elif self.responder is not None:
                reply = self.responder(body)
            else:
                reply = FINISH_REPLY
            return reply, self.served


def completion_body(reply: ChatReply, number: int, model: str) -> dict[str, Any]:
    """The JSON of a chat completion carrying ``reply``."""
    calls = [
        {
            "id": f"call_{number}_{i}",
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
        for i, (name, arguments) in enumerate(reply.tool_calls)
    ]
    default_reason = "tool_calls" if calls else "stop"
    body: dict[str, Any] = {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": 1_773_475_200,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": reply.content,
                    "refusal": reply.refusal,
                    "tool_calls": calls or None,
                },
                "finish_reason": reply.finish_reason or default_reason,
                "logprobs": None,
            }
        ],
    }
    if reply.usage is not None:
        prompt, completion = reply.usage
        body["usage"] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
    return body


def _handler(script: _Script) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if self.path.rstrip("/") != COMPLETIONS_PATH:
                self._send(404, {"error": {"message": f"no route {self.path}", "type": "nf"}})
                return
            body = json.loads(raw or b"{}")
            reply, number = script.next(body)
            if isinstance(reply, RawReply):
                self._send_raw(reply)
            elif isinstance(reply, ErrorReply):
                error = {"message": reply.message, "type": "server_error", "code": None}
                self._send(reply.status, {"error": error})
            else:
                self._send(200, completion_body(reply, number, str(body.get("model", ""))))

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _send_raw(self, reply: RawReply) -> None:
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            try:
                if not reply.trickle_s:
                    self.wfile.write(reply.body)
                    return
                for i in range(len(reply.body)):
                    self.wfile.write(reply.body[i : i + 1])
                    self.wfile.flush()
                    time.sleep(reply.trickle_s)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up reading
                return

        def log_message(self, format: str, *args: Any) -> None:  # quiet tests
            return

    return Handler


class ScriptedChatServer:
    """The one fake in the project: it stands in for a hosted chat model, which cannot be
    reached from here, so that policies are tested through the real ``openai`` client.

    It answers ``POST /v1/chat/completions`` with the scripted replies in order (a chat
    message, an HTTP error status, or any raw body), then, once they run out, with what
    ``responder`` makes of the request (a rule that answers alike every time), or else
    with a ``finish`` tool call.
    Every request body is recorded in ``requests`` (bodies only: headers, which carry the
    API key, are not kept).
    """

    def __init__(self, replies: Iterable[Reply] = (), responder: Responder | None = None) -> None:
        self._script = _Script(replies=deque(replies), responder=responder)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self._script))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        with self._script.lock:
            return list(self._script.requests)

    @property
    def remaining(self) -> int:
        with self._script.lock:
            return len(self._script.replies)

    def start(self) -> ScriptedChatServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> ScriptedChatServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def refusing_url() -> str:
    """The base URL of an endpoint that refuses connections: a port this machine just
    handed out and closed again, so nothing listens there."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"
