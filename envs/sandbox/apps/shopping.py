"""Shopping: a product catalogue, a cart, checkout and orders."""

from __future__ import annotations

import random
from typing import Any

from pydantic import JsonValue

from contract import ToolEffect
from envs.sandbox.app import App, integer, number, text
from envs.sandbox.state import WORLD_DATE, Collections, ToolContext, ToolFailure

app = App("shopping")

CATEGORIES = ["electronics", "home", "kitchen", "sports", "books", "grocery"]
SHIPPING = ["standard", "express"]
SHIPPING_FEES = {"standard": 0.0, "express": 7.99}

_CATALOGUE = (
    ("Sonora QuietMax headphones", "electronics", 89),
    ("Volt 20W USB-C charger", "electronics", 19),
    ("Pixelview 4K webcam", "electronics", 64),
    ("Trailblazer wireless earbuds", "electronics", 49),
    ("Nimbus memory foam pillow", "home", 34),
    ("Lumen LED desk lamp", "home", 29),
    ("Cozy knit throw blanket", "home", 39),
    ("Aroma pour-over coffee kettle", "kitchen", 45),
    ("Chef's steel frying pan", "kitchen", 52),
    ("Lisbon Roast coffee beans 1kg", "grocery", 18),
    ("Organic green tea 100 bags", "grocery", 9),
    ("Stride running shoes", "sports", 95),
    ("Flex yoga mat", "sports", 27),
    ("Hydra steel water bottle", "sports", 21),
    ("The Quiet Garden (paperback)", "books", 14),
    ("Atlas of Small Cities (hardcover)", "books", 32),
)  # fmt: skip


@app.seeder
def seed_shopping(state: Collections, rng: random.Random) -> None:
    products: dict[str, dict[str, Any]] = {}
    for i, (name, category, base) in enumerate(_CATALOGUE):
        pid = f"p-{i + 1}"
        products[pid] = {
            "id": pid,
            "name": name,
            "category": category,
            "price": round(base + rng.choice([0.0, 0.49, 0.99]), 2),
            "stock": rng.randrange(3, 40),
            "rating": round(rng.uniform(3.2, 4.9), 1),
        }
    orders = {}
    for i in range(4):
        pid = rng.choice(list(products))
        qty = rng.randrange(1, 3)
        oid = f"o-{i + 1}"
        orders[oid] = {
            "id": oid,
            "items": [{"product_id": pid, "quantity": qty}],
            "total": round(products[pid]["price"] * qty, 2),
            "shipping": rng.choice(SHIPPING),
            "status": "delivered" if i < 3 else "shipped",
            "date": f"2026-02-{rng.randrange(1, 28):02d}" if i < 3 else "2026-03-12",
        }
    state["shopping.products"] = products
    state["shopping.cart"] = {}
    state["shopping.orders"] = orders


@app.tool(
    "Search the store's products by name or category, optionally under a maximum price.",
    {
        "query": text("words to look for in product names or categories"),
        "max_price": number("only products at or below this price", minimum=0, optional=True),
    },
)
def search_products(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    words = args["query"].lower().split()
    cap = args.get("max_price")
    hits: list[JsonValue] = []
    for r in ctx.rows("shopping.products"):
        hay = f"{r['name']} {r['category']}".lower()
        if any(w in hay for w in words) and (cap is None or r["price"] <= cap):
            hits.append(dict(r))
    return hits


@app.tool(
    "Put a product in the shopping cart (adds to the quantity already there).",
    {
        "product_id": text("product id, e.g. p-3"),
        "quantity": integer("how many", minimum=1, maximum=10),
    },
    effect=ToolEffect.WRITE,
)
def add_to_cart(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    pid = args["product_id"]
    product = ctx.get("shopping.products", pid, "product_id")
    in_cart = ctx.collections["shopping.cart"].get(pid)
    quantity = args["quantity"] + (in_cart["quantity"] if in_cart else 0)
    if quantity > product["stock"]:
        raise ToolFailure(f"only {product['stock']} of {product['name']} in stock", "quantity")
    if in_cart:
        ctx.update("shopping.cart", pid, quantity=quantity)
    else:
        ctx.insert("shopping.cart", {"id": pid, "product_id": pid, "quantity": quantity})
    return {"product_id": pid, "name": product["name"], "quantity_in_cart": quantity}


@app.tool(
    "Buy everything in the cart and place an order.",
    {"shipping": text("shipping speed", enum=SHIPPING)},
    effect=ToolEffect.WRITE,
)
def checkout(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    cart = list(ctx.rows("shopping.cart"))
    if not cart:
        raise ToolFailure("the cart is empty", field="shipping")
    products = ctx.collections["shopping.products"]
    items: list[JsonValue] = []
    total = SHIPPING_FEES[args["shipping"]]
    for line in cart:
        product = products[line["product_id"]]
        items.append({"product_id": line["product_id"], "quantity": line["quantity"]})
        total += product["price"] * line["quantity"]
    for line in cart:
        product = products[line["product_id"]]
        ctx.update("shopping.products", product["id"], stock=product["stock"] - line["quantity"])
        ctx.delete("shopping.cart", line["id"])
    order = {
        "id": ctx.new_id("o"),
        "items": items,
        "total": round(total, 2),
        "shipping": args["shipping"],
        "status": "placed",
        "date": WORLD_DATE,
    }
    ctx.insert("shopping.orders", order)
    return {"order_id": order["id"], "total": order["total"], "status": "placed"}


@app.tool("Get an order's items, total and delivery status.", {"order_id": text("order id")})
def get_order_status(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    return dict(ctx.get("shopping.orders", args["order_id"], "order_id"))


@app.tool(
    "Cancel an order that has not shipped yet.",
    {"order_id": text("order id")},
    effect=ToolEffect.WRITE,
)
def cancel_order(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    order = ctx.get("shopping.orders", args["order_id"], "order_id")
    if order["status"] != "placed":
        raise ToolFailure(f"order is {order['status']} and can no longer be cancelled", "order_id")
    ctx.update("shopping.orders", order["id"], status="cancelled")
    return {"order_id": order["id"], "status": "cancelled"}
