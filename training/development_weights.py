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
    return _overall_weights(_shares(tasks))


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
        shares = _shares(chosen)
        rows = {"overall": concentration(_overall_weights(shares), len(chosen))}
        for capability in (c for c in Capability if c in shares):
            share, size = shares[capability]
            rows[capability.value] = concentration(share, size)
        out[part] = rows
    return out


def _shares(tasks: Sequence[TaskSpec]) -> dict[Capability, tuple[dict[str, float], int]]:
    """Per capability: each template's share of its tasks, and how many tasks it has (a
    task with two capabilities counts for both, as its success does)."""
    counts: dict[Capability, Counter[str]] = {}
    for task in tasks:
        for capability in task.capabilities:
            counts.setdefault(capability, Counter())[task.template or NO_TEMPLATE] += 1
    out: dict[Capability, tuple[dict[str, float], int]] = {}
    for capability, drawn in counts.items():
        size = sum(drawn.values())
        out[capability] = ({name: n / size for name, n in drawn.items()}, size)
    return out


def _overall_weights(
    shares: Mapping[Capability, tuple[Mapping[str, float], int]],
) -> dict[str, float]:
    """The templates' weights in the Overall: each capability's weight (renormalized
    over those present) times the template's share of its tasks, summed."""
    total = sum(OVERALL_WEIGHTS[c] for c in shares)
    weights: dict[str, float] = {}
    for capability, (share, _) in shares.items():
        for template, part in share.items():
            weights[template] = (
                weights.get(template, 0.0) + OVERALL_WEIGHTS[capability] / total * part
            )
    return weights
