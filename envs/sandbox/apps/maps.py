"""Maps and ride-hailing: places around the user, directions, saved lists and rides."""

from __future__ import annotations

import random
from typing import Any

from pydantic import JsonValue

from contract import ToolEffect
from envs.sandbox.app import DATE, TIME, App, text
from envs.sandbox.state import WORLD_DATE, WORLD_TIME, Collections, ToolContext, ToolFailure

app = App("maps")

PLACES = "maps.places"
SAVED = "maps.saved"
RIDES = "maps.rides"

HOME = "home"
"""The pickup point a ride uses when none is given: the user's current location."""

PLACE_POOL: tuple[tuple[str, str], ...] = (
    ("City Museum", "museum"),
    ("Maritime Museum", "museum"),
    ("Central Station", "station"),
    ("Airport Terminal 1", "station"),
    ("Cafe Aurora", "cafe"),
    ("Copper Kettle Cafe", "cafe"),
    ("Green Cross Pharmacy", "pharmacy"),
    ("Riverside Pharmacy", "pharmacy"),
    ("Iron Temple Gym", "gym"),
    ("Harbour Park", "park"),
    ("Botanical Garden", "park"),
    ("Riverside Arena", "venue"),
    ("Blue Note Club", "venue"),
    ("Northside Office Park", "office"),
    ("Innovation Hub", "office"),
    ("Public Library", "library"),
    ("St Mary's Hospital", "hospital"),
    ("FreshMart Supermarket", "supermarket"),
)
PLACE_NAMES: tuple[str, ...] = tuple(name for name, _ in PLACE_POOL)
CATEGORIES = sorted({category for _, category in PLACE_POOL})
_STREETS = (
    "Rua Augusta", "Avenida da Liberdade", "Rua do Carmo", "Praca do Comercio",
    "Rua Garrett", "Avenida Almirante Reis", "Rua da Prata", "Calcada do Combro",
)  # fmt: skip
_HOURS = {
    "museum": ("10:00", "18:00"),
    "station": ("05:00", "23:59"),
    "cafe": ("07:30", "19:00"),
    "pharmacy": ("08:30", "20:00"),
    "gym": ("06:00", "22:00"),
    "park": ("07:00", "21:00"),
    "venue": ("18:00", "23:59"),
    "office": ("08:00", "19:00"),
    "library": ("09:00", "20:00"),
    "hospital": ("00:00", "23:59"),
    "supermarket": ("08:00", "22:00"),
}
MODES = ["driving", "walking", "transit", "cycling"]
_SPEED_KMH = {"driving": 30.0, "walking": 5.0, "transit": 20.0, "cycling": 15.0}
RIDE_TYPES = ["standard", "comfort", "xl"]
_RIDE_RATE = {"standard": 1.0, "comfort": 1.4, "xl": 1.8}
SAVED_LISTS = ["favorites", "want_to_go"]


@app.seeder
def seed_maps(state: Collections, rng: random.Random) -> None:
    pool = list(PLACE_POOL)
    rng.shuffle(pool)
    places = {}
    for i, (name, category) in enumerate(pool):
        pid = f"pl-{i + 1}"
        opens, closes = _HOURS[category]
        places[pid] = {
            "id": pid,
            "name": name,
            "category": category,
            "address": f"{rng.randrange(1, 200)} {rng.choice(_STREETS)}",
            "distance_km": round(rng.uniform(0.4, 14.0), 1),
            "opens": opens,
            "closes": closes,
        }
    state[PLACES] = places
    first = rng.choice(list(places))
    state[SAVED] = {
        f"favorites:{first}": {
            "id": f"favorites:{first}",
            "place_id": first,
            "list_name": "favorites",
        }
    }
    rides = {}
    for i in range(2):
        rid = f"ride-{i + 1}"
        rides[rid] = {
            "id": rid,
            "pickup_id": HOME,
            "dropoff_id": rng.choice(list(places)),
            "ride_type": rng.choice(RIDE_TYPES),
            "pickup_date": f"2026-03-{rng.randrange(1, 13):02d}",
            "pickup_time": f"{rng.randrange(8, 20):02d}:{rng.choice((0, 15, 30, 45)):02d}",
            "status": "completed",
            "fare": round(rng.uniform(6.0, 30.0), 2),
        }
    state[RIDES] = rides


def public_place(row: dict[str, Any]) -> dict[str, JsonValue]:
    return {
        k: row[k] for k in ("id", "name", "category", "address", "distance_km", "opens", "closes")
    }


def _distance(ctx: ToolContext, origin: str, destination: dict[str, Any]) -> float:
    if origin == HOME:
        return float(destination["distance_km"])
    start = ctx.get(PLACES, origin, "origin_id")
    return round(abs(float(start["distance_km"]) - float(destination["distance_km"])) + 0.8, 1)


@app.tool(
    "Search places on the map by (part of) their name, address or category.",
    {
        "query": text("what to look for, e.g. a name or 'pharmacy'"),
        "category": text("only places of this category", enum=CATEGORIES, optional=True),
    },
)
def search_places(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    query = args["query"].lower()
    category = args.get("category")
    return [
        public_place(r)
        for r in ctx.rows(PLACES)
        if (category is None or r["category"] == category)
        and (query in r["name"].lower() or query in r["address"].lower() or query == r["category"])
    ]


@app.tool(
    "Directions to a place: distance and travel time from the user's location (or origin).",
    {
        "destination_id": text("place id of the destination, e.g. pl-4"),
        "mode": text("how to travel", enum=MODES),
        "origin_id": text("place id to start from; default: the user's location", optional=True),
    },
)
def get_directions(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    destination = ctx.get(PLACES, args["destination_id"], "destination_id")
    origin = args.get("origin_id", HOME)
    if origin == destination["id"]:
        raise ToolFailure("origin and destination are the same place", field="destination_id")
    km = _distance(ctx, origin, destination)
    minutes = max(1, round(km / _SPEED_KMH[args["mode"]] * 60))
    return {"destination": destination["name"], "distance_km": km, "minutes": minutes}


@app.tool(
    "Save a place to one of the user's lists.",
    {
        "place_id": text("place id"),
        "list_name": text("which list", enum=SAVED_LISTS),
    },
    effect=ToolEffect.WRITE,
)
def save_place(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    place = ctx.get(PLACES, args["place_id"], "place_id")
    key = f"{args['list_name']}:{place['id']}"
    if key in ctx.collections[SAVED]:
        raise ToolFailure(f"{place['name']} is already in {args['list_name']}", field="place_id")
    ctx.insert(SAVED, {"id": key, "place_id": place["id"], "list_name": args["list_name"]})
    return {"saved": place["name"], "list_name": args["list_name"]}


def _fare(km: float, ride_type: str) -> float:
    return round((3.5 + 1.2 * km) * _RIDE_RATE[ride_type], 2)


@app.tool(
    "Estimate the fare and pickup wait of a ride from the user's location to a place.",
    {
        "dropoff_id": text("place id of the destination"),
        "ride_type": text("kind of car", enum=RIDE_TYPES),
    },
)
def estimate_ride_fare(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    dropoff = ctx.get(PLACES, args["dropoff_id"], "dropoff_id")
    wait = {"standard": 4, "comfort": 7, "xl": 11}[args["ride_type"]]
    return {
        "dropoff": dropoff["name"],
        "ride_type": args["ride_type"],
        "fare": _fare(dropoff["distance_km"], args["ride_type"]),
        "pickup_wait_minutes": wait,
    }


@app.tool(
    "Request a ride to a place, now or at a scheduled pickup date and time.",
    {
        "dropoff_id": text("place id of the destination"),
        "ride_type": text("kind of car", enum=RIDE_TYPES),
        "pickup_id": text(
            "place id to be picked up at; default: the user's location", optional=True
        ),
        "pickup_date": text("pickup day, YYYY-MM-DD; default: today", pattern=DATE, optional=True),
        "pickup_time": text("pickup time, HH:MM; default: now", pattern=TIME, optional=True),
    },
    effect=ToolEffect.WRITE,
)
def request_ride(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    dropoff = ctx.get(PLACES, args["dropoff_id"], "dropoff_id")
    pickup = args.get("pickup_id", HOME)
    if pickup != HOME:
        ctx.get(PLACES, pickup, "pickup_id")
    if pickup == dropoff["id"]:
        raise ToolFailure("pickup and dropoff are the same place", field="dropoff_id")
    date = args.get("pickup_date", WORLD_DATE)
    if date < WORLD_DATE:
        raise ToolFailure(f"{date} is in the past (today is {WORLD_DATE})", field="pickup_date")
    scheduled = "pickup_time" in args
    time = args.get("pickup_time", WORLD_TIME)
    if date == WORLD_DATE and time < WORLD_TIME:
        raise ToolFailure(f"{time} today is in the past (now is {WORLD_TIME})", field="pickup_time")
    row = {
        "id": ctx.new_id("ride"),
        "pickup_id": pickup,
        "dropoff_id": dropoff["id"],
        "ride_type": args["ride_type"],
        "pickup_date": date,
        "pickup_time": time,
        "status": "scheduled" if scheduled or date != WORLD_DATE else "requested",
        "fare": _fare(dropoff["distance_km"], args["ride_type"]),
    }
    ctx.insert(RIDES, row)
    return {k: row[k] for k in ("id", "dropoff_id", "ride_type", "pickup_date", "pickup_time",
                                "status", "fare")}  # fmt: skip


@app.tool(
    "Cancel a requested or scheduled ride.",
    {"ride_id": text("ride id, e.g. ride-1001")},
    effect=ToolEffect.WRITE,
)
def cancel_ride(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    ride = ctx.get(RIDES, args["ride_id"], "ride_id")
    if ride["status"] not in ("requested", "scheduled"):
        raise ToolFailure(f"ride {ride['id']} is already {ride['status']}", field="ride_id")
    ctx.update(RIDES, ride["id"], status="cancelled")
    return {"ride_id": ride["id"], "status": "cancelled"}
