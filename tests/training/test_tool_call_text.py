"""The tolerant tool-call parser: loose writing is forgiven, anything else stays typed."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from training.tool_call_text import parse_tool_calls

CALL = '{"name": "set_alarm", "arguments": {"time": "07:00"}}'


@pytest.mark.parametrize(
    ("text", "content"),
    [
        (f"<tool_call>{CALL}</tool_call>", None),
        (f"<tool_call>\n<tool_call>\n{CALL}\n</tool_call>", None),
        (f"<tool_call><tool_call>  <tool_call>{CALL}</tool_call>", None),
        (f"  <tool_call>\n\t {CALL} \n\n</tool_call>  ", None),
        (f"<tool_call>\n```json\n{CALL}\n```\n</tool_call>", None),
        (f"<tool_call>{CALL} I will set it now.</tool_call>", "I will set it now."),
        (f"Setting it.\n<tool_call>\n{CALL}", "Setting it."),
        (f"<tool_call>{CALL}</tool_call>\nDone, see above.", "Done, see above."),
    ],
    ids=[
        "plain",
        "repeated opening tag",
        "three opening tags",
        "stray whitespace",
        "code fence",
        "trailing text inside",
        "no closing tag at the end",
        "trailing text after",
    ],
)
def test_loosely_written_calls_are_one_valid_call(text: str, content: str | None) -> None:
    parsed_content, calls = parse_tool_calls(text, "c")
    assert [(c.id, c.name, json.loads(c.arguments)) for c in calls] == [
        ("c_0", "set_alarm", {"time": "07:00"})
    ]
    assert parsed_content == content


def test_two_blocks_give_two_calls_in_order_even_when_the_first_is_not_closed() -> None:
    second = '{"name": "start_timer", "arguments": {"minutes": 5}}'
    for text in (
        f"<tool_call>{CALL}</tool_call><tool_call>{second}</tool_call>",
        f"<tool_call>{CALL}\n<tool_call>{second}</tool_call>",
    ):
        _, calls = parse_tool_calls(text, "c")
        assert [(c.id, c.name) for c in calls] == [("c_0", "set_alarm"), ("c_1", "start_timer")]


@pytest.mark.parametrize(
    "text",
    [
        "<tool_call>\n{not json}\n</tool_call>",
        '<tool_call>{"arguments": {}}</tool_call>',
        '<tool_call>{"name": 3}</tool_call>',
        '<tool_call>["set_alarm"]</tool_call>',
        "<tool_call></tool_call>",
        "<tool_call>",
        '<tool_call>{"name": "set_alarm", "arguments": {"time": "07:00"}',
        '<tool_call>{"name": "set_alarm", "arguments": ' + "[" * 5_000 + "</tool_call>",
    ],
    ids=["not-json", "no-name", "name-not-text", "list", "empty", "unclosed", "cut", "deep"],
)
def test_a_block_without_a_readable_call_stays_content(text: str) -> None:
    assert parse_tool_calls(text, "c") == (text, ())


def test_a_malformed_block_does_not_hide_a_good_one_after_it() -> None:
    text = f"<tool_call>{{oops}}</tool_call>\n<tool_call>{CALL}</tool_call>"
    content, calls = parse_tool_calls(text, "c")
    assert content == "<tool_call>{oops}</tool_call>"
    assert [c.name for c in calls] == ["set_alarm"]


@given(st.text(max_size=200))
def test_text_without_a_call_comes_back_as_it_was(text: str) -> None:
    content, calls = parse_tool_calls(text, "c")
    if "<tool_call>" not in text:
        assert (content, calls) == (text.strip() or None, ())


SPACE = st.text(alphabet=" \n\t", max_size=4)


@given(
    st.text(alphabet=st.characters(codec="utf-8"), max_size=20),
    st.dictionaries(st.text(max_size=8), st.integers() | st.text(max_size=8), max_size=3),
    st.integers(min_value=1, max_value=3),
    SPACE,
    SPACE,
)
def test_any_call_survives_repeated_tags_and_whitespace(
    name: str, arguments: dict[str, object], opens: int, before: str, after: str
) -> None:
    body = json.dumps({"name": name, "arguments": arguments})
    text = (f"<tool_call>{before}" * opens) + body + after + "</tool_call>"
    _, calls = parse_tool_calls(text, "c")
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [(name, arguments)]
