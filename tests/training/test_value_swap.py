"""Counterfactual values: a swapped row copies new values exactly where the original
copied old ones, and leaves alone what the plan derives or what it never read."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from agents.policies.chat_format import (
    format_tools,
    task_view,
    template_messages,
    trajectory_conversation,
)
from agents.policies.scripted import ScriptedPolicy
from agents.runner import run_episode
from contract import step_budget
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import instantiate, template_named
from training.value_swap import (
    ValuePool,
    copied_values,
    occurrences,
    swap_values,
    swapped_passes,
)


def call(name: str, **arguments: Any) -> dict[str, Any]:
    function = {"name": name, "arguments": arguments}
    return {"role": "assistant", "tool_calls": [{"function": function}]}


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "log_workout",
            "parameters": {
                "properties": {
                    "type": {"type": "string", "enum": ["running", "cycling", "yoga"]},
                    "minutes": {"type": "integer"},
                }
            },
        },
    }
]
ROW = {
    "messages": [
        {"role": "system", "content": "You have at most 40 calls."},
        {"role": "user", "content": 'Log 40 minutes of running, then text Ana Silva "Run done".'},
        call("log_workout", type="running", minutes=40),
        {"role": "tool", "content": '{"result":{"workout_id":"w-1001","date":"2026-03-14"}}'},
        call("search_contacts", query="Ana Silva"),
        {"role": "tool", "content": '{"result":[{"id":"c-14","name":"Ana Silva"}]}'},
        call("send_message", contact_id="c-14", text="Run done", date="2026-03-14", at="14:00"),
    ],
    "tools": TOOLS,
}


def texts(row: dict[str, Any]) -> str:
    return json.dumps(row["messages"][1:])


def test_the_copied_values_are_those_read_before_the_call() -> None:
    # "Run done" was read in the goal; the date and time are never swapped; w-1001 is
    # read but never copied into a call
    assert copied_values(ROW) == ["running", 40, "Ana Silva", "c-14", "Run done"]


def test_a_swap_replaces_each_value_everywhere_by_one_of_its_kind() -> None:
    swapped = swap_values(ROW, random.Random(3), ValuePool({(2, False, True): ("Bruno Costa",)}))
    goal = swapped["messages"][1]["content"]
    workout = swapped["messages"][2]["tool_calls"][0]["function"]["arguments"]
    send = swapped["messages"][6]["tool_calls"][0]["function"]["arguments"]
    assert workout["type"] in {"cycling", "yoga"}
    assert workout["type"] in goal and "running" not in texts(swapped)
    minutes = workout["minutes"]
    assert isinstance(minutes, int) and minutes != 40 and 10 <= minutes <= 99
    assert f"Log {minutes} minutes" in goal
    assert "Bruno Costa" in goal and "Ana Silva" not in texts(swapped)
    assert send["contact_id"].startswith("c-") and send["contact_id"] != "c-14"
    assert f'"id":"{send["contact_id"]}"' in swapped["messages"][5]["content"]
    assert (send["date"], send["at"]) == ("2026-03-14", "14:00")
    assert swapped["messages"][0] == ROW["messages"][0]  # the system prompt is not read
    assert ROW["messages"][2]["tool_calls"][0]["function"]["arguments"]["minutes"] == 40


def test_a_value_without_a_replacement_of_its_kind_stays() -> None:
    swapped = swap_values(ROW, random.Random(0), ValuePool({}))
    assert "Ana Silva" in swapped["messages"][1]["content"]
    assert "Run done" in json.dumps(swapped["messages"][6])


@pytest.mark.parametrize(
    ("text", "inside"),
    [("14", "c-14"), ("14", "2026-03-14"), ("14", "14:00"), ("14", "140"), ("14", "3.14")],
)
def test_a_number_is_not_found_inside_an_id_a_date_a_time_or_another_number(
    text: str, inside: str
) -> None:
    assert not occurrences(text).search(inside)
    assert occurrences(text).search(f"at {text}, or {inside}")


def test_passes_swap_anew_and_a_seed_repeats_them() -> None:
    rows = [ROW] * 3
    first = list(swapped_passes(rows, 2, 1.0, seed=5))
    assert len(first) == 6
    assert len({json.dumps(r["messages"]) for r in first}) > 1
    assert first == list(swapped_passes(rows, 2, 1.0, seed=5))
    assert list(swapped_passes(rows, 1, 0.0, seed=5)) == [dict(r) for r in rows]


@pytest.mark.parametrize(
    ("template", "seed"),
    [("text_contact", 7), ("start_kitchen_timer", 2), ("run_post_run_routine", 4)],
)
def test_a_swapped_sandbox_row_is_still_a_successful_plan_of_its_kind(
    template: str, seed: int
) -> None:
    """On real rows: the swapped calls copy what the swapped goal and results say."""
    sandbox = MobileSandbox()
    task = instantiate(template_named(template), seed, sandbox)
    trajectory = run_episode(task, sandbox, ScriptedPolicy())
    view = task_view(task, sandbox, step_budget(task, None))
    conversation = trajectory_conversation(trajectory, view)
    row = {"messages": template_messages(conversation.messages), "tools": format_tools(view)}
    swapped = swap_values(row, random.Random(1), ValuePool.of([row]))
    before, after = copied_values(row), copied_values(swapped)
    assert before and len(after) == len(before)
    changed = [old for old, new in zip(before, after, strict=True) if old != new]
    assert changed, "at least one value is swapped"
    for old in changed:
        assert not occurrences(str(old)).search(texts(swapped))
