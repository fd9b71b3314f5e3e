"""The development set: drawn once per catalog, stratified, in two labelled parts.

*Seen templates* are held-out parameter draws of training templates (reachable by
imitation); *unseen templates* are the held-out templates (generalisation). Each part is
stratified by (primary capability x difficulty), in proportion to a target mix, over the
cells its templates cover. Inside a cell every template gets its turn (round robin), and
a template is redrawn with new seeds until it yields a new development fingerprint: the
template is never redrawn, so a held-out template is not favoured by how often its draws
are accepted. A cell whose templates run out of new fingerprints passes what it lacks to
the cells of the same capability (then to any cell of the part); the draw says what it
reached (``DevelopmentSet.composition``). A draw a round would refuse (a goal that
``contract.goal_problem`` finds malformed) is not taken: no model trains on its kind.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from contract import (
    Capability,
    Difficulty,
    InvalidInputError,
    Split,
    TaskSpec,
    apportion,
)
from envs.sandbox.sandbox import MobileSandbox
from envs.sandbox.templates.base import TaskTemplate
from envs.sandbox.templates.catalog import instantiate, template_named
from envs.sandbox.templates.registry import ALL_TEMPLATES

Part = Literal["seen", "unseen"]
PARTS: tuple[Part, ...] = ("seen", "unseen")
Cell = tuple[Capability, Difficulty]

UNSEEN_SHARE = 0.25
"""The share of the development set drawn from held-out templates."""
DRAWS_PER_TEMPLATE = 1600
"""Seeded draws a template gets before it counts as out of new development tasks. A
training template's draw is held out one time in ``DEV_PARAMETER_SHARE``, so this gives
about 160 held-out draws each: the training templates then hold about 1,700 distinct
held-out tasks (800 at 400 draws), enough for a 960-task set that keeps every
capability's share (README, "The development set")."""
WORLDS = 64
"""Seeded worlds a part's tasks are drawn over (the sandbox keeps them built)."""


def part_of(task: TaskSpec) -> Part:
    """Seen when the task's template is a training template, else unseen."""
    if task.template is None:
        return "unseen"
    try:
        template = template_named(task.template)
    except InvalidInputError:
        return "unseen"
    return "seen" if template.split is Split.TRAIN else "unseen"


def cell_of(template: TaskTemplate) -> Cell:
    return (template.capabilities[0], template.difficulty)


@dataclass(frozen=True)
class DevelopmentSet:
    tasks: tuple[TaskSpec, ...]
    wanted: dict[Part, int]

    def composition(self) -> dict[Part, dict[str, int]]:
        """Tasks per part and cell (``tool_use/easy``), as drawn."""
        out: dict[Part, dict[str, int]] = {part: {} for part in PARTS}
        for task in self.tasks:
            cell = f"{task.capabilities[0].value}/{task.difficulty.value}"
            counts = out[part_of(task)]
            counts[cell] = counts.get(cell, 0) + 1
        return out


def draw_development_set(
    size: int,
    seed: int,
    sandbox: MobileSandbox,
    *,
    capability_mix: Mapping[str, float] | None = None,
    difficulty_mix: Mapping[str, float] | None = None,
    unseen_share: float = UNSEEN_SHARE,
) -> DevelopmentSet:
    """``size`` development tasks with distinct fingerprints (module docstring); the
    mixes are shares per capability and difficulty value (even when left out)."""
    if size < 1:
        raise InvalidInputError("dev_tasks", f"{size} is below 1")
    if not 0.0 <= unseen_share <= 1.0:
        raise InvalidInputError("unseen_share", f"{unseen_share} is outside [0, 1]")
    unseen_templates = [t for t in ALL_TEMPLATES if t.split is Split.DEV]
    unseen = round(size * unseen_share) if unseen_templates else 0
    wanted: dict[Part, int] = {"seen": size - unseen, "unseen": unseen}
    weights = _cell_weights(capability_mix, difficulty_mix)
    tasks: list[TaskSpec] = []
    for part, count in wanted.items():
        split = Split.TRAIN if part == "seen" else Split.DEV
        templates = [t for t in ALL_TEMPLATES if t.split is split]
        tasks += _draw_part(count, templates, weights, f"{seed}:{part}", sandbox)
    return DevelopmentSet(tuple(sorted(tasks, key=lambda t: t.fingerprint)), wanted)


def _cell_weights(
    capability_mix: Mapping[str, float] | None, difficulty_mix: Mapping[str, float] | None
) -> dict[Cell, float]:
    def share(mix: Mapping[str, float] | None, value: str, values: int) -> float:
        return mix.get(value, 0.0) if mix else 1.0 / values

    return {
        (c, d): share(capability_mix, c.value, len(Capability))
        * share(difficulty_mix, d.value, len(Difficulty))
        for c in Capability
        for d in Difficulty
    }


def _draw_part(
    count: int,
    templates: Sequence[TaskTemplate],
    weights: Mapping[Cell, float],
    stream: str,
    sandbox: MobileSandbox,
) -> list[TaskSpec]:
    sources = {cell: _CellSource(cell, templates, stream, sandbox) for cell in weights}
    open_cells = {c: w for c, w in weights.items() if w > 0 and sources[c].templates}
    quotas = _two_level(count, open_cells)
    drawn: list[TaskSpec] = []
    taken: set[str] = set()
    while quotas:
        lacking: Counter[Capability] = Counter()
        for cell, quota in quotas.items():
            for _ in range(quota):
                task = sources[cell].next_new(taken)
                if task is None:
                    open_cells.pop(cell, None)
                    lacking[cell[0]] += 1
                    continue
                taken.add(task.fingerprint)
                drawn.append(task)
        quotas = Counter()
        for capability, lack in lacking.items():
            same = {c: w for c, w in open_cells.items() if c[0] is capability}
            quotas.update(apportion(lack, same or open_cells))
    return drawn


class _CellSource:
    """New development tasks of one cell: its templates in turn, each from its own
    seeded stream of worlds and parameter draws."""

    def __init__(
        self, cell: Cell, templates: Sequence[TaskTemplate], stream: str, sandbox: MobileSandbox
    ) -> None:
        self.templates = sorted((t for t in templates if cell_of(t) == cell), key=lambda t: t.name)
        self._draws = {t.name: self._stream(t, stream, sandbox) for t in self.templates}
        self._turn = 0

    @staticmethod
    def _stream(template: TaskTemplate, stream: str, sandbox: MobileSandbox) -> Iterator[TaskSpec]:
        worlds = random.Random(stream)
        seeds = [worlds.randrange(2**31) for _ in range(WORLDS)]
        rng = random.Random(f"{stream}:{template.name}")
        for _ in range(DRAWS_PER_TEMPLATE):
            seed, variant = rng.choice(seeds), rng.randrange(2**16)
            try:
                task = instantiate(template, seed, sandbox, variant=variant, split=Split.DEV)
            except InvalidInputError:
                continue  # a draw a round refuses too (a malformed goal): never held out
            if task is not None:
                yield task

    def next_new(self, taken: set[str]) -> TaskSpec | None:
        """The next task with a fingerprint not in ``taken``; None when every template of
        the cell has run out."""
        while self.templates:
            template = self.templates[self._turn % len(self.templates)]
            task = next((t for t in self._draws[template.name] if t.fingerprint not in taken), None)
            if task is None:
                self.templates.remove(template)
                continue
            self._turn += 1
            return task
        return None


def _two_level(total: int, weights: Mapping[Cell, float]) -> Counter[Cell]:
    """``total`` over capabilities first, then over each capability's difficulties: the
    capability shares, which the Overall weighs, are as close to the target as counts
    allow."""
    by_capability: dict[Capability, float] = {}
    for (capability, _), weight in weights.items():
        by_capability[capability] = by_capability.get(capability, 0.0) + weight
    keyed = {(c, Difficulty.EASY): w for c, w in by_capability.items()}
    quotas: Counter[Cell] = Counter()
    for (capability, _), share in apportion(total, keyed).items():
        cells = {cell: w for cell, w in weights.items() if cell[0] is capability}
        quotas.update(apportion(share, cells))
    return quotas
