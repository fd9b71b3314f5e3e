"""Values by reference: the ``nano`` base copies a value from what it read as one token.

A model trained from scratch on a CPU learns which function a goal asks for long before it
learns to copy the values its arguments need from the goal or a tool result (README, "The
nano base"). Copying is easier when a value is one token that names it: each word,
number, time and entity id of the user's turns, and each number and id of the tools'
turns, is shown behind a reference token (``<v1>``, ``<v2>``, ... in the order values
first appear: ``<v1>Log <v2>60 <v3>minutes``), and a call that copies one writes its
reference (``{"minutes":<v2>}``, ``{"query":"<v7> <v8>"}`` for a name of two words). For
a template's every parameter draw the reference is then the same token, which the model
learns as it learns a function's name. A reply's references are resolved to their
values before its calls are parsed, so a policy, the model server and the exported data
see values only; a reference the conversation has not shown stays as written and the
call fails as any wrong value does.

Marking depends only on the messages before a turn, so rendering a longer conversation
extends the rendering of a shorter one (what SFT's masks and the rollouts' token traces
rely on). Dates are not values here (plans derive them from the goal's words), nor are
digits inside a word, a phone number's country code after ``+``, or a decimal's parts;
a tool's words are not referenced (what a call copies from a result is an id).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from transformers import PreTrainedTokenizerBase

MAX_REFERENCES = 96
"""Reference tokens in a vocabulary; values past the last one are shown plain."""
REFERENCE_TOKENS = tuple(f"<v{i}>" for i in range(1, MAX_REFERENCES + 1))
_ALONE_BEFORE = r"(?<![\w.+-])(?<!\d:)"
_ALONE_AFTER = r"(?![\w:]|-\d|\.\d)"
_NUMBER_OR_ID = r"[a-z]+-\d+|\d+(?:\.\d+)?"
VALUE = re.compile(rf"{_ALONE_BEFORE}({_NUMBER_OR_ID}){_ALONE_AFTER}")
"""A number (``60``, ``93.45``) or an entity id (``p-14``) standing alone: not part of a
word, a date (``2026-03-14``), a time (``14:00``) or a longer number. What a tool's
result is marked by."""
WORD_OR_VALUE = re.compile(
    rf"{_ALONE_BEFORE}({_NUMBER_OR_ID}|\d{{1,2}}:\d{{2}}|[^\W\d_]+){_ALONE_AFTER}"
)
"""``VALUE``, a time (``20:30``) or a word: what the user's turns are marked by, since a
call copies names, labels and choices from the request word by word."""
REFERENCE = re.compile(r"<v\d+>")
_SLOT = "\u0000{}\u0000"


def uses_references(tokenizer: PreTrainedTokenizerBase) -> bool:
    """Whether ``tokenizer`` has the reference tokens as tokens of their own (a ``nano``
    base does; a model of another kind has none)."""
    ids = [tokenizer.convert_tokens_to_ids(t) for t in (REFERENCE_TOKENS[0], REFERENCE_TOKENS[-1])]
    return all(isinstance(i, int) and i != tokenizer.unk_token_id for i in ids)


def shown_messages(
    tokenizer: PreTrainedTokenizerBase, messages: Sequence[Mapping[str, Any]]
) -> Sequence[Mapping[str, Any]]:
    """``messages`` as ``tokenizer``'s model reads them: values by reference when it
    has the reference tokens, else as they are."""
    return with_references(messages)[0] if uses_references(tokenizer) else messages


class References:
    """The references of one conversation: each value the turns read, by first sight."""

    def __init__(self) -> None:
        self._of: dict[str, str] = {}
        self._value: dict[str, str] = {}

    def _reference(self, value: str) -> str | None:
        known = self._of.get(value)
        if known is None and len(self._of) < MAX_REFERENCES:
            known = REFERENCE_TOKENS[len(self._of)]
            self._of[value] = known
            self._value[known] = value
        return known

    def mark(self, text: str, *, words: bool = False) -> str:
        """``text`` with each value behind its reference: numbers and ids (``VALUE``),
        and with ``words`` also times and words (``WORD_OR_VALUE``: a user's turn)."""

        def marked(match: re.Match[str]) -> str:
            value = match.group(1)
            reference = self._reference(value)
            return value if reference is None else reference + value

        return (WORD_OR_VALUE if words else VALUE).sub(marked, text)

    def refer(self, arguments: Any) -> str | Any:
        """A call's arguments as the compact JSON text the template writes, with each
        value the turns showed written as its reference: a number as the bare token
        (``{"minutes":<v1>}``), a text in quotes (``{"product_id":"<v3>"}``) and inside a
        longer text (``"order <v4> is late"``). Arguments that are not a JSON object are
        left as they are."""
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                return arguments
        if not isinstance(arguments, dict):
            return arguments
        numbers: list[str] = []
        text = json.dumps(
            self._referred(arguments, numbers), ensure_ascii=False, separators=(",", ":")
        )
        for index, reference in enumerate(numbers):
            text = text.replace(json.dumps(_SLOT.format(index)), reference)
        return text

    def _referred(self, value: Any, numbers: list[str]) -> Any:
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int | float):
            reference = self._of.get(str(value))
            if reference is None:
                return value
            numbers.append(reference)
            return _SLOT.format(len(numbers) - 1)
        if isinstance(value, str):
            return WORD_OR_VALUE.sub(lambda m: self._of.get(m.group(1), m.group(1)), value)
        if isinstance(value, list):
            return [self._referred(v, numbers) for v in value]
        if isinstance(value, dict):
            return {k: self._referred(v, numbers) for k, v in value.items()}
        return value

    def resolve(self, text: str) -> str:
        """A reply with each reference the conversation showed replaced by its value
        (numbers were written bare and texts in quotes, so the JSON keeps its types)."""
        return REFERENCE.sub(lambda m: self._value.get(m.group(0), m.group(0)), text)


def with_references(
    messages: Sequence[Mapping[str, Any]],
) -> tuple[list[dict[str, Any]], References]:
    """``messages`` as the ``nano`` base reads them, and the conversation's references
    (to resolve the next reply with)."""
    references = References()
    shown: list[dict[str, Any]] = []
    for original in messages:
        message = dict(original)
        role = message.get("role")
        if role in ("user", "tool") and isinstance(message.get("content"), str):
            message["content"] = references.mark(message["content"], words=role == "user")
        elif role == "assistant" and message.get("tool_calls"):
            message["tool_calls"] = [
                _referred_call(call, references) for call in message["tool_calls"]
            ]
        shown.append(message)
    return shown, references


def _referred_call(call: Mapping[str, Any], references: References) -> dict[str, Any]:
    call = dict(call)
    if isinstance(call.get("function"), Mapping):
        function = dict(call["function"])
        function["arguments"] = references.refer(function.get("arguments"))
        call["function"] = function
    elif "arguments" in call:
        call["arguments"] = references.refer(call["arguments"])
    return call
