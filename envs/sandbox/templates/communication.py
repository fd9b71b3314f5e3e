"""Templates over contacts and messages."""

from __future__ import annotations

from contract import (
    ActionOrderCheck,
    ActionPattern,
    AnswerCheck,
    Capability,
    Condition,
    Difficulty,
    Finish,
    MemoryRead,
    StatePatch,
    StatePredicateCheck,
    TaskPattern,
    ToolCall,
)
from envs.sandbox.state import Collections
from envs.sandbox.templates.base import Draft, Params, TemplateSet

templates = TemplateSet()

GROUNDING = TaskPattern.GROUNDING

QUICK_TEXTS = [
    "Running 10 minutes late",
    "Can we move our call to tomorrow?",
    "I left the keys under the mat",
    "Dinner is at 8 tonight",
    "Thanks for your help today!",
]


RELATIONS = ["sister", "brother", "mother", "father", "manager", "partner", "neighbour", "coach"]
"""Who a remembered contact is to the user (the memory key ``user.<relation>``)."""


@templates.template(
    [Capability.TOOL_USE], Difficulty.EASY, ["contacts", "messages"], patterns=[GROUNDING]
)
def text_contact(world: Collections, p: Params) -> Draft:
    person = world["contacts.people"][p.pick("contact_id", list(world["contacts.people"]))]
    message = p.pick("text", QUICK_TEXTS)
    return Draft(
        goal=f'Text {person["name"]}: "{message}"',
        plan=[
            ToolCall(tool="search_contacts", arguments={"query": person["name"]}),
            ToolCall(tool="send_message", arguments={"contact_id": person["id"], "text": message}),
        ],
        checks=[
            StatePredicateCheck(
                collection="messages.sent",
                where=(
                    Condition(field="contact_id", value=person["id"]),
                    Condition(field="text", op="icontains", value=message),
                ),
                expect="exactly_one",
            ),
            StatePredicateCheck(
                collection="messages.sent",
                where=(Condition(field="contact_id", op="ne", value=person["id"]),),
                expect="absent",
                note="nobody else gets the message",
            ),
        ],
    )


@templates.template([Capability.TOOL_USE], Difficulty.MEDIUM, ["contacts"])
def lookup_phone_number(world: Collections, p: Params) -> Draft:
    person = world["contacts.people"][p.pick("contact_id", list(world["contacts.people"]))]
    return Draft(
        goal=f"What is {person['name']}'s phone number?",
        plan=[
            ToolCall(tool="search_contacts", arguments={"query": person["name"]}),
            Finish(answer=f"{person['name']}'s number is {person['phone']}."),
        ],
        checks=[AnswerCheck(contains=(person["phone"],), shown=(person["phone"],))],
    )


@templates.template(
    [Capability.MEMORY, Capability.TOOL_USE],
    Difficulty.MEDIUM,
    ["contacts", "messages"],
    ordered=True,
)
def text_relative_from_memory(world: Collections, p: Params) -> Draft:
    relation = p.pick("relation", RELATIONS)
    person = world["contacts.people"][p.pick("contact_id", list(world["contacts.people"]))]
    message = p.pick("text", QUICK_TEXTS)
    fact = StatePatch(
        collection="memory.facts",
        row={
            "id": "mem-task",
            "key": f"user.{relation}",
            "value": f"{person['name']} (contact {person['id']})",
            "source": "conversation 2026-02-17",
        },
    )
    return Draft(
        goal=f'Text my {relation}: "{message}"',
        setup=[fact],
        plan=[
            MemoryRead(key=f"user.{relation}"),
            ToolCall(tool="send_message", arguments={"contact_id": person["id"], "text": message}),
        ],
        checks=[
            ActionOrderCheck(
                sequence=(
                    ActionPattern(kind="memory_read", target=f"user.{relation}"),
                    ActionPattern(kind="tool_call", target="send_message"),
                ),
                note="who the relative is must come from memory, before the message",
            ),
            StatePredicateCheck(
                collection="messages.sent",
                where=(
                    Condition(field="contact_id", value=person["id"]),
                    Condition(field="text", op="icontains", value=message),
                ),
                expect="exactly_one",
            ),
        ],
    )
