"""The pure part of serving: a chat-completions request in, a completion body out.

``respond`` runs one request on a ``LoadedModel``: the messages and tools (validated as
``ChatRequest``) are rendered with the model's own chat template, as ``LocalChatModel``
renders them during rollouts (tool-call arguments as JSON objects, as the export writes
them: ``template_messages``), then generated, then turned into a completion by
``completion_body``. Model output is parsed in one place, ``parse_tool_calls`` of
``training.tool_call_text``: a ``<tool_call>`` block that is not a JSON object with a
``name`` stays in the content, so a malformed reply is data for the client, never a
server error. A model that decodes within the call grammar (``nano``) does so here too,
over the request's tools, unless ``tool_choice`` is ``none``.

Token limits: ``max_completion_tokens`` (or ``max_tokens``) defaults to the server's
``max_new_tokens``, which is also its ceiling (more is capped, not refused); it is cut
further to the room the model's context (``max_position_embeddings``) leaves after the
prompt, and a prompt that leaves no room is refused by name (``messages``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from agents.policies.chat_format import Message, template_messages
from contract import FlywheelError, InvalidInputError
from serving.client import PROBE_MESSAGES, PROBE_TOOL
from training.base_model import load_base
from training.chat_model import LocalChatModel, _decode
from training.tool_call_text import parse_tool_calls

__all__ = [
    "ROLES",
    "TOOL_CHOICES",
    "ChatMessage",
    "ChatRequest",
    "Generated",
    "LoadedModel",
    "ProbeError",
    "ToolDefinition",
    "check_request",
    "completion_body",
    "generate",
    "load_folder",
    "probe_model",
    "prompt_ids",
    "respond",
]

ROLES = ("system", "user", "assistant", "tool")
TOOL_CHOICES = ("auto", "none")
DEFAULT_TEMPERATURE = 1.0
"""OpenAI's default when a request names none."""
PROBE_TOKENS = 4


class ProbeError(FlywheelError):
    """A model folder that loaded but cannot answer a chat turn."""


# -- the request -----------------------------------------------------------------------


class _Wire(BaseModel):
    """A JSON object of the OpenAI wire format: fields we do not read are kept, unread."""

    model_config = ConfigDict(extra="allow")


class FunctionCall(_Wire):
    name: str
    arguments: str


class AssistantToolCall(_Wire):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class TextPart(_Wire):
    type: Literal["text"]
    text: str


class ChatMessage(_Wire):
    """One message; content as text, or as text parts (joined by newlines)."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    tool_calls: list[AssistantToolCall] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _shaped_for_its_role(self) -> ChatMessage:
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs tool_call_id")
        if self.tool_calls and self.role != "assistant":
            raise ValueError(f"only assistant messages carry tool_calls, not {self.role}")
        return self

    def wire(self) -> Message:
        """The message as the client sent it, its content as one text."""
        message = self.model_dump(mode="json", exclude_unset=True)
        if isinstance(self.content, list):
            message["content"] = "\n".join(part.text for part in self.content)
        return message


class FunctionDefinition(_Wire):
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ToolDefinition(_Wire):
    type: Literal["function"]
    function: FunctionDefinition


class ChatRequest(_Wire):
    """The fields of ``POST /v1/chat/completions`` this server reads; others are ignored."""

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[ToolDefinition] | None = None
    tool_choice: Any = None
    """``auto``, ``none`` or absent (``check_request``)."""
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    seed: int | None = None
    stream: bool | None = None
    n: int | None = None

    def wire_messages(self) -> list[Message]:
        return template_messages([m.wire() for m in self.messages])

    def wire_tools(self) -> list[dict[str, Any]]:
        return [t.model_dump(mode="json", exclude_unset=True) for t in self.tools or ()]

    @property
    def calls_tools(self) -> bool:
        """Whether tool calls are parsed from the reply (not with ``tool_choice`` none)."""
        return bool(self.tool_choice != "none")


def check_request(request: ChatRequest) -> None:
    """Refuse, by field, what this server does not do: streaming, several choices, and
    any ``tool_choice`` but ``auto`` and ``none``."""
    if request.stream:
        raise InvalidInputError("stream", "streaming is not supported", ["false"])
    if request.n is not None and request.n != 1:
        raise InvalidInputError("n", f"{request.n} choices: only one is generated", [1])
    if request.tool_choice is not None and request.tool_choice not in TOOL_CHOICES:
        raise InvalidInputError(
            "tool_choice", f"{request.tool_choice!r} is not supported", TOOL_CHOICES
        )


# -- the model -------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadedModel:
    """A model folder loaded for serving, and who it is in the registry."""

    model_id: str
    name: str
    path: Path
    chat: LocalChatModel
    context_limit: int | None
    """``max_position_embeddings``: prompt and reply together; None when unknown."""
    loaded_at: int
    """Unix time it loaded."""


def load_folder(path: str | Path, model_id: str, name: str) -> LoadedModel:
    """Load the Hugging Face model folder ``path`` (with its tokenizer and chat template).
    A folder that does not load, for whatever reason, or an empty id or name, is an
    ``InvalidInputError`` naming ``path``, ``model_id`` or ``name``."""
    for field, value in (("model_id", model_id), ("name", name)):
        if not value.strip():
            raise InvalidInputError(field, "must not be empty")
    folder = Path(path).expanduser().resolve()  # absolute: never the name ``tiny``
    try:
        base = load_base(str(folder))
    except InvalidInputError as exc:
        raise InvalidInputError("path", exc.problem) from None
    except Exception as exc:  # any other failure to load is the folder's too
        problem = f"{folder}: does not load ({type(exc).__name__}: {exc})"
        raise InvalidInputError("path", problem) from exc
    chat = LocalChatModel(base.model, base.tokenizer, name, temperature=0.0, max_new_tokens=1)
    return LoadedModel(
        model_id=model_id,
        name=name,
        path=folder,
        chat=chat,
        context_limit=chat.positions,
        loaded_at=int(time.time()),
    )


def probe_model(model: LoadedModel) -> None:
    """One short greedy turn on a tiny conversation with one tool; ``ProbeError`` when
    rendering, generating or decoding raises."""
    try:
        ids = prompt_ids(model.chat, PROBE_MESSAGES, [PROBE_TOOL])
        new, _ = replace(model.chat, temperature=0.0, max_new_tokens=PROBE_TOKENS).generate(ids)
        parse_tool_calls(_decode(model.chat.tokenizer, new), "call_probe")
    except Exception as exc:  # whatever fails, the folder cannot serve: say what and why
        raise ProbeError(
            f"{model.path}: the probe turn failed ({type(exc).__name__}: {exc})"
        ) from exc


# -- one turn --------------------------------------------------------------------------


@dataclass(frozen=True)
class Generated:
    """What the model said: its text, and whether it ended its turn itself."""

    text: str
    stopped: bool
    prompt_tokens: int
    completion_tokens: int


def prompt_ids(
    chat: LocalChatModel, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
) -> list[int]:
    """The conversation rendered with the model's chat template, as token ids."""
    return chat.encode(chat.render(list(messages), [dict(t) for t in tools], prompt=True))


def generate(model: LoadedModel, request: ChatRequest, *, max_new_tokens: int) -> Generated:
    """Render ``request`` and generate a reply of at most ``max_new_tokens`` (the server's
    default and ceiling) tokens, greedy at temperature 0, seeded when ``seed`` is set."""
    ids = prompt_ids(model.chat, request.wire_messages(), request.wire_tools())
    asked = request.max_completion_tokens or request.max_tokens or max_new_tokens
    budget = min(asked, max_new_tokens)
    if model.context_limit is not None:
        room = model.context_limit - len(ids)
        if room < 1:
            raise InvalidInputError(
                "messages",
                f"the conversation is {len(ids)} tokens; {model.model_id} reads at most "
                f"{model.context_limit} (max_position_embeddings), its reply included",
            )
        budget = min(budget, room)
    temperature = DEFAULT_TEMPERATURE if request.temperature is None else request.temperature
    chat = replace(model.chat, temperature=temperature, max_new_tokens=budget)
    grammar = (
        chat.grammar(request.wire_messages(), request.wire_tools())
        if request.calls_tools and request.tools
        else None
    )
    if request.seed is None or temperature == 0:
        new, stopped = chat.generate(ids, grammar)
    else:
        with torch.random.fork_rng():  # a seeded request leaves the server's RNG as it was
            torch.manual_seed(request.seed)
            new, stopped = chat.generate(ids, grammar)
    return Generated(chat.reply_text(request.wire_messages(), new), stopped, len(ids), len(new))


def completion_body(
    generated: Generated,
    *,
    model_id: str,
    parse_tools: bool = True,
    suffix: str | None = None,
    created: int | None = None,
) -> dict[str, Any]:
    """The ``chat.completion`` JSON of ``generated``: tool calls parsed from
    ``<tool_call>`` blocks (unless ``parse_tools`` is False); ``finish_reason`` is
    ``tool_calls`` when there are calls, ``length`` when the token budget cut the reply,
    else ``stop``. ``suffix`` makes the ids (``chatcmpl-<suffix>``, ``call_<suffix>_<i>``);
    ``model`` is the registry id of the model that answered."""
    suffix = suffix or uuid.uuid4().hex[:24]
    if parse_tools:
        content, calls = parse_tool_calls(generated.text, f"call_{suffix}")
    else:
        content, calls = generated.text or None, ()
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    if calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in calls
        ]
    reason = "tool_calls" if calls else "stop" if generated.stopped else "length"
    return {
        "id": f"chatcmpl-{suffix}",
        "object": "chat.completion",
        "created": int(time.time()) if created is None else created,
        "model": model_id,
        "choices": [{"index": 0, "message": message, "finish_reason": reason, "logprobs": None}],
        "usage": {
            "prompt_tokens": generated.prompt_tokens,
            "completion_tokens": generated.completion_tokens,
            "total_tokens": generated.prompt_tokens + generated.completion_tokens,
        },
    }


def respond(model: LoadedModel, request: ChatRequest, *, max_new_tokens: int) -> dict[str, Any]:
    """One request answered by ``model``: checked, generated, shaped as a completion."""
    check_request(request)
    generated = generate(model, request, max_new_tokens=max_new_tokens)
    return completion_body(generated, model_id=model.model_id, parse_tools=request.calls_tools)
