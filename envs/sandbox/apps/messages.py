"""Messages: text conversations with contacts."""

from __future__ import annotations

import random
from typing import Any

from pydantic import JsonValue

from contract import ToolEffect
from envs.sandbox.app import App, integer, text
from envs.sandbox.state import WORLD_DATE, Collections, ToolContext

app = App("messages")

_OPENERS = (
    "Are we still on for dinner?",
    "Can you send me the photos from last weekend?",
    "Running 10 minutes late",
    "Happy birthday!",
    "Did you get my email?",
    "Call me when you can",
)


@app.seeder
def seed_messages(state: Collections, rng: random.Random) -> None:
    rows = {}
    contacts = list(state["contacts.people"].values())
    for i in range(12):
        person = rng.choice(contacts)
        mid = f"m-{i + 1}"
        rows[mid] = {
            "id": mid,
            "contact_id": person["id"],
            "direction": "in" if i % 3 else "out",
            "text": rng.choice(_OPENERS),
            "date": f"2026-03-{rng.randrange(1, 14):02d}",
            "read": i % 4 != 0,
        }
    state["messages.sent"] = {}
    state["messages.inbox"] = rows


@app.tool(
    "Send a text message to a contact.",
    {"contact_id": text("recipient's contact id"), "text": text("message text", max_length=1000)},
    effect=ToolEffect.WRITE,
)
def send_message(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    ctx.get("contacts.people", args["contact_id"], "contact_id")
    row = {
        "id": ctx.new_id("sms"),
        "contact_id": args["contact_id"],
        "text": args["text"],
        "date": WORLD_DATE,
    }
    ctx.insert("messages.sent", row)
    return {"message_id": row["id"], "status": "sent"}


@app.tool(
    "List recent incoming messages, newest first.",
    {"limit": integer("how many to return", minimum=1, maximum=50, optional=True)},
)
def list_messages(ctx: ToolContext, args: dict[str, Any]) -> list[Any]:
    rows = sorted(ctx.rows("messages.inbox"), key=lambda r: (r["date"], r["id"]), reverse=True)
    return rows[: args.get("limit", 10)]


@app.tool(
    "Read the whole conversation with one contact, oldest first.",
    {"contact_id": text("contact id")},
)
def read_conversation(ctx: ToolContext, args: dict[str, Any]) -> list[Any]:
    cid = args["contact_id"]
    ctx.get("contacts.people", cid, "contact_id")
    incoming = [r for r in ctx.rows("messages.inbox") if r["contact_id"] == cid]
    outgoing = [
        {**r, "direction": "out"} for r in ctx.rows("messages.sent") if r["contact_id"] == cid
    ]
    return sorted(incoming + outgoing, key=lambda r: (r["date"], r["id"]))
