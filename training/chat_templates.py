"""The chat templates of the bases built here, and rendering without a tokenizer.

Both are ChatML with Qwen2.5-style tool calls (a ``<tool_call>`` JSON object with
``name`` and ``arguments`` in the assistant turn, one ``tool`` turn per result) and both
are *prefix-consistent*: the rendering of a conversation's first messages is a prefix of
the rendering of more of them, and the generation prompt plus an assistant turn's body is
exactly that turn's rendering. SFT computes its loss masks from this (``training.sft``),
and rollouts append tool results after the tokens a model generated without re-rendering
what came before. They differ in how the functions are shown:

- ``CHAT_TEMPLATE`` (``tiny``, and a local model without a template of its own): the
  functions as JSON schemas in the system turn, with Qwen2.5's instructions around them.
- ``COMPACT_TEMPLATE`` (``nano``): the system turn is one line per function,
  ``name(arg,opt?)``, and nothing else: no system prompt, no types, no descriptions, no
  prose of the template's own, and tool calls are JSON without spaces. A model trained
  from scratch on a CPU learns the arguments' types and values from the calls it is
  shown, and every token it need not read is compute it can spend on the task: the
  structure is the same for every task and a row is about a sixth of its length with
  the full schemas (430 tokens against about 2,800 on a 2,000-task round's export). A
  system message's text is left out (the harness's system prompt says nothing a model
  trained on the export does not learn from it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from transformers.utils.chat_template_utils import render_jinja_template

CHAT_TEMPLATE = r"""
{%- macro arguments_of(function) -%}
    {%- if function.arguments is string -%}
        {{- function.arguments -}}
    {%- elif function.arguments is defined -%}
        {{- function.arguments | tojson -}}
    {%- else -%}
        {{- '{}' -}}
    {%- endif -%}
{%- endmacro -%}
{%- set system_first = messages | length > 0 and messages[0].role == 'system' -%}
{%- if tools -%}
    {{- '<|im_start|>system\n' -}}
    {%- if system_first and messages[0].content -%}
        {{- messages[0].content + '\n\n' -}}
    {%- endif -%}
    {{- '# Tools\n\nYou may call the functions whose signatures are within '
        + '<tools></tools>:\n<tools>' -}}
    {%- for tool in tools -%}
        {{- '\n' + (tool | tojson) -}}
    {%- endfor -%}
    {{- '\n</tools>\n\nTo call a function, write a JSON object with its name and arguments '
        + 'within <tool_call></tool_call> tags.<|im_end|>\n' -}}
{%- endif -%}
{%- for message in messages -%}
    {%- if loop.first and tools and system_first -%}
    {%- elif message.role == 'assistant' -%}
        {{- '<|im_start|>assistant\n' -}}
        {%- generation -%}
            {%- if message.content -%}
                {{- message.content -}}
            {%- endif -%}
            {%- if message.tool_calls -%}
                {%- for call in message.tool_calls -%}
                    {%- if not loop.first or message.content -%}
                        {{- '\n' -}}
                    {%- endif -%}
                    {%- set function = call.function if call.function is defined else call -%}
                    {{- '<tool_call>\n{"name": ' + (function.name | tojson) + ', "arguments": ' -}}
                    {{- arguments_of(function) -}}
                    {{- '}\n</tool_call>' -}}
                {%- endfor -%}
            {%- endif -%}
            {{- '<|im_end|>' -}}
        {%- endgeneration -%}
        {{- '\n' -}}
    {%- else -%}
        {{- '<|im_start|>' + message.role + '\n' -}}
        {%- if message.content -%}
            {{- message.content -}}
        {%- endif -%}
        {{- '<|im_end|>\n' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant\n' -}}
{%- endif -%}
""".strip()
"""ChatML with Qwen2.5-style tool calls (``<tool_call>`` JSON blocks in the assistant turn,
the functions as JSON lines in the system turn, one ``tool`` turn per result). Tool-call
arguments are JSON objects, written with ``tojson``, or text, written as it is (a model's
malformed arguments stay what it wrote). The assistant body, ``<|im_end|>`` included, is a
``{% generation %}`` block, for ``return_assistant_tokens_mask``."""

COMPACT_TEMPLATE = r"""
{%- macro arguments_of(function) -%}
    {%- if function.arguments is string -%}
        {{- function.arguments -}}
    {%- elif function.arguments is defined -%}
        {{- function.arguments | tojson(separators=(',', ':')) -}}
    {%- else -%}
        {{- '{}' -}}
    {%- endif -%}
{%- endmacro -%}
{%- macro signature(tool) -%}
    {%- set function = tool.function if tool.function is defined else tool -%}
    {%- set parameters = function.parameters if function.parameters is defined else {} -%}
    {%- set properties = parameters.properties if parameters.properties is defined else {} -%}
    {%- set required = parameters.required if parameters.required is defined else [] -%}
    {{- function.name + '(' -}}
    {%- for name in properties -%}
        {{- (',' if not loop.first else '') + name + ('' if name in required else '?') -}}
    {%- endfor -%}
    {{- ')' -}}
{%- endmacro -%}
{%- set system_first = messages | length > 0 and messages[0].role == 'system' -%}
{%- if tools -%}
    {{- '<|im_start|>system' -}}
    {%- for tool in tools -%}
        {{- '\n' + signature(tool) -}}
    {%- endfor -%}
    {{- '<|im_end|>\n' -}}
{%- endif -%}
{%- for message in messages -%}
    {%- if loop.first and system_first -%}
    {%- elif message.role == 'assistant' -%}
        {{- '<|im_start|>assistant\n' -}}
        {%- generation -%}
            {%- if message.content -%}
                {{- message.content -}}
            {%- endif -%}
            {%- if message.tool_calls -%}
                {%- for call in message.tool_calls -%}
                    {%- set function = call.function if call.function is defined else call -%}
                    {{- '<tool_call>{"name":' + (function.name | tojson) + ',"arguments":' -}}
                    {{- arguments_of(function) -}}
                    {{- '}</tool_call>' -}}
                {%- endfor -%}
            {%- endif -%}
            {{- '<|im_end|>' -}}
        {%- endgeneration -%}
        {{- '\n' -}}
    {%- else -%}
        {{- '<|im_start|>' + message.role + '\n' -}}
        {%- if message.content -%}
            {{- message.content -}}
        {%- endif -%}
        {{- '<|im_end|>\n' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant\n' -}}
{%- endif -%}
""".strip()
"""The functions' signatures, one per line, as the system turn (module docstring); tool
calls as ``<tool_call>{"name":...,"arguments":{...}}</tool_call>`` in JSON without
spaces, the assistant body a ``{% generation %}`` block as in ``CHAT_TEMPLATE``."""


def render(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    *,
    add_generation_prompt: bool = False,
    chat_template: str = CHAT_TEMPLATE,
) -> str:
    """``messages`` (and ``tools``) rendered with ``chat_template`` as text, without a
    tokenizer. Keys whose value is None are dropped first, as ``apply_chat_template`` does."""
    rendered, _ = cast(
        tuple[list[str], object],  # annotated as str, returns the texts and the indices
        render_jinja_template(
            conversations=[[{k: v for k, v in m.items() if v is not None} for m in messages]],
            tools=[dict(tool) for tool in tools] if tools else None,
            chat_template=chat_template,
            add_generation_prompt=add_generation_prompt,
        ),
    )
    return rendered[0]
