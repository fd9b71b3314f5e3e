"""Settings: the phone's toggles, levels, Wi-Fi networks and do-not-disturb schedule."""

from __future__ import annotations

import random
from typing import Any

from pydantic import JsonValue

from contract import ToolEffect
from envs.sandbox.app import TIME, App, boolean, integer, text
from envs.sandbox.state import Collections, ToolContext, ToolFailure

app = App("settings")
TOGGLES = [
    "wifi",
    "bluetooth",
    "airplane_mode",
    "do_not_disturb",
    "location_services",
    "dark_mode",
    "battery_saver",
    "nfc",
]
LEVELS = ["brightness", "media_volume", "ring_volume"]
_NETWORKS = ("HomeNet-5G", "Cafe Aroma Guest", "Office-Secure", "Library Free WiFi", "Gym Lobby")
DND = "dnd"


@app.seeder
def seed_settings(state: Collections, rng: random.Random) -> None:
    fixed = {"wifi": True, "airplane_mode": False, "do_not_disturb": False, "battery_saver": False}
    state["settings.toggles"] = {
        name: {"id": name, "enabled": fixed.get(name, rng.random() < 0.5)} for name in TOGGLES
    }
    state["settings.levels"] = {
        "brightness": {"id": "brightness", "value": rng.randrange(30, 90)},
        "media_volume": {"id": "media_volume", "value": rng.randrange(20, 80)},
        "ring_volume": {"id": "ring_volume", "value": rng.randrange(40, 100)},
    }
    state["settings.networks"] = {
        f"net-{i + 1}": {
            "id": f"net-{i + 1}",
            "ssid": ssid,
            "secured": i in (0, 2),
            "saved": i < 3,
            "connected": i == 0,
            "signal": rng.randrange(1, 5),
        }
        for i, ssid in enumerate(_NETWORKS)
    }
    state["settings.schedules"] = {}


@app.tool(
    "Show the phone's settings: toggles, levels, Wi-Fi networks in range and the "
    "do-not-disturb schedule."
)
def get_settings(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    return {
        "toggles": {r["id"]: r["enabled"] for r in ctx.rows("settings.toggles")},
        "levels": {r["id"]: r["value"] for r in ctx.rows("settings.levels")},
        "wifi_networks": [dict(r) for r in ctx.rows("settings.networks")],
        "schedules": [dict(r) for r in ctx.rows("settings.schedules")],
    }


@app.tool(
    "Turn a phone setting on or off (Wi-Fi, Bluetooth, do not disturb, dark mode, ...).",
    {"name": text("which setting", enum=TOGGLES), "enabled": boolean("true for on")},
    effect=ToolEffect.WRITE,
)
def set_setting(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    ctx.update("settings.toggles", args["name"], enabled=args["enabled"])
    return {"name": args["name"], "enabled": args["enabled"]}


@app.tool(
    "Set screen brightness, media volume or ring volume (0-100).",
    {
        "name": text("which level", enum=LEVELS),
        "value": integer("level in percent", minimum=0, maximum=100),
    },
    effect=ToolEffect.WRITE,
)
def set_level(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    ctx.update("settings.levels", args["name"], value=args["value"])
    return {"name": args["name"], "value": args["value"]}


@app.tool(
    "Connect to a Wi-Fi network in range (see get_settings for the networks).",
    {"network_id": text("network to connect to, e.g. net-2")},
    effect=ToolEffect.WRITE,
)
def connect_wifi(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    network = ctx.get("settings.networks", args["network_id"], "network_id")
    if not ctx.collections["settings.toggles"]["wifi"]["enabled"]:
        raise ToolFailure("Wi-Fi is turned off", field="network_id")
    for row in ctx.rows("settings.networks"):
        if row["connected"] and row["id"] != network["id"]:
            ctx.update("settings.networks", row["id"], connected=False)
    ctx.update("settings.networks", network["id"], connected=True, saved=True)
    return {"connected": network["ssid"]}


@app.tool(
    "Schedule do not disturb every night between two times.",
    {
        "start": text("start time, HH:MM", pattern=TIME),
        "end": text("end time, HH:MM", pattern=TIME),
    },
    effect=ToolEffect.WRITE,
)
def schedule_do_not_disturb(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    if args["start"] == args["end"]:
        raise ToolFailure("start and end must differ", field="end")
    row = {"id": DND, "start": args["start"], "end": args["end"], "enabled": True}
    if DND in ctx.collections["settings.schedules"]:
        ctx.update("settings.schedules", DND, **row)
    else:
        ctx.insert("settings.schedules", row)
    return {"do_not_disturb": f"{args['start']}-{args['end']}"}
