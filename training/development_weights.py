"""How much each template weighs in a development set's scores.

A capability's score is the mean success of its tasks, and the Overall weighs the
capabilities (``contract.OVERALL_WEIGHTS``, renormalized over those present;
``training.evaluate``). So a template's weight in the Overall is, summed over its
capabilities, the capability's weight times the template's share of that capability's
tasks: solving every draw of a template of weight 0.15 instead of none moves the Overall
by 0.15, whatever the rest of the set does.

A set whose scores rest on few templates measures a model by how it does on those few,
and two trainings of one recipe land far apart on it (README, "Runs of one recipe,
measured"). The *effective number of templates* (1 / the sum of the squared weights; as
many as there are templates when they weigh the same) says how many templates a score
really rests on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from contract import OVERALL_WEIGHTS, Capability, TaskSpec
from envs.sandbox.templates.development import PARTS, part_of

NO_TEMPLATE = "(no template)"
"""The name a task built without a template is counted under."""


@dataclass(frozen=True)
class Concentration:
    """How many tasks and templates a score rests on, and its heaviest template."""

    tasks: int
    templates: int
    effective_templates: float
    heaviest: str
    heaviest_weight: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def template_weights(tasks: Sequence[TaskSpec]) -> dict[str, float]:
    """Each template's weight in the Overall of ``tasks`` (module docstring); they sum
    to 1 (empty for no tasks)."""
    per_capability = _per_capability(tasks)
    total = sum(OVERALL_WEIGHTS[c] for c in per_capability)
    weights: dict[str, float] = {}
    for capability, counts in per_capability.items():
        size = sum(counts.values())
        for template, count in counts.items():
            share = OVERALL_WEIGHTS[capability] / total * count / size
            weights[template] = weights.get(template, 0.0) + share
    return weights


def concentration(weights: Mapping[str, float], tasks: int) -> Concentration:
    """The concentration of a score with these template ``weights`` (summing to 1)."""
    heaviest = max(sorted(weights), key=lambda name: weights[name])
    return Concentration(
        tasks=tasks,
        templates=len(weights),
        effective_templates=1.0 / sum(w * w for w in weights.values()),
        heaviest=heaviest,
        heaviest_weight=weights[heaviest],
    )


def development_concentration(tasks: Sequence[TaskSpec]) -> dict[str, dict[str, Concentration]]:
    """Per part of the development set (seen, unseen): the concentration of its Overall
    (``overall``) and of each capability's score it measures."""
    out: dict[str, dict[str, Concentration]] = {}
    for part in PARTS:
        chosen = [t for t in tasks if part_of(t) == part]
        if not chosen:
            continue
        rows = {"overall": concentration(template_weights(chosen), len(chosen))}
        per_capability = _per_capability(chosen)
        for capability in (c for c in Capability if c in per_capability):
            counts = per_capability[capability]
            size = sum(counts.values())
            shares = {name: count / size for name, count in counts.items()}
            rows[capability.value] = concentration(shares, size)
        out[part] = rows
    return out


def _per_capability(tasks: Sequence[TaskSpec]) -> dict[Capability, Counter[str]]:
    """Per capability, how many of its tasks each template drew (a task with two
    capabilities counts for both, as its success does)."""
    out: dict[Capability, Counter[str]] = {}
    for task in tasks:
        for capability in task.capabilities:
            out.setdefault(capability, Counter())[task.template or NO_TEMPLATE] += 1
    return out
