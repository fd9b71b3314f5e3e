"""Decoding within the call format: a ``nano`` model writes only calls the task allows.

A model trained from scratch on a CPU learns which function a goal asks for before it
learns the call format's every rule, and one wrong token (a function the task does not
offer, an argument the function does not take, a rating's reference where an entity id
belongs) sends an episode off the paths it was trained on. So while a ``nano`` model
generates, each next token is masked to those the *call grammar* of that reply allows
(README, "The nano base"):

- a reply is one or more calls, ``<tool_call>{"name":...,"arguments":{...}}</tool_call>``,
  in the compact template's JSON without spaces, then the end of the turn;
- the name is a function offered now (those that arrived with a later user turn too);
  the arguments are that function's parameters, in sorted order or the schema's (the two
  orders the training rows write), each required one present, each value of its
  schema's type: a string (one that matches the schema's ``pattern``, a date or a time,
  when it has one; otherwise one JSON parses: no control character, only JSON's
  escapes), a number, a boolean, one of an ``enum``'s values, an array or an
  object of such values;
- references (``training.value_refs``) only to values the conversation showed; a number
  may be the reference of a number, a patterned string that of a matching value, an
  enum value that of one of its values;
- an argument named ``*_id`` (and each item of an ``*_ids`` array) is an entity id: the
  reference of an id the conversation showed, never another value's; written out in the
  id shape (``c-4``) only when the conversation showed none.

Which value is right stays the model's choice: the grammar removes only what no task
accepts. The grammar is a Lark grammar, compiled and matched token by token by
``llguidance`` (the Rust engine behind structured output in vLLM and SGLang); the
reference tokens and ``<tool_call>`` are added tokens, which it matches by token.
"""

from __future__ import annotations

import json
import logging
import re
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

import llguidance
import llguidance.hf
import llguidance.torch
import torch
from transformers import LogitsProcessor, PreTrainedTokenizerBase

from training.value_refs import ENTITY_ID

_LOG = logging.getLogger(__name__)
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
"""A number, as a reference may stand for one where a number belongs."""
_GENERIC = r"""
string: "\"" (CHUNK | ref)* "\""
filled: "\"" (CHUNK | ref)+ "\""
CHUNK: /(?:[^"\\\x00-\x1f]|\\["\\\/bfnrt]|\\u[0-9a-fA-F]{4})+/
number: NUMBER | numref
NUMBER: /-?(0|[1-9][0-9]*)(\.[0-9]+)?/
value: string | number | "true" | "false" | "null" | array | object
array: "[" (value ("," value)*)? "]"
object: "{" (string ":" value ("," string ":" value)*)? "}"
"""
"""The rules every reply's grammar shares; ``ref`` and ``numref`` are the references of
the conversation at hand."""
_NOTHING = r"/[^\s\S]/"
"""A regex no text matches: the rule of an empty choice."""


def call_grammar(tools: Sequence[Mapping[str, Any]], shown: Mapping[str, str]) -> str:
    """The Lark grammar of a reply offered ``tools`` (OpenAI-style function specs) after a
    conversation that showed ``shown`` (reference token → value)."""
    rules = _Rules(shown)
    functions = [rule for tool in tools if (rule := rules.function(tool)) is not None]
    body = " | ".join(functions) if functions else _NOTHING
    return "\n".join(
        [
            "start: call+",
            f'call: <tool_call> "{{\\"name\\":" ({body}) "}}" </tool_call>',
            *rules.lines,
            _GENERIC.strip(),
            _alternatives("ref", shown),
            _alternatives("numref", {k: v for k, v in shown.items() if NUMBER.fullmatch(v)}),
        ]
    )


class _Rules:
    """Named rules for each function's arguments, and the values they take."""

    def __init__(self, shown: Mapping[str, str]) -> None:
        self._shown = shown
        self.lines: list[str] = []
        self._named: dict[str, str] = {}
        """Rules built once per reply: the entity id's, one per string pattern."""

    def _rule(self, body: str) -> str:
        name = f"r{len(self.lines)}"
        self.lines.append(f"{name}: {body}")
        return name

    def function(self, tool: Mapping[str, Any]) -> str | None:
        """The rule of a call of ``tool`` after its name; None for a spec without one."""
        spec = tool.get("function", tool)
        name = spec.get("name") if isinstance(spec, Mapping) else None
        if not isinstance(name, str):
            return None
        parameters = spec.get("parameters")
        arguments = self._object(parameters if isinstance(parameters, Mapping) else {})
        return self._rule(
            f'{_literal(json.dumps(name, ensure_ascii=False) + ",")} "\\"arguments\\":" {arguments}'
        )

    def _object(self, schema: Mapping[str, Any]) -> str:
        """``{...}`` with the schema's properties in sorted order or in the schema's own
        (the two orders calls are written in), each required one present; any object
        when the schema names no properties."""
        properties = schema.get("properties")
        if not isinstance(properties, Mapping) or not properties:
            return "object"
        required = set(schema.get("required") or ())
        pairs = {
            key: f"{_literal(json.dumps(key, ensure_ascii=False) + ':')} {self._value(value, key)}"
            for key, value in properties.items()
        }
        orders = [sorted(properties), list(properties)]
        bodies = [
            self._members(order, pairs, required)
            for order in orders[: 1 + (orders[0] != orders[1])]
        ]
        return f'"{{" ({" | ".join(bodies)}) "}}"'

    def _members(self, keys: Sequence[str], pairs: Mapping[str, str], required: set[str]) -> str:
        """The members of an object in the order of ``keys``, those not ``required``
        optional, separated by commas (a rule that may match nothing)."""
        tails: list[str | None] = [None] * (len(keys) + 1)
        for index in range(len(keys) - 1, 0, -1):  # the keys from ``index`` on, after one
            pair = f'"," {pairs[keys[index]]}'
            step = pair if keys[index] in required else f"({pair})?"
            after = tails[index + 1]
            tails[index] = self._rule(step if after is None else f"{step} {after}")
        firsts: list[str] = []
        for index, key in enumerate(keys):
            rest = tails[index + 1]
            firsts.append(pairs[key] if rest is None else f"{pairs[key]} {rest}")
            if key in required:
                return self._rule(" | ".join(firsts))
        return self._rule(f"({' | '.join(firsts)})?")

    def _entity(self) -> str:
        """An entity id in quotes: the reference of one the conversation showed, or,
        when it showed none, one written out (``c-4``)."""
        if "entity" not in self._named:
            ids = [ref for ref, value in self._shown.items() if ENTITY_ID.fullmatch(value)]
            body = " | ".join(ids) if ids else "/[a-z]{1,4}-[0-9]{1,4}/"
            self._named["entity"] = self._rule(f'"\\"" ({body}) "\\""')
        return self._named["entity"]

    def _shaped(self, pattern: str, terminal: str) -> str:
        """A string of the schema's ``pattern`` (a date, a time, an email address): the
        reference of a value that matches it, or one written out that does."""
        if pattern not in self._named:
            refs = [ref for ref, value in self._shown.items() if _matches(pattern, value)]
            body = " | ".join([*refs, terminal])
            self._named[pattern] = self._rule(f'"\\"" ({body}) "\\""')
        return self._named[pattern]

    def _value(self, schema: Any, name: str) -> str:
        if not isinstance(schema, Mapping):
            return "value"
        kind = schema.get("type")
        enum = schema.get("enum")
        if isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
            refs = [ref for ref, value in self._shown.items() if value in enum]
            words = [_literal(json.dumps(v, ensure_ascii=False)) for v in enum]
            return "(" + " | ".join(words + [f'"\\"" {ref} "\\""' for ref in refs]) + ")"
        if kind == "string":
            if name.endswith("_id"):
                return self._entity()
            pattern = schema.get("pattern")
            if isinstance(pattern, str) and (terminal := _regex_terminal(pattern)):
                return self._shaped(pattern, terminal)
            return "filled" if _at_least_one(schema, "minLength") else "string"
        if kind in ("integer", "number"):
            return "number"
        if kind == "boolean":
            return '("true" | "false")'
        if kind == "array":
            item = self._value(schema.get("items"), name[:-1] if name.endswith("_ids") else name)
            items = f'{item} ("," {item})*'
            if not _at_least_one(schema, "minItems"):
                items = f"({items})?"
            return f'"[" {items} "]"'
        if kind == "object":
            return self._object(schema)
        return "value"


def _at_least_one(schema: Mapping[str, Any], keyword: str) -> bool:
    """Whether ``schema``'s ``keyword`` (``minLength``, ``minItems``) refuses an empty
    value, so the grammar must too."""
    least = schema.get(keyword)
    return isinstance(least, int) and not isinstance(least, bool) and least >= 1


def _literal(text: str) -> str:
    """``text`` as a Lark string literal."""
    return json.dumps(text, ensure_ascii=False)


def _regex_terminal(pattern: str) -> str | None:
    """A JSON-schema ``pattern`` that must match a whole value as a Lark regex terminal;
    None for one the grammar leaves free (not anchored at both ends, or with a group
    construct, a backreference or a slash)."""
    if not (pattern.startswith("^") and pattern.endswith("$")) or pattern.endswith("\\$"):
        return None
    body = pattern[1:-1]
    if not body or "(?" in body or "/" in body or re.search(r"\\[1-9]", body):
        return None
    return f"/{body}/"


def _matches(pattern: str, value: str) -> bool:
    try:
        return re.search(pattern, value) is not None
    except re.error:
        return False


def _alternatives(rule: str, shown: Mapping[str, str]) -> str:
    """``rule`` as one of the reference tokens ``shown``, or as nothing to match when
    there are none (a regex no text matches)."""
    return f"{rule}: {' | '.join(shown) if shown else _NOTHING}"


_TOKENIZERS: weakref.WeakKeyDictionary[PreTrainedTokenizerBase, llguidance.LLTokenizer] = (
    weakref.WeakKeyDictionary()
)


def grammar_tokenizer(
    tokenizer: PreTrainedTokenizerBase, stop: Iterable[int]
) -> llguidance.LLTokenizer:
    """``tokenizer`` as llguidance reads it, its end-of-turn tokens as ``stop`` (built
    once per tokenizer)."""
    known = _TOKENIZERS.get(tokenizer)
    if known is None:
        known = llguidance.hf.from_tokenizer(cast(Any, tokenizer), eos_token=sorted(stop))
        _TOKENIZERS[tokenizer] = known
    return known


class GrammarMask(LogitsProcessor):
    """A ``generate`` logits processor that leaves only the tokens ``grammar`` allows
    after the tokens generated so far (those past ``prompt_length``). Build it with
    ``grammar_mask``."""

    def __init__(self, matcher: llguidance.LLMatcher, vocab_size: int, prompt_length: int):
        self._matcher = matcher
        self._bits = llguidance.torch.allocate_token_bitmask(1, vocab_size)
        self._shifts = torch.arange(32, dtype=torch.int32).repeat(self._bits.shape[1])
        self._prompt_length = prompt_length

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if input_ids.shape[1] > self._prompt_length:
            self._matcher.consume_token(int(input_ids[0, -1]))
        if self._matcher.is_error():
            return scores  # off the grammar already (cannot happen under the mask)
        llguidance.torch.fill_next_token_bitmask(self._matcher, self._bits, 0)
        allowed = (self._bits.repeat_interleave(32, dim=1)[0] >> self._shifts) & 1
        width = min(scores.shape[-1], allowed.shape[0])
        refused = torch.ones(scores.shape[-1], dtype=torch.bool)
        refused[:width] = allowed[:width] == 0
        return scores.masked_fill(refused.to(scores.device), float("-inf"))  # type: ignore[return-value]


def grammar_mask(
    tokenizer: PreTrainedTokenizerBase, stop: Iterable[int], grammar: str, prompt_length: int
) -> GrammarMask | None:
    """The mask of ``grammar`` for generation after ``prompt_length`` tokens; None (and a
    warning) when the grammar does not compile, so a tool schema the grammar cannot
    express leaves the reply free instead of failing the episode."""
    reader = grammar_tokenizer(tokenizer, stop)
    try:
        matcher = llguidance.LLMatcher(reader, llguidance.LLMatcher.grammar_from_lark(grammar))
    except (ValueError, RuntimeError) as exc:
        _LOG.warning("the call grammar does not compile (%s); decoding freely", exc)
        return None
    if matcher.is_error():
        _LOG.warning("the call grammar does not compile (%s); decoding freely", matcher.get_error())
        return None
    return GrammarMask(matcher, reader.vocab_size, prompt_length)
