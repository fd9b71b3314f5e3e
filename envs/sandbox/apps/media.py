"""Media: a music library, playlists and the player."""

from __future__ import annotations

import random
from typing import Any

from pydantic import JsonValue

from contract import ToolEffect
from envs.sandbox.app import App, array, text
from envs.sandbox.state import Collections, ToolContext, ToolFailure

app = App("media")
PLAYER = "player"

_SONGS = (
    ("Golden Hour Drive", "The Velvet Lines", "indie"),
    ("Paper Lanterns", "Mira Sol", "pop"),
    ("Northern Lights", "Aurora Kite", "electronic"),
    ("Slow River", "Jonah Reyes", "folk"),
    ("City of Glass", "Neon Harbor", "electronic"),
    ("Late Night Jazz", "The Blue Quartet", "jazz"),
    ("Runaway Train", "Steel Pines", "rock"),
    ("Summer Rain", "Mira Sol", "pop"),
    ("Morning Coffee", "Lila Park", "acoustic"),
    ("Electric Heart", "Neon Harbor", "electronic"),
    ("Desert Road", "Steel Pines", "rock"),
    ("Moonlit Waltz", "Clara Vieira", "classical"),
    ("Fado da Saudade", "Ana Moura Lima", "fado"),
    ("Ocean Drive", "The Velvet Lines", "indie"),
    ("Quiet Storm", "Jonah Reyes", "folk"),
    ("Skyline", "Aurora Kite", "electronic"),
    ("Blue Monday Blues", "The Blue Quartet", "jazz"),
    ("Wildfire", "Steel Pines", "rock"),
    ("Sunday Morning", "Lila Park", "acoustic"),
    ("Starlight Sonata", "Clara Vieira", "classical"),
    ("Dancing in Lisbon", "Mira Sol", "pop"),
    ("Running Up the Hill", "Neon Harbor", "electronic"),
)  # fmt: skip
_PLAYLISTS = ("Morning Run", "Chill Evening", "Road Trip")


@app.seeder
def seed_media(state: Collections, rng: random.Random) -> None:
    songs = {}
    for i, (title, artist, genre) in enumerate(_SONGS):
        sid = f"s-{i + 1}"
        songs[sid] = {
            "id": sid,
            "title": title,
            "artist": artist,
            "genre": genre,
            "duration_s": rng.randrange(150, 320),
        }
    playlists = {}
    for i, name in enumerate(_PLAYLISTS):
        pid = f"pl-{i + 1}"
        playlists[pid] = {"id": pid, "name": name, "song_ids": sorted(rng.sample(list(songs), 5))}
    state["media.songs"] = songs
    state["media.playlists"] = playlists
    state["media.player"] = {
        PLAYER: {"id": PLAYER, "song_id": "", "playlist_id": "", "playing": False}
    }


@app.tool(
    "Search the music library by song title, artist or genre.",
    {"query": text("title, artist or genre")},
)
def search_music(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    query = args["query"].lower()
    return [
        dict(r)
        for r in ctx.rows("media.songs")
        if query in r["title"].lower() or query in r["artist"].lower() or query in r["genre"]
    ]


@app.tool(
    "Start playing a song now.", {"song_id": text("song id, e.g. s-4")}, effect=ToolEffect.WRITE
)
def play_song(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    song = ctx.get("media.songs", args["song_id"], "song_id")
    ctx.update("media.player", PLAYER, song_id=song["id"], playlist_id="", playing=True)
    return {"now_playing": song["title"], "artist": song["artist"]}


@app.tool(
    "Show a playlist's songs (or list all playlists when no id is given).",
    {"playlist_id": text("playlist id, e.g. pl-2", optional=True)},
)
def get_playlist(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    if "playlist_id" not in args:
        return [{"id": r["id"], "name": r["name"]} for r in ctx.rows("media.playlists")]
    playlist = ctx.get("media.playlists", args["playlist_id"], "playlist_id")
    songs = ctx.collections["media.songs"]
    return {
        "id": playlist["id"],
        "name": playlist["name"],
        "songs": [dict(songs[s]) for s in playlist["song_ids"]],
    }


@app.tool(
    "Create a new playlist with the given songs.",
    {
        "name": text("playlist name", max_length=100),
        "song_ids": array("songs to include, in order", text("song id")),
    },
    effect=ToolEffect.WRITE,
)
def create_playlist(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    name = args["name"].strip()
    if any(r["name"].lower() == name.lower() for r in ctx.rows("media.playlists")):
        raise ToolFailure(f"a playlist named {name!r} already exists", field="name")
    for sid in args["song_ids"]:
        ctx.get("media.songs", sid, "song_ids")
    row = {"id": ctx.new_id("pl"), "name": name, "song_ids": list(args["song_ids"])}
    ctx.insert("media.playlists", row)
    return {"playlist_id": row["id"], "name": name, "songs": len(row["song_ids"])}


@app.tool(
    "Add a song to the end of a playlist.",
    {"playlist_id": text("playlist id"), "song_id": text("song id")},
    effect=ToolEffect.WRITE,
)
def add_song_to_playlist(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    playlist = ctx.get("media.playlists", args["playlist_id"], "playlist_id")
    song = ctx.get("media.songs", args["song_id"], "song_id")
    if song["id"] in playlist["song_ids"]:
        raise ToolFailure(f"{song['title']} is already in {playlist['name']}", field="song_id")
    ctx.update("media.playlists", playlist["id"], song_ids=[*playlist["song_ids"], song["id"]])
    return {"playlist_id": playlist["id"], "songs": len(playlist["song_ids"]) + 1}
