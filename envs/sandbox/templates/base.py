"""Task templates: seeded parameters, a goal, a reference plan and a declarative verifier."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import JsonValue

from contract import (
    Action,
    AllowedChange,
    Capability,
    Check,
    Difficulty,
    InvalidInputError,
    Split,
    StatePatch,
    TaskPattern,
)
from envs.sandbox.state import Collections

T = TypeVar("T", bound=JsonValue)


class Params:
    """Draws a template's parameters from a seeded stream, or takes the caller's values.

    A given value must be one of the options the template offers; a given name the
    template never asks for is refused (see ``finish``).
    """

    def __init__(self, rng: random.Random, given: Mapping[str, JsonValue] | None = None) -> None:
        self.rng = rng
        self._given = dict(given or {})
        self.values: dict[str, JsonValue] = {}

    def pick(self, name: str, options: Sequence[T]) -> T:
        if not options:
            raise InvalidInputError(f"params.{name}", "the world offers no option")
        if name in self._given:
            value = self._given[name]
            if value not in options:
                shown = list(options)[:20]
                raise InvalidInputError(f"params.{name}", f"{value!r} is not an option", shown)
            chosen: T = value  # type: ignore[assignment]
        else:
            chosen = options[self.rng.randrange(len(options))]
        self.values[name] = chosen
        return chosen

    def integer(self, name: str, low: int, high: int) -> int:
        """An integer in [low, high]."""
        if name in self._given:
            value = self._given[name]
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                raise InvalidInputError(f"params.{name}", f"must be an integer in [{low}, {high}]")
            chosen = value
        else:
            chosen = self.rng.randint(low, high)
        self.values[name] = chosen
        return chosen

    def finish(self) -> dict[str, JsonValue]:
        unknown = sorted(set(self._given) - set(self.values))
        if unknown:
            raise InvalidInputError(
                f"params.{unknown[0]}", "unknown parameter", sorted(self.values)
            )
        return self.values


@dataclass
class Draft:
    """What a template builds for one parameter draw."""

    goal: str
    plan: list[Action]
    checks: list[Check]
    setup: list[StatePatch] = field(default_factory=list)
    extra_tools: list[str] = field(default_factory=list)
    """Tools to offer besides those the plan calls (e.g. a plausible alternative)."""
    tolerate: list[AllowedChange] = field(default_factory=list)
    """Changes besides the reference plan's own that do the task no harm (another way
    to reach the same goal); the collateral check allows them."""


Builder = Callable[[Collections, Params], Draft]


@dataclass(frozen=True)
class TaskTemplate:
    name: str
    capabilities: tuple[Capability, ...]
    difficulty: Difficulty
    domains: tuple[str, ...]
    build: Builder
    split: Split = Split.TRAIN
    """DEV: the whole template is held out for the development set."""
    ordered: bool = False
    """The plan's decisive steps must happen in this order (tests swap them to check)."""
    patterns: frozenset[TaskPattern] = frozenset()
    """Interaction patterns every task of the template exhibits (repair sets draw on them;
    ``patterns.exhibits`` checks them on a task, the template tests on every template)."""


class TemplateSet:
    """Collects the templates a module defines with the ``template`` decorator."""

    def __init__(self) -> None:
        self.templates: list[TaskTemplate] = []

    def template(
        self,
        capabilities: Sequence[Capability],
        difficulty: Difficulty,
        domains: Sequence[str],
        *,
        split: Split = Split.TRAIN,
        ordered: bool = False,
        patterns: Iterable[TaskPattern] = (),
        name: str | None = None,
    ) -> Callable[[Builder], Builder]:
        def register(build: Builder) -> Builder:
            self.templates.append(
                TaskTemplate(
                    name=name or build.__name__,
                    capabilities=tuple(capabilities),
                    difficulty=difficulty,
                    domains=tuple(domains),
                    build=build,
                    split=split,
                    ordered=ordered,
                    patterns=frozenset(patterns),
                )
            )
            return build

        return register


def rows(world: Collections, collection: str) -> list[dict[str, Any]]:
    return list(world[collection].values())
