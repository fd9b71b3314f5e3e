"""The planner's harness inside the sandbox: the user's memory and the skills library.

Memory holds facts from past conversations with where they came from; skills are
documented multi-step routines loaded by name. Templates add the facts and skills a
task needs through its initial-condition patches.
"""

from __future__ import annotations

import random
import re

from pydantic import JsonValue

from envs.sandbox.state import WORLD_DATE, Collections, ToolContext, ToolFailure

MEMORY = "memory.facts"
SKILLS = "skills.library"

_WORD = re.compile(r"[a-z0-9]+")


def seed_harness(state: Collections, rng: random.Random) -> None:
    people = list(state["contacts.people"].values())
    friend = rng.choice(people)
    facts = [
        ("user.name", "Sam Rivera", "onboarding profile"),
        (
            "user.best_friend",
            f"{friend['name']} (contact {friend['id']})",
            "conversation 2026-01-12",
        ),
        ("user.shoe_size", str(rng.choice([39, 40, 41, 42, 43, 44])), "conversation 2026-02-02"),
        ("user.allergies", rng.choice(["none", "peanuts", "shellfish"]), "conversation 2026-01-20"),
    ]
    state[MEMORY] = {
        f"mem-{i + 1}": {"id": f"mem-{i + 1}", "key": k, "value": v, "source": src}
        for i, (k, v, src) in enumerate(facts)
    }
    state[SKILLS] = {
        "share_location": {
            "id": "share_location",
            "name": "share_location",
            "description": "Tell a contact where you are.",
            "steps": [
                "search_places with the place the user is at",
                "send_message to the contact with the place's name and address",
            ],
        },
    }


def public_fact(row: dict[str, JsonValue]) -> dict[str, JsonValue]:
    return {"key": row["key"], "value": row["value"], "source": row["source"]}


def memory_read(ctx: ToolContext, key: str) -> JsonValue:
    for row in ctx.rows(MEMORY):
        if row["key"] == key:
            return public_fact(row)
    raise ToolFailure(f"nothing is remembered under key {key!r}", field="key")


def memory_search(ctx: ToolContext, query: str) -> JsonValue:
    words = set(_WORD.findall(query.lower()))
    scored = []
    for row in ctx.rows(MEMORY):
        haystack = set(_WORD.findall(f"{row['key']} {row['value']}".lower().replace("_", " ")))
        overlap = len(words & haystack)
        if overlap:
            scored.append((-overlap, row["key"], row))
    return [public_fact(row) for _, _, row in sorted(scored)[:5]]


def memory_write(ctx: ToolContext, key: str, value: str) -> JsonValue:
    for row in ctx.rows(MEMORY):
        if row["key"] == key:
            ctx.update(MEMORY, row["id"], value=value, source=f"agent {WORLD_DATE}")
            return {"key": key, "status": "updated"}
    ctx.insert(
        MEMORY,
        {"id": ctx.new_id("mem"), "key": key, "value": value, "source": f"agent {WORLD_DATE}"},
    )
    return {"key": key, "status": "remembered"}


def skill_load(ctx: ToolContext, name: str) -> JsonValue:
    row = ctx.collections[SKILLS].get(name)
    if row is None:
        known = ", ".join(sorted(ctx.collections[SKILLS]))
        raise ToolFailure(f"no skill named {name!r} (available: {known})", field="name")
    return {"name": row["name"], "description": row["description"], "steps": row["steps"]}
