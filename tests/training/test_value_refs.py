"""Values by reference (``training.value_refs``): what is marked, what a call writes, and
that resolving a call written by reference gives back its arguments, on every call of a
real round's export."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import date
from typing import Any

import pytest

from agents.policies.base import TaskView
from agents.policies.chat_format import MEMORY_READ, MEMORY_SEARCH, SKILL_FUNCTION, system_prompt
from agents.policies.scripted import FaultConfig, ScriptedPolicy
from envs.sandbox.apps.calendar import list_events, search_events
from envs.sandbox.state import WORLD_DATE
from tests.training.conversations import scripted_rows
from training.base_model import NANO, TINY, built_tokenizer, corpus_texts
from training.chat_templates import COMPACT_TEMPLATE, render
from training.meant_values import stated_offsets, stated_today
from training.value_refs import (
    MAX_REFERENCES,
    REFERENCE_TOKENS,
    References,
    shown_messages,
    uses_references,
    with_references,
)


def test_dates_times_numbers_and_ids_are_marked_in_order_of_first_sight_and_nothing_else() -> None:
    refs = References()
    text = refs.mark(
        "Log 60 minutes at 14:00 on 2026-03-14 for c-12, then 60 more; +351 912 and 93.45 EUR"
        " at 2026-03-14T10:00, 19:30:00 or 119:30"
    )
    assert text == (
        "Log <v1>60 minutes at <v2>14:00 on <v3>2026-03-14 for <v4>c-12, then <v1>60 more; "
        "+351 <v5>912 and <v6>93.45 EUR at 2026-03-14T10:00, 19:30:00 or 119:30"
    )
    assert refs.mark('{"id":"c-12","n":7,"when":"09:30","label":"room2","at":"14:00"}') == (
        '{"id":"<v4>c-12","n":<v7>7,"when":"<v8>09:30","label":"room2","at":"<v2>14:00"}'
    )


def test_a_tool_results_words_are_not_referenced_its_ids_dates_times_and_emails_are() -> None:
    messages = [
        {"role": "user", "content": "Book Pho Saigon"},
        {
            "role": "tool",
            "content": '{"result":{"name":"Pho Saigon","id":"r-3","on":"2026-03-20",'
            '"mail":"pho@example.com","at":"19:30","error":"not found"}}',
        },
    ]
    shown, _ = with_references(messages)
    assert shown[1]["content"] == (
        '{"result":{"name":"Pho Saigon","id":"<v4>r-3","on":"<v5>2026-03-20",'
        '"mail":"<v6>pho@example.com","at":"<v7>19:30","error":"not found"}}'
    )


def test_a_code_is_one_value_wherever_it_is_shown_and_a_word_of_capitals_is_not() -> None:
    """A flight number, a booking reference and a member number are one reference each,
    the same in the goal and in a result, so the flight a goal names is the result whose
    number is the goal's token; short capitals (a currency) and codes inside a word or a
    timestamp are not codes."""
    messages = [
        {"role": "user", "content": "Book flight AU377, then mail G-23776 and say EUR."},
        {
            "role": "tool",
            "content": '{"result":[{"id":"fl-3","number":"AU971"},{"id":"fl-45","number":"AU377"}],'
            '"body":"Payment reference: MQ2YUR. Order code: GSOLSC. 12 EUR by USB, AU377x,'
            ' xAU377, 2026-03-14T10:00, MQ2YUR."}',
        },
    ]
    shown, refs = with_references(messages)
    assert shown[0]["content"] == (
        "<v1>Book <v2>flight <v3>AU377, <v4>then <v5>mail <v6>G-23776 <v7>and <v8>say <v9>EUR."
    )
    assert shown[1]["content"] == (
        '{"result":[{"id":"<v10>fl-3","number":"<v11>AU971"},'
        '{"id":"<v12>fl-45","number":"<v3>AU377"}],'
        '"body":"Payment reference: <v13>MQ2YUR. Order code: <v14>GSOLSC. <v15>12 EUR by USB,'
        ' AU377x, xAU377, 2026-03-14T10:00, <v13>MQ2YUR."}'
    )
    arguments = {"flight_id": "fl-45", "body": "My number is G-23776, ref MQ2YUR"}
    written = refs.refer(arguments)
    assert written == '{"flight_id":"<v12>","body":"My number is <v6>, ref <v13>"}'
    assert json.loads(refs.resolve(written)) == arguments


def test_a_quoted_phrase_is_one_value_a_call_copies_whole_with_its_punctuation() -> None:
    """A phrase of several words the user quotes, or a skill's step quotes, is one
    reference before its words' own; a call that writes it, alone or inside a longer
    text, writes that reference. One quoted word, an apostrophe, an escaped quote and a
    double-quoted JSON string of another tool's result are no phrases."""
    skill = {"steps": ["send_message to Ana saying 'Leaving now, see you soon'", "it's 'Go'"]}
    messages = [
        {"role": "user", "content": 'Email the app\'s code, subject "Gym card", label "x".'},
        _call("s1", SKILL_FUNCTION, {"name": "leave"}),
        {"role": "tool", "tool_call_id": "s1", "content": json.dumps({"result": skill})},
        _call("s2", "search_notes", {"query": "a"}),
        {
            "role": "tool",
            "tool_call_id": "s2",
            "content": '{"title":"Gym card two","b":"\\"a b\\""}',
        },
    ]
    shown, refs = with_references(messages)
    assert shown[0]["content"] == (
        "<v1>Email <v2>the <v3>app'<v4>s <v5>code, <v6>subject "
        '"<v7><v8>Gym <v9>card", <v10>label "<v11>x".'
    )
    assert json.loads(shown[2]["content"])["result"]["steps"] == [
        "<v12>send_message <v13>to <v14>Ana <v15>saying "
        "'<v16><v17>Leaving <v18>now, <v19>see <v20>you <v21>soon'",
        "<v22>it'<v4>s '<v23>Go'",
    ]
    assert shown[4]["content"] == messages[4]["content"], "another tool's strings stay plain"
    arguments = {
        "text": "Leaving now, see you soon",
        "subject": "Re: Gym card",
        "body": "Leaving now, see you soon. Gym card two",
        "label": "see you",
    }
    written = refs.refer(arguments)
    assert written == (
        '{"text":"<v16>","subject":"Re: <v7>","body":"<v16>. <v7> two","label":"<v19> <v20>"}'
    )
    assert json.loads(refs.resolve(written)) == arguments


def test_every_quoted_phrase_a_call_copies_is_written_as_one_reference(
    export_rows: list[dict[str, Any]],
) -> None:
    """On a real round's rows: an argument that is a phrase the user or a skill quoted is
    written as that phrase's one reference."""
    copied = 0
    for row in export_rows:
        for before, written, refs in _calls_as_shown(row["messages"]):
            phrases = {value: ref for ref, value in refs.shown().items() if " " in value}
            for key, value in _arguments(before).items():
                if isinstance(value, str) and value in phrases:
                    copied += 1
                    assert f'"{key}":"{phrases[value]}"' in written
    assert copied > 20, "the rows copy quoted phrases"


def test_a_users_words_and_times_are_referenced_and_a_name_is_written_word_by_word() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Book Taj Spice at 20:30 for 4 on 2026-03-25"},
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "type": "function",
                    "function": {
                        "name": "book_table",
                        "arguments": {"query": "Taj Spice", "time": "20:30", "party": 4},
                    },
                }
            ],
        },
        {"role": "tool", "content": '{"result": "Taj Spice at 20:30, table t-2"}'},
    ]
    shown, refs = with_references(messages)
    assert shown[0]["content"] == (
        "<v1>Book <v2>Taj <v3>Spice <v4>at <v5>20:30 <v6>for <v7>4 <v8>on <v9>2026-03-25"
    )
    written = shown[1]["tool_calls"][0]["function"]["arguments"]
    assert written == '{"query":"<v2> <v3>","time":"<v5>","party":<v7>}'
    assert shown[2]["content"] == '{"result": "Taj Spice at <v5>20:30, table <v10>t-2"}'
    assert json.loads(refs.resolve(written)) == {"query": "Taj Spice", "time": "20:30", "party": 4}


def _skill_conversation(function: str = SKILL_FUNCTION) -> list[dict[str, Any]]:
    steps = ["set_setting bluetooth off", "set_level ring_volume to 17 (d-4)"]
    result = {"result": {"description": "Quiet night.", "name": "bedtime", "steps": steps}}
    return [
        {"role": "user", "content": "Run my bedtime routine."},
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "call_0",
                    "type": "function",
                    "function": {"name": function, "arguments": {"name": "bedtime"}},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_0", "content": json.dumps(result)},
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {
                        "name": "set_level",
                        "arguments": {"name": "ring_volume", "value": 17, "tag": "off bluetooth"},
                    },
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": '{"result": {"name": "ring_volume", "note": "bluetooth off"}}',
        },
    ]


def test_a_skills_steps_are_read_as_the_users_words_and_nothing_else_of_its_result() -> None:
    messages = _skill_conversation()
    shown, refs = with_references(messages)
    assert shown[2]["content"] == (
        '{"result": {"description": "Quiet night.", "name": "bedtime", "steps": '
        '["<v5>set_setting <v6>bluetooth <v7>off", '
        '"<v8>set_level <v9>ring_volume <v10>to <v11>17 (<v12>d-4)"]}}'
    )
    written = shown[3]["tool_calls"][0]["function"]["arguments"]
    assert written == '{"name":"<v9>","value":<v11>,"tag":"<v7> <v6>"}'
    assert json.loads(refs.resolve(written)) == _arguments(messages[3]["tool_calls"][0])
    assert shown[4]["content"] == messages[4]["content"], "another tool's words stay plain"


def test_steps_in_the_result_of_another_function_are_not_words_by_reference() -> None:
    shown, _ = with_references(_skill_conversation(function="get_recipe"))
    assert shown[2]["content"] == (
        '{"result": {"description": "Quiet night.", "name": "bedtime", "steps": '
        '["set_setting bluetooth off", "set_level ring_volume to <v5>17 (<v6>d-4)"]}}'
    )
    assert shown[3]["tool_calls"][0]["function"]["arguments"] == (
        '{"name":"ring_volume","value":<v5>,"tag":"off bluetooth"}'
    )


@pytest.mark.parametrize(
    ("function", "content"),
    [
        (SKILL_FUNCTION, '{"result": "loaded"}'),
        (SKILL_FUNCTION, '{"result": {"steps": ["set x", '),
        (MEMORY_READ, '{"result": null, "error": "no such fact"}'),
        (MEMORY_SEARCH, '{"value": ["Sakura Sushi", '),
    ],
)
def test_a_result_without_the_json_whose_words_are_read_is_marked_as_any_tools(
    function: str, content: str
) -> None:
    messages = _skill_conversation(function)
    messages[2]["content"] = content
    assert with_references(messages)[0][2]["content"] == References().mark(content)


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
        ],
    }


def _memory_conversation(function: str, result: Any) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Book my favourite restaurant."},
        _call("call_0", function, {"key": "user.favourite_restaurant"}),
        {"role": "tool", "tool_call_id": "call_0", "content": json.dumps({"result": result})},
        _call("call_1", "search_restaurants", {"query": "Sakura Sushi", "note": "Sushi bar"}),
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": '{"result": [{"id": "r-5", "name": "Sakura Sushi", "value": "Sushi"}]}',
        },
    ]


def test_a_remembered_facts_value_is_read_as_the_users_words_and_nothing_else() -> None:
    fact = {
        "key": "user.favourite_restaurant",
        "source": "talk 2026-01-30",
        "value": "Sakura Sushi",
    }
    messages = _memory_conversation(MEMORY_READ, fact)
    shown, refs = with_references(messages)
    assert shown[2]["content"] == (
        '{"result": {"key": "user.favourite_restaurant", "source": "talk <v5>2026-01-30", '
        '"value": "<v6>Sakura <v7>Sushi"}}'
    )
    written = shown[3]["tool_calls"][0]["function"]["arguments"]
    assert written == '{"query":"<v6> <v7>","note":"<v7> bar"}'
    assert json.loads(refs.resolve(written)) == _arguments(messages[3]["tool_calls"][0])
    assert shown[4]["content"] == (
        '{"result": [{"id": "<v8>r-5", "name": "Sakura Sushi", "value": "Sushi"}]}'
    ), "another tool's value field stays plain"


def test_every_value_a_memory_search_found_is_read_as_words() -> None:
    facts = [
        {"key": "user.favourite_restaurant", "value": "Sakura Sushi"},
        {"key": "user.usual_order", "value": {"dish": "Miso ramen", "size": 2}},
    ]
    shown, refs = with_references(_memory_conversation(MEMORY_SEARCH, facts))
    assert shown[2]["content"] == (
        '{"result": [{"key": "user.favourite_restaurant", "value": "<v5>Sakura <v6>Sushi"}, '
        '{"key": "user.usual_order", "value": {"<v7>dish": "<v8>Miso <v9>ramen", '
        '"<v10>size": <v11>2}}]}'
    )
    assert refs.resolve("<v8> <v9>") == "Miso ramen"


def test_an_events_title_and_location_are_read_as_the_users_words_and_nothing_else() -> None:
    events = [
        {
            "id": "ev-3",
            "title": "Quarterly planning",
            "date": "2026-03-20",
            "start": "10:00",
            "location": "City Library",
            "attendees": ["c-2"],
        },
        {
            "id": "ev-7",
            "title": "Dentist",
            "date": "2026-03-20",
            "start": "16:30",
            "location": "Video call",
            "attendees": [],
        },
    ]
    messages = [
        {"role": "user", "content": "Run my agenda note routine."},
        _call("call_0", "list_events", {"date": "2026-03-20"}),
        {"role": "tool", "tool_call_id": "call_0", "content": json.dumps({"result": events})},
        _call("call_1", "create_note", {"body": "10:00 Quarterly planning\n16:30 Dentist"}),
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": '{"result": {"id": "n-9", "title": "Dentist", "location": "Video call"}}',
        },
    ]
    shown, refs = with_references(messages)
    assert shown[2]["content"] == (
        '{"result": [{"id": "<v6>ev-3", "title": "<v7>Quarterly <v8>planning", '
        '"date": "<v9>2026-03-20", "start": "<v10>10:00", "location": "<v11>City <v12>Library", '
        '"attendees": ["<v13>c-2"]}, {"id": "<v14>ev-7", "title": "<v15>Dentist", '
        '"date": "<v9>2026-03-20", "start": "<v16>16:30", "location": "<v17>Video <v18>call", '
        '"attendees": []}]}'
    )
    written = shown[3]["tool_calls"][0]["function"]["arguments"]
    assert written == '{"body":"<v10> <v7> <v8>\\n<v16> <v15>"}'
    assert json.loads(refs.resolve(written)) == _arguments(messages[3]["tool_calls"][0])
    assert shown[4]["content"] == (
        '{"result": {"id": "<v19>n-9", "title": "Dentist", "location": "Video call"}}'
    ), "another tool's title stays plain"


@pytest.mark.parametrize("told", ["skill", "memory", "event"])
def test_every_copied_word_the_user_told_is_written_by_reference(
    export_rows: list[dict[str, Any]], told: str
) -> None:
    """A call's argument made of a loaded skill's, a remembered fact's or a listed
    event's words is written as their references, never as the words themselves."""
    words_of = {"skill": _skill_words, "memory": _remembered_words, "event": _event_words}[told]
    copied = 0
    for row in export_rows:
        words = words_of(row["messages"])
        for before, written, _ in _calls_as_shown(row["messages"]) if words else ():
            for value in _arguments(before).values():
                if isinstance(value, str) and value.split() and set(value.split()) <= words:
                    copied += 1
                    assert json.dumps(value) not in written
    assert copied > 5, f"the rows copy words from a {told}"


def _results_of(messages: list[dict[str, Any]], *functions: str) -> Iterator[Any]:
    """The result of each call of one of ``functions`` in a conversation."""
    calls = {
        call["id"]
        for message in messages
        for call in message.get("tool_calls") or ()
        if call["function"]["name"] in functions
    }
    for message in messages:
        if message["role"] == "tool" and message["tool_call_id"] in calls:
            yield json.loads(message["content"]).get("result")


def _remembered_words(messages: list[dict[str, Any]]) -> set[str]:
    """The words of every fact's value a conversation read from memory."""
    words: set[str] = set()
    for result in _results_of(messages, MEMORY_READ, MEMORY_SEARCH):
        for fact in result if isinstance(result, list) else [result]:
            if isinstance(fact, dict) and isinstance(fact.get("value"), str):
                words.update(fact["value"].split())
    return words


def _event_words(messages: list[dict[str, Any]]) -> set[str]:
    """The words of the titles and locations of every event a conversation listed or
    found, and the events' times (an agenda's line is a start and a title)."""
    words: set[str] = set()
    for result in _results_of(messages, list_events.__name__, search_events.__name__):
        for event in result or ():
            words.update(event["title"].split() + event["location"].split())
            words.update((event["start"], event["end"]))
    return words


def _calls_as_shown(
    messages: list[dict[str, Any]],
) -> Iterator[tuple[dict[str, Any], str, References]]:
    """Each call of a conversation: as stored, its arguments as the nano base reads them,
    and the conversation's references."""
    shown, refs = with_references(messages)
    for original, message in zip(messages, shown, strict=True):
        for before, after in zip(
            original.get("tool_calls") or (), message.get("tool_calls") or (), strict=True
        ):
            yield before, after["function"]["arguments"], refs


def _skill_words(messages: list[dict[str, Any]]) -> set[str]:
    """The words of the steps of every skill a conversation loaded."""
    words: set[str] = set()
    for result in _results_of(messages, SKILL_FUNCTION):
        if isinstance(result, dict):
            words.update(word for step in result["steps"] for word in step.split())
    return words


def test_a_word_after_a_dot_and_an_email_address_are_copied_by_reference() -> None:
    refs = References()
    assert refs.mark("Text my brother: at nora.jensen@example.com", words=True) == (
        "<v1>Text <v2>my <v3>brother: <v4>at <v5>nora.jensen@example.com"
    )
    arguments = {"key": "user.brother", "to": "nora.jensen@example.com", "k": "user.my_room"}
    written = refs.refer(arguments)
    assert written == '{"key":"user.<v3>","to":"<v5>","k":"user.my_room"}'
    assert json.loads(refs.resolve(written)) == arguments


def test_a_spoken_date_and_an_unpadded_time_are_followed_by_the_values_they_mean() -> None:
    system = {"role": "system", "content": "A planner.\nToday's date is 2026-03-14.\n"}
    goal = (
        "Move it to Wednesday, March 25 at 9:00, not Tuesday, March 25, "
        "and then to Friday, January 8."
    )
    call = {
        "role": "assistant",
        "tool_calls": [
            {"type": "function", "function": {"name": "move", "arguments": '{"date":"2026-03-25"}'}}
        ],
    }
    shown, refs = with_references([system, {"role": "user", "content": goal}, call])
    assert shown[0] == system
    assert shown[1]["content"] == (
        "<v1>Move <v2>it <v3>to <v4>Wednesday, <v5>March <v6>25 (<v7>2026-03-25) <v8>at "
        "<v9>9:00 (<v10>09:00), <v11>not <v12>Tuesday, <v5>March <v6>25, <v13>and <v14>then "
        "<v3>to <v15>Friday, <v16>January <v17>8 (<v18>2027-01-08)."
    )
    written = shown[2]["tool_calls"][0]["function"]["arguments"]
    assert written == '{"date":"<v7>"}'
    assert refs.resolve(written) == '{"date":"2026-03-25"}'
    without_today, _ = with_references([{"role": "user", "content": goal}])
    assert "-25)" not in without_today[0]["content"]
    assert "-08)" not in without_today[0]["content"]


def test_a_date_named_without_its_weekday_is_followed_by_the_date_it_means() -> None:
    """The travel goals say ``on March 19``: the flight's ISO date is then one reference
    to copy, in this year or the next, as the first such day from today."""
    system = {"role": "system", "content": "Today's date is 2026-03-14.\n"}
    goal = "Fly on March 19, back on March 2 or in March 2026, not on March 19th."
    shown, refs = with_references([system, {"role": "user", "content": goal}])
    assert shown[1]["content"] == (
        "<v1>Fly <v2>on <v3>March <v4>19 (<v5>2026-03-19), <v6>back <v2>on <v3>March <v7>2 "
        "(<v8>2027-03-02) <v9>or <v10>in <v3>March <v11>2026, <v12>not <v2>on <v3>March "
        "19th."
    )
    assert refs.resolve(refs.refer({"date": "2026-03-19"})) == '{"date":"2026-03-19"}'
    assert refs.refer({"date": "2026-03-19"}) == '{"date":"<v5>"}'


def test_an_events_end_and_a_pickup_time_are_copied_from_the_times_they_mean() -> None:
    """The end of "a two-hour event" at a time the goal names, and a pickup "30 minutes
    before" a start a tool's result shows, are written as references; a result read before
    the offset was stated is shown as it was."""
    before = {"role": "tool", "tool_call_id": "c0", "content": '{"start":"19:00"}'}
    goal = "At 19:30 add a two-hour event; pick me up 30 minutes before it starts."
    after = {"role": "tool", "tool_call_id": "c1", "content": '{"start":"18:00"}'}
    event = _call("c2", "create_event", {"start": "19:30", "end": "21:30"})
    ride = _call("c3", "request_ride", {"pickup_time": "17:30"})
    messages = [before, {"role": "user", "content": goal}, after, event, ride]
    shown, refs = with_references(messages)
    assert shown[0]["content"] == '{"start":"<v1>19:00"}'
    assert "<v3>19:30 (+2h <v4>21:30) (-30m <v1>19:00)" in shown[1]["content"]
    assert shown[2]["content"] == ('{"start":"<v17>18:00 (+2h <v18>20:00) (-30m <v19>17:30)"}')
    assert shown[3]["tool_calls"][0]["function"]["arguments"] == '{"start":"<v3>","end":"<v4>"}'
    assert shown[4]["tool_calls"][0]["function"]["arguments"] == '{"pickup_time":"<v19>"}'
    for original, marked in zip(messages[3:], shown[3:], strict=True):
        written = marked["tool_calls"][0]["function"]["arguments"]
        assert json.loads(refs.resolve(written)) == _arguments(original["tool_calls"][0])


def test_every_time_a_call_writes_that_the_turns_mean_is_copied_by_reference(
    export_rows: list[dict[str, Any]],
) -> None:
    """A call's time of day that a turn before it shows (however written) or reaches by an
    offset the user stated is written as a reference, never as digits."""
    copied = 0
    for row in export_rows:
        for before, written, _ in _calls_as_shown(row["messages"]):
            meant = _times_meant_before(row["messages"], before)
            for value in _arguments(before).values():
                if isinstance(value, str) and value in meant:
                    copied += 1
                    assert json.dumps(value) not in written, (value, written)
    assert copied > 30, "the rows copy times, ends and pickups"


def _times_meant_before(messages: list[dict[str, Any]], call: dict[str, Any]) -> set[str]:
    """Each time of day shown in a user's turn or a tool's result before ``call``, zero
    padded, and each shifted by every offset the user's turns state."""
    shown: set[int] = set()
    offsets = {0}
    for message in messages:
        if call in (message.get("tool_calls") or ()):
            break
        if message["role"] in ("user", "tool") and isinstance(message["content"], str):
            shown.update(int(h) * 60 + int(m) for h, m in _TIMES.findall(message["content"]))
            if message["role"] == "user":
                offsets.update(stated_offsets(message["content"]))
    reached = {time + offset for time in shown for offset in offsets}
    return {f"{t // 60:02d}:{t % 60:02d}" for t in reached if 0 <= t < 24 * 60}


_TIMES = re.compile(r"(?<![\dT:])(\d{1,2}):(\d{2})(?![\d:])")


def test_the_policies_system_turn_states_the_today_dates_are_read_against() -> None:
    view = TaskView(goal="g", tools=(), subagents=(), max_steps=3)
    assert stated_today(system_prompt(view)) == date.fromisoformat(WORLD_DATE)


def test_a_call_writes_numbers_bare_texts_quoted_and_values_inside_texts() -> None:
    refs = References()
    refs.mark("Book fl-45 for 2 people; order o-1001")
    written = refs.refer(
        {"flight_id": "fl-45", "seats": 2, "note": "about o-1001", "late": False, "n": 3}
    )
    assert written == ('{"flight_id":"<v1>","seats":<v2>,"note":"about <v3>","late":false,"n":3}')
    assert json.loads(refs.resolve(written)) == {
        "flight_id": "fl-45",
        "seats": 2,
        "note": "about o-1001",
        "late": False,
        "n": 3,
    }
    assert refs.refer("not json {") == "not json {"
    assert refs.refer([1, 2]) == [1, 2]


def test_a_fractional_amount_refers_to_the_number_shown_with_its_value() -> None:
    refs = References()
    refs.mark('{"value":"925.00 EUR every month to my landlord (contact c-16)","limit":"7"}')
    written = refs.refer({"amount": 925.0, "contact_id": "c-16", "minutes": 925, "n": 7.0})
    assert written == '{"amount":<v1>,"contact_id":"<v2>","minutes":925,"n":<v3>}'
    resolved = json.loads(refs.resolve(written))
    assert resolved == {"amount": 925.0, "contact_id": "c-16", "minutes": 925, "n": 7}
    assert isinstance(resolved["amount"], float), "925.00 reads back as a float"
    assert refs.refer({"amount": 925.5, "x": float("nan")}) == '{"amount":925.5,"x":NaN}'


def test_a_reference_the_conversation_never_showed_stays_as_written() -> None:
    refs = References()
    refs.mark("alarm a-3")
    assert refs.resolve('{"alarm_id":"<v1>","other":"<v7>"}') == '{"alarm_id":"a-3","other":"<v7>"}'


def test_arguments_that_are_not_json_are_written_as_they_are() -> None:
    refs = References()
    refs.mark("alarm a-3")
    for text in ('{"alarm_id": "a-3"', '{"x": ' + "[" * 5_000 + "]" * 5_000 + "}"):
        assert refs.refer(text) == text


def test_values_past_the_last_reference_are_shown_plain() -> None:
    refs = References()
    text = refs.mark(" ".join(str(1000 + i) for i in range(MAX_REFERENCES + 2)))
    assert text.split()[-3:] == [
        f"{REFERENCE_TOKENS[-1]}{1000 + MAX_REFERENCES - 1}",
        "1096",
        "1097",
    ]


def _arguments(call: dict[str, Any]) -> Any:
    arguments = call["function"]["arguments"]
    return json.loads(arguments) if isinstance(arguments, str) else arguments


def test_every_call_of_a_round_resolves_back_to_its_arguments(
    export_rows: list[dict[str, Any]],
) -> None:
    referred = 0
    for row in export_rows:
        for before, written, refs in _calls_as_shown(row["messages"]):
            referred += "<v" in written
            assert json.loads(refs.resolve(written)) == _arguments(before)
    assert referred > len(export_rows) // 2, "most rows copy a value by reference"


def test_marking_is_prefix_consistent(export_rows: list[dict[str, Any]]) -> None:
    for row in export_rows[:40]:
        messages, tools = row["messages"], row["tools"]
        whole = render(with_references(messages)[0], tools, chat_template=COMPACT_TEMPLATE)
        for k in range(1, len(messages)):
            part = render(with_references(messages[:k])[0], tools, chat_template=COMPACT_TEMPLATE)
            assert whole.startswith(part)


def test_only_the_nano_tokenizer_has_the_references_each_as_one_token(
    export_rows: list[dict[str, Any]],
) -> None:
    nano = built_tokenizer(NANO, corpus_texts(export_rows[:50], COMPACT_TEMPLATE, references=True))
    tiny = built_tokenizer(TINY, corpus_texts(export_rows[:50]))
    assert uses_references(nano) and not uses_references(tiny)
    for token in (REFERENCE_TOKENS[0], REFERENCE_TOKENS[41], REFERENCE_TOKENS[-1]):
        assert len(nano(token, add_special_tokens=False)["input_ids"]) == 1
    row = export_rows[0]["messages"]
    assert shown_messages(tiny, row) is row
    assert shown_messages(nano, row) == with_references(row)[0]


@pytest.fixture(scope="module")
def export_rows() -> list[dict[str, Any]]:
    """Rows as the export writes them, of scripted episodes (some with faults and
    recoveries) of 200 tasks of every template kind."""
    return scripted_rows(200, 11, ScriptedPolicy(FaultConfig(rate=0.3, recovery_rate=0.7)))
