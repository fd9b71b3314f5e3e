"""Travel: flights from home, hotels, and the bookings made."""

from __future__ import annotations

import random
from typing import Any

from pydantic import JsonValue

from contract import ToolEffect
from envs.sandbox.app import DATE, App, integer, number, text
from envs.sandbox.apps.names import CITIES
from envs.sandbox.state import WORLD_DATE, Collections, ToolContext, ToolFailure

app = App("travel")

HOME_CITY = "Lisbon"
DESTINATIONS = [c for c in CITIES if c != HOME_CITY]
AIRLINES = (("Aurora Air", "AU"), ("Skyline", "SK"), ("Iberia Blue", "IB"), ("Nordwind", "NW"))
_HOTEL_NAMES = ("Grand", "Riverside", "Old Town", "Central Park", "Harbour View", "Garden")
FLIGHT_COUNT = 48


@app.seeder
def seed_travel(state: Collections, rng: random.Random) -> None:
    flights = {}
    for i in range(FLIGHT_COUNT):
        airline, code = rng.choice(AIRLINES)
        hour = rng.randrange(6, 21)
        origin, destination = HOME_CITY, rng.choice(DESTINATIONS)
        if i % 6 == 5:
            origin, destination = destination, HOME_CITY
        fid = f"fl-{i + 1}"
        flights[fid] = {
            "id": fid,
            "airline": airline,
            "number": f"{code}{rng.randrange(100, 999)}",
            "origin": origin,
            "destination": destination,
            "date": f"2026-03-{rng.randrange(15, 25)}",
            "departs": f"{hour:02d}:{rng.choice(['00', '15', '30', '45'])}",
            "arrives": f"{(hour + rng.randrange(2, 4)) % 24:02d}:{rng.choice(['05', '20', '50'])}",
            "price": round(rng.randrange(49, 380) + i / 100, 2),
            "seats_left": rng.randrange(1, 9),
        }
    hotels: dict[str, dict[str, Any]] = {}
    for i, city in enumerate(CITIES):
        for j, label in enumerate(rng.sample(_HOTEL_NAMES, 2)):
            hid = f"h-{2 * i + j + 1}"
            hotels[hid] = {
                "id": hid,
                "name": f"{label} Hotel {city}",
                "city": city,
                "nightly_price": round(rng.randrange(60, 260) + 0.5 * j, 2),
                "rating": round(rng.uniform(3.5, 4.9), 1),
                "rooms_left": rng.randrange(1, 6),
            }
    state["travel.flights"] = flights
    state["travel.hotels"] = hotels
    state["travel.bookings"] = {
        "bk-1": {
            "id": "bk-1",
            "kind": "hotel",
            "item_id": "h-9",
            "check_in": "2026-04-02",
            "nights": 3,
            "passengers": 0,
            "total": round(3 * hotels["h-9"]["nightly_price"], 2),
            "status": "confirmed",
        }
    }


@app.tool(
    "Search flights between two cities on a date, cheapest first.",
    {
        "origin": text("departure city"),
        "destination": text("arrival city"),
        "date": text("departure date, YYYY-MM-DD", pattern=DATE),
    },
)
def search_flights(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    origin, destination = args["origin"].lower(), args["destination"].lower()
    found = [
        r
        for r in ctx.rows("travel.flights")
        if r["origin"].lower() == origin
        and r["destination"].lower() == destination
        and r["date"] == args["date"]
    ]
    return [dict(r) for r in sorted(found, key=lambda r: r["price"])]


@app.tool(
    "Book seats on a flight.",
    {
        "flight_id": text("flight id, e.g. fl-12"),
        "passengers": integer("number of seats", minimum=1, maximum=6),
    },
    effect=ToolEffect.WRITE,
)
def book_flight(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    flight = ctx.get("travel.flights", args["flight_id"], "flight_id")
    seats = args["passengers"]
    if seats > flight["seats_left"]:
        raise ToolFailure(f"only {flight['seats_left']} seats left", field="passengers")
    ctx.update("travel.flights", flight["id"], seats_left=flight["seats_left"] - seats)
    row = {
        "id": ctx.new_id("bk"),
        "kind": "flight",
        "item_id": flight["id"],
        "check_in": flight["date"],
        "nights": 0,
        "passengers": seats,
        "total": round(flight["price"] * seats, 2),
        "status": "confirmed",
    }
    ctx.insert("travel.bookings", row)
    return {"booking_id": row["id"], "flight": flight["number"], "total": row["total"]}


@app.tool(
    "Search hotels in a city, optionally under a nightly price.",
    {
        "city": text("city name"),
        "max_price": number("highest nightly price in EUR", minimum=0, optional=True),
    },
)
def search_hotels(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    city = args["city"].lower()
    cap = args.get("max_price")
    return [
        dict(r)
        for r in ctx.rows("travel.hotels")
        if r["city"].lower() == city and (cap is None or r["nightly_price"] <= cap)
    ]


@app.tool(
    "Book a hotel room for a number of nights.",
    {
        "hotel_id": text("hotel id, e.g. h-4"),
        "check_in": text("arrival date, YYYY-MM-DD", pattern=DATE),
        "nights": integer("number of nights", minimum=1, maximum=30),
    },
    effect=ToolEffect.WRITE,
)
def book_hotel(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    hotel = ctx.get("travel.hotels", args["hotel_id"], "hotel_id")
    if args["check_in"] < WORLD_DATE:
        raise ToolFailure("check-in date is in the past", field="check_in")
    if hotel["rooms_left"] < 1:
        raise ToolFailure(f"{hotel['name']} is fully booked", field="hotel_id")
    ctx.update("travel.hotels", hotel["id"], rooms_left=hotel["rooms_left"] - 1)
    row = {
        "id": ctx.new_id("bk"),
        "kind": "hotel",
        "item_id": hotel["id"],
        "check_in": args["check_in"],
        "nights": args["nights"],
        "passengers": 0,
        "total": round(hotel["nightly_price"] * args["nights"], 2),
        "status": "confirmed",
    }
    ctx.insert("travel.bookings", row)
    return {"booking_id": row["id"], "hotel": hotel["name"], "total": row["total"]}


@app.tool(
    "Cancel a flight or hotel booking.",
    {"booking_id": text("booking id, e.g. bk-1")},
    effect=ToolEffect.WRITE,
)
def cancel_booking(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    booking = ctx.get("travel.bookings", args["booking_id"], "booking_id")
    if booking["status"] == "cancelled":
        raise ToolFailure("booking is already cancelled", field="booking_id")
    ctx.update("travel.bookings", booking["id"], status="cancelled")
    return {"booking_id": booking["id"], "status": "cancelled"}
