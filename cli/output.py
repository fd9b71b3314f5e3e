"""How the CLI prints: canonical JSON for machines, small tables for people."""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from contract import Capability, Trajectory


def emit_json(value: Any) -> None:
    """Sorted keys and fixed indentation: the same input always prints the same bytes."""
    sys.stdout.buffer.write(orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2))
    sys.stdout.buffer.write(b"\n")


def error_json(field: str | None, problem: str, allowed: Iterable[object] | None) -> dict[str, Any]:
    """A refusal as ``--json`` prints it: ``{"error": {"field", "problem", "allowed"}}``
    (``field`` None: the command as a whole)."""
    listed = [str(v) for v in allowed] if allowed is not None else None
    return {"error": {"field": field, "problem": problem, "allowed": listed}}


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    cells = [list(map(str, headers))] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def capability_summary(trajectories: Sequence[Trajectory]) -> str:
    """Per capability: tasks, success rate, mean steps (a task counts for each capability)."""
    groups: dict[Capability, list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        for capability in t.task.capabilities:
            groups[capability].append(t)
    rows: list[tuple[str, int, str, str]] = []
    for capability in Capability:
        group = groups.get(capability, [])
        if not group:
            rows.append((capability.value, 0, "-", "-"))
            continue
        success = sum(t.verdict.passed for t in group) / len(group)
        steps = sum(t.cost.steps for t in group) / len(group)
        rows.append((capability.value, len(group), f"{success:.0%}", f"{steps:.2f}"))
    total = len(trajectories)
    overall = sum(t.verdict.passed for t in trajectories) / total if total else 0.0
    body = table(("capability", "tasks", "success", "mean steps"), rows)
    return f"{body}\n\n{total} episodes, {overall:.0%} verified successful"


COLLECTORS: tuple[str, ...] = ("champion", "settings")
EXPORT_FORMATS: tuple[str, ...] = ("hf", "parquet")
"""``training.export.FORMATS``, without importing ``datasets`` for the help (a test
checks they agree)."""
BUILT_BASES: tuple[str, ...] = ("tiny", "nano")
"""``training.settings.BUILT_BASES``, likewise."""
"""Who collects a loop's rounds (``flows.loop``'s ``collect_with``)."""


def choices(values: Iterable[str]) -> str:
    """An option's fixed values as its help shows them: ``[auto|label-studio]``."""
    return "[" + "|".join(values) + "]"
