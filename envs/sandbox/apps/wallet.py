"""Wallet: bank accounts, transactions, payments to contacts, money requests and cards."""

from __future__ import annotations

import random
from typing import Any

from pydantic import JsonValue

from contract import ToolEffect
from envs.sandbox.app import App, boolean, integer, number, text
from envs.sandbox.state import WORLD_DATE, Collections, ToolContext, ToolFailure

app = App("wallet")

MAIN_ACCOUNT = "acct-1"
CODE_THRESHOLD = 1000.0
"""Payments above this amount need the one-time code the bank app shows."""
BANK_SCREEN = "bank:verification"

_MERCHANTS = (
    ("Pingo Doce", "groceries"),
    ("Uber", "transport"),
    ("Netflix", "subscriptions"),
    ("Galp", "fuel"),
    ("Zara", "clothing"),
    ("EDP Energia", "utilities"),
    ("Farmacia Central", "health"),
    ("Cinema City", "entertainment"),
)


@app.seeder
def seed_wallet(state: Collections, rng: random.Random) -> None:
    state["wallet.accounts"] = {
        "acct-1": {
            "id": "acct-1",
            "name": "Everyday checking",
            "balance": round(rng.uniform(1800, 3500), 2),
            "currency": "EUR",
        },
        "acct-2": {
            "id": "acct-2",
            "name": "Savings",
            "balance": round(rng.uniform(4000, 12000), 2),
            "currency": "EUR",
        },
    }
    contacts = list(state["contacts.people"].values())
    rows = {}
    for i in range(12):
        tid = f"t-{i + 1}"
        date = f"2026-03-{12 - i if i < 11 else 1:02d}"
        if i % 4 == 3:
            person = rng.choice(contacts)
            rows[tid] = {
                "id": tid,
                "account_id": MAIN_ACCOUNT,
                "direction": rng.choice(["in", "out"]),
                "counterparty": person["name"],
                "contact_id": person["id"],
                "amount": round(rng.uniform(10, 120), 2),
                "category": "transfer",
                "note": rng.choice(["dinner", "concert tickets", "taxi", "gift"]),
                "date": date,
            }
        else:
            merchant, category = rng.choice(_MERCHANTS)
            rows[tid] = {
                "id": tid,
                "account_id": MAIN_ACCOUNT,
                "direction": "out",
                "counterparty": merchant,
                "contact_id": "",
                "amount": round(rng.uniform(4, 90), 2),
                "category": category,
                "note": "",
                "date": date,
            }
    state["wallet.transactions"] = rows
    state["wallet.requests"] = {}
    state["wallet.cards"] = {
        "card-1": {
            "id": "card-1",
            "name": f"Visa debit ending {rng.randrange(1000, 9999)}",
            "kind": "debit",
            "frozen": False,
        },
        "card-2": {
            "id": "card-2",
            "name": f"Mastercard credit ending {rng.randrange(1000, 9999)}",
            "kind": "credit",
            "frozen": False,
        },
    }


def bank_code(collections: Collections) -> str:
    """The one-time code the bank app's verification screen shows (read by the GUI agent)."""
    screen = collections.get("gui.screens", {}).get(BANK_SCREEN)
    return str(screen["content"]).rsplit(" ", 1)[-1] if screen else ""


@app.tool(
    "Get the balance of your bank accounts (or of one account).",
    {"account_id": text("account id, e.g. acct-1; all accounts if left out", optional=True)},
)
def get_balance(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    if "account_id" in args:
        return [dict(ctx.get("wallet.accounts", args["account_id"], "account_id"))]
    return [dict(r) for r in ctx.rows("wallet.accounts")]


@app.tool(
    "List recent card and bank transactions, newest first, optionally with one contact.",
    {
        "contact_id": text("only transfers with this contact", optional=True),
        "limit": integer("how many to return", minimum=1, maximum=50, optional=True),
    },
)
def list_transactions(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    cid = args.get("contact_id")
    found = [r for r in ctx.rows("wallet.transactions") if cid is None or r["contact_id"] == cid]
    found.sort(key=lambda r: (r["date"], r["id"]), reverse=True)
    return [dict(r) for r in found[: args.get("limit", 10)]]


@app.tool(
    "Send money from your checking account to a contact. Amounts over 1000 EUR need the "
    "one-time code shown in the bank app.",
    {
        "contact_id": text("recipient's contact id"),
        "amount": number("amount in EUR", minimum=0.01, maximum=100000),
        "note": text("what the payment is for", optional=True, max_length=200),
        "verification_code": text("one-time code from the bank app", optional=True),
    },
    effect=ToolEffect.WRITE,
)
def send_money(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    person = ctx.get("contacts.people", args["contact_id"], "contact_id")
    amount = round(float(args["amount"]), 2)
    account = ctx.collections["wallet.accounts"][MAIN_ACCOUNT]
    if amount > account["balance"]:
        raise ToolFailure(
            f"insufficient funds: balance is {account['balance']:.2f} EUR", field="amount"
        )
    if amount > CODE_THRESHOLD and args.get("verification_code") != bank_code(ctx.collections):
        raise ToolFailure(
            "payments over 1000 EUR need the one-time code from the bank app",
            field="verification_code",
        )
    ctx.update("wallet.accounts", MAIN_ACCOUNT, balance=round(account["balance"] - amount, 2))
    row = {
        "id": ctx.new_id("t"),
        "account_id": MAIN_ACCOUNT,
        "direction": "out",
        "counterparty": person["name"],
        "contact_id": person["id"],
        "amount": amount,
        "category": "transfer",
        "note": args.get("note", ""),
        "date": WORLD_DATE,
    }
    ctx.insert("wallet.transactions", row)
    return {"transaction_id": row["id"], "amount": amount, "status": "sent"}


@app.tool(
    "Ask a contact to pay you an amount.",
    {
        "contact_id": text("who should pay"),
        "amount": number("amount in EUR", minimum=0.01, maximum=100000),
        "note": text("what it is for", optional=True, max_length=200),
    },
    effect=ToolEffect.WRITE,
)
def request_money(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    person = ctx.get("contacts.people", args["contact_id"], "contact_id")
    row = {
        "id": ctx.new_id("rq"),
        "contact_id": person["id"],
        "amount": round(float(args["amount"]), 2),
        "note": args.get("note", ""),
        "status": "pending",
        "date": WORLD_DATE,
    }
    ctx.insert("wallet.requests", row)
    return {"request_id": row["id"], "status": "pending"}


@app.tool(
    "Freeze or unfreeze a payment card.",
    {
        "card_id": text("card id, e.g. card-1"),
        "frozen": boolean("true to freeze, false to unfreeze"),
    },
    effect=ToolEffect.WRITE,
)
def set_card_frozen(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    card = ctx.get("wallet.cards", args["card_id"], "card_id")
    if card["frozen"] is args["frozen"]:
        state = "frozen" if card["frozen"] else "active"
        raise ToolFailure(f"{card['name']} is already {state}", field="frozen")
    ctx.update("wallet.cards", card["id"], frozen=args["frozen"])
    return {"card_id": card["id"], "frozen": args["frozen"]}
