"""Smart home: lights, plugs, door locks and the thermostat, by room."""

from __future__ import annotations

import random
from typing import Any

from pydantic import JsonValue

from contract import ToolEffect
from envs.sandbox.app import App, boolean, integer, number, text
from envs.sandbox.state import Collections, ToolContext, ToolFailure

app = App("smart_home")
THERMOSTAT = "d-13"
FRONT_DOOR = "d-10"
BACK_DOOR = "d-11"
THERMOSTAT_MODES = ["heat", "cool", "auto"]

_DEVICES = (
    ("Living room ceiling light", "light", "living room"),
    ("Living room floor lamp", "light", "living room"),
    ("Kitchen light", "light", "kitchen"),
    ("Bedroom light", "light", "bedroom"),
    ("Bedside lamp", "light", "bedroom"),
    ("Hallway light", "light", "hallway"),
    ("Desk plug", "plug", "office"),
    ("Coffee maker plug", "plug", "kitchen"),
    ("TV plug", "plug", "living room"),
    ("Front door lock", "lock", "hallway"),
    ("Back door lock", "lock", "kitchen"),
    ("Garage door lock", "lock", "garage"),
    ("Thermostat", "thermostat", "hallway"),
)  # fmt: skip
POWERED = ("light", "plug")


@app.seeder
def seed_smart_home(state: Collections, rng: random.Random) -> None:
    devices = {}
    for i, (name, kind, room) in enumerate(_DEVICES):
        did = f"d-{i + 1}"
        row: dict[str, Any] = {"id": did, "name": name, "type": kind, "room": room}
        if kind in POWERED:
            row["power"] = rng.random() < 0.5
        if kind == "light":
            row["brightness"] = rng.choice([30, 50, 70, 100])
        if kind == "lock":
            row["locked"] = {FRONT_DOOR: False, BACK_DOOR: True}.get(did, rng.random() < 0.5)
        if kind == "thermostat":
            row["target_temp"] = rng.choice([20.0, 20.5, 21.0, 22.0, 23.0])
            row["mode"] = "heat"
        devices[did] = row
    state["smart_home.devices"] = devices


@app.tool(
    "List smart home devices and their current state, optionally in one room.",
    {"room": text("room name, e.g. kitchen", optional=True)},
)
def list_devices(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    room = args.get("room", "").lower()
    return [dict(r) for r in ctx.rows("smart_home.devices") if not room or r["room"] == room]


@app.tool(
    "Turn a light or smart plug on or off.",
    {"device_id": text("device id, e.g. d-3"), "on": boolean("true to turn on, false to turn off")},
    effect=ToolEffect.WRITE,
)
def set_device_power(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    device = ctx.get("smart_home.devices", args["device_id"], "device_id")
    if device["type"] not in POWERED:
        raise ToolFailure(f"{device['name']} cannot be switched on or off", field="device_id")
    ctx.update("smart_home.devices", device["id"], power=args["on"])
    return {"device": device["name"], "power": args["on"]}


@app.tool(
    "Dim or brighten a light (turns it on).",
    {"device_id": text("light id"), "level": integer("brightness percent", minimum=1, maximum=100)},
    effect=ToolEffect.WRITE,
)
def set_light_brightness(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    device = ctx.get("smart_home.devices", args["device_id"], "device_id")
    if device["type"] != "light":
        raise ToolFailure(f"{device['name']} is not a light", field="device_id")
    ctx.update("smart_home.devices", device["id"], power=True, brightness=args["level"])
    return {"device": device["name"], "brightness": args["level"]}


@app.tool(
    "Set the thermostat's target temperature (and optionally its mode).",
    {
        "device_id": text("thermostat id"),
        "temperature": number("target in degrees Celsius", minimum=10, maximum=30),
        "mode": text("heating mode", enum=THERMOSTAT_MODES, optional=True),
    },
    effect=ToolEffect.WRITE,
)
def set_thermostat(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    device = ctx.get("smart_home.devices", args["device_id"], "device_id")
    if device["type"] != "thermostat":
        raise ToolFailure(f"{device['name']} is not a thermostat", field="device_id")
    fields = {"target_temp": float(args["temperature"]), "mode": args.get("mode", device["mode"])}
    ctx.update("smart_home.devices", device["id"], **fields)
    return {"device": device["name"], **fields}


@app.tool(
    "Lock or unlock a door.",
    {"device_id": text("lock id"), "locked": boolean("true to lock, false to unlock")},
    effect=ToolEffect.WRITE,
)
def set_door_lock(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    device = ctx.get("smart_home.devices", args["device_id"], "device_id")
    if device["type"] != "lock":
        raise ToolFailure(f"{device['name']} is not a door lock", field="device_id")
    ctx.update("smart_home.devices", device["id"], locked=args["locked"])
    return {"device": device["name"], "locked": args["locked"]}
