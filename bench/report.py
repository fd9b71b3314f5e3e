"""What a benchmark returns: its figures, JSON-ready for ``--json``, and the same figures
as the text a person reads."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from bench.machine import processor


@dataclass(frozen=True)
class BenchReport:
    figures: dict[str, Any]
    """Numbers in base units (seconds, bytes, items per second), with the machine's cores,
    CPU and load average when it ran (``machine``)."""
    text: str


def machine() -> dict[str, Any]:
    """The cores, the CPU and the one-minute load average now: what a figure must be read
    with."""
    return {
        "cores": os.cpu_count(),
        "cpu": processor(),
        "load_average": round(os.getloadavg()[0], 2),
    }


def json_ready(value: Any) -> Any:
    """``value`` with dataclasses as dicts, tuples as lists, paths as text and non-finite
    floats as None (JSON has no infinity)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: json_ready(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_ready(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, PurePath):
        return str(value)
    return value


def figures_json(figures: Any) -> str:
    """A benchmark's figures as indented JSON, keys sorted."""
    return json.dumps(figures, indent=2, sort_keys=True)


def cell(value: Any) -> str:
    """One value of a text table: ``-`` for None, a float to three decimals."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)
