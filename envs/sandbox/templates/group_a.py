"""Templates over calendar, clock, notes, email, maps and food (with contacts and messages)."""

from __future__ import annotations

import datetime
import re
from typing import Any, Literal

from contract import (
    ActionKind,
    ActionOrderCheck,
    ActionPattern,
    AnswerCheck,
    Capability,
    Check,
    CollaborationCheck,
    Condition,
    Difficulty,
    ExactToolCallCheck,
    Finish,
    MemoryRead,
    SkillLoad,
    Split,
    StatePatch,
    StatePredicateCheck,
    SubAgentCall,
    TaskPattern,
    ToolCall,
)
from envs.sandbox.apps.calendar import hhmm, minutes
from envs.sandbox.apps.clock import SEEDED_ALARM_TIMES
from envs.sandbox.apps.maps import RIDE_TYPES
from envs.sandbox.state import WORLD_DATE, Collections
from envs.sandbox.templates.base import Draft, Params, TemplateSet, rows

templates = TemplateSet()

GROUNDING = TaskPattern.GROUNDING
LONG_HORIZON = TaskPattern.LONG_HORIZON
ROUTING = TaskPattern.ROUTING

TOOL = Capability.TOOL_USE
EASY, MEDIUM, HARD = Difficulty.EASY, Difficulty.MEDIUM, Difficulty.HARD
UPCOMING = [f"2026-03-{d:02d}" for d in range(16, 28)]
"""Dates from the Monday after "today" (2026-03-14) on."""


def day_name(iso: str) -> str:
    """``2026-03-17`` -> ``Tuesday, March 17``."""
    d = datetime.date.fromisoformat(iso)
    return f"{d:%A}, {d:%B} {d.day}"


Expect = Literal["exists", "exactly_one", "absent", "unchanged"]


def _state(collection: str, expect: Expect = "exactly_one", **conds: Any) -> StatePredicateCheck:
    """A state check; ``title__icontains="x"`` style keys give the operator."""
    where = []
    for key, value in conds.items():
        field, _, op = key.partition("__")
        where.append(Condition(field=field, op=op or "eq", value=value))
    return StatePredicateCheck(collection=collection, where=tuple(where), expect=expect)


def _order(*patterns: tuple[ActionKind, str]) -> ActionOrderCheck:
    return ActionOrderCheck(sequence=tuple(ActionPattern(kind=k, target=t) for k, t in patterns))


def _place(world: Collections, name: str) -> dict[str, Any]:
    return next(r for r in world["maps.places"].values() if r["name"] == name)


def _restaurant(world: Collections, name: str) -> dict[str, Any]:
    return next(r for r in world["food.restaurants"].values() if r["name"] == name)


def _contact(world: Collections, cid: str) -> dict[str, Any]:
    return world["contacts.people"][cid]


def _memory(key: str, value: str, when: str = "2026-02-21") -> StatePatch:
    return StatePatch(
        collection="memory.facts",
        row={"id": "mem-task", "key": key, "value": value, "source": f"conversation {when}"},
    )


def _skill(name: str, description: str, steps: list[str]) -> StatePatch:
    return StatePatch(
        collection="skills.library",
        row={"id": name, "name": name, "description": description, "steps": list(steps)},
    )


def _knowledge(title: str, body: str) -> StatePatch:
    return StatePatch(
        collection="search.knowledge", row={"id": "k-task", "title": title, "text": body}
    )


NEW_EVENT_TITLES = ["Haircut", "Car service", "Pilates class", "Piano recital", "Vet visit"]
NEW_ALARM_TIMES = ["05:30", "06:15", "06:45", "07:45", "08:30"]
ALARM_LABELS = ["Gym", "Take medicine", "Call mum", "Water the plants"]
ROUTINE_ALARM_TIMES = [
    hhmm(m) for m in range(5 * 60, 10 * 60, 5) if hhmm(m) not in SEEDED_ALARM_TIMES
]
"""Times a remembered or routine alarm may be at: every five minutes from 05:00 to 09:55,
clear of the seeded alarms. Wide, so that a template's held-out draws are many."""
WAKE_UP_HABITS = ["on weekdays", "on workdays", "every morning", "during the week"]
USUAL_ACTIVITIES = {
    "gym_time": ("Gym", "usually goes to the gym at {time}", "go to the gym"),
    "yoga_time": ("Yoga", "does yoga at {time} most days", "do yoga"),
    "dog_walk_time": ("Dog walk", "walks the dog at {time}", "walk the dog"),
    "medication_time": ("Medication", "takes their medication at {time}", "take my medication"),
    "school_run_time": ("School run", "leaves for the school run at {time}", "leave for school"),
    "piano_time": ("Piano", "practises the piano at {time}", "practise the piano"),
    "call_home_time": ("Call home", "calls their parents at {time}", "call my parents"),
    "swim_time": ("Swim", "goes swimming at {time}", "go swimming"),
}
"""A remembered daily activity: its memory key (``user.<key>``), the alarm's label, what
the remembered fact says, and how the goal names it."""
ACTIVITY_TIMES = [hhmm(m) for m in range(6 * 60, 22 * 60, 5) if hhmm(m) not in SEEDED_ALARM_TIMES]
"""Every five minutes from 06:00 to 21:55, clear of the seeded alarms."""
PERSONAL = "@example.com"
"""Contacts' addresses end with this; businesses use other domains."""
MESSAGES_TO_REPLY = [
    "Thanks, I will take a look tonight",
    "Sounds good, count me in",
    "Let me check and get back to you tomorrow",
]


# -- tool use: easy -----------------------------------------------------------------


@templates.template([TOOL], EASY, ["calendar"])
def add_calendar_event(world: Collections, p: Params) -> Draft:
    title = p.pick("title", NEW_EVENT_TITLES)
    date = p.pick("date", UPCOMING)
    start = p.pick("start", ["09:00", "10:30", "14:00", "16:30"])
    end = hhmm(minutes(start) + p.pick("duration", [30, 60, 90]))
    return Draft(
        goal=f'Add "{title}" to my calendar on {day_name(date)} from {start} to {end}.',
        plan=[
            ToolCall(
                tool="create_event",
                arguments={"title": title, "date": date, "start": start, "end": end},
            )
        ],
        checks=[_state("calendar.events", title__icontains=title, date=date, start=start, end=end)],
    )


@templates.template([TOOL], EASY, ["clock"])
def set_labelled_alarm(world: Collections, p: Params) -> Draft:
    time = p.pick("time", NEW_ALARM_TIMES)
    label = p.pick("label", ALARM_LABELS)
    return Draft(
        goal=f'Set an alarm for {time} labelled "{label}".',
        plan=[ToolCall(tool="set_alarm", arguments={"time": time, "label": label})],
        checks=[_state("clock.alarms", time=time, label__icontains=label, enabled=True)],
    )


@templates.template([TOOL], EASY, ["clock"])
def start_kitchen_timer(world: Collections, p: Params) -> Draft:
    label = p.pick("label", ["Pasta", "Boiled eggs", "Bread in the oven", "Laundry"])
    mins = p.integer("minutes", 5, 45)
    return Draft(
        goal=f'Start a {mins}-minute timer called "{label}".',
        plan=[ToolCall(tool="start_timer", arguments={"minutes": mins, "label": label})],
        checks=[_state("clock.timers", minutes=mins, label__icontains=label)],
    )


@templates.template([TOOL], EASY, ["clock"])
def add_city_to_world_clock(world: Collections, p: Params) -> Draft:
    present = {r["city"] for r in rows(world, "clock.world_clocks")}
    options = ["Tokyo", "New York", "Sydney", "Sao Paulo", "Nairobi", "Singapore"]
    city = p.pick("city", [c for c in options if c not in present])
    return Draft(
        goal=f"Add {city} to my world clock.",
        plan=[ToolCall(tool="add_world_clock", arguments={"city": city})],
        checks=[_state("clock.world_clocks", city=city)],
    )


NEW_NOTES = {
    "Packing list": ("Charger, swimsuit, sunscreen", "travel"),
    "Party shopping": ("Balloons, candles, lemonade", "shopping"),
    "Podcast ideas": ("Interview a beekeeper about city bees", "ideas"),
    "Sprint retro": ("Too many meetings; pair more on reviews", "work"),
}


@templates.template([TOOL], EASY, ["notes"])
def write_new_note(world: Collections, p: Params) -> Draft:
    title = p.pick("title", list(NEW_NOTES))
    body, folder = NEW_NOTES[title]
    return Draft(
        goal=f'Create a note titled "{title}" in my {folder} folder that says "{body}".',
        plan=[
            ToolCall(tool="create_note", arguments={"title": title, "body": body, "folder": folder})
        ],
        checks=[_state("notes.notes", title__icontains=title, body=body, folder=folder)],
    )


@templates.template([TOOL], EASY, ["calendar"])
def when_does_event_start(world: Collections, p: Params) -> Draft:
    event = world["calendar.events"][p.pick("event_id", list(world["calendar.events"]))]
    return Draft(
        goal=f'What time does my "{event["title"]}" on {day_name(event["date"])} start?',
        plan=[
            ToolCall(tool="search_events", arguments={"query": event["title"]}),
            Finish(answer=f"It starts at {event['start']}."),
        ],
        checks=[AnswerCheck(contains=(event["start"],), shown=(event["id"],))],
    )


# -- tool use: medium ---------------------------------------------------------------


@templates.template([TOOL], MEDIUM, ["email"], patterns=[GROUNDING])
def reply_to_an_email(world: Collections, p: Params) -> Draft:
    personal = [m["id"] for m in rows(world, "email.inbox") if m["from_email"].endswith(PERSONAL)]
    mail = world["email.inbox"][p.pick("email_id", personal)]
    body = p.pick("text", MESSAGES_TO_REPLY)
    return Draft(
        goal=f'Reply to the email "{mail["subject"]}" from {mail["from_name"]}: "{body}"',
        plan=[
            ToolCall(tool="search_emails", arguments={"query": mail["subject"]}),
            ToolCall(tool="reply_to_email", arguments={"email_id": mail["id"], "body": body}),
        ],
        checks=[_state("email.sent", in_reply_to=mail["id"], body__icontains=body)],
    )


@templates.template([TOOL], MEDIUM, ["email"], patterns=[GROUNDING])
def archive_an_email(world: Collections, p: Params) -> Draft:
    mail = world["email.inbox"][p.pick("email_id", list(world["email.inbox"]))]
    return Draft(
        goal=f'Archive the email from {mail["from_name"]} about "{mail["subject"]}".',
        plan=[
            ToolCall(tool="search_emails", arguments={"query": mail["subject"]}),
            ToolCall(tool="archive_email", arguments={"email_id": mail["id"]}),
        ],
        checks=[
            _state("email.inbox", id=mail["id"], folder="archive"),
            _state("email.inbox", "unchanged", id__ne=mail["id"]),
        ],
    )


@templates.template([TOOL], MEDIUM, ["email", "contacts"], split=Split.DEV, patterns=[GROUNDING])
def forward_email_to_contact(world: Collections, p: Params) -> Draft:
    mail = world["email.inbox"][p.pick("email_id", list(world["email.inbox"]))]
    people = [c for c in world["contacts.people"].values() if c["email"] != mail["from_email"]]
    person = _contact(world, p.pick("contact_id", [c["id"] for c in people]))
    return Draft(
        goal=f'Forward the email "{mail["subject"]}" to {person["name"]}.',
        plan=[
            ToolCall(tool="search_emails", arguments={"query": mail["subject"]}),
            ToolCall(tool="search_contacts", arguments={"query": person["name"]}),
            ToolCall(
                tool="forward_email", arguments={"email_id": mail["id"], "to": [person["email"]]}
            ),
        ],
        checks=[_state("email.sent", forwarded_from=mail["id"], to__contains=person["email"])],
    )


RIDE_NAMES = {"standard": "a standard", "comfort": "a comfort", "xl": "an XL"}


@templates.template([TOOL], MEDIUM, ["maps"], patterns=[GROUNDING])
def ride_to_place(world: Collections, p: Params) -> Draft:
    place = world["maps.places"][p.pick("place_id", list(world["maps.places"]))]
    ride_type = p.pick("ride_type", ["standard", "comfort", "xl"])
    return Draft(
        goal=f"Get me {RIDE_NAMES[ride_type]} ride to {place['name']} right now.",
        plan=[
            ToolCall(tool="search_places", arguments={"query": place["name"]}),
            ToolCall(
                tool="request_ride",
                arguments={"dropoff_id": place["id"], "ride_type": ride_type},
            ),
        ],
        checks=[
            _state("maps.rides", dropoff_id=place["id"], ride_type=ride_type, status="requested")
        ],
    )


def _portions(qty: int) -> str:
    return "one portion" if qty == 1 else f"{qty} portions"


@templates.template([TOOL], MEDIUM, ["food"], patterns=[GROUNDING])
def order_dish_for_delivery(world: Collections, p: Params) -> Draft:
    restaurant = world["food.restaurants"][p.pick("restaurant_id", list(world["food.restaurants"]))]
    dishes = [m for m in world["food.menu"].values() if m["restaurant_id"] == restaurant["id"]]
    dish = world["food.menu"][p.pick("item_id", [m["id"] for m in dishes])]
    qty = p.integer("quantity", 1, 3)
    line = {"item_id": dish["id"], "quantity": qty}
    return Draft(
        goal=f"Order {_portions(qty)} of {dish['name']} from {restaurant['name']} for delivery.",
        plan=[
            ToolCall(tool="search_restaurants", arguments={"query": restaurant["name"]}),
            ToolCall(tool="get_menu", arguments={"restaurant_id": restaurant["id"]}),
            ToolCall(
                tool="place_food_order",
                arguments={"restaurant_id": restaurant["id"], "items": [line]},
            ),
        ],
        checks=[
            _state(
                "food.orders", restaurant_id=restaurant["id"], items__contains=line, status="placed"
            )
        ],
    )


@templates.template([TOOL], MEDIUM, ["calendar"], patterns=[GROUNDING])
def move_calendar_event(world: Collections, p: Params) -> Draft:
    upcoming = [e["id"] for e in rows(world, "calendar.events") if e["date"] >= WORLD_DATE]
    event = world["calendar.events"][p.pick("event_id", upcoming)]
    date = p.pick("date", [d for d in UPCOMING if d != event["date"]])
    start = p.pick("start", ["09:30", "11:00", "15:00", "17:30"])
    return Draft(
        goal=f'Move my "{event["title"]}" to {day_name(date)} at {start}.',
        plan=[
            ToolCall(tool="search_events", arguments={"query": event["title"]}),
            ToolCall(
                tool="reschedule_event",
                arguments={"event_id": event["id"], "date": date, "start": start},
            ),
        ],
        checks=[_state("calendar.events", id=event["id"], date=date, start=start)],
    )


# -- tool use: hard -----------------------------------------------------------------

REFERENCE_SUBJECTS = ("booking", "reservation", "tickets", "bill", "parcel")


@templates.template(
    [TOOL],
    HARD,
    ["email", "notes", "contacts", "messages"],
    patterns=[GROUNDING, LONG_HORIZON, ROUTING],
)
def save_and_share_reference(world: Collections, p: Params) -> Draft:
    with_ref = [m["id"] for m in rows(world, "email.inbox") if m["reference"]]
    mail = world["email.inbox"][p.pick("email_id", with_ref)]
    person = _contact(world, p.pick("contact_id", list(world["contacts.people"])))
    ref = mail["reference"]
    title = f"{mail['from_name']} reference"
    return Draft(
        goal=(
            f'Find the reference code in the email "{mail["subject"]}", save it in a new note '
            f'titled "{title}" in my travel folder that says "Reference:" and then the code, '
            f"and text it to {person['name']}."
        ),
        plan=[
            ToolCall(tool="search_emails", arguments={"query": mail["subject"]}),
            ToolCall(tool="read_email", arguments={"email_id": mail["id"]}),
            ToolCall(
                tool="create_note",
                arguments={"title": title, "body": f"Reference: {ref}", "folder": "travel"},
            ),
            ToolCall(tool="search_contacts", arguments={"query": person["name"]}),
            ToolCall(
                tool="send_message",
                arguments={"contact_id": person["id"], "text": f"The reference is {ref}"},
            ),
        ],
        checks=[
            _state(
                "notes.notes", title__icontains=title, body=f"Reference: {ref}", folder="travel"
            ),
            _state("messages.sent", contact_id=person["id"], text__icontains=ref),
        ],
    )


def _earliest_free_hour(world: Collections, date: str) -> str | None:
    busy = [
        (minutes(e["start"]), minutes(e["end"]))
        for e in rows(world, "calendar.events")
        if e["date"] == date
    ]
    for hour in range(9, 17):
        start, end = hour * 60, hour * 60 + 60
        if all(end <= b_start or b_end <= start for b_start, b_end in busy):
            return hhmm(start)
    return None


@templates.template(
    [TOOL], HARD, ["calendar", "contacts", "email"], patterns=[GROUNDING, LONG_HORIZON, ROUTING]
)
def meeting_in_first_free_hour(world: Collections, p: Params) -> Draft:
    busy_days = sorted({e["date"] for e in rows(world, "calendar.events")})
    days = [d for d in UPCOMING if d in busy_days and _earliest_free_hour(world, d)]
    date = p.pick("date", days)
    start = _earliest_free_hour(world, date) or "09:00"
    end = hhmm(minutes(start) + 60)
    person = _contact(world, p.pick("contact_id", list(world["contacts.people"])))
    title = p.pick("title", ["Project sync", "Contract review", "Roadmap chat"])
    return Draft(
        goal=(
            f"Find the earliest free hour between 9:00 and 17:00 on {day_name(date)}, book a "
            f'one-hour "{title}" with {person["name"]} then, and email them the time with '
            f'"{title}" as the subject.'
        ),
        plan=[
            ToolCall(tool="list_events", arguments={"date": date}),
            ToolCall(tool="search_contacts", arguments={"query": person["name"]}),
            ToolCall(
                tool="create_event",
                arguments={
                    "title": title,
                    "date": date,
                    "start": start,
                    "end": end,
                    "attendee_ids": [person["id"]],
                },
            ),
            ToolCall(
                tool="send_email",
                arguments={
                    "to": [person["email"]],
                    "subject": title,
                    "body": f"Let's meet on {day_name(date)} from {start} to {end}.",
                },
            ),
        ],
        checks=[
            _state(
                "calendar.events",
                title__icontains=title,
                date=date,
                start=start,
                end=end,
                attendees=[person["id"]],
            ),
            _state(
                "email.sent",
                to__contains=person["email"],
                subject__icontains=title,
                body__icontains=start,
            ),
        ],
    )


def _dinner_steps(
    world: Collections, restaurant: dict[str, Any], date: str, time: str, size: int, cid: str
) -> tuple[list[ToolCall], list[Check]]:
    """Book a table, block two hours in the calendar, text a contact the details."""
    title = f"Dinner at {restaurant['name']}"
    end = hhmm(minutes(time) + 120)
    person = _contact(world, cid)
    text = f"I booked {restaurant['name']} for {day_name(date)} at {time}"
    plan = [
        ToolCall(
            tool="book_table",
            arguments={
                "restaurant_id": restaurant["id"],
                "date": date,
                "time": time,
                "party_size": size,
            },
        ),
        ToolCall(
            tool="create_event",
            arguments={"title": title, "date": date, "start": time, "end": end},
        ),
        ToolCall(tool="search_contacts", arguments={"query": person["name"]}),
        ToolCall(tool="send_message", arguments={"contact_id": cid, "text": text}),
    ]
    checks: list[Check] = [
        _state(
            "food.reservations",
            restaurant_id=restaurant["id"],
            date=date,
            time=time,
            party_size=size,
        ),
        _state(
            "calendar.events",
            title__icontains=restaurant["name"],
            date=date,
            start=time,
            end=end,
            attendees=[],
        ),
        _state("messages.sent", contact_id=cid, text__icontains=restaurant["name"]),
    ]
    return plan, checks


DINNER_TIMES = ["19:00", "19:30", "20:00", "20:30"]


@templates.template(
    [TOOL],
    HARD,
    ["food", "calendar", "contacts", "messages"],
    patterns=[GROUNDING, LONG_HORIZON, ROUTING],
)
def dinner_booking_with_friend(world: Collections, p: Params) -> Draft:
    restaurant = world["food.restaurants"][p.pick("restaurant_id", list(world["food.restaurants"]))]
    date = p.pick("date", UPCOMING)
    time = p.pick("time", DINNER_TIMES)
    size = p.integer("party_size", 2, 6)
    cid = p.pick("contact_id", list(world["contacts.people"]))
    steps, checks = _dinner_steps(world, restaurant, date, time, size, cid)
    return Draft(
        goal=(
            f"Book a table for {size} at {restaurant['name']} on {day_name(date)} at {time}, "
            f'block two hours in my calendar as "Dinner at {restaurant["name"]}", and text '
            f"{_contact(world, cid)['name']} the restaurant, day and time."
        ),
        plan=[
            ToolCall(tool="search_restaurants", arguments={"query": restaurant["name"]}),
            *steps,
        ],
        checks=checks,
    )


@templates.template(
    [TOOL],
    HARD,
    ["calendar", "maps", "contacts", "messages"],
    patterns=[GROUNDING, LONG_HORIZON, ROUTING],
)
def ride_to_upcoming_event(world: Collections, p: Params) -> Draft:
    places = {r["name"] for r in rows(world, "maps.places")}
    options = [
        e["id"]
        for e in rows(world, "calendar.events")
        if e["date"] > WORLD_DATE and e["location"] in places and e["attendees"]
    ]
    event = world["calendar.events"][p.pick("event_id", options)]
    place = _place(world, event["location"])
    ride_type = p.pick("ride_type", ["standard", "comfort"])
    pickup = hhmm(minutes(event["start"]) - 30)
    cid = event["attendees"][0]
    person = _contact(world, cid)
    text = f"I booked a ride to {event['title']}, see you there"
    return Draft(
        goal=(
            f'Book a {ride_type} ride to my "{event["title"]}" on {day_name(event["date"])} '
            f"that picks me up 30 minutes before it starts, then text {person['name']} that "
            "I booked a ride to it."
        ),
        plan=[
            ToolCall(tool="search_events", arguments={"query": event["title"]}),
            ToolCall(tool="search_places", arguments={"query": place["name"]}),
            ToolCall(
                tool="request_ride",
                arguments={
                    "dropoff_id": place["id"],
                    "ride_type": ride_type,
                    "pickup_date": event["date"],
                    "pickup_time": pickup,
                },
            ),
            ToolCall(tool="get_contact", arguments={"contact_id": cid}),
            ToolCall(tool="send_message", arguments={"contact_id": cid, "text": text}),
        ],
        checks=[
            _state(
                "maps.rides",
                dropoff_id=place["id"],
                ride_type=ride_type,
                pickup_date=event["date"],
                pickup_time=pickup,
                status="scheduled",
            ),
            _state("messages.sent", contact_id=cid, text__icontains=event["title"]),
        ],
    )


# -- memory -------------------------------------------------------------------------


@templates.template([Capability.MEMORY, TOOL], EASY, ["clock"], ordered=True)
def wake_up_alarm_from_memory(world: Collections, p: Params) -> Draft:
    time = p.pick("time", ROUTINE_ALARM_TIMES)
    habit = p.pick("habit", WAKE_UP_HABITS)
    key = "user.wake_up_time"
    return Draft(
        goal='Set an alarm labelled "Wake up" for my usual wake-up time.',
        setup=[_memory(key, f"usually wakes up at {time} {habit}")],
        plan=[
            MemoryRead(key=key),
            ToolCall(tool="set_alarm", arguments={"time": time, "label": "Wake up"}),
        ],
        checks=[
            _order(("memory_read", key), ("tool_call", "set_alarm")),
            _state("clock.alarms", time=time, label__icontains="Wake up", enabled=True),
        ],
    )


@templates.template([Capability.MEMORY, TOOL], EASY, ["clock"], ordered=True)
def alarm_for_usual_activity(world: Collections, p: Params) -> Draft:
    activity = p.pick("activity", list(USUAL_ACTIVITIES))
    time = p.pick("time", ACTIVITY_TIMES)
    label, fact, named = USUAL_ACTIVITIES[activity]
    key = f"user.{activity}"
    return Draft(
        goal=f'Set an alarm labelled "{label}" for the time I usually {named}.',
        setup=[_memory(key, fact.format(time=time))],
        plan=[
            MemoryRead(key=key),
            ToolCall(tool="set_alarm", arguments={"time": time, "label": label}),
        ],
        checks=[
            _order(("memory_read", key), ("tool_call", "set_alarm")),
            _state("clock.alarms", time=time, label__icontains=label, enabled=True),
        ],
    )


@templates.template(
    [Capability.MEMORY, TOOL], MEDIUM, ["food"], ordered=True, patterns=[GROUNDING, LONG_HORIZON]
)
def usual_takeaway_from_memory(world: Collections, p: Params) -> Draft:
    dish = world["food.menu"][p.pick("item_id", list(world["food.menu"]))]
    restaurant = world["food.restaurants"][dish["restaurant_id"]]
    qty = p.integer("quantity", 1, 3)
    key = "user.usual_takeaway"
    line = {"item_id": dish["id"], "quantity": qty}
    return Draft(
        goal="Order my usual takeaway for delivery.",
        setup=[_memory(key, f"{qty} x {dish['name']} from {restaurant['name']}")],
        plan=[
            MemoryRead(key=key),
            ToolCall(tool="search_restaurants", arguments={"query": restaurant["name"]}),
            ToolCall(tool="get_menu", arguments={"restaurant_id": restaurant["id"]}),
            ToolCall(
                tool="place_food_order",
                arguments={"restaurant_id": restaurant["id"], "items": [line]},
            ),
        ],
        checks=[
            _order(("memory_read", key), ("tool_call", "place_food_order")),
            _state(
                "food.orders", restaurant_id=restaurant["id"], items__contains=line, status="placed"
            ),
        ],
    )


@templates.template([Capability.MEMORY, TOOL], MEDIUM, ["email"], ordered=True, split=Split.DEV)
def email_landlord_from_memory(world: Collections, p: Params) -> Draft:
    landlords = {
        "Maria Lopes": "maria.lopes@rentals.example",
        "Henrik Dahl": "h.dahl@homes.example",
        "Fatima Rahman": "fatima@lettings.example",
    }
    name = p.pick("landlord", list(landlords))
    address = landlords[name]
    issue = p.pick("issue", ["boiler is broken", "kitchen tap is leaking", "doorbell is dead"])
    key = "user.landlord"
    body = f"Hello, the {issue} again. Could someone come and fix it this week?"
    return Draft(
        goal=f'Email my landlord with the subject "Repair needed" saying the {issue} again.',
        setup=[_memory(key, f"{name} <{address}>", "2025-11-03")],
        plan=[
            MemoryRead(key=key),
            ToolCall(
                tool="send_email",
                arguments={"to": [address], "subject": "Repair needed", "body": body},
            ),
        ],
        checks=[
            _order(("memory_read", key), ("tool_call", "send_email")),
            _state(
                "email.sent",
                to__contains=address,
                subject__icontains="Repair needed",
                body__icontains=issue,
            ),
        ],
    )


@templates.template(
    [Capability.MEMORY, TOOL],
    HARD,
    ["food", "calendar", "contacts", "messages"],
    ordered=True,
    patterns=[GROUNDING, LONG_HORIZON, ROUTING],
)
def favourite_restaurant_dinner(world: Collections, p: Params) -> Draft:
    restaurant = world["food.restaurants"][p.pick("restaurant_id", list(world["food.restaurants"]))]
    date = p.pick("date", UPCOMING)
    time = p.pick("time", DINNER_TIMES)
    cid = p.pick("contact_id", list(world["contacts.people"]))
    key = "user.favourite_restaurant"
    steps, checks = _dinner_steps(world, restaurant, date, time, 2, cid)
    return Draft(
        goal=(
            f"Book a table for two at my favourite restaurant on {day_name(date)} at {time}, "
            'add a two-hour calendar event named "Dinner at" followed by the restaurant, '
            f"and text {_contact(world, cid)['name']} where and when."
        ),
        setup=[_memory(key, restaurant["name"], "2026-01-30")],
        plan=[
            MemoryRead(key=key),
            ToolCall(tool="search_restaurants", arguments={"query": restaurant["name"]}),
            *steps,
        ],
        checks=[
            _order(
                ("memory_read", key),
                ("tool_call", "book_table"),
                ("tool_call", "create_event"),
                ("tool_call", "send_message"),
            ),
            *checks,
        ],
    )


# -- skills -------------------------------------------------------------------------


@templates.template([Capability.SKILLS, TOOL], EASY, ["clock"], ordered=True)
def bedtime_routine_skill(world: Collections, p: Params) -> Draft:
    time = p.pick("time", ROUTINE_ALARM_TIMES)
    mins = p.pick("minutes", list(range(5, 50, 5)))
    name = "bedtime_routine"
    skill = _skill(
        name,
        "Get the phone ready for the night.",
        [
            f"set_alarm at {time} labelled 'Wake up'",
            f"start_timer for {mins} minutes labelled 'Wind down'",
        ],
    )
    return Draft(
        goal="Run my bedtime routine.",
        setup=[skill],
        plan=[
            SkillLoad(name=name),
            ToolCall(tool="set_alarm", arguments={"time": time, "label": "Wake up"}),
            ToolCall(tool="start_timer", arguments={"minutes": mins, "label": "Wind down"}),
        ],
        checks=[
            _order(("skill_load", name), ("tool_call", "set_alarm"), ("tool_call", "start_timer")),
            _state("clock.alarms", time=time, label__icontains="Wake up", enabled=True),
            _state("clock.timers", minutes=mins, label__icontains="Wind down"),
        ],
    )


AGENDA_FOLDERS = ["work", "personal", "travel"]
AGENDA_PREFIXES = [
    "Agenda",
    "Day plan",
    "Schedule",
    "Itinerary",
    "Timetable",
    "Rundown",
    "Overview",
    "Run sheet",
]
"""No prefix is inside another, so a note titled with the wrong one fails the check."""


@templates.template([Capability.SKILLS, TOOL], MEDIUM, ["calendar", "notes"], ordered=True)
def agenda_note_skill(world: Collections, p: Params) -> Draft:
    busy = sorted({e["date"] for e in rows(world, "calendar.events") if e["date"] >= WORLD_DATE})
    date = p.pick("date", busy)
    folder = p.pick("folder", AGENDA_FOLDERS)
    prefix = p.pick("title_prefix", AGENDA_PREFIXES)
    events = sorted(
        (e for e in rows(world, "calendar.events") if e["date"] == date),
        key=lambda e: e["start"],
    )
    name = "daily_agenda_note"
    title = f"{prefix} {date}"
    body = "\n".join(f"{e['start']} {e['title']}" for e in events)
    skill = _skill(
        name,
        f"Write the agenda of one day into a {folder} note.",
        [
            "list_events for the day the user names",
            f"create_note titled '{prefix} YYYY-MM-DD' in the {folder} folder, one line per "
            "event with its start time and title",
        ],
    )
    return Draft(
        goal=f"Run my daily agenda note routine for {day_name(date)}.",
        setup=[skill],
        plan=[
            SkillLoad(name=name),
            ToolCall(tool="list_events", arguments={"date": date}),
            ToolCall(
                tool="create_note", arguments={"title": title, "body": body, "folder": folder}
            ),
        ],
        checks=[
            _order(
                ("skill_load", name), ("tool_call", "list_events"), ("tool_call", "create_note")
            ),
            ExactToolCallCheck(tool="list_events", arguments={"date": date}),
            StatePredicateCheck(
                collection="notes.notes",
                where=(
                    Condition(field="title", op="icontains", value=title),
                    Condition(field="folder", value=folder),
                    Condition(field="body", value=body),
                ),
                expect="exactly_one",
            ),
        ],
    )


LEAVING_TEXTS = [
    "Leaving now, see you soon",
    "On my way to the office",
    "Heading out now, talk later",
    "Just left home, see you at work",
]
"""What the leave-for-work routine texts someone."""


@templates.template(
    [Capability.SKILLS, TOOL],
    HARD,
    ["maps", "contacts", "messages", "clock"],
    ordered=True,
    patterns=[GROUNDING, LONG_HORIZON, ROUTING],
)
def leave_for_work_skill(world: Collections, p: Params) -> Draft:
    offices = [r["id"] for r in rows(world, "maps.places") if r["category"] == "office"]
    office = world["maps.places"][p.pick("office_id", offices)]
    person = _contact(world, p.pick("contact_id", list(world["contacts.people"])))
    mins = p.integer("minutes", 15, 40)
    ride_type = p.pick("ride_type", RIDE_TYPES)
    text = p.pick("text", LEAVING_TEXTS)
    name = "leave_for_work"
    skill = _skill(
        name,
        "Everything to do when leaving home for the office.",
        [
            f"search_places for '{office['name']}'",
            f"request_ride to it with ride type {ride_type}",
            f"send_message to {person['name']} saying '{text}'",
            f"start_timer for {mins} minutes labelled 'Commute'",
        ],
    )
    return Draft(
        goal="Run my leave for work routine.",
        setup=[skill],
        plan=[
            SkillLoad(name=name),
            ToolCall(tool="search_places", arguments={"query": office["name"]}),
            ToolCall(
                tool="request_ride", arguments={"dropoff_id": office["id"], "ride_type": ride_type}
            ),
            ToolCall(tool="search_contacts", arguments={"query": person["name"]}),
            ToolCall(tool="send_message", arguments={"contact_id": person["id"], "text": text}),
            ToolCall(tool="start_timer", arguments={"minutes": mins, "label": "Commute"}),
        ],
        checks=[
            _order(
                ("skill_load", name),
                ("tool_call", "request_ride"),
                ("tool_call", "send_message"),
                ("tool_call", "start_timer"),
            ),
            _state("maps.rides", dropoff_id=office["id"], ride_type=ride_type, status="requested"),
            _state("messages.sent", contact_id=person["id"], text__icontains=text),
            _state("clock.timers", minutes=mins, label__icontains="Commute"),
        ],
    )


# -- sub-agents ---------------------------------------------------------------------


MUSEUMS = [
    "Maritime Museum",
    "Natural History Museum",
    "Tile Museum",
    "Design Museum",
    "Railway Museum",
    "Science Centre",
    "Modern Art Gallery",
    "Toy Museum",
    "Coach Museum",
    "Photography Museum",
    "Botanical Garden",
    "Planetarium",
]
VISIT_HOURS = {1: "one hour", 2: "two hours", 3: "three hours"}


@templates.template([Capability.SUBAGENT, TOOL], EASY, ["calendar"], patterns=[ROUTING])
def museum_visit_via_search(world: Collections, p: Params) -> Draft:
    museum = p.pick("museum", MUSEUMS)
    opens = p.pick("opens", [hhmm(m) for m in range(9 * 60, 11 * 60 + 45, 15)])
    hours = p.pick("hours", list(VISIT_HOURS))
    date = "2026-03-15"
    end = hhmm(minutes(opens) + 60 * hours)
    return Draft(
        goal=(
            f"Ask the search agent when the {museum} opens on Sundays, then add "
            f'"Museum visit" to my calendar tomorrow from opening time for {VISIT_HOURS[hours]}.'
        ),
        setup=[
            _knowledge(
                f"{museum} opening hours",
                f"The {museum} opens at {opens} and closes at 18:00 on weekends.",
            )
        ],
        plan=[
            SubAgentCall(
                agent="search",
                instruction=f"When does the {museum} open on Sundays?",
                arguments={"query": f"{museum} opening hours"},
            ),
            ToolCall(
                tool="create_event",
                arguments={"title": "Museum visit", "date": date, "start": opens, "end": end},
            ),
        ],
        checks=[
            CollaborationCheck(
                agent="search",
                mentions=(museum,),
                then=ActionPattern(kind="tool_call", target="create_event"),
            ),
            _state(
                "calendar.events", title__icontains="Museum visit", date=date, start=opens, end=end
            ),
        ],
    )


GYM_SUBJECTS = [
    "Gym membership",
    "My gym number",
    "Membership number",
    "Gym card",
    "Guest pass",
    "For the gym booking",
]


def _gym_number(world: Collections) -> str:
    content = world["gui.screens"]["gym:membership"]["content"]
    found = re.search(r"G-\d+", content)
    return found.group(0) if found else content


@templates.template(
    [Capability.SUBAGENT, TOOL], MEDIUM, ["contacts", "email"], patterns=[GROUNDING, ROUTING]
)
def gym_number_by_email(world: Collections, p: Params) -> Draft:
    person = _contact(world, p.pick("contact_id", list(world["contacts.people"])))
    subject = p.pick("subject", GYM_SUBJECTS)
    number = _gym_number(world)
    gui_args = {"app": "gym", "operation": "read_screen", "target": "membership"}
    return Draft(
        goal=(
            "Have the GUI agent read my membership number from the gym app's membership "
            f'screen and email it to {person["name"]} with the subject "{subject}".'
        ),
        plan=[
            SubAgentCall(
                agent="gui",
                instruction="Open the gym app's membership screen and read my member number.",
                arguments=dict(gui_args),
            ),
            ToolCall(tool="search_contacts", arguments={"query": person["name"]}),
            ToolCall(
                tool="send_email",
                arguments={
                    "to": [person["email"]],
                    "subject": subject,
                    "body": f"My gym membership number is {number}.",
                },
            ),
        ],
        checks=[
            CollaborationCheck(
                agent="gui",
                arguments=dict(gui_args),
                then=ActionPattern(kind="tool_call", target="send_email"),
            ),
            _state(
                "email.sent",
                to__contains=person["email"],
                subject__icontains=subject,
                body__icontains=number,
            ),
        ],
    )


CLOSING_PLACES = [
    "Central Library",
    "Corner Bakery",
    "Hardware Store",
    "Post Office",
    "Flower Market",
    "Bike Repair Shop",
    "Farmers Market",
    "Swimming Pool",
    "Town Hall",
    "Garden Centre",
]


@templates.template(
    [Capability.SUBAGENT, TOOL], MEDIUM, ["contacts", "messages"], patterns=[GROUNDING, ROUTING]
)
def closing_time_by_text(world: Collections, p: Params) -> Draft:
    place = p.pick("place", CLOSING_PLACES)
    closes = p.pick("closes", [hhmm(m) for m in range(16 * 60, 21 * 60 + 1, 30)])
    person = _contact(world, p.pick("contact_id", list(world["contacts.people"])))
    text = f"The {place} closes at {closes} today."
    return Draft(
        goal=(
            f"Ask the search agent when the {place} closes today, then text "
            f"{person['name']} the closing time."
        ),
        setup=[_knowledge(f"{place} opening hours", f"Today the {place} closes at {closes}.")],
        plan=[
            SubAgentCall(
                agent="search",
                instruction=f"When does the {place} close today?",
                arguments={"query": f"{place} opening hours"},
            ),
            ToolCall(tool="search_contacts", arguments={"query": person["name"]}),
            ToolCall(tool="send_message", arguments={"contact_id": person["id"], "text": text}),
        ],
        checks=[
            CollaborationCheck(
                agent="search",
                mentions=(place,),
                then=ActionPattern(kind="tool_call", target="send_message"),
            ),
            _state("messages.sent", contact_id=person["id"], text__icontains=closes),
        ],
    )


@templates.template(
    [Capability.SUBAGENT, TOOL], MEDIUM, ["clock"], split=Split.DEV, patterns=[ROUTING]
)
def pharmacy_opening_alarm(world: Collections, p: Params) -> Draft:
    pharmacy = p.pick("pharmacy", ["Green Cross Pharmacy", "Riverside Pharmacy"])
    times = ["08:45", "09:15", "09:45", "10:15"]
    opens = p.pick("opens", [t for t in times if t not in SEEDED_ALARM_TIMES])
    return Draft(
        goal=(
            f"Ask the search agent when {pharmacy} opens on Saturdays and set an alarm "
            'labelled "Pharmacy" for that time.'
        ),
        setup=[
            _knowledge(
                f"{pharmacy} Saturday hours",
                f"{pharmacy} is open on Saturdays from {opens} to 13:00.",
            )
        ],
        plan=[
            SubAgentCall(
                agent="search",
                instruction=f"What time does {pharmacy} open on Saturdays?",
                arguments={"query": f"{pharmacy} Saturday hours"},
            ),
            ToolCall(tool="set_alarm", arguments={"time": opens, "label": "Pharmacy"}),
        ],
        checks=[
            CollaborationCheck(
                agent="search",
                mentions=(pharmacy,),
                then=ActionPattern(kind="tool_call", target="set_alarm"),
            ),
            _state("clock.alarms", time=opens, label__icontains="Pharmacy", enabled=True),
        ],
    )


CONCERT_ARTISTS = [
    "Norah Jones",
    "Arctic Monkeys",
    "Florence and the Machine",
    "Fleetwood Mac",
    "Daft Punk",
    "Rosalia",
]


@templates.template(
    [Capability.SUBAGENT, TOOL],
    HARD,
    ["calendar", "maps"],
    patterns=[GROUNDING, LONG_HORIZON, ROUTING],
)
def concert_night_with_agents(world: Collections, p: Params) -> Draft:
    venue = _place(world, p.pick("venue", ["Riverside Arena", "Blue Note Club"]))
    artist = p.pick("artist", CONCERT_ARTISTS)
    date = p.pick("date", UPCOMING)
    doors = p.pick("doors", ["18:30", "19:00", "19:30", "20:00"])
    pickup = hhmm(minutes(doors) - 30)
    title = f"{artist} concert"
    gui_args = {"app": "transit", "operation": "grant_permission", "target": "notifications"}
    return Draft(
        goal=(
            f"I'm going to the {artist} concert at {venue['name']} on {day_name(date)}. Ask the "
            f'search agent when doors open, add "{title}" to my calendar from then until 23:00, '
            "have the GUI agent allow notifications for the transit app, and book a comfort "
            "ride there that picks me up 30 minutes before doors open."
        ),
        setup=[
            _knowledge(
                f"{artist} at {venue['name']}",
                f"{artist} play {venue['name']} on {date}. Doors open at {doors}.",
            )
        ],
        plan=[
            SubAgentCall(
                agent="search",
                instruction=f"When do doors open for {artist} at {venue['name']} on {date}?",
                arguments={"query": f"{artist} {venue['name']} doors open"},
            ),
            ToolCall(
                tool="create_event",
                arguments={"title": title, "date": date, "start": doors, "end": "23:00"},
            ),
            SubAgentCall(
                agent="gui",
                instruction="Allow notifications for the transit app.",
                arguments=dict(gui_args),
            ),
            ToolCall(tool="search_places", arguments={"query": venue["name"]}),
            ToolCall(
                tool="request_ride",
                arguments={
                    "dropoff_id": venue["id"],
                    "ride_type": "comfort",
                    "pickup_date": date,
                    "pickup_time": pickup,
                },
            ),
        ],
        checks=[
            CollaborationCheck(
                agent="search",
                mentions=(artist,),
                then=ActionPattern(kind="tool_call", target="create_event"),
            ),
            CollaborationCheck(
                agent="gui",
                arguments=dict(gui_args),
                then=ActionPattern(kind="tool_call", target="request_ride"),
            ),
            _state("calendar.events", title__icontains=title, date=date, start=doors, end="23:00"),
            _state("gui.permissions", id="transit:notifications", granted=True),
            _state(
                "maps.rides",
                dropoff_id=venue["id"],
                ride_type="comfort",
                pickup_date=date,
                pickup_time=pickup,
                status="scheduled",
            ),
        ],
    )
