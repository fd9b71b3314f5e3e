"""Values by reference: the ``nano`` base copies a value from what it read as one token.

A model trained from scratch on a CPU learns which function a goal asks for long before it
learns to copy the values its arguments need from the goal or a tool result (README, "The
nano base"). Copying is easier when a value is one token that names it: each word,
number, time, date, email address, entity id and code (``AU377``, ``MQ2YUR``) of the
user's turns, and each number, time, date, email address, entity id and code of the
tools' results, is shown behind a reference token (``<v1>``, ``<v2>``, ... in the order
values first appear: ``<v1>Log <v2>60 <v3>minutes``), and a call that copies one writes
its reference (``{"minutes":<v2>}``, ``{"query":"<v7> <v8>"}`` for a name of two words).
A code is then the same token in the goal and in the result that lists it, so the model
can pick the flight whose number the goal names by matching tokens. A phrase of several
words the user quotes, or a skill's step quotes, is one value too, before its words' own
(``subject "<v3><v4>Gym <v5>membership"``): a call that writes the text quoted writes
one token (``{"subject":"<v3>"}``), where word by word it dropped or moved the commas
(``Leaving now see you soon`` for ``Leaving now, see you soon``). For
a template's every parameter draw the reference is then the same token, which the model
learns as it learns a function's name. A reply's references are resolved to their
values before its calls are parsed, so a policy, the model server and the exported data
see values only; a reference the conversation has not shown stays as written and the
call fails as any wrong value does.

A value the turns mean but do not write is shown beside the words that mean it
(``training.meant_values``), so that a call copies it instead of computing it: a spoken
date's ISO date (``Wednesday, March 25 (<v9>2026-03-25)``), and the time a stated offset
reaches from a time (``at <v4>19:30 (+2h <v5>21:30)`` after "a two-hour event", for the
event's end).

A tool's words are not referenced: with every word of a result's strings behind a
reference too, the model wrote a word where an id belongs (a song's title for its id, a
word of an error message for a contact's id), and greedy episodes on the development
set's seen templates solved fewer tasks (README, "The nano base"). A skill's steps are
the exception: the user wrote the routine, its steps name the settings, levels and
labels a call copies (``set_setting bluetooth off``, ``set_level ring_volume to 17``),
and read as plain text the model wrote whichever name it had seen most instead
(README, "A skill's words by reference"). So is a remembered fact's value (``memory_read``,
``memory_search``): the user told it, and a call copies it (the favourite restaurant a
search asks for); read plain, the model searched the restaurant it had seen most. And so
are a calendar event's title and location (``list_events``, ``search_events``): the user
named them when making the event, and a call copies them (an agenda's lines, a ride to
where an event is); read plain, the model wrote the titles it had seen most. Digits
inside a word, a phone number's country code after ``+`` and a decimal's parts are not
values either.

Marking depends only on the messages before a turn, so rendering a longer conversation
extends the rendering of a shorter one (what SFT's masks and the rollouts' token traces
rely on).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from datetime import date
from decimal import Decimal
from typing import Any

from transformers import PreTrainedTokenizerBase

from agents.policies.chat_format import MEMORY_READ, MEMORY_SEARCH, SKILL_FUNCTION, json_value
from envs.sandbox.apps.calendar import list_events, search_events
from training.meant_values import (
    stated_offsets,
    stated_today,
    with_dates_meant,
    with_times_meant,
)

MAX_REFERENCES = 96
"""Reference tokens in a vocabulary; values past the last one are shown plain."""
REFERENCE_TOKENS = tuple(f"<v{i}>" for i in range(1, MAX_REFERENCES + 1))
_ALONE_BEFORE = r"(?<![\w.+-])(?<!\d:)"
_ALONE_AFTER = r"(?![\w:]|-\d|\.\d)"
_ENTITY_ID = r"[a-z]+-\d+"
ENTITY_ID = re.compile(_ENTITY_ID)
"""An entity id (``p-14``, ``sms-1001``): letters, a hyphen, a number."""
_CODE = r"(?=[A-Z\d-]*\d)[A-Z\d]*[A-Z][A-Z\d]*(?:-[A-Z\d]+)*|[A-Z]{4,}"
"""A code a person copies exactly: capitals with digits, in groups joined by hyphens
(a flight number ``AU377``, a booking reference ``MQ2YUR``, a member number
``G-23776``), or four or more capitals (a reference ``GSOLSC``; ``EUR`` and ``USB`` are
words)."""
_NUMBER_OR_ID = (
    rf"[\w.+-]+@[\w-]+(?:\.[\w-]+)+|\d{{4}}-\d{{2}}-\d{{2}}|{_ENTITY_ID}|{_CODE}|\d+(?:\.\d+)?"
)
_TIME = r"\d{1,2}:\d{2}"
VALUE = re.compile(rf"{_ALONE_BEFORE}({_NUMBER_OR_ID}|{_TIME}){_ALONE_AFTER}")
"""An email address, a date (``2026-03-14``), a number (``60``, ``93.45``), a time
(``14:00``), an entity id (``p-14``) or a code (``AU377``) standing alone: not part of
a word, a timestamp (``2026-03-14T10:00``) or a longer number. What a tool's result is
marked by: a routine's alarm (``set_alarm at 07:20``) or an opening hour a search agent
found is copied from a result as one token, as an id is."""
WORD_OR_VALUE = re.compile(
    rf"{_ALONE_BEFORE}(?P<value>{_NUMBER_OR_ID}|{_TIME}){_ALONE_AFTER}"
    rf"|(?<![\w+-])(?P<word>[^\W\d_]+(?:_[^\W\d_]+)*)(?!\w|-\d|\.\d)"
)
"""``VALUE`` or a word (a name joined by underscores, ``ring_volume``, is one), also
after a dot (``user.brother``) or before a colon (``brother:``): what the user's turns
and a skill's steps are marked by, since a call copies names, labels, choices and keys
from the request word by word."""
_IN_DOUBLE = r"[^\s\"\\\x00-\x1f](?:[^\"\\\x00-\x1f]*[^\s\"\\\x00-\x1f])?"
_IN_SINGLE = r"[^\s\"'\\\x00-\x1f](?:[^\"'\\\x00-\x1f]*[^\s\"'\\\x00-\x1f])?"
SINGLE_QUOTED = re.compile(rf"(?<!\w)'({_IN_SINGLE})'(?!\w)")
"""A phrase in single quotes (``saying 'Leaving now, see you soon'``): how a skill's steps
quote what a call writes, inside the JSON of its result."""
QUOTED = re.compile(rf"(?<![\w\\])\"({_IN_DOUBLE})\"(?!\w)|{SINGLE_QUOTED.pattern}")
"""A phrase in double or single quotes, as a user quotes what a call writes (``with the
subject "Gym membership"``)."""
_SPACE = re.compile(r"\s")
_FACT_VALUE = re.compile(r'"value":\s*')
_EVENT_NAMES = re.compile(r'"(?:title|location)":\s*')
_WORDS_IN: dict[str, re.Pattern[str]] = {
    SKILL_FUNCTION: re.compile(r'"steps":\s*(?=\[)'),
    MEMORY_READ: _FACT_VALUE,
    MEMORY_SEARCH: _FACT_VALUE,
    list_events.__name__: _EVENT_NAMES,
    search_events.__name__: _EVENT_NAMES,
}
"""The results whose words are referenced, by function: the JSON value that each pattern
introduces (a skill's steps, a remembered fact's value, a calendar event's title and
location)."""
REFERENCE = re.compile(r"<v\d+>")
PLAIN_NUMBER = re.compile(r"\d+(?:\.\d+)?")
"""A number as the turns show it: digits, and a decimal's fraction (``925.00``)."""
_SLOT = "\u0000{}\u0000"


def _found(match: re.Match[str]) -> str:
    return match.group(match.lastindex or 0)


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
        self._number: dict[Decimal, str] = {}
        """The first reference of each number shown, by its value (``925.00`` is 925)."""

    def _reference(self, value: str) -> str | None:
        known = self._of.get(value)
        if known is None and len(self._of) < MAX_REFERENCES:
            known = REFERENCE_TOKENS[len(self._of)]
            self._of[value] = known
            self._value[known] = value
            if PLAIN_NUMBER.fullmatch(value):
                self._number.setdefault(Decimal(value), known)
        return known

    def mark(
        self, text: str, *, words: bool = False, phrases: re.Pattern[str] | None = None
    ) -> str:
        """``text`` with each value behind its reference: numbers, times, dates, emails,
        ids and codes (``VALUE``), and with ``words`` also words (``WORD_OR_VALUE``: a
        user's turn). A phrase of several words in the quotes ``phrases`` finds is also
        one value, its reference inside the opening quote before its words' own
        (``"<v3><v4>Gym <v5>membership"``): a call copies it whole, punctuation too."""
        values = WORD_OR_VALUE if words else VALUE

        def marked(match: re.Match[str]) -> str:
            value = _found(match)
            reference = self._reference(value)
            return value if reference is None else reference + value

        parts: list[str] = []
        done = 0
        for quoted in phrases.finditer(text) if phrases is not None else ():
            phrase = _found(quoted)
            if not _SPACE.search(phrase):
                continue
            start, end = quoted.span(quoted.lastindex or 0)
            parts.append(values.sub(marked, text[done:start]))
            parts.append((self._reference(phrase) or "") + values.sub(marked, phrase))
            done = end
        parts.append(values.sub(marked, text[done:]))
        return "".join(parts)

    def refer(self, arguments: Any) -> str | Any:
        """A call's arguments as the compact JSON text the template writes, with each
        value the turns showed written as its reference: a number as the bare token
        (``{"minutes":<v1>}``), a text in quotes (``{"product_id":"<v3>"}``) and inside a
        longer text (``"order <v4> is late"``). A fractional number refers to a number
        shown with the same value however it was written (``925.0`` to ``925.00 EUR``):
        otherwise a rent read as ``925.00`` is a value the model must spell, and it writes
        the amount it saw most. An integer refers only to an integer shown as it is, so
        that its reference resolves to an integer. Arguments that are not a JSON object are
        left as they are."""
        if isinstance(arguments, str):
            try:
                arguments = json_value(arguments)
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
            if reference is None and isinstance(value, float) and math.isfinite(value):
                reference = self._number.get(Decimal(repr(value)))
            if reference is None:
                return value
            numbers.append(reference)
            return _SLOT.format(len(numbers) - 1)
        if isinstance(value, str):
            return self._referred_text(value)
        if isinstance(value, list):
            return [self._referred(v, numbers) for v in value]
        if isinstance(value, dict):
            return {k: self._referred(v, numbers) for k, v in value.items()}
        return value

    def _referred_text(self, text: str) -> str:
        """``text`` with each quoted phrase shown in it as the phrase's reference (the
        longest first), and each word or value elsewhere as its own."""

        def words(part: str) -> str:
            return WORD_OR_VALUE.sub(lambda m: self._of.get(_found(m), _found(m)), part)

        phrases = sorted((v for v in self._of if _SPACE.search(v)), key=len, reverse=True)
        if not phrases:
            return words(text)
        alternatives = "|".join(map(re.escape, phrases))
        parts: list[str] = []
        done = 0
        for found in re.finditer(rf"(?<!\w)(?:{alternatives})(?!\w)", text):
            parts += [words(text[done : found.start()]), self._of[found.group(0)]]
            done = found.end()
        return "".join([*parts, words(text[done:])])

    def shown(self) -> dict[str, str]:
        """Each reference the conversation showed and its value, in order of first sight."""
        return dict(self._value)

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
    today: date | None = None
    offsets: list[int] = []
    function_of: dict[str, Any] = {}
    for original in messages:
        message = dict(original)
        role = message.get("role")
        content = message.get("content")
        if role == "system" and isinstance(content, str) and today is None:
            today = stated_today(content)
        elif role == "user" and isinstance(content, str):
            offsets += [o for o in stated_offsets(content) if o not in offsets]
            meant = with_times_meant(with_dates_meant(content, today), offsets)
            message["content"] = references.mark(meant, words=True, phrases=QUOTED)
        elif role == "tool" and isinstance(content, str):
            content = with_times_meant(content, offsets)
            opening = _WORDS_IN.get(str(function_of.get(str(message.get("tool_call_id")))))
            message["content"] = (
                references.mark(content)
                if opening is None
                else _marked_words(content, references, opening)
            )
        elif role == "assistant" and message.get("tool_calls"):
            function_of.update(_functions(message["tool_calls"]))
            message["tool_calls"] = [
                _referred_call(call, references) for call in message["tool_calls"]
            ]
        shown.append(message)
    return shown, references


def _functions(calls: Any) -> dict[str, Any]:
    """The function each call names, by the call's id (calls of another shape are
    skipped)."""
    named: dict[str, Any] = {}
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping) and isinstance(call.get("id"), str):
            named[call["id"]] = function.get("name")
    return named


def _marked_words(content: str, references: References, opening: re.Pattern[str]) -> str:
    """A tool's result with the words of each JSON value that ``opening`` introduces
    referenced as a user's are (module docstring), the rest as any tool's result; a
    result that is not such JSON is marked as any tool's."""
    parts: list[str] = []
    done = 0
    for found in opening.finditer(content):
        start = found.end()
        if start < done:
            continue
        try:
            _, end = json.JSONDecoder().raw_decode(content, start)
        except ValueError:
            continue
        parts += [
            references.mark(content[done:start]),
            references.mark(content[start:end], words=True, phrases=SINGLE_QUOTED),
        ]
        done = end
    return "".join([*parts, references.mark(content[done:])])


def _referred_call(call: Mapping[str, Any], references: References) -> dict[str, Any]:
    call = dict(call)
    if isinstance(call.get("function"), Mapping):
        function = dict(call["function"])
        function["arguments"] = references.refer(function.get("arguments"))
        call["function"] = function
    elif "arguments" in call:
        call["arguments"] = references.refer(call["arguments"])
    return call
