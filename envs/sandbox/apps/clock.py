"""Clock: alarms, timers and world clocks."""

from __future__ import annotations

import random
from typing import Any

from pydantic import JsonValue

from contract import ToolEffect
from envs.sandbox.app import TIME, App, array, boolean, integer, text
from envs.sandbox.apps.names import CITIES
from envs.sandbox.state import Collections, ToolContext, ToolFailure

app = App("clock")

ALARMS = "clock.alarms"
TIMERS = "clock.timers"
WORLD_CLOCKS = "clock.world_clocks"
WEEKDAYS = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
SEEDED_ALARM_TIMES = ("06:00", "06:30", "07:00", "07:15", "08:00", "22:30")
"""Seeded alarms only ever use these times (templates set alarms at other times)."""
_LABELS = ("Wake up", "Gym", "Take vitamins", "Leave for work", "School run", "Go to bed")


@app.seeder
def seed_clock(state: Collections, rng: random.Random) -> None:
    alarms = {}
    for i, time in enumerate(sorted(rng.sample(SEEDED_ALARM_TIMES, 4))):
        aid = f"al-{i + 1}"
        alarms[aid] = {
            "id": aid,
            "time": time,
            "label": rng.choice(_LABELS),
            "repeat_days": WEEKDAYS[:5] if rng.random() < 0.5 else [],
            "enabled": rng.random() < 0.6,
        }
    state[ALARMS] = alarms
    state[TIMERS] = {}
    state[WORLD_CLOCKS] = {
        f"wc-{i + 1}": {"id": f"wc-{i + 1}", "city": city}
        for i, city in enumerate(rng.sample(CITIES, 2))
    }


@app.tool("List all alarms, earliest first.")
def list_alarms(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    return [dict(r) for r in sorted(ctx.rows(ALARMS), key=lambda r: r["time"])]


@app.tool(
    "Set a new alarm, optionally repeating on some weekdays.",
    {
        "time": text("alarm time, HH:MM", pattern=TIME),
        "label": text("what the alarm is for", max_length=100),
        "repeat_days": array(
            "weekdays to repeat on (default: once)",
            text("weekday", enum=WEEKDAYS),
            max_items=7,
            optional=True,
        ),
    },
    effect=ToolEffect.WRITE,
)
def set_alarm(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    time = args["time"]
    for row in ctx.rows(ALARMS):
        if row["time"] == time:
            raise ToolFailure(
                f"an alarm at {time} already exists ({row['id']}); enable or edit it instead",
                field="time",
            )
    row = {
        "id": ctx.new_id("al"),
        "time": time,
        "label": args["label"],
        "repeat_days": list(args.get("repeat_days", [])),
        "enabled": True,
    }
    return dict(ctx.insert(ALARMS, row))


@app.tool(
    "Turn an existing alarm on or off.",
    {"alarm_id": text("alarm id, e.g. al-2"), "enabled": boolean("true: on, false: off")},
    effect=ToolEffect.WRITE,
)
def toggle_alarm(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    alarm = ctx.get(ALARMS, args["alarm_id"], "alarm_id")
    if alarm["enabled"] is args["enabled"]:
        state = "on" if args["enabled"] else "off"
        raise ToolFailure(f"the alarm at {alarm['time']} is already {state}", field="enabled")
    return dict(ctx.update(ALARMS, alarm["id"], enabled=args["enabled"]))


@app.tool("Delete an alarm.", {"alarm_id": text("alarm id")}, effect=ToolEffect.WRITE)
def delete_alarm(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    alarm = ctx.get(ALARMS, args["alarm_id"], "alarm_id")
    ctx.delete(ALARMS, alarm["id"])
    return {"deleted": alarm["id"], "time": alarm["time"]}


@app.tool(
    "Start a countdown timer.",
    {
        "minutes": integer("duration in minutes", minimum=1, maximum=720),
        "label": text("what the timer is for", max_length=100),
    },
    effect=ToolEffect.WRITE,
)
def start_timer(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    row = {
        "id": ctx.new_id("tm"),
        "minutes": args["minutes"],
        "label": args["label"],
        "status": "running",
    }
    return dict(ctx.insert(TIMERS, row))


@app.tool(
    "Add a city to the world clock.",
    {"city": text("city name, e.g. Tokyo", max_length=100)},
    effect=ToolEffect.WRITE,
)
def add_world_clock(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    city = args["city"].strip()
    for row in ctx.rows(WORLD_CLOCKS):
        if row["city"].casefold() == city.casefold():
            raise ToolFailure(f"{city} is already on the world clock", field="city")
    return dict(ctx.insert(WORLD_CLOCKS, {"id": ctx.new_id("wc"), "city": city}))
