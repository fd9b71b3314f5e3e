"""Sub-agents the planner can delegate to, simulated inside the sandbox.

The GUI agent acts on apps that expose no API (permissions, screens, in-app options);
the search agent researches the web knowledge base. On real devices the GUI agent is
backed by Appium instead.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import JsonValue

from contract import ToolSpec
from contract.argcheck import Checker, compile_schema
from envs.sandbox.app import boolean, integer, object_schema, text
from envs.sandbox.state import Collections, ToolContext, ToolFailure
from envs.screen import OPTIONS, PERMISSIONS, SCREENS

KNOWLEDGE = "search.knowledge"

GUI_OPERATIONS = ["grant_permission", "revoke_permission", "read_screen", "set_option"]
_WORD = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class SubAgent:
    spec: ToolSpec
    check: Checker
    handler: Callable[[ToolContext, dict[str, Any]], JsonValue]


GUI_APPS = (
    "parking",
    "bank",
    "gym",
    "airline",
    "transit",
    "cinema",
    "library",
    "pharmacy",
    "podcasts",
    "weather",
)
"""Apps with no API: only the GUI agent can reach their permissions, screens and options."""
GUI_PERMISSIONS = ("location", "notifications", "camera", "microphone", "contacts", "photos")
GUI_OPTIONS = ("dark_mode", "auto_renew", "offline_mode", "autoplay", "data_saver")


def seed_subagents(state: Collections, rng: random.Random) -> None:
    state[PERMISSIONS] = {
        f"{a}:{p}": {"id": f"{a}:{p}", "app": a, "permission": p, "granted": False}
        for a in GUI_APPS
        for p in GUI_PERMISSIONS
    }
    code = rng.randrange(100_000, 999_999)
    state[SCREENS] = {
        "bank:verification": {
            "id": "bank:verification",
            "app": "bank",
            "screen": "verification",
            "content": f"Your one-time code is {code}",
        },
        "gym:membership": {
            "id": "gym:membership",
            "app": "gym",
            "screen": "membership",
            "content": f"Member number G-{rng.randrange(10_000, 99_999)}, valid until 2026-12-31",
        },
    }
    state[OPTIONS] = {
        f"{a}:{o}": {"id": f"{a}:{o}", "app": a, "option": o, "enabled": False}
        for a in GUI_APPS
        for o in GUI_OPTIONS
    }
    state[KNOWLEDGE] = {
        "k-1": {
            "id": "k-1",
            "title": "City Museum opening hours",
            "text": "The City Museum opens at 10:00 and closes at 18:00, Tuesday to Sunday.",
        },
    }


def _gui(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    app, op, target = args["app"], args["operation"], args["target"]
    if op in ("grant_permission", "revoke_permission"):
        row = ctx.get(PERMISSIONS, f"{app}:{target}", "target")
        ctx.update(PERMISSIONS, row["id"], granted=op == "grant_permission")
        return {"app": app, "permission": target, "granted": op == "grant_permission"}
    if op == "read_screen":
        row = ctx.get(SCREENS, f"{app}:{target}", "target")
        return {"app": app, "screen": target, "content": row["content"]}
    if "value" not in args:
        raise ToolFailure("set_option needs value (true or false)", field="value")
    row = ctx.get(OPTIONS, f"{app}:{target}", "target")
    ctx.update(OPTIONS, row["id"], enabled=args["value"])
    return {"app": app, "option": target, "enabled": args["value"]}


def _search(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    words = set(_WORD.findall(args["query"].lower()))
    scored = []
    for row in ctx.rows(KNOWLEDGE):
        hay = set(_WORD.findall(f"{row['title']} {row['text']}".lower()))
        overlap = len(words & hay)
        if overlap:
            scored.append((-overlap, row["id"], row))
    hits = [{"title": r["title"], "summary": r["text"]} for _, _, r in sorted(scored)]
    return {"findings": hits[: args.get("max_results", 3)]}


def _subagent(name: str, description: str, fields: dict[str, Any], handler: Any) -> SubAgent:
    schema = object_schema(fields)
    spec = ToolSpec(name=name, domain="subagent", description=description, parameters=schema)
    return SubAgent(spec, compile_schema(schema), handler)


SUBAGENTS: dict[str, SubAgent] = {
    "gui": _subagent(
        "gui",
        "GUI agent: operates app screens that have no API (permissions, screens, in-app options).",
        {
            "app": text("the app to operate, e.g. bank, parking, gym, airline, transit"),
            "operation": text("what to do on the screen", enum=GUI_OPERATIONS),
            "target": text("the permission, screen or option name"),
            "value": boolean("for set_option: on or off", optional=True),
        },
        _gui,
    ),
    "search": _subagent(
        "search",
        "Search agent: researches the web and returns findings with summaries.",
        {
            "query": text("what to find out"),
            "max_results": integer("how many findings", minimum=1, maximum=5, optional=True),
        },
        _search,
    ),
}
