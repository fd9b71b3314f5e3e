"""A local Hugging Face chat model as a policy, and the token trace online RL trains on.

``LocalChatModel`` speaks through the same ``ChatSession`` as the OpenAI-compatible
policy: the same system prompt, tool schemas, tool results, error messages and nudges,
so a model trained on the export sees at rollout time what it saw in SFT, and what it
will see when served. Only the reply source differs: the conversation is rendered with
the model's own chat template, sampled with ``generate``, and the tool calls are parsed
back from the text (``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, the
Qwen2.5 / Hermes convention our tiny model's template uses too).

**The token trace.** RL must score exactly the tokens the model generated, so the session
never re-tokenizes its own output: the context grows by the generated ids verbatim, and
by the tokens of what the harness adds after them (tool results, nudges, the next
assistant header), taken as the difference between two renderings of the conversation.
That needs a prefix-consistent template (rendering ``messages[:k]`` is a prefix of
rendering ``messages``), which ChatML templates are; a template that is not gets a clear
error. ``TokenTrace.model_mask`` marks the generated tokens (1) against the harness's (0).

**Malformed output is data.** Tool calls are read by ``training.tool_call_text``, which
forgives repeated tags, whitespace and trailing text; a block that still is not a JSON
object with a ``name`` stays in the reply's content, so the session records a typed
``malformed_output`` error and the episode goes on; a reply cut off by
``max_new_tokens`` keeps ``finish_reason="length"``. A context that would outgrow
``context_limit`` (``max_context``, or the model's own context if smaller) ends in an
empty reply (``finish_reason="length"``) without generating.

**Decoding within the call grammar.** A model with reference tokens (``nano``) writes
its replies under ``training.call_grammar``'s mask (``constrained``, on by default): only
calls of the functions offered, with their parameters, values of their types, and
references the conversation showed. A model without them keeps its own format, unmasked.

**Prefix reuse.** Each reply prefills only the tokens the last generation did not
compute: the rest of its keys and values come from ``prefix`` (``training.prefix_cache``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import LogitsProcessorList, PreTrainedModel, PreTrainedTokenizerBase

from agents.policies.base import TaskView
from agents.policies.chat_format import Message, Reply
from agents.policies.openai_policy import ChatSession
from contract import InvalidInputError, PolicyInfo, TaskSpec
from training.call_grammar import call_grammar, grammar_mask
from training.prefix_cache import PrefixCache
from training.tool_call_text import parse_tool_calls
from training.value_refs import shown_messages, uses_references, with_references

LOCAL_POLICY = "local-model"
"""``PolicyInfo.name`` of trajectories a local model collected."""


class TemplateError(InvalidInputError):
    """The model's chat template cannot extend a conversation token by token."""

    def __init__(self, detail: str) -> None:
        super().__init__("base.chat_template", detail)


@dataclass
class TokenTrace:
    """One episode in tokens: the opening prompt, then everything after it."""

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    model_mask: list[int] = field(default_factory=list)
    """1 for a token the model generated, 0 for one the harness added."""

    def add(self, ids: list[int], *, generated: bool) -> None:
        self.completion_ids += ids
        self.model_mask += [int(generated)] * len(ids)

    @property
    def context(self) -> list[int]:
        return self.prompt_ids + self.completion_ids

    @property
    def generated_tokens(self) -> int:
        return sum(self.model_mask)


@dataclass
class LocalChatModel:
    """A causal LM and its tokenizer as a ``Policy``; ``sessions`` keeps every episode's
    session (with its ``trace``) until the caller clears it."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    name: str
    temperature: float = 1.0
    max_new_tokens: int = 96
    max_context: int = 4096
    constrained: bool = True
    """Whether a model with reference tokens decodes within the call grammar."""
    sessions: list[LocalSession] = field(default_factory=list)
    prefix: PrefixCache | None = field(default_factory=PrefixCache, compare=False)
    """The last generation's keys and values, which the next one reuses for the context
    they share (``training.prefix_cache``); None prefills every context in full. A copy
    made with ``dataclasses.replace`` shares it, as it shares the model."""

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise InvalidInputError("temperature", f"{self.temperature} is negative")
        if self.max_new_tokens < 1:
            raise InvalidInputError("max_new_tokens", f"{self.max_new_tokens} is below 1")
        if not getattr(self.tokenizer, "chat_template", None):
            raise TemplateError("the tokenizer has no chat template")

    @property
    def positions(self) -> int | None:
        """The model's own context (``max_position_embeddings``: prompt and reply
        together); None when its config does not say."""
        limit = getattr(self.model.config, "max_position_embeddings", None)
        return limit if isinstance(limit, int) and limit > 0 else None

    @property
    def context_limit(self) -> int:
        """The longest context a reply may end at: ``max_context``, or the model's own
        (``positions``) if smaller, since positions past it were never trained
        (transformers warns and the replies degrade)."""
        positions = self.positions
        return self.max_context if positions is None else min(self.max_context, positions)

    @property
    def info(self) -> PolicyInfo:
        return PolicyInfo(name=LOCAL_POLICY, version=self.name, model=self.name)

    def start(self, task: TaskSpec, view: TaskView) -> LocalSession:
        """A session that sees ``view`` only (``task`` is not read)."""
        session = LocalSession(self, view)
        self.sessions.append(session)
        return session

    def render(self, messages: list[Message], tools: list[dict[str, Any]], *, prompt: bool) -> str:
        """The conversation as the model reads it: its chat template over ``messages``,
        values by reference for a model that has reference tokens (``value_refs``)."""
        text = self.tokenizer.apply_chat_template(
            [dict(m) for m in shown_messages(self.tokenizer, messages)],
            tools=list(tools),
            add_generation_prompt=prompt,
            tokenize=False,
        )
        if not isinstance(text, str):
            raise TemplateError("the chat template did not render text")
        return text

    def reply_text(self, messages: Sequence[Message], ids: list[int]) -> str:
        """The text of generated ``ids`` after ``messages``, end-of-turn and padding left
        out and, for a model with reference tokens, each reference ``messages`` showed
        replaced by its value."""
        text = _decode(self.tokenizer, ids)
        if not uses_references(self.tokenizer):
            return text
        return with_references(messages)[1].resolve(text)

    def grammar(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
    ) -> str | None:
        """The call grammar of the next reply after ``messages`` offered ``tools``; None for
        a model that decodes freely (not ``constrained``, or without reference tokens)."""
        if not self.constrained or not uses_references(self.tokenizer):
            return None
        return call_grammar(tools, with_references(messages)[1].shown())

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])

    def generate(self, context: list[int], grammar: str | None = None) -> tuple[list[int], bool]:
        """New token ids after ``context``, and whether they ended with end of turn; each
        token one ``grammar`` allows when it is given."""
        stop = _stop_ids(self.tokenizer)
        mask = grammar_mask(self.tokenizer, stop, grammar, len(context)) if grammar else None
        model_device = next(self.model.parameters()).device
        ids = torch.tensor([context], device=model_device)
        sampling: dict[str, Any] = (
            {"do_sample": True, "temperature": self.temperature, "top_k": 0, "top_p": 1.0}
            if self.temperature > 0
            else {"do_sample": False}
        )
        was_training = self.model.training
        self.model.train(False)
        try:
            claimed = self.prefix.claimed() if self.prefix is not None else nullcontext()
            with torch.no_grad(), claimed as prefix:
                reuse = {} if prefix is None else {"cache": prefix.for_context(self.model, context)}
                out = self.model.generate(  # type: ignore[operator]
                    input_ids=ids,
                    attention_mask=torch.ones_like(ids),
                    max_new_tokens=self.max_new_tokens,
                    eos_token_id=sorted(stop),
                    pad_token_id=self.tokenizer.pad_token_id,
                    use_cache=True,  # each new token attends to cached keys and values
                    logits_processor=LogitsProcessorList([mask] if mask else []),
                    **sampling,
                    **reuse,
                )
                sequence = [int(t) for t in out[0].tolist()]
                if prefix is not None:
                    prefix.keep(sequence)
        finally:
            self.model.train(was_training)
        new = sequence[len(context) :]
        if new and new[-1] == self.tokenizer.pad_token_id and new[-1] not in stop:
            while new and new[-1] == self.tokenizer.pad_token_id:
                new.pop()
        return new, bool(new) and new[-1] in stop


class LocalSession(ChatSession):
    """A ``ChatSession`` over a local model, keeping the episode's ``TokenTrace``."""

    def __init__(self, chat_model: LocalChatModel, view: TaskView) -> None:
        self._traced = _TracedSource(chat_model, lambda: self.offered)
        super().__init__(self._traced, view, tools_per_request=False)

    @property
    def trace(self) -> TokenTrace | None:
        """None until the model has been asked for its first reply."""
        return self._traced.trace


class _TracedSource:
    def __init__(
        self, chat_model: LocalChatModel, offered: Callable[[], list[dict[str, Any]]]
    ) -> None:
        self._chat = chat_model
        self._offered = offered
        """The functions the reply may call (the rendered ``tools`` are the start's)."""
        self.trace: TokenTrace | None = None
        self._rendered = ""
        """The conversation as rendered after the last reply (its assistant turn included)."""
        self._turns = 0

    def reply(
        self, messages: list[Message], tools: list[dict[str, Any]]
    ) -> tuple[Reply | None, int, str]:
        chat = self._chat
        text = chat.render(messages, tools, prompt=True)
        if self.trace is None:
            self.trace = TokenTrace(prompt_ids=chat.encode(text))
        else:
            if not text.startswith(self._rendered):
                raise TemplateError(
                    "rendering the conversation with the new messages does not extend its "
                    "earlier rendering (the template is not prefix-consistent)"
                )
            self.trace.add(chat.encode(text[len(self._rendered) :]), generated=False)
        context = self.trace.context
        if len(context) + chat.max_new_tokens > chat.context_limit:
            return Reply(None, None, "length", (), len(context), 0), 0, ""
        new, stopped = chat.generate(context, chat.grammar(messages, self._offered()))
        self.trace.add(new, generated=True)
        self._turns += 1
        content, calls = parse_tool_calls(chat.reply_text(messages, new), f"call_{self._turns}")
        reply = Reply(
            content=content,
            refusal=None,
            finish_reason="stop" if stopped else "length",
            calls=calls,
            input_tokens=len(context),
            output_tokens=len(new),
        )
        self._rendered = chat.render([*messages, reply.assistant_message()], tools, prompt=False)
        if stopped:  # what the template writes after the end of turn (ChatML: a newline)
            end = _decode(chat.tokenizer, new[-1:], keep_stop=True)
            at = self._rendered.rfind(end) if end else -1
            if at >= 0 and (tail := self._rendered[at + len(end) :]):
                self.trace.add(chat.encode(tail), generated=False)
        return reply, 0, ""


def _stop_ids(tokenizer: PreTrainedTokenizerBase) -> set[int]:
    stop = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    for token in ("<|im_end|>", "<|endoftext|>"):
        token_id = tokenizer.convert_tokens_to_ids(token)
        if isinstance(token_id, int) and token_id != tokenizer.unk_token_id:
            stop.add(token_id)
    return {int(t) for t in stop}


def _decode(tokenizer: PreTrainedTokenizerBase, ids: list[int], *, keep_stop: bool = False) -> str:
    """The generated text, without end-of-turn and padding tokens unless ``keep_stop``."""
    drop = set() if keep_stop else _stop_ids(tokenizer) | {tokenizer.pad_token_id}
    text = tokenizer.decode([t for t in ids if t not in drop], skip_special_tokens=False)
    return str(text)
