"""Food delivery: restaurants, their menus, delivery orders and table bookings."""

from __future__ import annotations

import random
from typing import Any

from pydantic import JsonValue

from contract import ToolEffect
from envs.sandbox.app import DATE, TIME, App, array, integer, obj, text
from envs.sandbox.state import WORLD_DATE, Collections, ToolContext, ToolFailure

app = App("food")

RESTAURANTS = "food.restaurants"
MENU = "food.menu"
ORDERS = "food.orders"
RESERVATIONS = "food.reservations"
CUISINES = ["italian", "japanese", "indian", "mexican", "vegan", "chinese", "american",
            "greek", "vietnamese", "french"]  # fmt: skip
RESTAURANT_NAMES = {
    "italian": "Luigi's Trattoria",
    "japanese": "Sakura Sushi",
    "indian": "Taj Spice",
    "mexican": "El Toro Taqueria",
    "vegan": "Green Bowl",
    "chinese": "Golden Dragon",
    "american": "Burger Barn",
    "greek": "Olive Tree Mezze",
    "vietnamese": "Pho Saigon",
    "french": "Le Petit Bistro",
}
_DISHES: dict[str, tuple[tuple[str, float, bool], ...]] = {
    "italian": (("Margherita pizza", 9.5, True), ("Lasagne", 12.0, False),
                ("Mushroom risotto", 11.5, True), ("Tiramisu", 5.5, True)),
    "japanese": (("Salmon nigiri set", 14.0, False), ("Vegetable gyoza", 6.5, True),
                 ("Chicken katsu curry", 12.5, False), ("Miso soup", 3.5, True)),
    "indian": (("Butter chicken", 12.0, False), ("Chana masala", 9.5, True),
               ("Garlic naan", 3.0, True), ("Lamb rogan josh", 13.5, False)),
    "mexican": (("Beef burrito", 10.5, False), ("Bean quesadilla", 8.0, True),
                ("Chicken tacos", 9.0, False), ("Guacamole and chips", 5.0, True)),
    "vegan": (("Buddha bowl", 11.0, True), ("Falafel wrap", 8.5, True),
              ("Lentil soup", 6.0, True), ("Carrot cake", 4.5, True)),
    "chinese": (("Kung pao chicken", 11.0, False), ("Mapo tofu", 9.5, True),
                ("Pork dumplings", 7.5, False), ("Egg fried rice", 5.5, True)),
    "american": (("Classic cheeseburger", 10.0, False), ("Veggie burger", 9.5, True),
                 ("Sweet potato fries", 4.0, True), ("Chocolate milkshake", 5.0, True)),
    "greek": (("Chicken souvlaki", 11.5, False), ("Greek salad", 8.0, True),
              ("Spanakopita", 7.0, True), ("Moussaka", 12.5, False)),
    "vietnamese": (("Beef pho", 12.0, False), ("Tofu banh mi", 8.0, True),
                   ("Fresh spring rolls", 6.5, True), ("Lemongrass chicken", 11.5, False)),
    "french": (("Croque monsieur", 9.0, False), ("French onion soup", 8.5, True),
               ("Duck confit", 18.0, False), ("Creme brulee", 6.0, True)),
}  # fmt: skip
OPENS, CLOSES = "12:00", "23:00"
LAST_BOOKING = "21:30"


@app.seeder
def seed_food(state: Collections, rng: random.Random) -> None:
    cuisines = rng.sample(CUISINES, 8)
    restaurants: dict[str, dict[str, Any]] = {}
    menu: dict[str, dict[str, Any]] = {}
    for i, cuisine in enumerate(cuisines):
        rid = f"r-{i + 1}"
        restaurants[rid] = {
            "id": rid,
            "name": RESTAURANT_NAMES[cuisine],
            "cuisine": cuisine,
            "rating": round(rng.uniform(3.6, 4.9), 1),
            "delivery_minutes": rng.randrange(20, 55, 5),
            "opens": OPENS,
            "closes": CLOSES,
        }
        for dish, price, vegetarian in _DISHES[cuisine]:
            mid = f"mi-{len(menu) + 1}"
            menu[mid] = {
                "id": mid,
                "restaurant_id": rid,
                "name": dish,
                "price": round(price + rng.choice((0.0, 0.5, 1.0)), 2),
                "vegetarian": vegetarian,
            }
    state[RESTAURANTS] = restaurants
    state[MENU] = menu
    orders = {}
    for i in range(2):
        rid = rng.choice(list(restaurants))
        item = rng.choice([m for m in menu.values() if m["restaurant_id"] == rid])
        oid = f"fo-{i + 1}"
        orders[oid] = {
            "id": oid,
            "restaurant_id": rid,
            "items": [{"item_id": item["id"], "quantity": 1}],
            "total": item["price"],
            "note": "",
            "date": f"2026-03-{rng.randrange(1, 13):02d}",
            "status": "delivered",
        }
    state[ORDERS] = orders
    state[RESERVATIONS] = {}


@app.tool(
    "Search restaurants by (part of) their name or by cuisine.",
    {
        "query": text("name or cuisine to look for"),
        "cuisine": text("only this cuisine", enum=CUISINES, optional=True),
    },
)
def search_restaurants(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    query = args["query"].lower()
    cuisine = args.get("cuisine")
    return [
        dict(r)
        for r in ctx.rows(RESTAURANTS)
        if (cuisine is None or r["cuisine"] == cuisine)
        and (query in r["name"].lower() or query in r["cuisine"])
    ]


@app.tool("Get a restaurant's menu.", {"restaurant_id": text("restaurant id, e.g. r-2")})
def get_menu(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    rid = ctx.get(RESTAURANTS, args["restaurant_id"], "restaurant_id")["id"]
    return [
        {k: m[k] for k in ("id", "name", "price", "vegetarian")}
        for m in ctx.rows(MENU)
        if m["restaurant_id"] == rid
    ]


@app.tool(
    "Order food for delivery from one restaurant.",
    {
        "restaurant_id": text("restaurant id"),
        "items": array(
            "dishes to order",
            obj(
                "one dish",
                {
                    "item_id": text("menu item id, e.g. mi-7"),
                    "quantity": integer("how many", minimum=1, maximum=20),
                },
            ),
        ),
        "note": text("a note for the restaurant or courier", optional=True, max_length=500),
    },
    effect=ToolEffect.WRITE,
)
def place_food_order(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    restaurant = ctx.get(RESTAURANTS, args["restaurant_id"], "restaurant_id")
    menu = ctx.collections[MENU]
    items = []
    total = 0.0
    for line in args["items"]:
        dish = menu.get(line["item_id"])
        if dish is None or dish["restaurant_id"] != restaurant["id"]:
            raise ToolFailure(
                f"{line['item_id']!r} is not on the menu of {restaurant['name']}", field="items"
            )
        items.append({"item_id": dish["id"], "quantity": line["quantity"]})
        total += dish["price"] * line["quantity"]
    row = {
        "id": ctx.new_id("fo"),
        "restaurant_id": restaurant["id"],
        "items": items,
        "total": round(total, 2),
        "note": args.get("note", ""),
        "date": WORLD_DATE,
        "status": "placed",
    }
    ctx.insert(ORDERS, row)
    return {
        "order_id": row["id"],
        "restaurant": restaurant["name"],
        "total": row["total"],
        "status": "placed",
        "eta_minutes": restaurant["delivery_minutes"],
    }


@app.tool("Get the status of a food order.", {"order_id": text("order id, e.g. fo-1001")})
def track_food_order(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    order = ctx.get(ORDERS, args["order_id"], "order_id")
    return {
        "order_id": order["id"],
        "status": order["status"],
        "total": order["total"],
        "items": [dict(i) for i in order["items"]],
    }


@app.tool(
    "Cancel a food order that has not been delivered yet.",
    {"order_id": text("order id")},
    effect=ToolEffect.WRITE,
)
def cancel_food_order(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    order = ctx.get(ORDERS, args["order_id"], "order_id")
    if order["status"] not in ("placed", "preparing"):
        raise ToolFailure(f"order {order['id']} is already {order['status']}", field="order_id")
    ctx.update(ORDERS, order["id"], status="cancelled")
    return {"order_id": order["id"], "status": "cancelled"}


@app.tool(
    "Book a table at a restaurant.",
    {
        "restaurant_id": text("restaurant id"),
        "date": text("day, YYYY-MM-DD", pattern=DATE),
        "time": text("time, HH:MM", pattern=TIME),
        "party_size": integer("number of people", minimum=1, maximum=12),
    },
    effect=ToolEffect.WRITE,
)
def book_table(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    restaurant = ctx.get(RESTAURANTS, args["restaurant_id"], "restaurant_id")
    if args["date"] < WORLD_DATE:
        raise ToolFailure(f"{args['date']} is in the past (today is {WORLD_DATE})", field="date")
    if not restaurant["opens"] <= args["time"] <= LAST_BOOKING:
        raise ToolFailure(
            f"{restaurant['name']} takes bookings from {restaurant['opens']} to {LAST_BOOKING}",
            field="time",
        )
    row = {
        "id": ctx.new_id("bk"),
        "restaurant_id": restaurant["id"],
        "date": args["date"],
        "time": args["time"],
        "party_size": args["party_size"],
        "status": "confirmed",
    }
    ctx.insert(RESERVATIONS, row)
    return {**row, "restaurant": restaurant["name"]}
