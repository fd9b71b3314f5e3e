"""Health: daily steps and sleep, workouts, water intake and goals."""

from __future__ import annotations

import random
from typing import Any

from pydantic import JsonValue

from contract import ToolEffect
from envs.sandbox.app import DATE, App, integer, text
from envs.sandbox.state import WORLD_DATE, Collections, ToolContext, ToolFailure

app = App("health")
GOALS = "goals"
WORKOUT_TYPES = ["running", "cycling", "swimming", "yoga", "strength", "walking"]
PAST_DAYS = [f"2026-03-{d:02d}" for d in range(7, 14)]


@app.seeder
def seed_health(state: Collections, rng: random.Random) -> None:
    days = {}
    for date in [*PAST_DAYS, WORLD_DATE]:
        days[date] = {
            "id": date,
            "date": date,
            "steps": rng.randrange(1200, 4000)
            if date == WORLD_DATE
            else rng.randrange(3000, 14000),
            "sleep_hours": round(rng.uniform(5.0, 8.8), 1),
            "resting_hr": rng.randrange(54, 72),
        }
    workouts = {}
    for i, date in enumerate(rng.sample(PAST_DAYS, 4)):
        wid = f"w-{i + 1}"
        kind = rng.choice(WORKOUT_TYPES)
        minutes = rng.randrange(20, 75)
        workouts[wid] = {
            "id": wid,
            "type": kind,
            "minutes": minutes,
            "date": date,
            "calories": minutes * rng.randrange(5, 11),
        }
    water = {}
    for i, date in enumerate(PAST_DAYS):
        wid = f"wl-{i + 1}"
        water[wid] = {"id": wid, "date": date, "ml": rng.choice([1200, 1500, 1800, 2100, 2400])}
    state["health.days"] = days
    state["health.workouts"] = workouts
    state["health.water"] = water
    state["health.goals"] = {
        GOALS: {"id": GOALS, "daily_steps": rng.choice([6000, 8000, 10000]), "water_ml": 2000}
    }


@app.tool(
    "Get one day's health summary: steps, sleep, resting heart rate, water and workouts.",
    {"date": text("the day, YYYY-MM-DD", pattern=DATE)},
)
def get_health_summary(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    date = args["date"]
    day = ctx.get("health.days", date, "date")
    return {
        **day,
        "water_ml": sum(r["ml"] for r in ctx.rows("health.water") if r["date"] == date),
        "workouts": [dict(r) for r in ctx.rows("health.workouts") if r["date"] == date],
        "step_goal": ctx.collections["health.goals"][GOALS]["daily_steps"],
    }


@app.tool(
    "List logged workouts, newest first.",
    {"limit": integer("how many to return", minimum=1, maximum=50, optional=True)},
)
def list_workouts(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    found = sorted(ctx.rows("health.workouts"), key=lambda r: (r["date"], r["id"]), reverse=True)
    return [dict(r) for r in found[: args.get("limit", 10)]]


@app.tool(
    "Log a workout (today unless a date is given).",
    {
        "type": text("kind of workout", enum=WORKOUT_TYPES),
        "minutes": integer("duration in minutes", minimum=1, maximum=600),
        "date": text("day of the workout, YYYY-MM-DD", pattern=DATE, optional=True),
    },
    effect=ToolEffect.WRITE,
)
def log_workout(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    date = args.get("date", WORLD_DATE)
    if date > WORLD_DATE:
        raise ToolFailure("cannot log a workout in the future", field="date")
    row = {
        "id": ctx.new_id("w"),
        "type": args["type"],
        "minutes": args["minutes"],
        "date": date,
        "calories": args["minutes"] * 8,
    }
    ctx.insert("health.workouts", row)
    return {"workout_id": row["id"], "calories": row["calories"]}


@app.tool(
    "Log water you drank today.",
    {"ml": integer("amount in millilitres", minimum=50, maximum=3000)},
    effect=ToolEffect.WRITE,
)
def log_water(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    row = {"id": ctx.new_id("wl"), "date": WORLD_DATE, "ml": args["ml"]}
    ctx.insert("health.water", row)
    total = sum(r["ml"] for r in ctx.rows("health.water") if r["date"] == WORLD_DATE)
    return {"logged_ml": args["ml"], "today_total_ml": total}


@app.tool(
    "Set the daily step goal.",
    {"steps": integer("steps per day", minimum=1000, maximum=50000)},
    effect=ToolEffect.WRITE,
)
def set_step_goal(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    goals = ctx.collections["health.goals"][GOALS]
    if goals["daily_steps"] == args["steps"]:
        raise ToolFailure(f"the step goal is already {args['steps']}", field="steps")
    ctx.update("health.goals", GOALS, daily_steps=args["steps"])
    return {"daily_steps": args["steps"]}
