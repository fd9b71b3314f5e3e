"""Contacts: the people every other app refers to."""

from __future__ import annotations

import random
from typing import Any

from pydantic import JsonValue

from contract import ToolEffect
from envs.sandbox.app import App, text
from envs.sandbox.apps.names import FIRST_NAMES, LAST_NAMES
from envs.sandbox.state import Collections, ToolContext, ToolFailure

app = App("contacts")
CONTACT_COUNT = 16


@app.seeder
def seed_contacts(state: Collections, rng: random.Random) -> None:
    firsts = rng.sample(FIRST_NAMES, CONTACT_COUNT)
    rows = {}
    for i, first in enumerate(firsts):
        last = rng.choice(LAST_NAMES)
        cid = f"c-{i + 1}"
        rows[cid] = {
            "id": cid,
            "name": f"{first} {last}",
            "phone": f"+351 9{rng.randrange(10_000_000, 99_999_999)}",
            "email": f"{first.lower()}.{last.lower()}@example.com",
            "favorite": False,
        }
    state["contacts.people"] = rows


def public_contact(row: dict[str, Any]) -> dict[str, JsonValue]:
    return {k: row[k] for k in ("id", "name", "phone", "email", "favorite")}


@app.tool(
    "Search contacts by (part of) a name, phone number or email address.",
    {"query": text("text to look for")},
)
def search_contacts(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    query = args["query"].lower()
    return [
        public_contact(r)
        for r in ctx.rows("contacts.people")
        if query in r["name"].lower() or query in r["phone"] or query in r["email"]
    ]


@app.tool("Get one contact by id.", {"contact_id": text("contact id, e.g. c-3")})
def get_contact(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    return public_contact(ctx.get("contacts.people", args["contact_id"], "contact_id"))


@app.tool(
    "Add a new contact.",
    {
        "name": text("full name"),
        "phone": text("phone number", pattern=r"^\+?[0-9 ]{6,20}$"),
        "email": text("email address", pattern=r"^[^@\s]+@[^@\s]+$", optional=True),
    },
    effect=ToolEffect.WRITE,
)
def add_contact(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    row = {
        "id": ctx.new_id("c"),
        "name": args["name"],
        "phone": args["phone"],
        "email": args.get("email", ""),
        "favorite": False,
    }
    return public_contact(ctx.insert("contacts.people", row))


@app.tool(
    "Change a contact's phone number or email address.",
    {
        "contact_id": text("contact id"),
        "phone": text("new phone number", pattern=r"^\+?[0-9 ]{6,20}$", optional=True),
        "email": text("new email address", pattern=r"^[^@\s]+@[^@\s]+$", optional=True),
    },
    effect=ToolEffect.WRITE,
)
def update_contact(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    ctx.get("contacts.people", args["contact_id"], "contact_id")
    fields = {k: args[k] for k in ("phone", "email") if k in args}
    if not fields:
        raise ToolFailure("give at least one of phone, email", field="phone")
    return public_contact(ctx.update("contacts.people", args["contact_id"], **fields))
