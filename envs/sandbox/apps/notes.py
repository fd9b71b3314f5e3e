"""Notes: titled text notes in folders."""

from __future__ import annotations

import random
from typing import Any

from pydantic import JsonValue

from contract import ToolEffect
from envs.sandbox.app import App, text
from envs.sandbox.state import WORLD_DATE, Collections, ToolContext, ToolFailure

app = App("notes")

NOTES = "notes.notes"
FOLDERS = ["personal", "work", "shopping", "travel", "ideas", "archive"]
_POOL = (
    ("Groceries", "Oat milk, tomatoes, rice, coffee beans", "shopping"),
    ("Hardware store", "Wall plugs, 4 mm drill bit, sandpaper", "shopping"),
    ("Gift ideas", "Scarf for mum, board game for Leo, concert vouchers", "ideas"),
    ("App ideas", "Plant watering reminder; shared grocery list with sync", "ideas"),
    ("Meeting notes 3 March", "Agreed to ship the beta by April; Kemi owns QA", "work"),
    ("Onboarding checklist", "Laptop, badge, accounts, intro meetings", "work"),
    ("Wi-Fi password", "Network: HomeNet-5G, password: sunflower42", "personal"),
    ("Books to read", "The Overstory; Piranesi; Project Hail Mary", "personal"),
    ("Recipes to try", "Shakshuka, mushroom risotto, lemon tart", "personal"),
    ("Porto weekend", "Trains at 08:05, hotel near Ribeira, visit Livraria Lello", "travel"),
    ("Passport renewal", "Book appointment, bring 2 photos and old passport", "personal"),
    ("Quarterly goals", "Cut build time by half; mentor one new hire", "work"),
)


@app.seeder
def seed_notes(state: Collections, rng: random.Random) -> None:
    chosen = rng.sample(_POOL, 9)
    state[NOTES] = {
        f"n-{i + 1}": {
            "id": f"n-{i + 1}",
            "title": title,
            "body": body,
            "folder": folder,
            "pinned": rng.random() < 0.2,
            "updated": f"2026-03-{rng.randrange(1, 14):02d}",
        }
        for i, (title, body, folder) in enumerate(chosen)
    }


def _summary(row: dict[str, Any]) -> dict[str, JsonValue]:
    return {
        "id": row["id"],
        "title": row["title"],
        "folder": row["folder"],
        "snippet": row["body"][:80],
    }


@app.tool(
    "Search notes by (part of) their title or text.",
    {"query": text("text to look for")},
)
def search_notes(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    query = args["query"].lower()
    return [
        _summary(r)
        for r in ctx.rows(NOTES)
        if query in r["title"].lower() or query in r["body"].lower()
    ]


@app.tool("Read one note in full.", {"note_id": text("note id, e.g. n-2")})
def get_note(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    return dict(ctx.get(NOTES, args["note_id"], "note_id"))


@app.tool(
    "Create a new note.",
    {
        "title": text("note title", max_length=200),
        "body": text("note text", max_length=5000),
        "folder": text("folder (default: personal)", enum=FOLDERS, optional=True),
    },
    effect=ToolEffect.WRITE,
)
def create_note(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    title = args["title"]
    folded = title.strip().casefold()
    for row in ctx.rows(NOTES):
        if row["title"].casefold() == folded:
            raise ToolFailure(
                f"a note titled {row['title']!r} already exists ({row['id']})", field="title"
            )
    row = {
        "id": ctx.new_id("n"),
        "title": title,
        "body": args["body"],
        "folder": args.get("folder", "personal"),
        "pinned": False,
        "updated": WORLD_DATE,
    }
    return _summary(ctx.insert(NOTES, row))


@app.tool(
    "Add a line of text at the end of a note.",
    {"note_id": text("note id"), "text": text("text to add", max_length=2000)},
    effect=ToolEffect.WRITE,
)
def append_to_note(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    note = ctx.get(NOTES, args["note_id"], "note_id")
    body = f"{note['body']}\n{args['text']}"
    return _summary(ctx.update(NOTES, note["id"], body=body, updated=WORLD_DATE))


@app.tool(
    "Move a note to another folder.",
    {"note_id": text("note id"), "folder": text("destination folder", enum=FOLDERS)},
    effect=ToolEffect.WRITE,
)
def move_note(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    note = ctx.get(NOTES, args["note_id"], "note_id")
    if note["folder"] == args["folder"]:
        raise ToolFailure(f"the note is already in {args['folder']}", field="folder")
    return _summary(ctx.update(NOTES, note["id"], folder=args["folder"], updated=WORLD_DATE))


@app.tool("Delete a note.", {"note_id": text("note id")}, effect=ToolEffect.WRITE)
def delete_note(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    note = ctx.get(NOTES, args["note_id"], "note_id")
    ctx.delete(NOTES, note["id"])
    return {"deleted": note["id"], "title": note["title"]}
