"""Photos: the camera roll, albums, favourites and sharing with contacts."""

from __future__ import annotations

import random
from typing import Any

from pydantic import JsonValue

from contract import ToolEffect
from envs.sandbox.app import DATE, App, array, boolean, text
from envs.sandbox.apps.names import CITIES
from envs.sandbox.state import WORLD_DATE, Collections, ToolContext, ToolFailure

app = App("photos")
PHOTO_COUNT = 24
_SUBJECTS = (
    "Sunset over the river", "Birthday cake", "Street market", "Old cathedral", "Beach picnic",
    "Mountain trail", "Family dinner", "Tram at night", "Museum courtyard", "Coffee and pastry",
    "Rooftop view", "Dog in the park",
)  # fmt: skip


@app.seeder
def seed_photos(state: Collections, rng: random.Random) -> None:
    pairs = rng.sample([(s, c) for s in _SUBJECTS for c in CITIES], PHOTO_COUNT)
    photos = {}
    for i, (subject, city) in enumerate(pairs):
        pid = f"ph-{i + 1}"
        photos[pid] = {
            "id": pid,
            "title": f"{subject} in {city}",
            "place": city,
            "date": f"2026-{rng.choice(['01', '02', '03'])}-{rng.randrange(1, 14):02d}",
            "favorite": False,
        }
    ids = list(photos)
    albums = {}
    for i, name in enumerate(("Family", "Trips", "Food")):
        aid = f"alb-{i + 1}"
        albums[aid] = {"id": aid, "name": name, "photo_ids": sorted(rng.sample(ids, 4))}
    state["photos.items"] = photos
    state["photos.albums"] = albums
    state["photos.shares"] = {}


@app.tool(
    "Search photos by words in their title or place, optionally taken on one date.",
    {
        "query": text("words to look for"),
        "date": text("only photos from this day, YYYY-MM-DD", pattern=DATE, optional=True),
    },
)
def search_photos(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    words = args["query"].lower().split()
    date = args.get("date")
    return [
        dict(r)
        for r in ctx.rows("photos.items")
        if all(w in r["title"].lower() for w in words) and (date is None or r["date"] == date)
    ]


@app.tool(
    "Create a photo album from some photos.",
    {
        "name": text("album name", max_length=100),
        "photo_ids": array("photos to put in it", text("photo id")),
    },
    effect=ToolEffect.WRITE,
)
def create_album(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    name = args["name"].strip()
    if any(r["name"].lower() == name.lower() for r in ctx.rows("photos.albums")):
        raise ToolFailure(f"an album named {name!r} already exists", field="name")
    for pid in args["photo_ids"]:
        ctx.get("photos.items", pid, "photo_ids")
    row = {"id": ctx.new_id("alb"), "name": name, "photo_ids": list(args["photo_ids"])}
    ctx.insert("photos.albums", row)
    return {"album_id": row["id"], "name": name, "photos": len(row["photo_ids"])}


@app.tool(
    "Add a photo to an existing album.",
    {"album_id": text("album id, e.g. alb-2"), "photo_id": text("photo id")},
    effect=ToolEffect.WRITE,
)
def add_photo_to_album(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    album = ctx.get("photos.albums", args["album_id"], "album_id")
    photo = ctx.get("photos.items", args["photo_id"], "photo_id")
    if photo["id"] in album["photo_ids"]:
        raise ToolFailure(f"{photo['title']} is already in {album['name']}", field="photo_id")
    ctx.update("photos.albums", album["id"], photo_ids=[*album["photo_ids"], photo["id"]])
    return {"album_id": album["id"], "photos": len(album["photo_ids"]) + 1}


@app.tool(
    "Share a photo with a contact.",
    {"photo_id": text("photo id, e.g. ph-7"), "contact_id": text("recipient's contact id")},
    effect=ToolEffect.WRITE,
)
def share_photo(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    photo = ctx.get("photos.items", args["photo_id"], "photo_id")
    person = ctx.get("contacts.people", args["contact_id"], "contact_id")
    row = {"id": ctx.new_id("sh"), "photo_id": photo["id"], "contact_id": person["id"]}
    ctx.insert("photos.shares", {**row, "date": WORLD_DATE})
    return {"share_id": row["id"], "photo": photo["title"], "shared_with": person["name"]}


@app.tool(
    "Mark or unmark a photo as a favourite.",
    {"photo_id": text("photo id"), "favorite": boolean("true to mark as favourite")},
    effect=ToolEffect.WRITE,
)
def set_photo_favorite(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    photo = ctx.get("photos.items", args["photo_id"], "photo_id")
    ctx.update("photos.items", photo["id"], favorite=args["favorite"])
    return {"photo": photo["title"], "favorite": args["favorite"]}
