"""News and web search: headlines by topic, articles, saved reading and followed topics."""

from __future__ import annotations

import random
from typing import Any

from pydantic import JsonValue

from contract import ToolEffect
from envs.sandbox.app import App, boolean, integer, text
from envs.sandbox.state import Collections, ToolContext, ToolFailure

app = App("news")
TOPICS = ["technology", "sports", "business", "science", "world", "health"]
SOURCES = ("Daily Ledger", "Tech Pulse", "Global Wire", "The Courier", "Science Today")
_HEADLINES = {
    "technology": (
        "New battery chemistry doubles phone life",
        "Open-source assistant tops mobile benchmark",
        "Chipmaker unveils low-power AI processor",
        "City pilots driverless night buses",
    ),
    "sports": (
        "Lisbon marathon sets course record",
        "Underdogs reach the cup semi-final",
        "Tennis star announces comeback tour",
        "Cycling team unveils carbon-neutral season",
    ),
    "business": (
        "Central bank holds interest rates steady",
        "Coffee prices climb after poor harvest",
        "Airline orders fifty electric planes",
        "Start-up fund backs green shipping",
    ),
    "science": (
        "Telescope spots water on distant moon",
        "Ancient forest found under glacier",
        "New enzyme breaks down plastic in days",
        "Researchers map the octopus brain",
    ),
    "world": (
        "Leaders agree on ocean protection treaty",
        "Historic bridge reopens after restoration",
        "Record turnout in regional elections",
        "Festival of lights draws million visitors",
    ),
    "health": (
        "Short walks after meals steady blood sugar",
        "Study links good sleep to memory",
        "New guidance on daily water intake",
        "Flu season ends earlier than expected",
    ),
}
_WEB = (
    ("How to descale a coffee kettle", "https://homehow.example/descale-kettle",
     "Fill with equal parts water and vinegar, boil, rinse twice."),
    ("Lisbon tram 28 timetable", "https://carris.example/tram-28",
     "Trams run every 12 minutes from 07:00 to 22:30."),
    ("Best time to visit Prague", "https://travelnotes.example/prague",
     "Late spring brings mild weather and fewer crowds."),
    ("Beginner 5k running plan", "https://runclub.example/5k",
     "Three runs a week for eight weeks, alternating walking and running."),
    ("How many steps a day is healthy", "https://healthfacts.example/steps",
     "Most adults benefit from 7000 to 10000 steps a day."),
    ("Repotting a fiddle leaf fig", "https://greenthumb.example/fig",
     "Repot in spring into a pot 5 cm wider than the old one."),
)  # fmt: skip


@app.seeder
def seed_news(state: Collections, rng: random.Random) -> None:
    articles = {}
    n = 0
    for topic in TOPICS:
        titles = list(_HEADLINES[topic])
        rng.shuffle(titles)
        for day, title in zip(range(13, 9, -1), titles, strict=False):
            n += 1
            aid = f"a-{n}"
            articles[aid] = {
                "id": aid,
                "title": title,
                "topic": topic,
                "source": rng.choice(SOURCES),
                "date": f"2026-03-{day}",
                "summary": f"{title}. Reporters follow the story as it develops.",
            }
    state["news.articles"] = articles
    state["news.web"] = {
        f"web-{i + 1}": {"id": f"web-{i + 1}", "title": t, "url": u, "snippet": s}
        for i, (t, u, s) in enumerate(_WEB)
    }
    state["news.saved"] = {}
    state["news.topics"] = {
        t: {"id": t, "followed": t in ("world", rng.choice(TOPICS))} for t in TOPICS
    }


@app.tool(
    "Search the web and return matching pages with a snippet.",
    {
        "query": text("what to search for"),
        "max_results": integer("how many pages", minimum=1, maximum=10, optional=True),
    },
)
def web_search(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    words = args["query"].lower().split()
    scored = []
    for r in ctx.rows("news.web"):
        hay = f"{r['title']} {r['snippet']}".lower()
        score = sum(w in hay for w in words)
        if score:
            scored.append((-score, r["id"], r))
    scored.sort(key=lambda t: (t[0], t[1]))
    return [dict(r) for _, _, r in scored[: args.get("max_results", 5)]]


@app.tool(
    "Latest news headlines on a topic, newest first.",
    {
        "topic": text("news topic", enum=TOPICS),
        "limit": integer("how many headlines", minimum=1, maximum=20, optional=True),
    },
)
def get_news(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    found = [r for r in ctx.rows("news.articles") if r["topic"] == args["topic"]]
    found.sort(key=lambda r: (r["date"], r["id"]), reverse=True)
    return [
        {k: r[k] for k in ("id", "title", "source", "date")} for r in found[: args.get("limit", 5)]
    ]


@app.tool("Read a news article in full.", {"article_id": text("article id, e.g. a-5")})
def read_article(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    return dict(ctx.get("news.articles", args["article_id"], "article_id"))


@app.tool(
    "Save an article to read later.",
    {"article_id": text("article id")},
    effect=ToolEffect.WRITE,
)
def save_article(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    article = ctx.get("news.articles", args["article_id"], "article_id")
    if article["id"] in ctx.collections["news.saved"]:
        raise ToolFailure(f"{article['title']!r} is already saved", field="article_id")
    ctx.insert("news.saved", {"id": article["id"], "article_id": article["id"]})
    return {"saved": article["title"]}


@app.tool(
    "Follow or unfollow a news topic in the news feed.",
    {"topic": text("news topic", enum=TOPICS), "follow": boolean("true to follow")},
    effect=ToolEffect.WRITE,
)
def follow_news_topic(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    ctx.update("news.topics", args["topic"], followed=args["follow"])
    return {"topic": args["topic"], "followed": args["follow"]}
