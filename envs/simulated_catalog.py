"""Long-tail tools no app of ours implements, and the tasks a round takes over them.

Each tool books or orders something in an app that has a list of places (parking zones,
laundries, pharmacies, groomers): its description says which collection it reads and
which it adds a row to, so a simulating chat model (``envs.simulated``) knows what a
call changes, and a task's verifier checks that row. A task's goal names its place with
its id (``Baixa (pa-0)``); its reference plan is one call and a ``finish``.
"""

from __future__ import annotations

import random
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from contract import (
    Capability,
    Condition,
    Difficulty,
    Finish,
    InitialConditions,
    Split,
    StatePatch,
    StatePredicateCheck,
    TaskSpec,
    ToolCall,
    ToolSpec,
    VerifierSpec,
    step_budget_for,
    task_fingerprint,
)

BACKEND = "simulated"
TEMPLATE_PREFIX = "simulated_"


@dataclass(frozen=True)
class LongTailApp:
    """An app of places and the one tool that books at one of them."""

    domain: str
    places: str
    """The collection of places (``parking.zones``)."""
    bookings: str
    """The collection a booking adds a row to (``parking.sessions``)."""
    tool: str
    what: str
    """What a booking is, in the tool's description."""
    names: tuple[str, ...]
    amount: str
    """The booking's one other argument (an integer from 1 to 4)."""
    goal: str
    """The user's request: ``{place}`` and ``{amount}`` are filled in."""

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name=self.tool,
            domain=self.domain,
            description=(
                f"Book {self.what} at a place of {self.places} (by its id): adds a row "
                f"to {self.bookings} with the place's id and the {self.amount}."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "place_id": {"type": "string"},
                    self.amount: {"type": "integer", "minimum": 1, "maximum": 4},
                },
                "required": ["place_id", self.amount],
                "additionalProperties": False,
            },
        )


APPS = (
    LongTailApp(
        "parking",
        "parking.zones",
        "parking.sessions",
        "book_parking",
        "a parking session",
        ("Baixa", "Alfama", "Belem", "Chiado"),
        "hours",
        "Park my car in {place} for {amount} hours.",
    ),
    LongTailApp(
        "laundry",
        "laundry.shops",
        "laundry.pickups",
        "schedule_laundry_pickup",
        "a laundry pickup",
        ("Clean Corner", "Bubbles", "Fresh Fold", "Spin City"),
        "bags",
        "Have {place} pick up {amount} bags of laundry.",
    ),
    LongTailApp(
        "pharmacy",
        "pharmacy.stores",
        "pharmacy.refills",
        "refill_prescription",
        "a prescription refill",
        ("Farmacia Luz", "Saude Mais", "Botica Sol", "Farmacia Rio"),
        "packs",
        "Refill my prescription at {place}: {amount} packs.",
    ),
)
TOOLS: tuple[ToolSpec, ...] = tuple(app.spec() for app in APPS)


def simulated_task(app: LongTailApp, place: int, amount: int, split: Split) -> TaskSpec:
    """The task of booking ``amount`` at place number ``place`` of ``app``."""
    template = TEMPLATE_PREFIX + app.domain
    params: dict[str, Any] = {"place": place, "amount": amount}
    place_id = _place_id(app, place)
    goal = app.goal.format(place=f"{app.names[place]} ({place_id})", amount=amount)
    setup = tuple(
        StatePatch(collection=app.places, row={"id": _place_id(app, i), "name": name})
        for i, name in enumerate(app.names)
    )
    plan = (
        ToolCall(tool=app.tool, arguments={"place_id": place_id, app.amount: amount}),
        Finish(answer="Booked."),
    )
    return TaskSpec(
        fingerprint=task_fingerprint(template, params, goal),
        goal=goal,
        capabilities=(Capability.TOOL_USE,),
        difficulty=Difficulty.EASY,
        domains=(app.domain,),
        tools=(app.tool,),
        initial_conditions=InitialConditions(backend=BACKEND, seed=0, setup=setup),
        verifier=VerifierSpec(
            checks=(
                StatePredicateCheck(
                    collection=app.bookings,
                    where=(
                        Condition(field="place_id", value=place_id),
                        Condition(field=app.amount, value=amount),
                    ),
                    expect="exactly_one",
                ),
            )
        ),
        reference_plan=plan,
        template=template,
        params=params,
        split=split,
        max_steps=step_budget_for(plan),
    )


def _place_id(app: LongTailApp, place: int) -> str:
    return f"{app.domain[:2]}-{place}"


def simulated_tasks(count: int, seed: int, known_fingerprints: Collection[str]) -> list[TaskSpec]:
    """Up to ``count`` training tasks over the long-tail apps whose fingerprints are not
    in ``known_fingerprints``, in the order ``seed`` shuffles them."""
    every = [
        simulated_task(app, place, amount, Split.TRAIN)
        for app in APPS
        for place in range(len(app.names))
        for amount in range(1, 5)
    ]
    fresh = [t for t in every if t.fingerprint not in known_fingerprints]
    random.Random(seed).shuffle(fresh)
    return fresh[:count]
