"""Email: an inbox (from contacts and businesses) and the user's sent mail."""

from __future__ import annotations

import random
import string
from typing import Any

from pydantic import JsonValue

from contract import ToolEffect
from envs.sandbox.app import App, array, integer, text
from envs.sandbox.state import WORLD_DATE, Collections, ToolContext, ToolFailure

app = App("email")

INBOX = "email.inbox"
SENT = "email.sent"
USER_EMAIL = "sam.rivera@example.com"
EMAIL_PATTERN = r"^[^@\s]+@[^@\s]+$"

_PERSONAL = (
    ("Photos from the hike", "Here are the photos from Sunday. The view from the top was great!"),
    ("Draft for the proposal", "I attached the draft. Could you review section 3 by Thursday?"),
    ("Birthday party on Saturday", "We're celebrating at our place from 7pm. Bring snacks!"),
    ("Question about the budget", "Do we still have room for the new monitors this quarter?"),
    ("Carpool next week", "I can drive on Monday and Wednesday if you take Friday."),
    ("Book recommendation", "You have to read Piranesi, I finished it in two days."),
)
_BUSINESS = (
    ("Lisbon Air", "bookings@lisbonair.example", "Your flight booking confirmation",
     "Thank you for flying with us. Booking reference: {ref}. Check-in opens 24h before."),
    ("Harbour Hotel", "stay@harbourhotel.example", "Hotel reservation confirmed",
     "Your room is reserved for two nights. Confirmation number: {ref}."),
    ("TicketHub", "orders@tickethub.example", "Your concert tickets",
     "Your e-tickets are ready. Order code: {ref}. Show it at the entrance."),
    ("City Water", "billing@citywater.example", "Your March water bill",
     "Your bill of 38.20 EUR is due on 2026-03-28. Payment reference: {ref}."),
    ("Weekly Tech Digest", "news@techdigest.example", "This week in tech",
     "Top stories: new phones, chip shortages ease, and an interview with a robot."),
    ("Parcel Express", "track@parcelexpress.example", "Your parcel is on its way",
     "Your parcel will arrive on Tuesday. Tracking number: {ref}."),
)  # fmt: skip


def _reference(rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_uppercase + string.digits) for _ in range(6))


@app.seeder
def seed_email(state: Collections, rng: random.Random) -> None:
    contacts = list(state["contacts.people"].values())
    mails: list[dict[str, Any]] = []
    for subject, body in rng.sample(_PERSONAL, 4):
        person = rng.choice(contacts)
        mails.append({"from_name": person["name"], "from_email": person["email"],
                      "subject": subject, "body": body, "reference": ""})  # fmt: skip
    for name, address, subject, body in rng.sample(_BUSINESS, 5):
        ref = _reference(rng) if "{ref}" in body else ""
        mails.append({"from_name": name, "from_email": address, "subject": subject,
                      "body": body.replace("{ref}", ref), "reference": ref})  # fmt: skip
    rng.shuffle(mails)
    inbox = {}
    for i, mail in enumerate(mails):
        eid = f"e-{i + 1}"
        inbox[eid] = {
            "id": eid,
            **mail,
            "date": f"2026-03-{rng.randrange(1, 14):02d}",
            "read": rng.random() < 0.5,
            "folder": "inbox",
        }
    state[INBOX] = inbox
    state[SENT] = {}


def _summary(row: dict[str, Any]) -> dict[str, JsonValue]:
    return {k: row[k] for k in ("id", "from_name", "from_email", "subject", "date", "read",
                                "folder")}  # fmt: skip


@app.tool(
    "Search emails by sender, subject or text, newest first.",
    {
        "query": text("text to look for"),
        "limit": integer("how many to return", minimum=1, maximum=50, optional=True),
    },
)
def search_emails(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    query = args["query"].lower()
    found = [
        r
        for r in ctx.rows(INBOX)
        if query in r["subject"].lower()
        or query in r["from_name"].lower()
        or query in r["from_email"]
        or query in r["body"].lower()
    ]
    found.sort(key=lambda r: (r["date"], r["id"]), reverse=True)
    return [_summary(r) for r in found[: args.get("limit", 10)]]


@app.tool("Read one email in full.", {"email_id": text("email id, e.g. e-4")})
def read_email(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    row = ctx.get(INBOX, args["email_id"], "email_id")
    return {**_summary(row), "body": row["body"]}


def _send(
    ctx: ToolContext, to: list[str], subject: str, body: str, *, reply: str = "", fwd: str = ""
) -> JsonValue:
    row: dict[str, Any] = {
        "id": ctx.new_id("out"),
        "to": to,
        "subject": subject,
        "body": body,
        "date": WORLD_DATE,
        "in_reply_to": reply,
        "forwarded_from": fwd,
    }
    ctx.insert(SENT, row)
    return {"email_id": row["id"], "to": list(to), "subject": subject, "status": "sent"}


_ADDRESSES = array("recipient email addresses", text("email address", pattern=EMAIL_PATTERN))


@app.tool(
    "Send a new email.",
    {
        "to": _ADDRESSES,
        "subject": text("subject line", max_length=200),
        "body": text("message text", max_length=10_000),
    },
    effect=ToolEffect.WRITE,
)
def send_email(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    to = list(args["to"])
    if USER_EMAIL in to:
        raise ToolFailure("you cannot email yourself", field="to")
    return _send(ctx, to, args["subject"], args["body"])


@app.tool(
    "Reply to the sender of an email.",
    {"email_id": text("id of the email to answer"), "body": text("reply text", max_length=10_000)},
    effect=ToolEffect.WRITE,
)
def reply_to_email(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    original = ctx.get(INBOX, args["email_id"], "email_id")
    subject = f"Re: {original['subject']}"
    return _send(ctx, [original["from_email"]], subject, args["body"], reply=original["id"])


@app.tool(
    "Forward an email to other people, with an optional note on top.",
    {
        "email_id": text("id of the email to forward"),
        "to": _ADDRESSES,
        "note": text("a note above the forwarded text", optional=True, max_length=2000),
    },
    effect=ToolEffect.WRITE,
)
def forward_email(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    original = ctx.get(INBOX, args["email_id"], "email_id")
    to = list(args["to"])
    if original["from_email"] in to:
        raise ToolFailure("that is the original sender; reply instead", field="to")
    body = f"{args.get('note', '')}\n\n---------- Forwarded ----------\n{original['body']}"
    subject = f"Fwd: {original['subject']}"
    return _send(ctx, to, subject, body.lstrip("\n"), fwd=original["id"])


@app.tool(
    "Move an email out of the inbox into the archive.",
    {"email_id": text("email id")},
    effect=ToolEffect.WRITE,
)
def archive_email(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    mail = ctx.get(INBOX, args["email_id"], "email_id")
    if mail["folder"] == "archive":
        raise ToolFailure("that email is already archived", field="email_id")
    return _summary(ctx.update(INBOX, mail["id"], folder="archive"))
