"""Calendar: the user's events, with times, places and attendees (contact ids)."""

from __future__ import annotations

import random
from typing import Any

from pydantic import JsonValue

from contract import ToolEffect
from envs.sandbox.app import DATE, TIME, App, array, text
from envs.sandbox.apps.maps import PLACE_NAMES
from envs.sandbox.state import WORLD_DATE, Collections, ToolContext, ToolFailure

app = App("calendar")

EVENTS = "calendar.events"
EVENT_TITLES = (
    "Team standup", "Quarterly planning", "Dentist appointment", "Lunch with investors",
    "Design review", "Budget meeting", "Doctor check-up", "Book club", "Tennis practice",
    "Client workshop", "Product demo", "One-on-one with manager", "Parents' evening",
    "Flat viewing", "Guitar lesson", "Volunteer shift", "Board presentation", "Team offsite",
    "Language exchange", "Marketing sync", "Hiring panel", "Charity run briefing",
)  # fmt: skip
VIDEO_CALL = "Video call"
FIRST_DAY, LAST_DAY = 9, 27
"""Seeded events fall on 2026-03-09 .. 2026-03-27."""


def minutes(hhmm: str) -> int:
    return int(hhmm[:2]) * 60 + int(hhmm[3:])


def hhmm(total: int) -> str:
    return f"{total // 60:02d}:{total % 60:02d}"


@app.seeder
def seed_calendar(state: Collections, rng: random.Random) -> None:
    contacts = list(state["contacts.people"])
    titles = list(EVENT_TITLES)
    rng.shuffle(titles)
    events: dict[str, dict[str, Any]] = {}
    for day in range(FIRST_DAY, LAST_DAY + 1):
        if not titles:
            break
        count = rng.choice((0, 1, 1, 2))
        for hour in sorted(rng.sample((8, 10, 12, 14, 16), count)):
            if not titles:
                break
            start = hour * 60 + rng.choice((0, 30))
            eid = f"ev-{len(events) + 1}"
            events[eid] = {
                "id": eid,
                "title": titles.pop(),
                "date": f"2026-03-{day:02d}",
                "start": hhmm(start),
                "end": hhmm(start + rng.choice((30, 60, 90))),
                "location": rng.choice((*PLACE_NAMES[:12], VIDEO_CALL)),
                "attendees": rng.sample(contacts, rng.randrange(0, 3)),
            }
    state[EVENTS] = events


def public_event(row: dict[str, Any]) -> dict[str, JsonValue]:
    return {k: row[k] for k in ("id", "title", "date", "start", "end", "location", "attendees")}


@app.tool(
    "List the events on one day, earliest first.",
    {"date": text("the day, YYYY-MM-DD", pattern=DATE)},
)
def list_events(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    day = args["date"]
    found = sorted((r for r in ctx.rows(EVENTS) if r["date"] == day), key=lambda r: r["start"])
    return [public_event(r) for r in found]


@app.tool(
    "Search events by (part of) their title or location.",
    {"query": text("text to look for")},
)
def search_events(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    query = args["query"].lower()
    return [
        public_event(r)
        for r in ctx.rows(EVENTS)
        if query in r["title"].lower() or query in r["location"].lower()
    ]


def _check_day(date: str) -> None:
    if date < WORLD_DATE:
        raise ToolFailure(f"{date} is in the past (today is {WORLD_DATE})", field="date")


@app.tool(
    "Create a calendar event; attendees are contact ids.",
    {
        "title": text("event title", max_length=200),
        "date": text("day, YYYY-MM-DD", pattern=DATE),
        "start": text("start time, HH:MM", pattern=TIME),
        "end": text("end time, HH:MM (same day)", pattern=TIME),
        "location": text("where it happens", optional=True, max_length=200),
        "attendee_ids": array("contact ids to invite", text("contact id"), optional=True),
    },
    effect=ToolEffect.WRITE,
)
def create_event(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    _check_day(args["date"])
    if args["end"] <= args["start"]:
        raise ToolFailure("the event must end after it starts", field="end")
    attendees = list(args.get("attendee_ids", []))
    people = ctx.collections["contacts.people"]
    for cid in attendees:
        if cid not in people:
            raise ToolFailure(f"{cid!r} is not a contact", field="attendee_ids")
    row = {
        "id": ctx.new_id("ev"),
        "title": args["title"],
        "date": args["date"],
        "start": args["start"],
        "end": args["end"],
        "location": args.get("location", ""),
        "attendees": attendees,
    }
    conflicts = [
        r["title"]
        for r in ctx.rows(EVENTS)
        if r["date"] == row["date"] and r["start"] < row["end"] and row["start"] < r["end"]
    ]
    ctx.insert(EVENTS, row)
    return {**public_event(row), "conflicts": conflicts}


@app.tool(
    "Move an event to another day and start time; it keeps its duration.",
    {
        "event_id": text("event id, e.g. ev-3"),
        "date": text("new day, YYYY-MM-DD", pattern=DATE),
        "start": text("new start time, HH:MM", pattern=TIME),
    },
    effect=ToolEffect.WRITE,
)
def reschedule_event(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    event = ctx.get(EVENTS, args["event_id"], "event_id")
    _check_day(args["date"])
    if event["date"] == args["date"] and event["start"] == args["start"]:
        raise ToolFailure("the event is already at that time", field="start")
    end = minutes(args["start"]) + minutes(event["end"]) - minutes(event["start"])
    if end >= 24 * 60:
        raise ToolFailure("the event would end after midnight", field="start")
    row = ctx.update(EVENTS, event["id"], date=args["date"], start=args["start"], end=hhmm(end))
    return public_event(row)


@app.tool(
    "Delete an event from the calendar.",
    {"event_id": text("event id")},
    effect=ToolEffect.WRITE,
)
def delete_event(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    event = ctx.get(EVENTS, args["event_id"], "event_id")
    ctx.delete(EVENTS, event["id"])
    return {"deleted": event["id"], "title": event["title"]}


@app.tool(
    "Invite a contact to an existing event.",
    {"event_id": text("event id"), "contact_id": text("contact id of the person to invite")},
    effect=ToolEffect.WRITE,
)
def add_event_attendee(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    event = ctx.get(EVENTS, args["event_id"], "event_id")
    ctx.get("contacts.people", args["contact_id"], "contact_id")
    if args["contact_id"] in event["attendees"]:
        raise ToolFailure("that contact is already invited", field="contact_id")
    row = ctx.update(EVENTS, event["id"], attendees=[*event["attendees"], args["contact_id"]])
    return public_event(row)
