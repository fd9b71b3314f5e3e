"""Sampling weights: the balancer's ``weight`` of each member, as the trainers draw by it.

The balancer weighs every member of a version towards the version's target mix (a quarter
of the weight per capability by default). The rows themselves are far from that mix: a
round refuses a parameter draw it has made before, so templates with few parameters run
dry and the quota goes to those with many. SFT draws its rows by these weights
(``sft.weighted``), RL its tasks by the summed weights of their rows (``rl.weighted``),
so that both train on the mix the version was balanced to. A run that continues from a
checkpoint trains on some of the rows (``training/replay.py``): their weights are scaled
so that each capability keeps its share of the version's weight (``in_version_mix``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from contract import InvalidInputError


def checked_weights(weights: Sequence[float], unit: str) -> list[float]:
    """``weights`` (one per ``unit``: a row, an RL task) as a list; one that is not finite,
    a negative one, or all of them 0 is an ``InvalidInputError`` naming ``weight``."""
    bad = next((i for i, w in enumerate(weights) if not (math.isfinite(w) and w >= 0)), None)
    if bad is not None:
        raise InvalidInputError(
            "weight",
            f"{unit} {bad} has sampling weight {weights[bad]}; weights are finite and >= 0",
        )
    if not any(weights):
        raise InvalidInputError(
            "weight", f"every {unit}'s sampling weight is 0; one must be above 0"
        )
    return list(weights)


def task_weights(
    task_ids: Iterable[str], weights: Iterable[float | None]
) -> dict[str, float] | None:
    """Each task's sampling weight: the sum of its rows' (a capability keeps its share of
    the weight however its rows spread over tasks); None when a row has none. The rows'
    weights are checked as ``checked_weights`` checks them."""
    given = _all_given(weights)
    if given is None:
        return None
    summed: dict[str, float] = {}
    for task_id, weight in zip(task_ids, checked_weights(given, "row"), strict=True):
        summed[task_id] = summed.get(task_id, 0.0) + weight
    return summed


def in_version_mix(
    capabilities: Sequence[Sequence[str]],
    weights: Sequence[float | None],
    chosen: Sequence[int],
) -> list[float] | None:
    """The weights of the rows at ``chosen``, each multiplied by its primary capability's
    weight over all the rows divided by its weight over the chosen ones, so that drawn by
    them the chosen rows hold each capability in the share the version gives it (the
    balancer's target). A later round's new rows lean to the templates with parameters
    left to draw, and a uniform sample of the rows seen keeps that lean. None when a row
    has no weight."""
    given = _all_given(weights)
    if given is None:
        return None
    primary = [caps[0] if caps else "" for caps in capabilities]
    every: dict[str, float] = {}
    picked: dict[str, float] = {}
    for capability, weight in zip(primary, given, strict=True):
        every[capability] = every.get(capability, 0.0) + weight
    for i in chosen:
        picked[primary[i]] = picked.get(primary[i], 0.0) + given[i]
    return [
        given[i] * every[primary[i]] / picked[primary[i]] if picked[primary[i]] else 0.0
        for i in chosen
    ]


def _all_given(weights: Iterable[float | None]) -> list[float] | None:
    """``weights`` as floats, or None when one is missing."""
    listed = list(weights)
    given = [float(w) for w in listed if w is not None]
    return given if len(given) == len(listed) else None
